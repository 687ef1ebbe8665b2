"""Chat templates: ``promptweave.ChatTemplate`` vs transformers, jinja2 and minijinja-py.

Each workload renders the same 10,000 three-turn conversations (generated, seeded) with
``add_generation_prompt=True`` through one HuggingFace-style chat template, on every engine:

* ``ours-batch`` -- ``ChatTemplate.render_many(conversations)`` (inputs converted with the
  interpreter held, then rendered with it released, on one thread by default);
* ``ours-batch-2t`` -- the same with ``threads=2``: pipelined, this thread reading the next
  block and making the strings of the last while a second thread renders;
* ``ours-loop`` -- ``ChatTemplate.render(conversation)`` per conversation;
* ``transformers`` -- ``tokenizer.apply_chat_template(conversation, tokenize=False, ...)`` per
  conversation (what OpenCompass's HF chat models do), on a ``PreTrainedTokenizerFast`` built from
  a one-word ``WordLevel`` tokenizer with the template and special tokens set;
* ``transformers-batch`` -- one ``apply_chat_template(conversations, tokenize=False, ...)`` call;
* ``jinja2`` -- ``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)``, the
  template compiled once, ``template.render(messages=..., ...)`` per conversation (the Jinja2 core
  of ``apply_chat_template`` without transformers' per-call work);
* ``minijinja-py`` -- the ``minijinja`` Python package (``Environment(trim_blocks=True,
  lstrip_blocks=True)``), ``render_template`` per conversation (it has no batch API);
* ``floor`` -- not an engine: the same output strings decoded from ready UTF-8 bytes, the
  least any renderer returning Python ``str`` objects must spend (on the development VM most
  of it is page faults: the strings of one round are freed before the next allocates its own).

Templates (written for these benchmarks, in the style of the real ones):

* **chatml** -- Qwen2.5-style ChatML: ``<|im_start|>role\\n...<|im_end|>\\n``, a default system
  message when the conversation has none, ``<|im_start|>assistant\\n`` as generation prompt;
* **llama3** -- Llama-3 style: ``bos_token``, ``<|start_header_id|>role<|end_header_id|>\\n\\n``
  + trimmed content + ``<|eot_id|>``, the system message split off, a role-alternation check
  with ``raise_exception``.

A conversation is user / assistant / user / assistant / user (3 user turns, 2 replies), with a
system message in about half of them; user turns 40-600 characters, replies 100-1,200, system
messages 40-200 (the text generator of ``bench_render.py``: mostly ASCII, one word in 700 not).

Every test checks, outside the timed region, that its strings equal transformers' for every
conversation.  Besides pytest-benchmark's timer (``report.py``: CPU time), each test records the
CPU-time *and* wall-clock median of its rounds in ``extra_info`` (``cpu_median``/``wall_median``):
``ours-batch-2t`` runs 2 threads, whose CPU time adds up, so both clocks are reported.  Under
``--benchmark-disable`` (CI) or ``PROMPTWEAVE_BENCH_QUICK=1`` the tests run on 200 conversations.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench_render as B  # noqa: E402  (the text generator, _quick and _rounds)

Message = dict[str, str]
Conversation = list[Message]

# --------------------------------------------------------------------------- templates

#: Qwen2.5-style ChatML (default system message, whitespace control with ``{%-``/``{{-``)
CHATML_TEMPLATE = """\
{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- set turns = messages[1:] %}
{%- else %}
    {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- set turns = messages %}
{%- endif %}
{%- for message in turns %}
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

