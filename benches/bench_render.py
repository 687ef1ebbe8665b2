"""Row-by-row prompt rendering: promptweave vs OpenCompass 0.5.4 (pytest-benchmark).

Each workload renders its test rows exactly as OpenCompass's ``GenInferencer`` does with a
``ZeroRetriever`` / ``FixKRetriever`` (``max_seq_len=None``, ``batch_size=1``): per row,
``retriever.generate_ice(ice_idx, ice_template)``, then
``retriever.generate_prompt_for_generate_task(idx, ice, ...)`` (i.e. ``template.generate_item``),
then ``model.parse_template(prompt, mode='gen')``.  :func:`render_rows` is that loop, written once
against the mirrored API and run unchanged on both implementations (``M`` is ``promptweave`` or the
reference namespace), so the timed work is identical.

Workloads (one benchmark ``group`` each; the reference is slow, so it and ours are timed on the
same fixed subset, and ours additionally on the full size in a ``*-full`` group):

* **W1** -- zero-shot 4-field string template, no meta template, 100k short rows (subset 10k);
  the group also times Python's own ``str.format_map`` loop producing the same strings.
* **W2** -- MMLU 5-shot, the templates of ``configs/datasets/mmlu/mmlu_gen_4d595a.py`` (dialogue
  ICE + ``</E>`` prompt template, FixK ``[0..4]``) under a ChatML meta template, 14,042 rows of
  MMLU-sized text (subset 1,000).

Every test checks, outside the timed region, that ours == reference on the rows it timed.

Row counts shrink to a quick size when benchmarking is disabled (``--benchmark-disable``, as CI
runs them) or when ``PROMPTWEAVE_BENCH_QUICK=1``; ``PROMPTWEAVE_BENCH_ROUNDS_SCALE`` (a float,
default 1) scales the number of rounds.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

QUICK_ENV = "PROMPTWEAVE_BENCH_QUICK"
ROUNDS_SCALE_ENV = "PROMPTWEAVE_BENCH_ROUNDS_SCALE"

Row = dict[str, Any]


# --------------------------------------------------------------------------- the timed loop


def generation_template(ice_template: Any, prompt_template: Any) -> Any:
    """The template ``BaseRetriever.generate_prompt_for_generate_task`` renders with."""
    if prompt_template is not None and ice_template is not None:
        if prompt_template.ice_token is None:
            raise NotImplementedError("ice_token of prompt_template is not provided")
        return prompt_template
    if ice_template is not None:
        if ice_template.ice_token is None:
            raise NotImplementedError("ice_token of ice_template is not provided")
        return ice_template
    if prompt_template is not None:
        return prompt_template
    raise NotImplementedError("Leaving prompt as empty is not supported")


def render_rows(
    M: Any,
    rows: Sequence[Row],
    train: Sequence[Row],
    *,
    parser: Any,
    prompt_template: Any,
    output_column: str,
    ice_template: Any = None,
    fix_id_list: Sequence[int] = (),
    ice_separator: str = "\n",
    ice_eos_token: str = "\n",
    gen_field_replace_token: str = "",
) -> list[Any]:
    """Render ``rows`` as OpenCompass's GenInferencer + Zero/FixK retriever does, one row at a
    time, through implementation ``M``'s classes (the templates and parser were built from ``M``).

    ``ice_separator`` / ``ice_eos_token`` are the retriever's (FixK: ``'\\n'``/``'\\n'``, Zero:
    ``''``/``''``).  Returns the model inputs (``parse_template(prompt, mode='gen')``).
    """
    prompt_list_cls = M.PromptList
    template = generation_template(ice_template, prompt_template)
    out = []
    for row in rows:
        # -- BaseRetriever.generate_ice(ice_idx, ice_template) (FixK: the same ids every row)
        if ice_template is None:
            assert len(fix_id_list) == 0, "ice_template is required to retrieve examples"
        if ice_template is not None and ice_template.prompt_type == "meta":
            sep, eos = "", ""
        else:
            sep, eos = ice_separator, ice_eos_token
        ice_list = [
            ice_template.generate_ice_item(train[i], train[i][output_column]) for i in fix_id_list
        ]
        if len(ice_list) > 0 and isinstance(ice_list[0], prompt_list_cls):
            ice: Any = []
            for item in ice_list:
                ice += item + sep
            ice.append(eos)
        else:
            ice = sep.join(ice_list) + eos
        # -- BaseRetriever.generate_prompt_for_generate_task(idx, ice, ...)
        prompt = template.generate_item(
            row,
            output_field=output_column,
            output_field_replace_token=gen_field_replace_token,
            ice_field_replace_token=ice,
        )
        # -- GenInferencer: model.parse_template(entry, mode='gen')
        out.append(parser.parse_template(prompt, mode="gen"))
    return out


def format_map_rows(template: str, rows: Sequence[Row]) -> list[str]:
    """The pure-Python floor: ``template.format_map(row)`` for every row."""
    return [template.format_map(row) for row in rows]


# --------------------------------------------------------------------------- generated data

_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when "
    "what if can more will so no who its into time only could new them some these than "
    "other then two may any like now my over such our after most also made first many "
    "energy cell protein enzyme membrane molecule reaction acid equilibrium pressure "
    "velocity theorem integral function matrix vector eigenvalue probability variance "
    "court statute plaintiff defendant contract liability negligence constitution treaty "
    "market demand supply inflation elasticity revenue monopoly tariff deficit exchange "
    "patient diagnosis symptom therapy dosage syndrome chronic acute infection tissue"
).split()
# Occasional non-ASCII words, as in real benchmark text (names, curly quotes, symbols): one word
# in NON_ASCII_EVERY, so about 10% of MMLU-sized rows and 5% of W1 rows contain one.
_NON_ASCII_WORDS = (
    "café naïve résumé déjà\u2013vu Schrödinger Gödel Poincaré Erdős \u201cso-called\u201d "
    "it\u2019s 90\u00b0C \u03c0r\u00b2 5\u00d710\u207b\u00b3 \u221a2 \u03bcm"
).split()
NON_ASCII_EVERY = 700


def _text(rng: random.Random, lo: int, hi: int) -> str:
    """Sentence-like text of ``lo``..``hi`` characters (no braces)."""
    target = rng.randint(lo, hi)
    words: list[str] = []
    n = 0
    while n < target:
        pool = _NON_ASCII_WORDS if rng.randrange(NON_ASCII_EVERY) == 0 else _WORDS
        w = rng.choice(pool)
        words.append(w)
        n += len(w) + 1
    s = " ".join(words)[:target].rstrip()
    return s[0].upper() + s[1:] + rng.choice([".", "?", ":", "."])


@cache
def w1_rows(n: int) -> list[Row]:
    """Short zero-shot rows (HF row layout: data columns, then ``subdivision``, ``idx``)."""
    rng = random.Random(1)
    return [
        {
            "context": _text(rng, 60, 160),
            "question": _text(rng, 25, 80),
            "a": _text(rng, 4, 24),
            "b": _text(rng, 4, 24),
            "answer": rng.choice("AB"),
            "subdivision": "w1",
            "idx": i,
        }
        for i in range(n)
    ]


def _mmlu_row(rng: random.Random, i: int, split: str) -> Row:
    return {
        "input": _text(rng, 200, 400),
        "A": _text(rng, 8, 80),
        "B": _text(rng, 8, 80),
        "C": _text(rng, 8, 80),
        "D": _text(rng, 8, 80),
        "target": rng.choice("ABCD"),
        "subdivision": f"lukaemon_mmlu_college_biology_{split}",
        "idx": i,
    }


@cache
def w2_train() -> list[Row]:
    rng = random.Random(2)
    return [_mmlu_row(rng, i, "dev") for i in range(5)]


@cache
def w2_rows(n: int) -> list[Row]:
    rng = random.Random(3)
    return [_mmlu_row(rng, i, "test") for i in range(n)]


# --------------------------------------------------------------------------- workloads

W1_TEMPLATE = "{context}\nQuestion: {question}\nA: {a}\nB: {b}\nAnswer: {answer}"
#: what format_map must be given to produce the same string (the answer column is masked)
W1_FORMAT_MAP_TEMPLATE = W1_TEMPLATE.replace("{answer}", "")

# configs/datasets/mmlu/mmlu_gen_4d595a.py, for one subject
_HINT = (
    "There is a single choice question about college biology. "
    "Answer the question by replying A, B, C or D."
)
_MMLU_HUMAN = f"{_HINT}\nQuestion: {{input}}\nA. {{A}}\nB. {{B}}\nC. {{C}}\nD. {{D}}\nAnswer: "
W2_ICE_TEMPLATE = {
    "round": [
        {"role": "HUMAN", "prompt": _MMLU_HUMAN},
        {"role": "BOT", "prompt": "{target}\n"},
    ]
}
W2_PROMPT_TEMPLATE = {"begin": "</E>", "round": [{"role": "HUMAN", "prompt": _MMLU_HUMAN}]}
CHATML_META = {
    "round": [
        {"role": "HUMAN", "begin": "<|im_start|>user\n", "end": "<|im_end|>\n"},
        {
            "role": "BOT",
            "begin": "<|im_start|>assistant\n",
            "end": "<|im_end|>\n",
            "generate": True,
        },
    ],
    "reserved_roles": [
        {"role": "SYSTEM", "begin": "<|im_start|>system\n", "end": "<|im_end|>\n"},
    ],
}


@dataclass(frozen=True)
class Workload:
    name: str
    rows: Callable[[int], list[Row]]
    train: Callable[[], list[Row]]
    setup: Callable[[Any], dict[str, Any]]  # M -> render_rows keyword arguments
    full: int  # full size (ours only)
    subset: int  # rows timed on both implementations
    quick: int  # rows when benchmarking is disabled / quick
    ref_rounds: int
    ours_rounds: int
    full_rounds: int


def _w1_setup(M: Any) -> dict[str, Any]:
    # ZeroRetriever: no ice template, ice_separator = ice_eos_token = ''
    return {
        "parser": M.LMTemplateParser(None),
        "prompt_template": M.PromptTemplate(W1_TEMPLATE),
        "output_column": "answer",
        "ice_separator": "",
        "ice_eos_token": "",
    }


def _w2_setup(M: Any, dicts: Callable[[Any], Any] = copy.deepcopy) -> dict[str, Any]:
    """``dicts`` makes the templates' and meta template's own copies of their dicts."""
    return {
        "parser": M.LMTemplateParser(dicts(CHATML_META)),
        "ice_template": M.PromptTemplate(dicts(W2_ICE_TEMPLATE)),
        "prompt_template": M.PromptTemplate(dicts(W2_PROMPT_TEMPLATE), ice_token="</E>"),
        "output_column": "target",
        "fix_id_list": [0, 1, 2, 3, 4],
    }


W1 = Workload(
    name="W1",
    rows=w1_rows,
    train=lambda: [],
    setup=_w1_setup,
    full=100_000,
    subset=10_000,
    quick=1_000,
    ref_rounds=5,
    ours_rounds=15,
    full_rounds=5,
)
W2 = Workload(
    name="W2",
    rows=w2_rows,
    train=w2_train,
    setup=_w2_setup,
    full=14_042,
    subset=1_000,
    quick=100,
    ref_rounds=5,
    ours_rounds=15,
    full_rounds=5,
)

G_W1 = "W1-zero-shot-4field"
G_W1_FULL = "W1-zero-shot-4field-full"
G_W2 = "W2-mmlu-5shot-chatml"
G_W2_FULL = "W2-mmlu-5shot-chatml-full"


# --------------------------------------------------------------------------- helpers


def _quick(benchmark: Any) -> bool:
    return bool(benchmark.disabled) or os.environ.get(QUICK_ENV, "") not in ("", "0")


def _rounds(n: int) -> int:
    scale = float(os.environ.get(ROUNDS_SCALE_ENV, "1") or 1)
    return max(1, round(n * scale))


def _size(benchmark: Any, wl: Any, size: str) -> int:
    """The row count of a workload with ``quick``/``subset``/``full`` sizes for this run."""
    if _quick(benchmark):
        return int(wl.quick)
    return int(wl.full if size == "full" else wl.subset)


def time_render(benchmark: Any, wl: Any, renderer: Any, rows: Any, train: Any, size: str) -> Any:
    """``renderer.render(rows, train)`` timed as the workload's ``subset``/``full`` rounds say
    (one warm-up round when timing); its result."""
    return benchmark.pedantic(
        renderer.render,
        args=(rows, train),
        rounds=_rounds(wl.ours_rounds if size == "subset" else wl.full_rounds),
        warmup_rounds=0 if benchmark.disabled else 1,
        iterations=1,
    )


def check_outputs(
    got: Sequence[Any], want: Sequence[Any], what: str, same: Callable[[Any, Any], bool]
) -> None:
    """Row for row, ``same(got, want)``; the message names the first row that differs."""
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert same(g, w), f"{what}: row {i} differs:\n{g!r}\n!=\n{w!r}"


_EXPECTED: dict[tuple[str, str, int], list[Any]] = {}


def rendered(M: Any, wl: Workload, n: int) -> list[Any]:
    """``render_rows`` of the first ``n`` rows through ``M``, computed once (untimed)."""
    key = (getattr(M, "name", None) or M.__name__, wl.name, n)
    if key not in _EXPECTED:
        _EXPECTED[key] = render_rows(M, wl.rows(n), wl.train(), **wl.setup(M))
    return _EXPECTED[key]


def _check(got: list[Any], want: list[Any], what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert type(g) is type(w), f"{what}: row {i}: {type(g).__name__} != {type(w).__name__}"
        assert g == w, f"{what}: row {i} differs:\n{g!r}\n!=\n{w!r}"


def _bench(
    benchmark: Any,
    M: Any,
    impl: str,
    wl: Workload,
    n: int,
    rounds: int,
    check_against: Any,
) -> None:
    """Time ``render_rows`` over ``n`` rows through ``M``; then diff it with ``check_against``."""
    rows, train, kwargs = wl.rows(n), wl.train(), wl.setup(M)
    benchmark.extra_info.update(workload=wl.name, impl=impl, rows=n)
    fallbacks = _fallback_count(M)
    got = benchmark.pedantic(
        render_rows,
        args=(M, rows, train),
        kwargs=kwargs,
        rounds=_rounds(rounds),
        warmup_rounds=1 if impl == "ours" and not benchmark.disabled else 0,
        iterations=1,
    )
    _check(got, rendered(check_against, wl, n), f"{wl.name} {impl} ({n} rows)")
    # a benchmark of promptweave's pure-Python fallback path would measure the wrong thing
    # (unless that path is what is being measured: PROMPTWEAVE_FORCE_PYTHON=1)
    if not getattr(getattr(M, "_backend", None), "FORCE_PYTHON", False):
        assert _fallback_count(M) == fallbacks, f"{wl.name}: ours left the Rust core"


def _fallback_count(M: Any) -> int:
    """Calls promptweave rendered on its pure-Python path so far (0 for the reference)."""
    backend = getattr(M, "_backend", None)
    return int(getattr(backend, "fallbacks", 0))


# --------------------------------------------------------------------------- W1


@pytest.mark.benchmark(group=G_W1)
def test_w1_reference(benchmark: Any, ours: Any, reference: Any) -> None:
    n = W1.quick if _quick(benchmark) else W1.subset
    _bench(benchmark, reference, "reference", W1, n, W1.ref_rounds, ours)


@pytest.mark.benchmark(group=G_W1)
def test_w1_ours(benchmark: Any, ours: Any, reference: Any) -> None:
    n = W1.quick if _quick(benchmark) else W1.subset
    _bench(benchmark, ours, "ours", W1, n, W1.ours_rounds, reference)


@pytest.mark.benchmark(group=G_W1)
def test_w1_format_map(benchmark: Any, ours: Any, reference: Any) -> None:
    n = W1.quick if _quick(benchmark) else W1.subset
    rows = W1.rows(n)
    benchmark.extra_info.update(workload=W1.name, impl="format_map", rows=n)
    got = benchmark.pedantic(
        format_map_rows,
        args=(W1_FORMAT_MAP_TEMPLATE, rows),
        rounds=_rounds(W1.ours_rounds),
        warmup_rounds=0 if benchmark.disabled else 1,
        iterations=1,
    )
    want = rendered(reference, W1, n)
    _check(got, want, f"W1 format_map ({n} rows)")
    _check(rendered(ours, W1, n), want, f"W1 ours ({n} rows)")


@pytest.mark.benchmark(group=G_W1_FULL)
def test_w1_ours_full(benchmark: Any, ours: Any, reference: Any) -> None:
    n = W1.quick if _quick(benchmark) else W1.full
    _bench(benchmark, ours, "ours", W1, n, W1.full_rounds, reference)


# --------------------------------------------------------------------------- W2


@pytest.mark.benchmark(group=G_W2)
def test_w2_reference(benchmark: Any, ours: Any, reference: Any) -> None:
    n = W2.quick if _quick(benchmark) else W2.subset
    _bench(benchmark, reference, "reference", W2, n, W2.ref_rounds, ours)


@pytest.mark.benchmark(group=G_W2)
def test_w2_ours(benchmark: Any, ours: Any, reference: Any) -> None:
    n = W2.quick if _quick(benchmark) else W2.subset
    _bench(benchmark, ours, "ours", W2, n, W2.ours_rounds, reference)


@pytest.mark.benchmark(group=G_W2_FULL)
def test_w2_ours_full(benchmark: Any, ours: Any, reference: Any) -> None:
    n = W2.quick if _quick(benchmark) else W2.full
    _bench(benchmark, ours, "ours", W2, n, W2.full_rounds, reference)


def test_w2_prompt_shape(ours: Any, reference: Any) -> None:
    """The W2 model input has the expected ChatML shape (five ICE turns, open assistant turn)."""
    (out,) = rendered(reference, W2, 1)
    assert out.count("<|im_start|>user\n") == 6
    assert out.count("<|im_start|>assistant\n") == 6
    assert out.endswith("\nAnswer: <|im_end|>\n<|im_start|>assistant\n")
    assert rendered(ours, W2, 1) == [out]


@pytest.mark.parametrize(
    ("wl", "retriever"),
    [(W1, "ZeroRetriever"), (W2, "FixKRetriever")],
    ids=["W1-zero", "W2-fixk"],
)
def test_render_rows_is_the_opencompass_pipeline(
    wl: Workload, retriever: str, ours: Any, reference: Any, refload: Any
) -> None:
    """``render_rows`` == OpenCompass's own retriever + ``GenInferencer`` prompt building (over
    a HF ``DatasetReader``), then ``parse_template(..., 'gen')`` -- on both implementations."""
    M, n = reference, 40
    setup = wl.setup(M)
    out_col = setup["output_column"]
    train = wl.train() or wl.rows(n)  # ZeroRetriever still needs a train split
    ds = refload.make_dataset(M, train, wl.rows(n), output_column=out_col)
    if retriever == "FixKRetriever":
        ret = M.FixKRetriever(ds, fix_id_list=setup["fix_id_list"])
    else:
        ret = M.ZeroRetriever(ds)
    prompts = M.GenInferencer.get_generation_prompt_list_from_retriever_indices(
        None,  # `self` is only used when max_seq_len is set
        ret.retrieve(),
        ret,
        "",
        max_seq_len=None,
        ice_template=setup.get("ice_template"),
        prompt_template=setup["prompt_template"],
    )
    want = [setup["parser"].parse_template(p, mode="gen") for p in prompts]
    _check(render_rows(M, wl.rows(n), wl.train(), **setup), want, f"{wl.name} reference")
    _check(rendered(ours, wl, n), want, f"{wl.name} ours")
