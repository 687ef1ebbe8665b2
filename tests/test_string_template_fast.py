"""``generate_item`` of a string template without an ice token: the one-pass path.

Such a template is split at its slots once; a row with no more columns than the template has
slots is read by looking each slot up (which proves that no other key is in the row when every
column is found), any other row in one pass over its items (key objects seen before are
recognised by identity), and the prompt is written into a reused buffer. The path is exact only
under the one-scan condition (no key and no used value with a brace), checked per value or,
when the template's text has no brace and every slot is filled, by one scan of the output;
every other row goes to the full core or the pure-Python path. Each case here is compared with
the reference, on both frameworks, and the common ones must stay in Rust.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

import promptweave.aisbench
import promptweave.opencompass
from promptweave import _backend

OURS = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}
FRAMEWORKS = list(OURS)

TEMPLATE = "{context}\nQuestion: {question}\nA: {a}\nB: {b}\nAgain: {a}\nAnswer: {answer}"
# stray closing braces in the text: the output's braces are not all the values'
STRAY_BRACES = "} {context}\nQuestion: {question}}\nA: {a}\nB: {b}\nAnswer: {answer} }"


class Loud:
    """A value whose ``str()`` renders with the same template (re-entrancy)."""

    def __init__(self, template: Any) -> None:
        self.template = template

    def __str__(self) -> str:
        inner = self.template.generate_item({"context": "in", "question": "q", "a": 1, "b": 2})
        return f"<{len(inner)}>"


def _rows() -> list[dict[Any, Any]]:
    base = {"context": "ctx", "question": "why?", "a": "yes", "b": "no", "answer": "A"}
    return [
        base,
        dict(base),  # the same key objects again
        {k.upper(): v for k, v in base.items()},  # no key fills a slot
        {**base, "a": 1, "b": 2.5, "context": None, "question": True},  # non-str values
        {**base, "question": "about {a} and {b}"},  # a used value with braces
        {**base, "extra": "{answer}"},  # an unused value with braces
        {**base, "k}{x": "v"},  # a key with a brace
        {**base, "question": "lone \ud800 surrogate"},
        {**base, "bad \udfff key": "v"},
        {"question": "only one column"},  # missing slots stay as {name}
        {**base, 7: "int key"},
        {"b": "order", "a": "reversed", "question": "q", "context": "c", "answer": "B"},
        {**base, "question": "ünïcödé ✓ 中文 🎉"},
        {**base, "question": ""},
        # fewer columns than slots: looked up, and a column that is no slot sends the row to
        # the one-pass read (which checks its key)
        {"context": "c", "k}{x": "v"},
        {"context": "c", 7: "int key"},
        {"context": "c", "extra": "{a}", "answer": "A"},
        {"question": "{a} with a slot left unfilled", "b": "{b}"},
        {"context": "c", "missing": "{question}"},
        {"context": "}", "question": "{", "a": "a", "b": "b", "answer": "A"},
        {},
    ]


@pytest.fixture(autouse=True)
def _rust(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", False)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", repr(fn())
    except Exception as exc:
        return "error", type(exc)


def _assert_like_reference(got: tuple[str, Any], want: tuple[str, Any], context: Any) -> None:
    """The reference's value, or (the policy) an exception of its builtin type or a subclass."""
    if want[0] == "ok":
        assert got == want, context
    else:
        assert got[0] == "error", (context, got, want)
        assert issubclass(got[1], want[1]), (context, got, want)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("template", [TEMPLATE, STRAY_BRACES], ids=["plain", "stray-braces"])
@pytest.mark.parametrize(
    ("output_field", "token"),
    [
        (None, ""),
        ("answer", ""),
        ("answer", "<mask>"),
        ("answer", "{a}"),
        ("missing", "x"),
        ("a", 5),
    ],
)
def test_rows_equal_the_reference(
    reference: dict[str, Any], fw: str, template: str, output_field: Any, token: Any
) -> None:
    ours = OURS[fw].PromptTemplate(template)
    ref = reference[fw].PromptTemplate(template)
    for row in _rows():
        got = _outcome(
            lambda row=row: ours.generate_item(
                dict(row), output_field=output_field, output_field_replace_token=token
            )
        )
        want = _outcome(
            lambda row=row: ref.generate_item(
                dict(row), output_field=output_field, output_field_replace_token=token
            )
        )
        _assert_like_reference(got, want, row)


