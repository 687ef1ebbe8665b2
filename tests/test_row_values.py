"""Row values whose ``str()`` can fail or run code, through the Rust template methods.

The reference ``str()``s every value of the row once per formatted item (used by the template
or not), and never the masked output column's own value (``generate_item`` replaces it in a deep
copy of the row first). The Rust paths read a row once; that is only the same for values whose
``str()`` is pure, so rows with any other value must give the reference's results (and errors,
and ``str()`` calls) anyway, while rows of plain values (lists and dicts of them included) stay
in Rust.
"""

from __future__ import annotations

from typing import Any

import pytest

import promptweave.aisbench
import promptweave.opencompass
from promptweave import _backend

OURS = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}
HUGE = 10**5000  # str() raises ValueError (Python's 4300-digit limit)

STRING = "Q: {question}\nA: {answer}"
DIALOGUE = {
    "round": [
        {"role": "HUMAN", "prompt": "Q: {question}"},
        {"role": "BOT", "prompt": "{answer}"},
    ]
}
NO_PROMPTS = {"round": [{"role": "HUMAN"}, {"role": "BOT"}]}
LABELS = {"A": "Q: {question} A", "B": "Q: {question} B"}


class Counted:
    """A value whose ``str()`` is different every call."""

    def __init__(self) -> None:
        self.calls = 0

    def __str__(self) -> str:
        self.calls += 1
        return f"t{self.calls}"


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", repr(fn()))
    except Exception as exc:  # the exception family is compared, not the message
        return ("raises", type(exc).__mro__[-3].__name__)


METHODS = ["generate_item", "generate_ice_item", "label_prompt"]


def _call(t: Any, method: str, row: dict[str, Any]) -> Any:
    """``method`` of template ``t`` on ``row`` (the answer column masked; label ``'A'``)."""
    if method == "generate_item":
        return t.generate_item(row, output_field="answer")
    if method == "generate_ice_item":
        return t.generate_ice_item(row, "A")
    return t.generate_label_prompt_item(row, "", "A")


def _calls(M: Any, template: Any, method: str) -> list[Any]:
    """Results of three calls on a row holding a ``Counted`` value, and its ``str()`` count."""
    t = M.PromptTemplate(template)
    value = Counted()
    row = {"question": "q", "answer": "A", "extra": value}
    outs = [repr(_call(t, method, row)) for _ in range(3)]
    return [outs, value.calls]


@pytest.mark.parametrize("fw", ["oc", "ais"])
@pytest.mark.parametrize(
    "template", [STRING, DIALOGUE, NO_PROMPTS, LABELS], ids=["string", "dialogue", "none", "label"]
)
@pytest.mark.parametrize("method", METHODS)
def test_str_calls_and_errors_as_reference(
    reference: dict[str, Any], fw: str, template: Any, method: str
) -> None:
    R, M = reference[fw], OURS[fw]
    assert _calls(M, template, method) == _calls(R, template, method)

    def run(NS: Any, row: dict[str, Any]) -> Any:
        return _outcome(lambda: _call(NS.PromptTemplate(template), method, row))

    rows = [
        {"question": "q", "answer": "A", "unused": HUGE},  # the reference raises ValueError
        {"question": "q", "answer": HUGE},  # masked by generate_item: never str()ed there
        {"question": HUGE, "answer": "A"},
    ]
    for row in rows:
        assert run(M, row) == run(R, row), row.keys()


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_plain_values_stay_in_rust(reference: dict[str, Any], fw: str) -> None:
    R, M = reference[fw], OURS[fw]
    row = {
        "question": "q",
        "answer": "A",
        "choices": ["x", 1, 2.5, None, True, ("t", {"k": [1, 2]})],
        "meta": {"id": 7, "tags": ["a", "b"]},
        "idx": 2**62,
    }
    for template in (STRING, DIALOGUE, LABELS):
        before = _backend.fallbacks
        ours = M.PromptTemplate(template)
        got = [_call(ours, method, row) for method in METHODS]
        assert _backend.fallbacks == before, template
        ref = R.PromptTemplate(template)
        assert repr(got) == repr([_call(ref, method, row) for method in METHODS])


class DeepCopied:
    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __deepcopy__(self, memo: Any) -> DeepCopied:
        return DeepCopied(self.text + " deep-copied")


class ReadOnly(dict):  # type: ignore[type-arg]
    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("read-only row")


@pytest.mark.parametrize("fw", ["oc", "ais"])
@pytest.mark.parametrize("template", [STRING, DIALOGUE], ids=["string", "dialogue"])
def test_generate_item_masks_a_deep_copy_as_reference(
    reference: dict[str, Any], fw: str, template: Any
) -> None:
    """``generate_item(..., output_field=...)`` deep-copies the row before masking it: the
    copy's errors (an undeep-copyable value, a row refusing item assignment) and the copy's
    values are what the reference renders."""
    import threading
    from types import MappingProxyType

    rows: list[Any] = [
        {"question": "q", "answer": "A", "lock": threading.Lock()},
        # in the masked column itself: copied (and refused) before it is masked
        {"question": "q", "answer": threading.Lock()},
        {"question": "q", "answer": DeepCopied("A")},
        {"question": DeepCopied("q"), "answer": "A"},
        ReadOnly(question="q", answer="A"),
        MappingProxyType({"question": "q", "answer": "A"}),
    ]
    for row in rows:
        for force in (False, True):
            _backend.FORCE_PYTHON = force
            try:
                got = _outcome(
                    lambda r=row: (
                        OURS[fw].PromptTemplate(template).generate_item(r, output_field="answer")
                    )
                )
            finally:
                _backend.FORCE_PYTHON = False
            want = _outcome(
                lambda r=row: (
                    reference[fw].PromptTemplate(template).generate_item(r, output_field="answer")
                )
            )
            assert got == want, (type(row).__name__, force)
