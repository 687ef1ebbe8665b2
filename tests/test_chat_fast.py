"""The chat templates' fast path (``rust/core/src/chat_fast.rs``) against the full engine.

The fast path renders plain conversations (string/int/bool/None values) for the parts of Jinja
it models and gives up anywhere else; the full engine (minijinja configured as transformers'
Jinja2, checked against transformers in ``test_chat_template.py``) then renders the
conversation. These tests check that whenever the fast path produces a string it is the full
engine's string, that it gives up wherever the full engine fails, and that it is actually used
(a fast path that always gave up would pass the first two checks).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))

import chat_corpus
from test_chat_template import TEMPLATES

from promptweave._core import CompiledChatTemplate
from promptweave.errors import ChatInputError, ChatTemplateError

VARIABLES = [*chat_corpus.SPECIAL_TOKENS.items(), ("tools", None), ("documents", None)]

USER = {"role": "user", "content": "What is 2 + 2?"}
BOT = {"role": "assistant", "content": " It is 4. "}
SYSTEM = {"role": "system", "content": "You are terse."}

#: plain conversations: the corpus cases without tools/continue, and a few more shapes
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], bool]] = {
    name: (case["messages"], bool(case.get("add_generation_prompt")))
    for name, case in chat_corpus.CASES.items()
    if not case.get("tools") and not case.get("continue_final_message")
}
CONVERSATIONS.update(
    {
        "two_systems": ([SYSTEM, SYSTEM, USER], True),
        "assistant_first": ([BOT, USER], True),
        "user_user": ([USER, USER], False),
        "extra_fields": ([{**USER, "name": "ann", "id": 3, "flag": True, "x": None}, BOT], True),
        "empty_content": ([{"role": "user", "content": ""}], True),
        "tool_message": ([USER, {"role": "tool", "content": "4"}, BOT], False),
    }
)


def outcome(template: CompiledChatTemplate, messages: Any, agp: bool) -> tuple[str, str]:
    try:
        return ("ok", template.render(messages, VARIABLES, agp))
    except (ChatTemplateError, ChatInputError) as exc:
        return (type(exc).__name__, str(exc))


def check(source: str, messages: Any, agp: bool) -> bool:
    """The fast path equals the full engine on this input; ``True`` when it was used."""
    fast = CompiledChatTemplate(source)
    full = CompiledChatTemplate(source, None, False)
    want = outcome(full, messages, agp)
    got = fast.fast_render(messages, VARIABLES, agp)
    if got is not None:
        assert want == ("ok", got)
    # and the public path (fast path with fallback) always gives the full engine's outcome
    assert outcome(fast, messages, agp) == want
    return got is not None


def test_fast_path_matches_the_full_engine_on_the_corpus() -> None:
    corpus = chat_corpus.corpus_or_skip()
    used = total = with_fast_path = 0
    for source in corpus.values():
        with_fast_path += CompiledChatTemplate(source).fast_path
        for messages, agp in CONVERSATIONS.values():
            total += 1
            used += check(source, messages, agp)
    # measured: every template has a fast path; it renders about 60% of these inputs
    assert with_fast_path == len(corpus)
    assert used >= total // 2, (used, total)


@pytest.mark.parametrize("impl", ["chatml", "llama3"])
def test_benchmark_templates_render_on_the_fast_path(impl: str) -> None:
    import bench_chat

    wl = {"chatml": bench_chat.CHATML, "llama3": bench_chat.LLAMA3}[impl]
    fast = CompiledChatTemplate(wl.template)
    full = CompiledChatTemplate(wl.template, None, False)
    variables = [*wl.tokens.items(), ("tools", None), ("documents", None)]
    convs = bench_chat.conversations(200)
    for conv in convs:
        assert fast.fast_render(conv, variables, True) == full.render(conv, variables, True)
    assert fast.render_many(convs, variables, True) == full.render_many(convs, variables, True)


ROLES = st.sampled_from(["system", "user", "assistant", "tool", "developer", "ipython", "bot"])
TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40
) | st.sampled_from(["", " ", "\n\n", "  padded  ", "{{ x }}", "{% if %}", "<think>a</think>b"])
EXTRA = st.dictionaries(
    st.sampled_from(["name", "id", "flag", "tool_call_id", "weight"]),
    st.none() | st.booleans() | st.integers(-5, 5) | TEXT,
    max_size=2,
)
MESSAGE = st.builds(
    lambda role, content, extra: {"role": role, "content": content, **extra}, ROLES, TEXT, EXTRA
)
CONVERSATION = st.lists(MESSAGE, min_size=1, max_size=6)


@pytest.fixture(scope="module")
def conformance_sources() -> list[str]:
    corpus = chat_corpus.corpus_or_skip()
    return [corpus[name] for name in TEMPLATES if name in corpus]


@given(conv=CONVERSATION, agp=st.booleans(), which=st.integers(0, 10_000))
def test_fast_path_on_generated_conversations(
    conformance_sources: list[str], conv: list[dict[str, Any]], agp: bool, which: int
) -> None:
    check(conformance_sources[which % len(conformance_sources)], conv, agp)