def test_plain_rows_stay_in_rust_and_reentrant_values_work(reference: dict[str, Any]) -> None:
    ours = promptweave.opencompass.PromptTemplate(TEMPLATE)
    ref = reference["oc"].PromptTemplate(TEMPLATE)
    fallbacks = _backend.fallbacks
    for row in _rows()[:4]:
        assert ours.generate_item(row, output_field="answer") == ref.generate_item(
            row, output_field="answer"
        )
    assert _backend.fallbacks == fallbacks
    row = {"context": Loud(ours), "question": Loud(ours), "a": "x", "b": "y", "answer": "A"}
    ref_row = {"context": Loud(ref), "question": Loud(ref), "a": "x", "b": "y", "answer": "A"}
    assert ours.generate_item(row) == ref.generate_item(ref_row)
    # a long prompt, then short ones: the reused buffer never leaks text between rows
    long_row = {**_rows()[0], "context": "z" * 200_000}
    assert ours.generate_item(long_row) == ref.generate_item(long_row)
    assert ours.generate_item(_rows()[0]) == ref.generate_item(_rows()[0])


# ================================================================ the template's own Rust methods

DIALOGUE = {
    "begin": "</E>",
    "round": [
        {"role": "HUMAN", "prompt": "Q: {question}"},
        {"role": "BOT", "prompt": "A: {answer}"},
    ],
}


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_installed_methods_equal_the_class_methods(reference: dict[str, Any], fw: str) -> None:
    """``generate_item`` / ``generate_ice_item`` / ``generate_label_prompt_item`` of a template
    are Rust methods of the instance
    (no Python frame per row), with the reference's signature and defaults; each call equals
    the class method's and the reference's, the pure-Python cases (non-dict rows, lone
    surrogates, FORCE_PYTHON) included."""
    for template, ice_token in ((TEMPLATE, None), (DIALOGUE, "</E>")):
        ours = OURS[fw].PromptTemplate(template, ice_token=ice_token)
        ref = reference[fw].PromptTemplate(template, ice_token=ice_token)
        assert type(ours.generate_item).__name__ == "builtin_function_or_method"
        assert type(ours.generate_ice_item).__name__ == "builtin_function_or_method"
        assert type(ours.generate_label_prompt_item).__name__ == "builtin_function_or_method"
        cls = type(ours)
        ice = ref_ice = ""
        if ice_token:
            ice = ours.generate_ice_item({"question": "q0", "answer": "a0"}, "a0")
            ref_ice = ref.generate_ice_item({"question": "q0", "answer": "a0"}, "a0")
            assert repr(ice) == repr(ref_ice)
        for row in [*_rows(), {"question": "q", "answer": "a"}]:
            calls = [
                ((row,), {}),
                ((row, "answer"), {}),
                ((row,), {"output_field": "answer", "output_field_replace_token": None}),
                ((row, "answer", "<m>", ice), {}),
            ]
            for args, kw in calls:
                ref_args = tuple(ref_ice if a is ice and ice_token else a for a in args)
                got = _outcome(partial(ours.generate_item, *args, **kw))
                assert got == _outcome(partial(cls.generate_item, ours, *args, **kw))
                want = _outcome(partial(ref.generate_item, *ref_args, **kw))
                _assert_like_reference(got, want, (row, args, kw))
            got = _outcome(partial(ours.generate_ice_item, row, "A"))
            want = _outcome(partial(ref.generate_ice_item, row, "A"))
            _assert_like_reference(got, want, row)
            for args in ((row, ice, "A"), (row, ice, "A", True), (row, ice, "A", None)):
                ref_args = tuple(ref_ice if a is ice and ice_token else a for a in args)
                got = _outcome(partial(ours.generate_label_prompt_item, *args))
                assert got == _outcome(partial(cls.generate_label_prompt_item, ours, *args))
                want = _outcome(partial(ref.generate_label_prompt_item, *ref_args))
                _assert_like_reference(got, want, (row, args))
        # a mapping that is not a dict, and everything under FORCE_PYTHON: the Python methods
        fallbacks = _backend.fallbacks
        proxy = type("Row", (dict,), {})(question="p", answer="x")
        assert ours.generate_item(proxy) == ref.generate_item(proxy)
        assert _backend.fallbacks == fallbacks + 1
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_backend, "FORCE_PYTHON", True)
            assert ours.generate_item({"question": "f"}) == ref.generate_item({"question": "f"})
        assert _backend.fallbacks == fallbacks + 2
        # the switch is back: the Rust method renders again
        assert ours.generate_item({"question": "g"}) == ref.generate_item({"question": "g"})
        assert _backend.fallbacks == fallbacks + 2
    with pytest.raises(TypeError, match="entry"):
        ours.generate_item()