#: Llama-3 style (BOS, header tokens, trimmed content, role alternation enforced)
LLAMA3_TEMPLATE = """\
{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set turns = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
    {%- set turns = messages %}
{%- endif %}
{%- if system_message %}
    {{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message + '<|eot_id|>' }}
{%- endif %}
{%- for message in turns %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/...') }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
    {{- message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""


@dataclass(frozen=True)
class ChatWorkload:
    name: str
    template: str
    tokens: dict[str, str]  # special tokens, as the tokenizer config would give them
    full: int = 10_000
    quick: int = 200

    @property
    def group(self) -> str:
        return f"chat-{self.name}"


CHATML = ChatWorkload("chatml", CHATML_TEMPLATE, {"bos_token": "<s>", "eos_token": "<|im_end|>"})
LLAMA3 = ChatWorkload(
    "llama3", LLAMA3_TEMPLATE, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
)
WORKLOADS = [CHATML, LLAMA3]


# --------------------------------------------------------------------------- conversations


@cache
def conversations(n: int) -> list[Conversation]:
    """``n`` conversations: [system], user, assistant, user, assistant, user (seeded)."""
    rng = random.Random(7)
    out: list[Conversation] = []
    for _ in range(n):
        conv: Conversation = []
        if rng.random() < 0.5:
            conv.append({"role": "system", "content": B._text(rng, 40, 200)})
        for turn in range(3):
            conv.append({"role": "user", "content": B._text(rng, 40, 600)})
            if turn < 2:
                conv.append({"role": "assistant", "content": B._text(rng, 100, 1200)})
        out.append(conv)
    return out


# --------------------------------------------------------------------------- engines

Renderer = Callable[[Sequence[Conversation]], list[str]]


def _raise_exception(message: str) -> None:
    raise ValueError(message)


def _import(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed")


def ours_batch(wl: ChatWorkload, threads: int | None = None) -> Renderer:
    from promptweave import ChatTemplate

    ct = ChatTemplate(wl.template, special_tokens=wl.tokens)

    def render(convs: Sequence[Conversation]) -> list[str]:
        return ct.render_many(convs, add_generation_prompt=True, threads=threads)

    return render


def ours_loop(wl: ChatWorkload) -> Renderer:
    from promptweave import ChatTemplate

    ct = ChatTemplate(wl.template, special_tokens=wl.tokens)

    def render(convs: Sequence[Conversation]) -> list[str]:
        return [ct.render(c, add_generation_prompt=True) for c in convs]

    return render


_TOKENIZERS: dict[str, Any] = {}


def _tokenizer(wl: ChatWorkload) -> Any:
    if wl.name in _TOKENIZERS:
        return _TOKENIZERS[wl.name]
    tokenizers = _import("tokenizers")
    transformers = _import("transformers")
    word_level = tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>")
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer(word_level),
        chat_template=wl.template,
        **wl.tokens,
    )
    _TOKENIZERS[wl.name] = tok
    return tok


def transformers_loop(wl: ChatWorkload) -> Renderer:
    tok = _tokenizer(wl)

    def render(convs: Sequence[Conversation]) -> list[str]:
        return [
            tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in convs
        ]

    return render


def transformers_batch(wl: ChatWorkload) -> Renderer:
    tok = _tokenizer(wl)

    def render(convs: Sequence[Conversation]) -> list[str]:
        return list(tok.apply_chat_template(convs, tokenize=False, add_generation_prompt=True))

    return render


def jinja2_loop(wl: ChatWorkload) -> Renderer:
    sandbox = _import("jinja2.sandbox")
    env = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise_exception
    template = env.from_string(wl.template)
    tokens = dict(wl.tokens)

    def render(convs: Sequence[Conversation]) -> list[str]:
        return [template.render(messages=c, add_generation_prompt=True, **tokens) for c in convs]

    return render


def minijinja_loop(wl: ChatWorkload) -> Renderer:
    minijinja = _import("minijinja")
    env = minijinja.Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        templates={"chat": wl.template},
        globals={"raise_exception": _raise_exception},
    )
    tokens = dict(wl.tokens)

    def render(convs: Sequence[Conversation]) -> list[str]:
        return [
            env.render_template("chat", messages=c, add_generation_prompt=True, **tokens)
            for c in convs
        ]

    return render


class Floor:
    """Not an engine: building the same Python strings from ready UTF-8 bytes (encoded by
    :meth:`prepare`, outside the timed region), the least any renderer returning ``str``
    objects spends on these conversations."""

    def __init__(self, wl: ChatWorkload) -> None:
        self.wl = wl
        self.utf8: list[bytes] = []

    def prepare(self, n: int) -> None:
        self.utf8 = [s.encode() for s in expected(self.wl, n)]

    def __call__(self, convs: Sequence[Conversation]) -> list[str]:
        assert len(self.utf8) == len(convs), "Floor.prepare(n) first"
        return [b.decode() for b in self.utf8]


#: impl -> (renderer factory, rounds when timed)
ENGINES: dict[str, tuple[Callable[[ChatWorkload], Renderer], int]] = {
    "ours-batch": (ours_batch, 15),
    "ours-batch-2t": (lambda wl: ours_batch(wl, threads=2), 15),
    "ours-loop": (ours_loop, 11),
    "transformers": (transformers_loop, 5),
    "transformers-batch": (transformers_batch, 5),
    "jinja2": (jinja2_loop, 7),
    "minijinja-py": (minijinja_loop, 7),
    "floor": (Floor, 15),
}


# --------------------------------------------------------------------------- helpers

_EXPECTED: dict[tuple[str, int], list[str]] = {}


def expected(wl: ChatWorkload, n: int) -> list[str]:
    """transformers' strings for the first ``n`` conversations, computed once (untimed)."""
    key = (wl.name, n)
    if key not in _EXPECTED:
        _EXPECTED[key] = transformers_loop(wl)(conversations(n))
    return _EXPECTED[key]


