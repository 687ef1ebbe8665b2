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


# ------------------------------------------------- macros, loop neighbours, blocks, ranges

#: ``name: (source, on the fast path)``: each template is checked against transformers'
#: Jinja2 (through the public path) and, where the fast path renders it, the fast path too
CONSTRUCT_CASES: dict[str, tuple[str, bool]] = {
    "params_defaults_kwargs": (
        "{% macro tag(role, text, close='<end>') %}<{{ role }}>{{ text | trim }}{{ close }}"
        "{% endmacro %}{% for m in messages %}{{ tag(m.role, m.content) }}"
        "{{ tag(m.role, text=m.content, close='|') }}{% endfor %}",
        True,
    ),
    "render_variables": (
        "{% macro head() %}{{ bos_token }}[{{ add_generation_prompt }}]{{ messages | length }}"
        "{% endmacro %}{{ head() }}{{ head() }}",
        True,
    ),
    "read_before_set": (
        "{% macro sys() %}{% if model_identity is not defined %}"
        "{% set model_identity = 'default' %}{% endif %}{{ model_identity }}{% endmacro %}"
        "{{ sys() }}",
        True,
    ),
    "earlier_macro": (
        "{% macro a(x) %}[{{ x }}]{% endmacro %}{% macro b(x) %}{{ a(x) ~ a(x | upper) }}"
        "{% endmacro %}{% for m in messages %}{{ b(m.role) }}{% endfor %}",
        True,
    ),
    "later_macro": (
        "{% macro b(x) %}{{ a(x) }}{% endmacro %}{% macro a(x) %}[{{ x }}]{% endmacro %}"
        "{{ b('r') }}",
        False,
    ),
    "local_namespace": (
        "{% macro count(ms) %}{% set ns = namespace(n=0) %}{% for m in ms %}"
        "{% if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.n }}"
        "{% endmacro %}{{ count(messages) }}/{{ count(messages[1:]) }}",
        True,
    ),
    "outer_namespace": (
        "{% set ns = namespace(n=0) %}{% macro bump(x) %}{% set ns.n = ns.n + 1 %}{{ x }}"
        "{% endmacro %}{{ bump('a') }}{{ ns.n }}",
        False,
    ),
    "namespace_argument": (
        "{% macro bump(n) %}{% set n.v = n.v + 1 %}{% endmacro %}"
        "{% set ns = namespace(v=0) %}{{ bump(ns) }}{{ bump(ns) }}{{ ns.v }}",
        False,
    ),
    # the quick comparisons and lookups: a message picked by a constant index, comparisons
    # of strings, of integers, of truths and of mixed kinds
    "indexed_message_fields": (
        "{% if messages[0]['role'] == 'system' %}S:{{ messages[0]['content'] }}{% endif %}"
        "|{{ messages[-1]['role'] + messages[1].role }}|{{ messages[-4]['content'] | trim }}"
        "|{{ messages[0]['role'] != messages[-1]['role'] }}|{{ messages[1]['missing'] == 'x' }}"
        "|{{ messages[0]['content'] == 0 }}|{{ messages[2]['content'] != None }}",
        True,
    ),
    "index_out_of_range": (
        "{% if messages[7]['role'] == 'user' %}u{% else %}v{% endif %}",
        False,
    ),
    "mixed_comparisons": (
        "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 1) %}!"
        "{% endif %}{{ loop.index == 2 }}{{ (loop.index0 == 0) == (m.role == 'system') }}"
        "{{ loop.index0 == '0' }}{{ m.role == loop.index0 }}{{ (loop.index0 - 1) * 2 == -2 }}"
        "{{ loop.length != loop.index }}{% endfor %}",
        True,
    ),
    "top_level_variable": (
        "{% set sep = '|' %}{% macro j(a, b) %}{{ a }}{{ sep }}{{ b }}{% endmacro %}"
        "{{ j('x', 'y') }}",
        False,
    ),
    "defined_in_a_loop": (
        "{% for m in messages %}{% macro r() %}{{ m.role }}{% endmacro %}{{ r() }}{% endfor %}",
        False,
    ),
    "missing_argument": (
        "{% macro f(a, b) %}{{ a }}{{ b is defined }}{% endmacro %}{{ f(1) }}",
        False,
    ),
    "too_many_arguments": ("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}", False),
    "recursion": (
        "{% macro down(n) %}{{ n }}{% if n > 0 %}{{ down(n - 1) }}{% endif %}{% endmacro %}"
        "{{ down(3) }}",
        False,
    ),
    "varargs": ("{% macro f() %}{{ varargs | length }}{% endmacro %}{{ f(1, 2) }}", False),
    "caller": (
        "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}x{% endcall %}",
        False,
    ),
    "value_in_expressions": (
        "{% macro q(x) %}'{{ x }}'{% endmacro %}{% set s = q('a') + q('b') %}"
        "{{ s | length }}{{ s }}{{ q('c') ~ 3 }}{% if q('') %}T{% else %}F{% endif %}",
        True,
    ),
    "whitespace_control": (
        "{%- macro f(x) -%}\n  {{- x -}}\n{%- endmacro -%}\n{{ f('a') }}|{{ f('b') }}",
        True,
    ),
    "string_case": (
        "{{ 'hello wORLD-foo(bar) x1y  \\tz' | title }}|{{ \"o'neil mc-d 1st\" | title }}|"
        "{{ 'hELLO wORLD' | capitalize }}|{{ \"o'neil mc-d 1st\".title() }}|"
        "{{ 'aBC'.capitalize() }}|{{ '' | capitalize }}{{ ''.title() }}|"
        "{% for m in messages %}{{ m.role | capitalize }}{{ m.role.title() }};{% endfor %}",
        True,
    ),
    "non_ascii_case": ("{{ 'ǆemal ßtraße' | title }}{{ 'éa'.capitalize() }}", False),
    "ranges": (
        "{% for i in range(messages | length) %}{{ i }}{{ messages[i].role[0] }}{% endfor %}|"
        "{% for i in range(messages | length - 1, -1, -1) %}{{ i }}{% endfor %}|"
        "{% for i in range(0, 10, 3) %}{{ i }}{% endfor %}|{{ range(5) | length }}|"
        "{{ range(2, -3, -2) | list | length }}|{{ 3 in range(4) }}|{{ range(0) | length }}",
        True,
    ),
    "range_shadowed": ("{% set range = 3 %}{{ range }}", True),
    "set_block": (
        "{% set intro %}[{% for m in messages %}{{ m.role }},{% endfor %}]{% endset %}"
        "{{ intro | length }}{{ intro }}{{ intro }}",
        True,
    ),
    "set_block_with_assignment": (
        "{% set x %}{% set y = 1 %}{{ y }}{% endset %}{{ x }}{{ y is defined }}",
        False,
    ),
    "set_block_filtered": ("{% set x | upper %}abc{% endset %}{{ x }}", False),
    "tojson": (
        "{% for m in messages %}{{ m.content | tojson }}{{ m | tojson }}{% endfor %}"
        "{{ messages | tojson }}{{ [1, 'a\"b', none, true, messages[1:2]] | tojson }}"
        "{{ 'é\\n\u2028\\u0001<>&' | tojson }}{{ add_generation_prompt | tojson }}",
        True,
    ),
    "tojson_arguments": ("{{ messages | tojson(indent=2) }}", False),
    "dict_literals": (
        "{% set ind = {'user': '<|user|>', 'assistant': '<|bot|>', 'system': '<|sys|>'} %}"
        "{% for m in messages %}{{ ind[m.role] }}{{ ind.get(m.role, '?') }}{{ m.role in ind }}"
        "{% endfor %}|{{ ind | length }}{{ {} | length }}{{ {'a': 1} == {'a': 1} }}"
        "{{ {'a': 1, 'a': 2}['a'] }}{{ ind.missing is defined }}{{ ({'x': 'y'}).get('z', 'd') }}"
        "{{ [{'role': 'x'}][0]['role'] }}{{ ind is mapping }}{{ {} is mapping }}"
        "{{ {'role': 'user', 'content': messages[1].content} == messages[1] }}"
        "{{ {'k': [1, 'v'], 'm': messages[1]} | tojson }}{% if {} %}T{% else %}F{% endif %}",
        True,
    ),
    "dict_method_name_key": (
        "{% set d = {'items': 1} %}{{ d['items'] }}{{ d.items is defined }}",
        False,
    ),
    "dict_update": ("{% set d = {'a': 1} %}{% set _ = d.update({'a': 2}) %}{{ d.a }}", False),
    "dict_printed": ("{{ {'a': 1} }}", False),
    "list_concatenation": (
        "{% set ms = [{'role': 'system', 'content': 'S'}] + messages %}"
        "{% for m in ms %}{{ m.role }}:{{ m['content'] | length }};{% endfor %}"
        "{% set more = messages[1:] + messages[:1] + [1] %}{{ more | length }}"
        "{{ (messages + messages) | length }}{{ (messages + [])[0].role }}",
        True,
    ),
    "default_boolean": (
        "{{ '' | default('x', true) }}{{ '' | default('x') }}{{ none | default('n', true) }}"
        "{{ 0 | default(5, true) }}{{ 'a' | default('b', true) }}"
        "{{ missing | default('m', false) }}{{ messages[0].nope | default('q', true) }}"
        "{{ [] | default('e', true) }}",
        True,
    ),
    "int_filter": ("{{ '12' | int }}{{ '-3' | int + 1 }}{{ true | int }}{{ 7 | int }}", True),
    "int_filter_lenient": (
        "{{ ' 12' | int }}{{ '1.5' | int }}{{ 'x' | int }}{{ '1_000' | int }}{{ '-2.9e1' | int }}"
        "{{ 'nan' | int }}{{ none | int }}{{ 'x' | int(7) }}{{ '+5' | int }}"
        "{{ '0x1A' | int }}{{ '1A' | int(0, 16) }}",
        False,
    ),
    "int_of_undefined": ("{{ missing | int }}", False),
    "tojson_ensure_ascii": (
        "{{ 'é😀' | tojson(ensure_ascii=true) }}{{ 'é' | tojson(ensure_ascii=false) }}"
        "{{ messages[1] | tojson(true) }}{{ 'del:\x7f' | tojson(ensure_ascii=true) }}"
        "{{ 'del:\x7f' | tojson }}",
        True,
    ),
    "string_iteration": (
        "{% for m in messages %}{% for c in m.content %}{% if c['type'] == 'image' %}I"
        "{% elif c.type == 'text' %}{{ c.text }}{% endif %}{{ c if loop.index0 < 2 }}"
        "{% endfor %};{% for p in m.content | selectattr('type', 'equalto', 'text') %}"
        "{{ p['text'] }}{% endfor %}{{ m.content | rejectattr('type') | list | length }}"
        "{{ (m.content | list)[:2] | join('.') }}|"
        "{% endfor %}",
        True,
    ),
    "string_slices": (
        "{% set s = messages[1].content %}{{ s[:3] }}|{{ s[2:] }}|{{ s[-4:-1] }}|{{ s[::-1] }}|"
        "{{ s[1:8:2] }}|[{{ s[5:2] }}]|{{ 'é☃x'[1:] }}{{ 'é☃x'[::-1] }}{{ 'é☃xyz'[-2:] }}|"
        "{{ s[:100] | length }}{{ s[-100:2] }}",
        True,
    ),
    "string_method_attribute": ("{% for c in 'ab' %}{{ c.upper is defined }}{% endfor %}", False),
    "selectattr_dict_method_name": (
        "{{ messages | selectattr('items') | list | length }}",
        False,
    ),
    "loop_neighbours": (
        "{% for m in messages if m.role != 'system' %}"
        "{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ m.role }}>"
        "{{ loop.nextitem.role if loop.nextitem is defined else '-' }};{% endfor %}",
        True,
    ),
    # Jinja2's Markup strings: `safe`/`escape` give one; `+` with a plain string escapes it
    "markup_concatenation": (
        "{% for m in messages %}{{ ('<p>'|safe) + m.role + '</p>'|safe }}{% endfor %}|"
        "{{ 'a'|safe + '<' + 'b'|safe + '>' }}|{{ ('&'|safe|trim) + '<' }}|{{ (5|safe) + \"'\" }}|"
        "{{ ('x'|safe) ~ '<' }}|{% set j = '<q>'|tojson|safe %}{{ j + '</q>' }}|"
        "{{ ('a'|safe + '<') | length }}|{{ ('x'|safe|string) + '&' }}|{{ 1 + 2 }}"
        "{{ (messages + [])|length }}{{ ('(' + 'y') + (')'|safe) }}",
        False,
    ),
    "escape_entities": (
        "{{ \"<a href='x'>\\\"&\" | e }}|{{ '&'|e|e }}|{{ '<'|forceescape }}|"
        "{{ ('<'|e) + '<' }}|{{ none|e }}|{{ messages[1].role|escape }}",
        False,
    ),
    "raw_block_newline": (
        "{% raw %}\n{{ x }}{% endraw %}|{%- raw %}\n\nY\n{% endraw %}\nZ|"
        "{% raw -%}\nW{% endraw %}|{# {% raw %} #}\nQ",
        True,
    ),
    "carriage_returns": (
        "A\r\n{% for m in messages %}{{ m.role }}\r\n{% endfor %}{{ 'x\ry\r\nz' }}\rB",
        True,
    ),
}


