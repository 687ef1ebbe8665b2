"""OpenCompass ``ChatInferencer`` without the model (spec 03 §2.2).

:class:`ChatInferencer` builds one OpenAI-style chat per test row (``get_chat_list``) and runs it
in mode ``last``, ``every`` or ``every_with_gt`` against a user-supplied ``generate(model_input)
-> reply``, reporting to an output handler exactly like the reference (``save_results`` /
``save_multiround_results``; :class:`~promptweave.chat.ChatOutputHandler` is the reference's).

Reference quirks kept (spec 06 B#22): in mode ``every`` the recorded gold is the prediction
(read after the overwrite) and every turn gets the same index; once one row is a ``dialogue``
chat, ``every`` reports in dialogue mode for good.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from promptweave.chat import (
    ChatOutputHandler,
    chat_parser,
    is_list_of,
    promptlist_to_openai,
    role_of,
)
from promptweave.errors import ArgumentError, TemplateError, make_error

__all__ = ["INFER_MODES", "ChatInferencer"]

INFER_MODES = ("last", "every", "every_with_gt")

Generate = Callable[[Any], Any]


class ChatInferencer:
    """OpenCompass ``ChatInferencer`` without the model: chats from test rows, run in one of the
    three modes against ``generate``.

    Args:
        generate: ``generate(model_input) -> reply``, called once per request.
        template_parser: the model's parser. promptweave's (or any) ``LMTemplateParser`` /
            ``APITemplateParser`` is replaced by the chat variant over its meta template, as
            the reference does; ``model_input`` is then the parsed history. ``None`` passes the
            history (a list of message dicts) itself.
        infer_mode: ``'last'``, ``'every'`` or ``'every_with_gt'``.

    Attributes:
        dialogue_mode: set once a row's chat came from a ``dialogue`` input column; ``every``
            then reports the whole conversation per row (reference behaviour).
    """

    def __init__(
        self, generate: Generate, template_parser: Any = None, infer_mode: str = "last"
    ) -> None:
        if infer_mode not in INFER_MODES:
            raise make_error(
                ArgumentError,
                f"infer_mode must be one of {list(INFER_MODES)}, got {infer_mode!r}",
                compat=AssertionError,
            )
        self.generate = generate
        self.template_parser = chat_parser(template_parser)
        self.infer_mode = infer_mode
        self.dialogue_mode = False

    # ------------------------------------------------------------------ chats
    def chat_from_entry(
        self,
        entry: Mapping[Any, Any],
        input_columns: Sequence[str],
        output_column: str | None,
        prompt_template: Any = None,
    ) -> list[Any]:
        """One turn: ``[user, assistant]`` from the single input column, or the template's
        messages (**unmasked**) plus an assistant gold message unless they end with one."""
        if prompt_template is None and len(input_columns) == 1:
            return [
                {"role": "user", "content": entry.get(input_columns[0])},
                {"role": "assistant", "content": entry.get(output_column, "")},
            ]
        if prompt_template is None:
            raise make_error(
                TemplateError,
                "cannot build a chat turn: give a prompt_template, or use exactly one input "
                f"column (got {list(input_columns)})",
                compat=ValueError,
            )
        chat = promptlist_to_openai(prompt_template.generate_item(entry))
        if not chat:
            raise make_error(
                TemplateError,
                "the prompt template rendered no chat message for this row",
                compat=IndexError,
            )
        if chat[-1]["role"] != "assistant":
            chat.append({"role": "assistant", "content": entry.get(output_column, "")})
        return chat

    def build_chat(
        self,
        row: Mapping[str, Any],
        input_columns: Sequence[str],
        output_column: str | None,
        prompt_template: Any = None,
    ) -> list[Any]:
        """The chat of one test row (spec 03 §2.2): only the input and output columns are
        visible; str columns make one turn, list-of-str columns one turn per element, a single
        input column holding message dicts (or a ``dialogue`` input column) is the chat."""
        item = {k: v for k, v in row.items() if k in input_columns or k == output_column}
        if all(isinstance(v, str) for v in item.values()):
            return self.chat_from_entry(item, input_columns, output_column, prompt_template)
        if all(is_list_of(v, str) for v in item.values()):
            chat: list[Any] = []
            # zip stops at the shortest column, as in the reference
            for values in zip(*item.values(), strict=False):
                turn = dict(zip(item, values, strict=True))
                chat += self.chat_from_entry(turn, input_columns, output_column, prompt_template)
            return chat
        if len(input_columns) == 1:
            given: list[Any] = _column(item, input_columns[0])
            if is_list_of(given, dict):
                return given
        if "dialogue" in input_columns:
            self.dialogue_mode = True
            dialogue: list[Any] = _column(item, "dialogue")
            return dialogue
        raise make_error(
            TemplateError, "Cannot construct chat from the dataset.", compat=ValueError
        )

    def get_chat_list(
        self, ice_idx_list: Sequence[Any], retriever: Any, prompt_template: Any = None
    ) -> list[list[Any]]:
        """One chat per test row of ``retriever`` (the in-context examples are not used)."""
        reader = retriever.dataset_reader
        return [
            self.build_chat(
                retriever.test_ds[idx], reader.input_columns, reader.output_column, prompt_template
            )
            for idx in range(len(ice_idx_list))
        ]

    # ------------------------------------------------------------------ modes
    def _request(self, history: list[Any]) -> Any:
        parser = self.template_parser
        return self.generate(history if parser is None else parser.parse_template(history, "gen"))

    def infer_last(self, chat: list[Any], index: int, output_handler: Any) -> None:
        """One request: everything before the last assistant message (gold answers kept)."""
        last = _assistant_indices(chat)[-1:]
        if not last:
            raise make_error(TemplateError, "the chat has no assistant message", compat=IndexError)
        history = chat[: last[0]]
        output = self._request(history)
        output_handler.save_results(
            origin_prompt=history,
            prediction=output,
            idx=index,
            gold=_content(chat[last[0]], last[0]),
        )

    def infer_every(self, chat: list[Any], index: int, output_handler: Any) -> None:
        """One request per assistant message; each reply **overwrites** that message, so later
        requests see the model's earlier replies (the chat is modified in place)."""
        for i in _assistant_indices(chat):
            history = chat[:i]
            output = self._request(history)
            chat[i]["content"] = output
            if not self.dialogue_mode:
                # reference quirk (06 B#22): gold is read after the overwrite, index not advanced
                output_handler.save_multiround_results(
                    origin_prompt=_last_content(history, i),
                    prediction=output,
                    idx=index,
                    gold=chat[i]["content"],
                )
        if self.dialogue_mode:
            if len(chat) % 2:
                raise make_error(
                    TemplateError,
                    f"a dialogue chat must alternate user/assistant messages (even length), "
                    f"got {len(chat)} messages",
                    compat=AssertionError,
                )
            rounds = [
                {
                    "round": r + 1,
                    "user": _content(chat[2 * r], 2 * r),
                    "assistant": _content(chat[2 * r + 1], 2 * r + 1),
                }
                for r in range(len(chat) // 2)
            ]
            output_handler.save_results(origin_prompt=None, prediction=rounds, idx=index, gold=None)

    def infer_every_with_gt(self, chat: list[Any], index: int, output_handler: Any) -> None:
        """One request per assistant message, always with the gold history; the index advances
        per turn."""
        for i in _assistant_indices(chat):
            history = chat[:i]
            output = self._request(history)
            output_handler.save_multiround_results(
                origin_prompt=_last_content(history, i),
                prediction=output,
                idx=index,
                gold=_content(chat[i], i),
            )
            index += 1

    def infer(self, chat: list[Any], index: int, output_handler: Any) -> None:
        """Run ``chat`` in ``self.infer_mode``."""
        getattr(self, f"infer_{self.infer_mode}")(chat, index, output_handler)

    def inference(
        self, retriever: Any, prompt_template: Any = None, output_handler: Any = None
    ) -> dict[str, Any]:
        """Every test row's chat, in order; returns the handler's ``results_dict``."""
        handler = ChatOutputHandler() if output_handler is None else output_handler
        chats = self.get_chat_list(retriever.retrieve(), retriever, prompt_template)
        for index, chat in enumerate(chats):
            self.infer(chat, index, handler)
        results: dict[str, Any] = handler.results_dict
        return results


def _column(item: Mapping[str, Any], column: str) -> Any:
    try:
        return item[column]
    except KeyError:
        raise make_error(
            TemplateError, f"the test row has no column {column!r}", compat=KeyError
        ) from None


def _assistant_indices(chat: Sequence[Any]) -> list[int]:
    return [i for i, msg in enumerate(chat) if role_of(msg, i, hashable=False) == "assistant"]


def _content(msg: Any, index: int) -> Any:
    try:
        return msg["content"]
    except KeyError:
        raise make_error(
            TemplateError, f"chat[{index}] has no 'content': {msg!r}", compat=KeyError
        ) from None


def _last_content(history: list[Any], index: int) -> Any:
    if not history:
        raise make_error(
            TemplateError,
            f"chat[{index}] is an assistant message with nothing before it",
            compat=IndexError,
        )
    return _content(history[-1], index - 1)
