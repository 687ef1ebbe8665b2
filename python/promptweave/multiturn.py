"""AISBench multi-turn dialogues: ``MultiTurnPromptTemplate`` and the requests of
``MultiTurnGenInferencer`` (spec 03 §2.3-2.4).

:class:`MultiTurnPromptTemplate` mirrors AISBench's class: the template's round is repeated once
per ``(question, answer)`` pair of the row. :func:`multiturn_requests` replays what
``MultiTurnGenInferencer`` sends to the model for one sample, per ``infer_mode``:

* ``every``: one request per answer slot; the history holds the model's earlier replies
  (needs a ``generate`` callable);
* ``every_with_gt``: one request per answer slot; the history holds the gold answers;
* ``last``: one request, the whole dialogue up to the last answer slot with gold answers. The
  reference crashes here on every sample (``RecursionError``, spec 06 B#10); promptweave does
  what it documents.

Compat behaviour kept (spec 06 B#24/25): only ``{question}``/``{answer}`` are formatted and only
inside the round; answer slots are items whose role is exactly ``'BOT'``; a per-turn
``max_out_len`` list gives element 0 to every turn of ``every``/``every_with_gt`` (and the last
element to ``last``). ``answer_role`` and ``per_turn_max_out_len`` lift the last two.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, NamedTuple

from promptweave import prompt as _prompt
from promptweave.errors import ArgumentError, PromptTypeError, TemplateError, make_error
from promptweave.prompt_template import BasePromptTemplate

__all__ = [
    "INFER_MODES",
    "InferMode",
    "MultiTurnPromptTemplate",
    "MultiTurnRequest",
    "get_round_index",
    "multiturn_prompt_requests",
    "multiturn_requests",
]

InferMode = Literal["every", "last", "every_with_gt"]
INFER_MODES: tuple[str, ...] = ("every", "last", "every_with_gt")
_MODE_CODE = "ICLI-PARAM-002"  # AISBench ParameterValueError: multiturn mode out of range

#: ``generate(model_input, max_out_len)``: the model's reply, or ``None`` for a failed request
Generate = Callable[[Any, Any], Any]


def get_round_index(template: Iterable[Any]) -> tuple[int, int]:
    """``(left, right)``: the index after the last round-begin marker and the index of the last
    round-end marker (defaults ``1`` and ``-1``). Every item must be a dict (spec 03 §2.3)."""
    left, right = 1, -1
    try:
        items = enumerate(template)
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"a multi-turn prompt must be a list of items, got {type(template).__name__}",
            compat=TypeError,
            path="prompt",
        ) from exc
    for i, item in items:
        try:
            section, pos = item.get("section", None), item.get("pos", None)
        except AttributeError as exc:
            raise make_error(
                TemplateError,
                f"prompt[{i}] is of type {type(item).__name__} ({item!r}); a multi-turn prompt "
                f"holds only role dicts and section markers ({exc})",
                compat=AttributeError,
                path=f"prompt[{i}]",
            ) from exc
        if section == "round" and pos == "begin":
            left = i + 1
        elif section == "round" and pos == "end":
            right = i
    return left, right


class MultiTurnPromptTemplate(BasePromptTemplate):
    """AISBench's ``MultiTurnPromptTemplate``: the round of a dialogue template, repeated for
    each ``(question, answer)`` of the row's ``question`` and ``answer`` lists.

    ``output_field``, the replace tokens and the ICE are ignored: every answer is present (the
    inferencer cuts the dialogue at each answer).
    """

    def generate_item(
        self,
        entry: Mapping[str, Any],
        output_field: Any = None,
        output_field_replace_token: Any = "",
        ice_field_replace_token: Any = "",
    ) -> Any:
        """``begin`` items + the round once per turn + ``end`` items, section markers kept.

        Only the round is formatted, with ``question`` and ``answer`` alone (spec 06 B#24).
        """
        template = self._encode_template(self.template, ice=False)
        left, right = get_round_index(template)
        pl = self._prompt_list
        head, tail, body = pl(template[:left]), pl(template[right:]), pl(template[left:right])
        dialog = pl()
        for question, answer in _turns(entry):
            dialog += body.format(question=question, answer=answer)
        return head + dialog + tail

    def __repr__(self) -> str:
        return (
            f"MultiTurnPromptTemplate({{\n\ttemplate: {self.template},\n\t"
            f"ice_token: {self.ice_token}\n}})"
        )


def _turns(entry: Mapping[str, Any]) -> Iterable[tuple[Any, Any]]:
    columns = []
    for field in ("question", "answer"):
        try:
            columns.append(entry[field])
        except KeyError:
            raise make_error(
                TemplateError,
                f"the data row has no {field!r} field; a multi-turn row needs 'question' and "
                "'answer' lists",
                compat=KeyError,
                path=f"entry[{field!r}]",
            ) from None
        except (TypeError, IndexError) as exc:
            raise make_error(
                PromptTypeError,
                f"the data row must be a mapping, got {type(entry).__name__}",
                compat=type(exc),
                path="entry",
            ) from exc
    try:
        # stops at the shorter list, as the reference
        return zip(columns[0], columns[1], strict=False)
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"the row's 'question' and 'answer' must be lists, got "
            f"{type(columns[0]).__name__} and {type(columns[1]).__name__}",
            compat=TypeError,
            path="entry",
        ) from exc


# ================================================================ MultiTurnGenInferencer


class MultiTurnRequest(NamedTuple):
    """One model request of a multi-turn sample."""

    #: 0-based turn number
    turn_id: int
    #: what the model receives: ``parser.parse_template(history, mode='gen')``
    model_input: Any
    #: the ``max_out_len`` the reference passes for this turn
    max_out_len: Any
    #: ``generate``'s reply (``None`` without ``generate`` or for a failed request)
    output: Any = None


def multiturn_requests(
    template: MultiTurnPromptTemplate,
    row: Mapping[str, Any],
    mode: InferMode | str,
    parser: Any,
    generate: Generate | None = None,
    *,
    max_out_len: Any = None,
    answer_role: str = "BOT",
    per_turn_max_out_len: bool = False,
) -> list[MultiTurnRequest]:
    """The requests ``MultiTurnGenInferencer(infer_mode=mode)`` sends for ``row``.

    The prompt is ``template.generate_item(row)``; see :func:`multiturn_prompt_requests`.
    """
    return multiturn_prompt_requests(
        template.generate_item(row),
        mode,
        parser,
        generate,
        max_out_len=max_out_len,
        answer_role=answer_role,
        per_turn_max_out_len=per_turn_max_out_len,
    )


def multiturn_prompt_requests(
    prompt: Any,
    mode: InferMode | str,
    parser: Any,
    generate: Generate | None = None,
    *,
    max_out_len: Any = None,
    answer_role: str = "BOT",
    per_turn_max_out_len: bool = False,
) -> list[MultiTurnRequest]:
    """The requests ``MultiTurnGenInferencer`` sends for one sample whose prompt is ``prompt``.

    Args:
        prompt: the sample's PromptList (``MultiTurnPromptTemplate.generate_item``).
        mode: ``'every'``, ``'every_with_gt'`` or ``'last'``.
        parser: the model's template parser (``parse_template(prompt, mode)``).
        generate: ``generate(model_input, max_out_len)`` returning the model's reply, or
            ``None`` for a failed request, which ends the sample (the failed request is
            listed). Required by ``every``; optional otherwise (then no reply is recorded).
        max_out_len: the model's ``max_out_len``, or the dataset's per-turn list.
        answer_role: the role of the answer slots (the reference hard-codes ``'BOT'``).
        per_turn_max_out_len: give turn ``k`` element ``k`` of a list ``max_out_len``
            (the reference gives element 0 to every turn).
    """
    if mode not in INFER_MODES:
        raise make_error(
            ArgumentError,
            "multiturn mode out of range. Multiturn dialogue infer model only supports every、"
            f"last or every_with_gt, but got {mode}",
            path="infer_mode",
            code=_MODE_CODE,
        )
    if mode == "every" and generate is None:
        raise make_error(
            ArgumentError,
            "infer_mode 'every' needs a generate callable: each request's history holds the "
            "model's replies to the earlier turns",
            path="generate",
        )
    sample = copy.deepcopy(prompt)  # the reference deep-copies the sample; replies go in here
    left, right = get_round_index(sample)
    head, chat, tail = list(sample[:left]), list(sample[left:right]), list(sample[right:])
    slots = _answer_slots(chat, answer_role)
    pl = type(prompt) if isinstance(prompt, _prompt.PromptList) else _ais_prompt_list()

    if mode == "last":
        if not slots:
            raise make_error(
                TemplateError,
                f"infer_mode 'last' needs at least one answer slot (an item with role "
                f"{answer_role!r}) in the dialogue",
                compat=IndexError,
                path="prompt",
            )
        model_input = parser.parse_template(pl([*head, *chat[: slots[-1]], *tail]), mode="gen")
        budget = _budget(max_out_len, -1)
        output = generate(model_input, budget) if generate is not None else None
        return [MultiTurnRequest(0, model_input, budget, output)]

    requests: list[MultiTurnRequest] = []
    budget = max_out_len
    for turn, slot in enumerate(slots):
        model_input = parser.parse_template(pl([*head, *chat[:slot], *tail]), mode="gen")
        # the reference overwrites its variable on the first turn: element 0 for every turn
        budget = _budget(max_out_len if per_turn_max_out_len else budget, turn)
        output = generate(model_input, budget) if generate is not None else None
        requests.append(MultiTurnRequest(turn, model_input, budget, output))
        if generate is None:
            continue
        if output is None:
            break  # a failed request ends the sample's remaining turns
        if mode == "every":
            chat[slot]["prompt"] = output
    return requests


def _answer_slots(chat: list[Any], role: str) -> list[int]:
    slots = []
    for i, item in enumerate(chat):
        try:
            item_role = item["role"]
        except (KeyError, TypeError, IndexError) as exc:
            raise make_error(
                TemplateError,
                f"item {i} of the dialogue rounds ({item!r}) is not a role dict",
                compat=type(exc),
                path=f"round[{i}]",
            ) from exc
        if item_role == role:
            slots.append(i)
    return slots


def _budget(max_out_len: Any, turn: int) -> Any:
    if not isinstance(max_out_len, list):
        return max_out_len
    try:
        return max_out_len[turn]
    except IndexError as exc:
        raise make_error(
            ArgumentError,
            f"max_out_len {max_out_len!r} has no element for turn {turn}",
            compat=IndexError,
            path="max_out_len",
        ) from exc


def _ais_prompt_list() -> type[_prompt.PromptList]:
    from promptweave.aisbench import PromptList  # import cycle: aisbench imports this module

    return PromptList