#: the full engine differs from Jinja2 here (the fast path leaves them to it)
FULL_ENGINE_GAPS = {
    "varargs": "`varargs` (extra positional arguments of a macro) is not supported by "
    "minijinja: 'too many arguments' where Jinja2 renders",
    "set_block_with_assignment": "a `set` inside a `{% set x %}` block is local to the block "
    "in Jinja2; minijinja keeps it after the block",
    "string_method_attribute": "`'a'.upper` is a bound method in Jinja2 (defined); minijinja "
    "has no attributes on strings (undefined)",
    "selectattr_dict_method_name": "Jinja2's selectattr falls back to the attribute (a dict's "
    "`items` method, true) when the key is missing; minijinja does not",
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=FULL_ENGINE_GAPS[n]))
        if n in FULL_ENGINE_GAPS
        else n
        for n in CONSTRUCT_CASES
    ],
)
def test_constructs_match_jinja2(name: str, ref_tok: Any) -> None:
    from test_chat_template import _assert_same, _reference

    source, on_fast_path = CONSTRUCT_CASES[name]
    conv = [SYSTEM, USER, BOT, USER]
    case = {"messages": conv, "add_generation_prompt": True}
    ref = _reference(ref_tok, source, case)
    _assert_same(ref, chat_corpus.ours_outcome(source, case))
    got = CompiledChatTemplate(source).fast_render(conv, VARIABLES, True)
    if on_fast_path:
        assert ref == ("ok", got)
    else:
        assert got is None


def test_tuple_conversation_is_left_to_the_full_engine(ref_tok: Any) -> None:
    """A tuple of messages is rendered by the full engine (`messages + [...]` fails on a tuple
    in Jinja2, and the fast path's messages are a list)."""
    from test_chat_template import _assert_same, _reference

    conv = (SYSTEM, USER)
    source = "{% for m in messages %}{{ m.role }}{% endfor %}"
    assert CompiledChatTemplate(source).fast_render(conv, VARIABLES, True) is None
    assert CompiledChatTemplate(source).fast_render(list(conv), VARIABLES, True) == "systemuser"
    case = {"messages": conv, "add_generation_prompt": True}
    _assert_same(_reference(ref_tok, source, case), chat_corpus.ours_outcome(source, case))
