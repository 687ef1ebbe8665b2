"""``generate_item`` of a string template without an ice token: the one-pass path.

Such a template is split at its slots once; a row is read in one pass over its items (key
objects seen before are recognised by identity) and the prompt written into a reused buffer.
The path is exact only under the one-scan condition (no key and no used value with a brace);
every other row goes to the full core or the pure-Python path. Each case here is compared with
the reference, on both frameworks, and the common ones must stay in Rust.
"""

from __future__ import annotations

from typing import Any

import pytest

import promptweave.aisbench
import promptweave.opencompass
from promptweave import _backend

OURS = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}
FRAMEWORKS = list(OURS)

TEMPLATE = "{context}\nQuestion: {question}\nA: {a}\nB: {b}\nAgain: {a}\nAnswer: {answer}"


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
    ]


@pytest.fixture(autouse=True)
def _rust(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", False)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", repr(fn())
    except Exception as exc:
        return "error", type(exc)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize(
    ("output_field", "token"),
    [(None, ""), ("answer", ""), ("answer", "<mask>"), ("missing", "x"), ("a", 5)],
)
def test_rows_equal_the_reference(
    reference: dict[str, Any], fw: str, output_field: Any, token: Any
) -> None:
    ours = OURS[fw].PromptTemplate(TEMPLATE)
    ref = reference[fw].PromptTemplate(TEMPLATE)
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
        if want[0] == "ok":
            assert got == want, row
        else:
            # the policy: an exception of the reference's builtin type (or a subclass)
            assert got[0] == "error", row
            assert issubclass(got[1], want[1]), (row, got, want)


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