def test_a_subclass_keeps_its_override() -> None:
    class Shouting(promptweave.opencompass.PromptTemplate):
        def generate_item(self, entry: Any, *args: Any, **kw: Any) -> Any:
            return super().generate_item(entry, *args, **kw).upper()

    t = Shouting("q: {question}")
    assert "generate_item" not in t.__dict__
    assert "generate_ice_item" in t.__dict__
    assert t.generate_item({"question": "why"}) == "Q: WHY"


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_attributes_set_after_construction_are_rendered(reference: dict[str, Any], fw: str) -> None:
    """The reference reads ``template``, ``ice_token``, ``sep_token`` at every call: setting one
    renders with the new value (the template is compiled again)."""
    ours = OURS[fw].PromptTemplate("Q: {question}</E>", ice_token=None)
    ref = reference[fw].PromptTemplate("Q: {question}</E>", ice_token=None)
    row = {"question": "why", "answer": "A"}
    steps: list[tuple[str, Any]] = [
        ("template", "Other {question} <SEP> {answer}</E>"),
        ("sep_token", "<SEP>"),
        ("ice_token", "</E>"),
        ("template", DIALOGUE),
        ("template", 42),  # the reference fails at the call, not at the assignment
        ("template", "back: {question}"),
    ]
    for name, value in steps:
        setattr(ours, name, value)
        setattr(ref, name, value)
        for call in (
            lambda t: t.generate_item(dict(row), "answer", "", "[ICE]"),
            lambda t: t.generate_ice_item(dict(row), "A"),
            lambda t: t.generate_label_prompt_item(dict(row), "[ICE]", "A"),
        ):
            got, want = _outcome(lambda c=call: c(ours)), _outcome(lambda c=call: c(ref))
            _assert_like_reference(got, want, (name, value))
    import copy
    import pickle

    for clone in (copy.copy(ours), copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert clone.generate_item(dict(row)) == ref.generate_item(dict(row))


def test_templates_with_installed_methods_are_collected() -> None:
    """The installed methods hold their template (a cycle through its instance dict), which
    the garbage collector frees."""
    import gc
    import weakref

    refs = [weakref.ref(promptweave.opencompass.PromptTemplate(f"Q: {{q}} {i}")) for i in range(50)]
    gc.collect()
    assert not [r for r in refs if r() is not None]


class Truthy:
    """A ``remain_sep`` whose truth the template asks once."""

    def __init__(self) -> None:
        self.asked = 0

    def __bool__(self) -> bool:
        self.asked += 1
        return True


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_installed_label_prompt_method_on_label_templates(
    reference: dict[str, Any], fw: str
) -> None:
    """A label dict (string and dialogue bodies, a sep token): the installed
    ``generate_label_prompt_item`` equals the class method and the reference for every label,
    ``remain_sep`` given or not, and an unknown label fails as the reference's does."""
    labels = {
        "A": "</E>Q: {question} <SEP>Answer: A",
        "B": {"begin": "</E>", "round": [{"role": "HUMAN", "prompt": "{question}<SEP>"}]},
    }
    ours = OURS[fw].PromptTemplate(labels, ice_token="</E>", sep_token="<SEP>")
    ref = reference[fw].PromptTemplate(labels, ice_token="</E>", sep_token="<SEP>")
    cls = type(ours)
    row = {"question": "why {answer}?", "answer": "because"}
    for label in ("A", "B", "missing"):
        for tail in ((), (True,), (False,), (None,)):
            args = (row, "[ICE {question}]", label, *tail)
            got = _outcome(partial(ours.generate_label_prompt_item, *args))
            assert got == _outcome(partial(cls.generate_label_prompt_item, ours, *args))
            want = _outcome(partial(ref.generate_label_prompt_item, *args))
            _assert_like_reference(got, want, (label, tail))
    truthy = Truthy()
    kept = ours.generate_label_prompt_item(row, "", "A", remain_sep=truthy)
    assert kept == ref.generate_label_prompt_item(row, "", "A", remain_sep=True)
    assert truthy.asked == 1
