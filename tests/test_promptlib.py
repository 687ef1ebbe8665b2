"""prompt-lib ``make_prompt`` and the query assembly (``promptweave.promptlib``, spec 05).

* every worked example of spec 05 §4 (the upstream ``test_make_prompt`` expectations and the
  boolean-simplification prompt), CoT and non-CoT, several seeds;
* the seeded order: an independent MT19937 implementation of the recipe of spec 05 §5 is checked
  against Python's own ``random.Random(seed).sample`` and against ``make_prompt``'s order;
* query assembly (answer-prefix stripping), config parsing, errors.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import promptweave
from promptweave.errors import ArgumentError, PromptRenderError, PromptTypeError
from promptweave.promptlib import (
    Example,
    PromptConfig,
    PromptStr,
    is_code_model,
    make_prompt,
    make_query,
)

E1 = Example("What is 2+2?", "4", "Adding 2 and 2")
E2 = Example("What is the capital of France?", "Paris", "The capital of France")
E3 = Example("What color is the sky?", "Blue", "The sky is generally")

# ============================================================================ spec 05 §4


def test_prompt_str_is_returned_unchanged() -> None:
    assert make_prompt(PromptStr("This is a test prompt."), PromptConfig(), 2, 42, False) == (
        "This is a test prompt."
    )


def test_upstream_all_examples_shuffled() -> None:
    assert make_prompt([E1, E2, E3], PromptConfig(), -1, 42, False) == (
        "Q: What color is the sky?\nA: The answer is Blue\n\n\n"
        "Q: What is 2+2?\nA: The answer is 4\n\n\n"
        "Q: What is the capital of France?\nA: The answer is Paris\n\n\n"
    )


def test_upstream_two_examples() -> None:
    assert make_prompt([E1, E2, E3], PromptConfig(), 2, 42, False) == (
        "Q: What color is the sky?\nA: The answer is Blue\n\n\n"
        "Q: What is 2+2?\nA: The answer is 4\n\n\n"
    )


def test_upstream_two_examples_cot() -> None:
    assert make_prompt([E1, E2, E3], PromptConfig(), 2, 42, True) == (
        "Q: What color is the sky?\nA: The sky is generally The answer is Blue\n\n\n"
        "Q: What is 2+2?\nA: Adding 2 and 2 The answer is 4\n\n\n"
    )


BOOL_CFG = PromptConfig(
    question_prefix="# Q: ",
    answer_prefix="Let's think step by step:\n",
    final_answer_prefix="Answer",
    intra_example_sep="\n",
    inter_example_sep="\n\n",
)
BOOL_EXAMPLES = [
    Example("!a & a & (a ^ c & d | !b)", "false", "false & expr is false"),
    Example("a & b | a & c", "a & (b | c)", "a & (b | c) is the same as a & b | a & c"),
]
BOOL_SEED0 = (
    "# Q: a & b | a & c\nLet's think step by step:\na & (b | c) is the same as a & b | a & c "
    "Answera & (b | c)\n\n\n"
    "# Q: !a & a & (a ^ c & d | !b)\nLet's think step by step:\nfalse & expr is false "
    "Answerfalse\n\n\n"
)
BOOL_OTHER_ORDER = (
    "# Q: !a & a & (a ^ c & d | !b)\nLet's think step by step:\nfalse & expr is false "
    "Answerfalse\n\n\n"
    "# Q: a & b | a & c\nLet's think step by step:\na & (b | c) is the same as a & b | a & c "
    "Answera & (b | c)\n\n\n"
)


def test_boolsimplify_seed0() -> None:
    assert make_prompt(BOOL_EXAMPLES, BOOL_CFG, -1, 0, True) == BOOL_SEED0


@pytest.mark.parametrize("seed", [1, 42])
def test_boolsimplify_other_seeds_give_the_other_order(seed: int) -> None:
    assert make_prompt(BOOL_EXAMPLES, BOOL_CFG, -1, seed, True) == BOOL_OTHER_ORDER


def test_boolsimplify_query_non_code_model_strips_the_answer_prefix() -> None:
    prompt = make_prompt(BOOL_EXAMPLES, BOOL_CFG, -1, 0, True)
    query = make_query(prompt, BOOL_CFG, "a & b | a & c", code_model=is_code_model("davinci"))
    assert query == BOOL_SEED0 + "# Q: a & b | a & c\nLet's think step by step:"


def test_boolsimplify_query_code_model_keeps_the_answer_prefix() -> None:
    prompt = make_prompt(BOOL_EXAMPLES, BOOL_CFG, -1, 0, True)
    query = make_query(prompt, BOOL_CFG, "a & b | a & c", code_model=is_code_model("code-davinci"))
    assert query == BOOL_SEED0 + "# Q: a & b | a & c\nLet's think step by step:\n"


# ============================================================================ assembly


def test_non_cot_and_cot_default_config() -> None:
    cfg = PromptConfig()
    assert make_prompt([E1], cfg, 1, 0, False) == "Q: What is 2+2?\nA: The answer is 4\n\n\n"
    assert make_prompt([E1], cfg, 1, 0, True) == (
        "Q: What is 2+2?\nA: Adding 2 and 2 The answer is 4\n\n\n"
    )


def test_custom_separators_and_prefixes() -> None:
    cfg = PromptConfig("Question: ", "Answer:", " So ", " | ", "###")
    ex = [Example("q1", "a1", "t1"), Example("q2", "a2", "t2")]
    order = random.Random(7).sample(ex, 2)
    expected = "".join(f"Question: {e.question} | Answer: So {e.answer} | ###" for e in order)
    assert make_prompt(ex, cfg, -1, 7, False) == expected
    expected_cot = "".join(
        f"Question: {e.question} | Answer:{e.thought}  So {e.answer} | ###" for e in order
    )
    assert make_prompt(ex, cfg, -1, 7, True) == expected_cot


def test_zero_examples_and_empty_population() -> None:
    assert make_prompt([E1, E2], PromptConfig(), 0, 3, True) == ""
    assert make_prompt([], PromptConfig(), -1, 3, False) == ""


def test_query_with_prompt_str_and_default_config() -> None:
    cfg = PromptConfig()
    assert make_query(PromptStr("P\n"), cfg, "x?") == "P\nQ: x?\nA:"
    assert make_query("", cfg, "x?", code_model=True) == "Q: x?\nA: "


def test_prompt_config_from_args_and_dict() -> None:
    args = SimpleNamespace(
        question_prefix="Q:\\n",
        answer_prefix="A:\\t",
        final_answer_prefix="F",
        intra_example_sep="\\n",
        inter_example_sep="\\n\\n",
    )
    assert PromptConfig.from_args(args) == PromptConfig("Q:\n", "A:\\t", "F", "\n", "\n\n")
    assert PromptConfig.from_dict({"question_prefix": "X"}) == PromptConfig(question_prefix="X")


@pytest.mark.parametrize("k", [4, -2, 100])
def test_bad_num_prompt_examples(k: int) -> None:
    with pytest.raises(ValueError, match="between 0 and 3") as info:
        make_prompt([E1, E2, E3], PromptConfig(), k, 0, False)
    assert isinstance(info.value, ArgumentError)
    assert "Sample larger than population or is negative" in str(info.value)


def test_non_sequence_and_non_str_fields() -> None:
    with pytest.raises(TypeError) as info:
        make_prompt(iter([E1, E2]), PromptConfig(), 1, 0, False)  # type: ignore[arg-type]
    assert isinstance(info.value, PromptTypeError)
    with pytest.raises(TypeError) as info:
        make_prompt(iter([E1, E2]), PromptConfig(), -1, 0, False)  # type: ignore[arg-type]
    assert isinstance(info.value, PromptTypeError)
    with pytest.raises(TypeError) as info:
        make_prompt([Example("q", 4, "t")], PromptConfig(), 1, 0, False)  # type: ignore[arg-type]
    assert isinstance(info.value, PromptRenderError)


@pytest.mark.parametrize("cot", [False, True])
def test_the_first_bad_example_decides_the_error(cot: bool) -> None:
    """prompt-lib concatenates example by example, reading each field as it goes: a non-str
    field of an earlier example raises (TypeError) before a later example that is not an
    ``Example`` at all (AttributeError) is read, and the other way round."""
    good_then_bad: list[Any] = [Example("What is 2+2?", 4, "2 and 2"), {"question": "q"}]
    order = random.Random(1).sample(good_then_bad, 2)
    assert isinstance(order[0], Example)  # seed 1 keeps the Example first
    with pytest.raises(TypeError):
        make_prompt(good_then_bad, PromptConfig(), 2, 1, cot)
    # a non-Example first: its missing attribute is met first
    with pytest.raises(AttributeError):
        make_prompt(good_then_bad[::-1], PromptConfig(), 2, 1, cot)
    # within an example, the question is read (and concatenated) before the answer
    with pytest.raises(TypeError):
        make_prompt([SimpleNamespace(question=1)], PromptConfig(), 1, 0, cot)  # type: ignore[list-item]


def test_exported() -> None:
    assert promptweave.promptlib.make_prompt is make_prompt


# ============================================================================ seeded order

N_STATE = 624


class MT19937:
    """The recipe of spec 05 §5, written independently of CPython's ``random``."""

    def __init__(self, seed: int) -> None:
        key = []
        s = abs(seed)
        while True:
            key.append(s & 0xFFFFFFFF)
            s >>= 32
            if not s:
                break
        self.mt = [0] * N_STATE
        self._init_genrand(19650218)
        mt = self.mt
        i, j = 1, 0
        for _ in range(max(N_STATE, len(key))):
            mt[i] = ((mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525)) + key[j] + j) & (
                0xFFFFFFFF
            )
            i, j = i + 1, j + 1
            if i >= N_STATE:
                mt[0] = mt[N_STATE - 1]
                i = 1
            if j >= len(key):
                j = 0
        for _ in range(N_STATE - 1):
            mt[i] = ((mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941)) - i) & 0xFFFFFFFF
            i += 1
            if i >= N_STATE:
                mt[0] = mt[N_STATE - 1]
                i = 1
        mt[0] = 0x80000000
        self.index = N_STATE

    def _init_genrand(self, s: int) -> None:
        mt = self.mt
        mt[0] = s
        for i in range(1, N_STATE):
            mt[i] = (1812433253 * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i) & 0xFFFFFFFF

    def _twist(self) -> None:
        mt = self.mt
        for i in range(N_STATE):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % N_STATE] & 0x7FFFFFFF)
            mt[i] = mt[(i + 397) % N_STATE] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        self.index = 0

    def genrand(self) -> int:
        if self.index >= N_STATE:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y

    def getrandbits(self, k: int) -> int:
        assert 0 <= k <= 32
        return self.genrand() >> (32 - k) if k else 0

    def randbelow(self, n: int) -> int:
        k = n.bit_length()
        r = self.getrandbits(k)
        while r >= n:
            r = self.getrandbits(k)
        return r

    def sample(self, population: list[Any], k: int) -> list[Any]:
        n = len(population)
        if not 0 <= k <= n:
            raise ValueError("Sample larger than population or is negative")
        setsize = 21
        if k > 5:
            setsize += 4 ** math.ceil(math.log(3 * k, 4))
        result = []
        if n <= setsize:
            pool = list(population)
            for i in range(k):
                j = self.randbelow(n - i)
                result.append(pool[j])
                pool[j] = pool[n - i - 1]
        else:
            selected: set[int] = set()
            for _ in range(k):
                j = self.randbelow(n)
                while j in selected:
                    j = self.randbelow(n)
                selected.add(j)
                result.append(population[j])
        return result


