"""Rows with a column named ``input_str`` or ``self``.

The reference formats with ``safe_format(input_str, **row)`` and ``PromptList.format(self,
**row)`` (AISBench: also ``format_mm(self, **row)``): a column named like the callee's own first
parameter makes the call raise ``TypeError`` ("got multiple values for argument"). promptweave
raises a ``TypeError``-family error there too, on every path (the Rust fast paths send such rows
to Python), and renders exactly as the reference wherever the reference does not call the
colliding function (``self`` with a string template, ``input_str`` with no formatted item).
"""

from __future__ import annotations

from typing import Any

import pytest

import promptweave.aisbench
import promptweave.opencompass
from promptweave import _backend
from promptweave.dataset import DatasetRenderer
from promptweave.errors import PromptTypeError

OURS = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}

STRING = "Q: {question}|{input_str}|{self}\nA: {answer}"
DIALOGUE = {
    "round": [
        {"role": "HUMAN", "prompt": "Q: {question}|{input_str}|{self}"},
        {"role": "BOT", "prompt": "{answer}"},
    ]
}
NO_PROMPTS = {"round": [{"role": "HUMAN"}, {"role": "BOT"}]}
LABELS = {"A": "Q: {question} {input_str} A", "B": {"round": [{"role": "HUMAN", "prompt": "B"}]}}
ROWS = {
    "input_str": {"question": "q", "input_str": "I", "answer": "A"},
    "self": {"question": "q", "self": "S", "answer": "A"},
    "both": {"self": "S", "question": "q", "input_str": "I", "answer": "A"},
    "neither": {"question": "q", "answer": "A"},
}


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", type(fn()).__name__, repr(fn()))
    except Exception as exc:
        return ("raises", [c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins"])


def _calls(t: Any, row: dict[str, Any]) -> dict[str, Any]:
    return {
        "generate_item": lambda: t.generate_item(dict(row), output_field="answer"),
        "generate_ice_item": lambda: t.generate_ice_item(dict(row), "A"),
        "label_prompt": lambda: t.generate_label_prompt_item(dict(row), "", "A"),
    }


@pytest.mark.parametrize("fw", ["oc", "ais"])
@pytest.mark.parametrize(
    "template",
    [STRING, DIALOGUE, NO_PROMPTS, LABELS],
    ids=["string", "dialogue", "no-prompts", "labels"],
)
@pytest.mark.parametrize("row", list(ROWS))
@pytest.mark.parametrize("force_python", [False, True], ids=["rust", "python"])
def test_templates_as_reference(
    reference: dict[str, Any], fw: str, template: Any, row: str, force_python: bool
) -> None:
    ref = reference[fw].PromptTemplate(template)
    ours = OURS[fw].PromptTemplate(template)
    old = _backend.FORCE_PYTHON
    _backend.FORCE_PYTHON = force_python
    try:
        got = {k: _outcome(f) for k, f in _calls(ours, ROWS[row]).items()}
    finally:
        _backend.FORCE_PYTHON = old
    want = {k: _outcome(f) for k, f in _calls(ref, ROWS[row]).items()}
    assert got == want


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_errors_say_which_column(fw: str) -> None:
    t = OURS[fw].PromptTemplate(STRING)
    with pytest.raises(PromptTypeError, match="column named 'input_str'") as info:
        t.generate_item(ROWS["input_str"], output_field="answer")
    assert isinstance(info.value, TypeError)
    d = OURS[fw].PromptTemplate(DIALOGUE)
    with pytest.raises(TypeError, match=r"column named 'self'.*PromptList\.format"):
        d.generate_item(ROWS["self"], output_field="answer")


@pytest.mark.parametrize("fw", ["oc", "ais"])
@pytest.mark.parametrize(
    "items",
    [["{question}"], [{"role": "HUMAN", "prompt": "{question}"}], [{"role": "HUMAN"}], []],
    ids=["str", "prompt-dict", "dict-without-prompt", "empty"],
)
def test_prompt_list_format_as_reference(
    reference: dict[str, Any], fw: str, items: list[Any]
) -> None:
    row = ROWS["input_str"]
    want = _outcome(lambda: reference[fw].PromptList(items).format(**row))
    assert _outcome(lambda: OURS[fw].PromptList(items).format(**row)) == want


def test_single_pass_is_not_the_reference_call() -> None:
    """The opt-in single-pass substitution does not emulate the reference's keyword call."""
    t = promptweave.PromptTemplate(STRING, substitution="single_pass")
    assert t.generate_item(ROWS["both"], output_field="answer") == "Q: q|I|S\nA: "


MM_TEMPLATE = {
    "round": [{"role": "HUMAN", "prompt_mm": {"text": {"type": "text", "text": "{question}"}}}]
}


@pytest.mark.parametrize("row", ["self", "input_str", "neither"])
def test_multimodal_as_reference(reference: dict[str, Any], row: str) -> None:
    entry = {**ROWS[row], "content": "<AIS_TEXT_START>hi<AIS_CONTENT_TAG>"}
    ref = reference["ais"].MMPromptTemplate(MM_TEMPLATE)
    ours = promptweave.aisbench.MMPromptTemplate(MM_TEMPLATE)
    assert _outcome(lambda: ours.generate_item(dict(entry))) == _outcome(
        lambda: ref.generate_item(dict(entry))
    )


@pytest.mark.parametrize("items", [["{question}"], [{"role": "HUMAN", "prompt": "x"}]])
def test_format_mm_str_items(reference: dict[str, Any], items: list[Any]) -> None:
    row = {**ROWS["input_str"], "content": ""}
    want = _outcome(lambda: reference["ais"].PromptList(items).format_mm(**row))
    assert _outcome(lambda: promptweave.aisbench.PromptList(items).format_mm(**row)) == want


READER = {"input_columns": ["question", "input_str"], "output_column": "answer"}


def _renderer(template: Any, flavor: str = "opencompass") -> DatasetRenderer:
    infer = {
        "prompt_template": {"template": template},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    return DatasetRenderer(infer, READER, None, flavor=flavor)


@pytest.mark.parametrize("flavor", ["opencompass", "aisbench"])
def test_dataset_job_raises_with_the_row(flavor: str) -> None:
    rows = [{"question": f"q{i}", "input_str": "I", "answer": "A"} for i in range(3)]
    with pytest.raises(TypeError, match="column named 'input_str'") as info:
        _renderer("{question}|{input_str}", flavor).render(rows, rows)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "test row 0" in notes


def test_dataset_job_self_column_with_a_string_template(reference: dict[str, Any]) -> None:
    """``safe_format(template, **row)`` takes a ``self`` column: rendered as the reference."""
    rows = [{"question": f"q{i}", "self": f"s{i}", "answer": "A"} for i in range(3)]
    reader = {"input_columns": ["question", "self"], "output_column": "answer"}
    infer = {
        "prompt_template": {"template": "{question}|{self}"},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    got = DatasetRenderer(infer, reader, None).render(rows, rows).prompts
    ref = reference["oc"].PromptTemplate("{question}|{self}")
    assert got == [ref.generate_item(r, output_field="answer") for r in rows]