def check(got: Sequence[str], want: Sequence[str], what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert type(g) is str, f"{what}: conversation {i}: {type(g).__name__}, not str"
        assert g == w, f"{what}: conversation {i} differs:\n{g!r}\n!=\n{w!r}"


class _Clocks:
    """Wraps a renderer to record each call's CPU time and wall-clock time."""

    def __init__(self, fn: Renderer) -> None:
        self.fn = fn
        self.cpu: list[float] = []
        self.wall: list[float] = []

    def __call__(self, convs: Sequence[Conversation]) -> list[str]:
        c0, w0 = time.process_time(), time.perf_counter()
        out = self.fn(convs)
        w1, c1 = time.perf_counter(), time.process_time()
        self.cpu.append(c1 - c0)
        self.wall.append(w1 - w0)
        return out


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("impl", list(ENGINES))
@pytest.mark.parametrize("wl", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_chat(benchmark: Any, wl: ChatWorkload, impl: str) -> None:
    factory, rounds = ENGINES[impl]
    n = wl.quick if B._quick(benchmark) else wl.full
    convs = conversations(n)
    want = expected(wl, n)  # before the timing: also skips the test without transformers
    renderer = factory(wl)
    if isinstance(renderer, Floor):
        renderer.prepare(n)
    clocks = _Clocks(renderer)
    warmup = 0 if benchmark.disabled else 1
    benchmark.group = wl.group
    got = benchmark.pedantic(
        clocks,
        args=(convs,),
        rounds=B._rounds(rounds),
        warmup_rounds=warmup,
        iterations=1,
    )
    timed_cpu, timed_wall = clocks.cpu[warmup:], clocks.wall[warmup:]
    benchmark.extra_info.update(
        path="chat",
        workload=wl.name,
        impl=impl,
        rows=n,
        threads={"ours-batch-2t": 2}.get(impl, 1),
        cpu_median=statistics.median(timed_cpu) if timed_cpu else None,
        wall_median=statistics.median(timed_wall) if timed_wall else None,
    )
    check(got, want, f"{wl.name} {impl} ({n} conversations)")


@pytest.mark.parametrize("wl", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_chat_shape(wl: ChatWorkload) -> None:
    """The rendered conversations have the expected shape (5 turns, open assistant turn)."""
    convs = conversations(20)
    outs = expected(wl, 20)
    assert any(c[0]["role"] == "system" for c in convs)
    assert any(c[0]["role"] != "system" for c in convs)
    for conv, out in zip(convs, outs, strict=True):
        assert len([m for m in conv if m["role"] != "system"]) == 5
        if wl is CHATML:
            assert out.startswith("<|im_start|>system\n")
            assert out.count("<|im_start|>") == 7
            assert out.endswith("<|im_end|>\n<|im_start|>assistant\n")
        else:
            assert out.startswith("<|begin_of_text|><|start_header_id|>")
            assert out.count("<|eot_id|>") == len(conv)
            assert out.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_llama3_role_check_raises_everywhere() -> None:
    """The Llama-3 template's ``raise_exception`` fires on every engine (same template code)."""
    bad = [[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]]
    for impl, (factory, _) in ENGINES.items():
        if impl == "floor":
            continue  # not an engine: it renders nothing
        with pytest.raises(Exception, match="roles must alternate"):
            factory(LLAMA3)(bad)