SEEDS = [0, 1, 42, -42, 2**40 + 3, 123456789, 2**64 + 1]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("n", "k"), [(3, 3), (3, 2), (10, 5), (30, 4), (30, 6), (200, 7)])
def test_recipe_matches_python_random(seed: int, n: int, k: int) -> None:
    population = list(range(n))
    assert MT19937(seed).sample(population, k) == random.Random(seed).sample(population, k)


@given(seed=st.integers(-(2**70), 2**70), n=st.integers(0, 300), data=st.data())
def test_recipe_matches_python_random_property(seed: int, n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n))
    population = list(range(n))
    assert MT19937(seed).sample(population, k) == random.Random(seed).sample(population, k)


@given(
    seed=st.integers(-(2**40), 2**40),
    n=st.integers(0, 40),
    data=st.data(),
    cot=st.booleans(),
)
def test_make_prompt_order_is_the_seeded_sample(
    seed: int, n: int, data: st.DataObject, cot: bool
) -> None:
    k = data.draw(st.one_of(st.just(-1), st.integers(0, n)))
    examples = [Example(f"q{i}", f"a{i}", f"t{i}") for i in range(n)]
    order = MT19937(seed).sample(list(range(n)), n if k == -1 else k)
    cfg = PromptConfig()
    mid = "A: t{i} The answer is a{i}" if cot else "A: The answer is a{i}"
    expected = "".join(f"Q: q{i}\n{mid.format(i=i)}\n\n\n" for i in order)
    assert make_prompt(examples, cfg, k, seed, cot) == expected


def test_pool_method_prefix_property() -> None:
    """``sample(pop, k)[:m] == sample(pop, m)`` for the pool method (upstream tests rely on
    it: k=2 gives the first two of k=3)."""
    for seed in SEEDS:
        three = make_prompt([E1, E2, E3], PromptConfig(), 3, seed, False)
        two = make_prompt([E1, E2, E3], PromptConfig(), 2, seed, False)
        assert three.startswith(two)


@pytest.mark.parametrize(("seed", "family"), [("\ud800", ValueError), ([1], TypeError)])
def test_a_bad_seed_is_named_as_the_seed(seed: Any, family: type[Exception]) -> None:
    """A seed ``random.Random`` refuses raises its builtin family, and says the seed is at
    fault (not ``num_prompt_examples``)."""
    examples = [Example(question=f"q{i}", answer=f"a{i}", thought=f"t{i}") for i in range(2)]
    with pytest.raises(family, match="seed") as info:
        make_prompt(examples, PromptConfig(), 1, seed, False)
    assert "num_prompt_examples" not in str(info.value)
