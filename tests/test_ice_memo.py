"""``generate_ice_item`` remembers its outputs by row identity: calls with the very same row
objects return copies of the first output, and anything that could change the output misses.

Every output is compared with the reference's for the same call (OpenCompass and AISBench), and
the returned objects must be as independent as the reference's fresh deep copies.
"""

from __future__ import annotations

from typing import Any

import pytest

import promptweave.aisbench
import promptweave.opencompass
from promptweave import _backend

OURS = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}
FRAMEWORKS = list(OURS)

DIALOGUE = {
    "round": [
        {"role": "HUMAN", "prompt": "Q: {question}\nA. {a}\nB. {b}"},
        {"role": "BOT", "prompt": "{answer}\n"},
    ]
}
LABELS = {"A": "{question} -> A", "B": "{question} -> B ({b})"}
STRING = "{question}\n{answer}"


def _pair(reference: dict[str, Any], fw: str, template: Any, **kw: Any) -> tuple[Any, Any]:
    return OURS[fw].PromptTemplate(template, **kw), reference[fw].PromptTemplate(template, **kw)


def _same(got: Any, want: Any) -> None:
    assert type(got).__name__ == type(want).__name__
    assert repr(got) == repr(want)


@pytest.fixture(autouse=True)
def _rust(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", False)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("template", [DIALOGUE, LABELS, STRING], ids=["dialogue", "labels", "str"])
def test_repeated_calls_equal_the_reference_and_stay_in_rust(
    reference: dict[str, Any], fw: str, template: Any
) -> None:
    ours, ref = _pair(reference, fw, template)
    rows = [
        {"question": f"q{i}", "a": "x", "b": 7, "answer": "AB"[i % 2], "n": None, "f": 0.5}
        for i in range(4)
    ]
    fallbacks = _backend.fallbacks
    for _ in range(3):
        for row in rows:
            label = row["answer"]
            _same(ours.generate_ice_item(row, label), ref.generate_ice_item(row, label))
    assert _backend.fallbacks == fallbacks


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_outputs_are_fresh_objects(reference: dict[str, Any], fw: str) -> None:
    ours, ref = _pair(reference, fw, DIALOGUE)
    row = {"question": "q", "a": "x", "b": "y", "answer": "A"}
    first = ours.generate_ice_item(row, "A")
    second = ours.generate_ice_item(row, "A")
    assert first is not second
    assert all(a is not b for a, b in zip(first, second, strict=True) if isinstance(a, dict))
    # the caller's changes to one output reach neither the next output nor the memo
    first[1]["prompt"] = "changed"
    first.append("extra")
    second[2]["role"] = "SYSTEM"
    _same(ours.generate_ice_item(row, "A"), ref.generate_ice_item(row, "A"))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_a_changed_row_is_rendered_again(reference: dict[str, Any], fw: str) -> None:
    ours, ref = _pair(reference, fw, DIALOGUE)
    row: dict[str, Any] = {"question": "q", "a": "x", "b": "y", "answer": "A"}
    ours.generate_ice_item(row, "A")
    row["question"] = "another question"  # a new value object
    _same(ours.generate_ice_item(row, "A"), ref.generate_ice_item(row, "A"))
    row["b"] = "{question}"  # order-dependent substitution: now b's value is filled again
    _same(ours.generate_ice_item(row, "A"), ref.generate_ice_item(row, "A"))
    del row["a"]  # the placeholder stays
    _same(ours.generate_ice_item(row, "A"), ref.generate_ice_item(row, "A"))
    reordered = {"answer": "A", "b": "{question}", "question": "q"}  # same objects, new order
    _same(ours.generate_ice_item(reordered, "A"), ref.generate_ice_item(reordered, "A"))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_mutable_values_are_read_on_every_call(reference: dict[str, Any], fw: str) -> None:
    """A list value is the same object after an in-place change: its str() is read again."""
    ours, ref = _pair(reference, fw, DIALOGUE)
    options = ["x"]
    row = {"question": "q", "a": options, "b": "y", "answer": "A"}
    _same(ours.generate_ice_item(row, "A"), ref.generate_ice_item(row, "A"))
    options.append("z")
    _same(ours.generate_ice_item(row, "A"), ref.generate_ice_item(row, "A"))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_labels_are_not_confused(reference: dict[str, Any], fw: str) -> None:
    ours, ref = _pair(reference, fw, LABELS)
    row = {"question": "q", "b": "bee"}
    for label in ["A", "B", "A", "B"]:
        _same(ours.generate_ice_item(row, label), ref.generate_ice_item(row, label))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_unknown_label_raises_as_the_reference(reference: dict[str, Any], fw: str) -> None:
    ours, ref = _pair(reference, fw, LABELS)
    row = {"question": "q", "b": "bee"}
    ours.generate_ice_item(row, "A")
    with pytest.raises(KeyError):
        ref.generate_ice_item(row, "C")
    with pytest.raises(KeyError):
        ours.generate_ice_item(row, "C")
    with pytest.raises(TypeError):  # an unhashable label
        ours.generate_ice_item(row, ["A"])


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_nested_role_values_are_deep_copied(reference: dict[str, Any], fw: str) -> None:
    """A role dict holding a mutable value needs a deep copy per call: no memo, fresh objects."""
    template = {"round": [{"role": "HUMAN", "prompt": "{question}", "meta": {"k": [1]}}]}
    ours, ref = _pair(reference, fw, template)
    row = {"question": "q"}
    first = ours.generate_ice_item(row, None)
    first[1]["meta"]["k"].append(2)
    _same(ours.generate_ice_item(row, None), ref.generate_ice_item(row, None))


def test_many_rows_stay_correct_past_the_memo_size(reference: dict[str, Any]) -> None:
    """More distinct rows than the memo keeps (it starts again empty): still the reference's."""
    ours, ref = _pair(reference, "oc", STRING)
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(5000)]
    for row in rows + rows[:100]:
        assert ours.generate_ice_item(row, None) == ref.generate_ice_item(row, None)
