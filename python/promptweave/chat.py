"""OpenCompass ``ChatInferencer``: OpenAI-style chats, its own parsers and its three modes.

Mirrors ``opencompass.openicl.icl_inferencer.icl_chat_inferencer`` (spec 02 §5, spec 03 §2.2):

* :func:`promptlist_to_openai` turns a ``PromptTemplate`` result into ``{'role', 'content'}``
  messages;
* :class:`LMTemplateParser` / :class:`APITemplateParser` are the parsers ``ChatInferencer``
  swaps in for the model's own (they consume such messages);
* :class:`ChatOutputHandler` collects results like the reference's;
* the driver, :class:`~promptweave.chat_inferencer.ChatInferencer`, lives in
  :mod:`promptweave.chat_inferencer`.

Reference quirk kept (spec 06 B#21): the ``'section' in item`` test of
:func:`promptlist_to_openai` is a substring test on str items.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from promptweave import template_parser as _tp
from promptweave.errors import (
    MetaTemplateError,
    PromptTypeError,
    TemplateError,
    UnknownRoleError,
    join_text,
    make_error,
)
from promptweave.prompt import PromptList

__all__ = [
    "APITemplateParser",
    "ChatOutputHandler",
    "LMTemplateParser",
    "chat_parser",
    "is_list_of",
    "promptlist_to_openai",
    "role_of",
]

_TO_OPENAI = {"SYSTEM": "system", "HUMAN": "user", "BOT": "assistant"}


def is_list_of(seq: Any, kind: type) -> bool:
    """mmengine's ``is_list_of``: a ``list`` whose every item is a ``kind`` (``[]`` is)."""
    return isinstance(seq, list) and all(isinstance(x, kind) for x in seq)


def promptlist_to_openai(prompt: Any) -> list[dict[str, Any]]:
    """A str -> one user message; a prompt list -> its role items as OpenAI messages.

    Items for which ``'section' in item`` holds are skipped (markers -- and, as in the
    reference, any str item containing the word "section"); other non-empty str items become
    user messages; role items SYSTEM/HUMAN/BOT become system/user/assistant (``prompt`` ->
    ``content``); any other role is dropped.

    Raises:
        PromptTypeError: an item is an empty str or neither a str nor a dict (the reference
            fails with ``TypeError`` there).
        TemplateError: a role item lacks ``role`` or ``prompt`` (also a ``KeyError``).
    """
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(prompt):
        if isinstance(item, str):
            if "section" in item:
                continue
            if item:
                out.append({"role": "user", "content": item})
                continue
            raise make_error(
                PromptTypeError,
                f"prompt[{i}] is an empty string, which promptlist_to_openai cannot convert "
                "(the reference indexes it like a role dict)",
                compat=TypeError,
                path=f"prompt[{i}]",
            )
        if not isinstance(item, dict):
            raise make_error(
                PromptTypeError,
                f"prompt[{i}] is of type {type(item).__name__}; expected a str or a dict",
                compat=TypeError,
                path=f"prompt[{i}]",
            )
        if "section" in item:
            continue
        role = _TO_OPENAI.get(_key(item, "role", i)) if _hashable(item.get("role")) else None
        if role is not None:
            out.append({"role": role, "content": _key(item, "prompt", i)})
    return out


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _key(item: Mapping[str, Any], key: str, index: int) -> Any:
    try:
        return item[key]
    except KeyError:
        raise make_error(
            TemplateError,
            f"prompt[{index}] has no {key!r}: {item!r}",
            compat=KeyError,
            path=f"prompt[{index}]",
        ) from None


def _chat_roles(meta_template: Any) -> dict[Any, dict[str, Any]]:
    """Meta roles keyed by their OpenAI names (SYSTEM->system, HUMAN->user, BOT->assistant;
    later duplicates win)."""
    roles: dict[Any, dict[str, Any]] = {}
    if meta_template:
        for key in ("round", "reserved_roles"):
            for item in meta_template.get(key, []):
                name = _meta_key(item, "role")
                roles[_TO_OPENAI.get(name, name)] = item.copy()
    return roles


def _meta_key(item: Mapping[str, Any], key: str) -> Any:
    try:
        return item[key]
    except KeyError:
        raise make_error(
            MetaTemplateError, f"meta template role {item!r} has no {key!r}", compat=KeyError
        ) from None


def role_of(msg: Any, index: int, *, hashable: bool = True) -> Any:
    """``msg['role']``, failing like the reference (``TypeError`` / ``KeyError``) but clearly."""
    if not isinstance(msg, Mapping):
        raise make_error(
            PromptTypeError,
            f"chat[{index}] is of type {type(msg).__name__}; expected a message dict",
            compat=TypeError,
            path=f"chat[{index}]",
        )
    if "role" not in msg:
        raise make_error(TemplateError, f"chat[{index}] has no 'role': {msg!r}", compat=KeyError)
    role = msg["role"]
    if hashable and not _hashable(role):
        raise make_error(
            PromptTypeError, f"chat[{index}] has an unhashable role: {msg!r}", compat=TypeError
        )
    return role


def _check_chat(chat: Any) -> None:
    if not is_list_of(chat, dict):
        raise make_error(
            PromptTypeError,
            f"a chat must be a list of message dicts (or a list of such lists), got {chat!r}",
            compat=AssertionError,
        )


class LMTemplateParser:
    """``ChatInferencer``'s parser for string-input models: a chat -> one ``str``.

    With a meta template each message contributes ``begin + content + end`` of its role (an
    unknown role just its content) and the assistant role's ``begin`` closes the prompt;
    without one the contents are joined with ``'\\n'``. A list of chats is a batch.
    """

    def __init__(self, meta_template: Any = None) -> None:
        self.meta_template = meta_template
        self.roles = _chat_roles(meta_template)

    def parse_template(self, chat: Any, mode: str = "gen") -> Any:
        if is_list_of(chat, list):
            return [self.parse_template(item) for item in chat]
        _check_chat(chat)
        parts: list[Any] = []
        if self.roles:
            for i, msg in enumerate(chat):
                cfg = self.roles.get(role_of(msg, i), {})
                parts += (cfg.get("begin") or "", msg.get("content") or "", cfg.get("end") or "")
            text = _concat(parts)
            if "assistant" not in self.roles:
                raise make_error(
                    UnknownRoleError,
                    "the meta template has no BOT (assistant) role, whose begin closes a chat "
                    "prompt",
                    compat=KeyError,
                )
            return text + _concat([self.roles["assistant"].get("begin") or ""])
        for i, msg in enumerate(chat):
            if i:
                parts.append("\n")
            parts.append(msg.get("content") or "")
        return _concat(parts)


def _concat(parts: list[Any]) -> str:
    return join_text(
        parts, lambda bad: f"cannot build a chat prompt from a non-str content or role text {bad!r}"
    )


class APITemplateParser:
    """``ChatInferencer``'s parser for API models: a chat -> a ``PromptList`` of
    ``{'role': api_role, 'prompt': content}`` (default roles SYSTEM/HUMAN/BOT)."""

    def __init__(self, meta_template: Any = None) -> None:
        self.meta_template = meta_template
        self.roles = _chat_roles(meta_template)
        if not meta_template:
            self.roles = {
                "system": {"api_role": "SYSTEM"},
                "user": {"api_role": "HUMAN"},
                "assistant": {"api_role": "BOT", "generate": True},
            }

    def parse_template(self, chat: Any, mode: str = "gen") -> Any:
        if is_list_of(chat, list):
            return [self.parse_template(item) for item in chat]
        _check_chat(chat)
        out = PromptList()
        for i, msg in enumerate(chat):
            role = role_of(msg, i)
            if role in self.roles:
                role = _meta_key(self.roles[role], "api_role")
            out.append({"role": role, "prompt": msg.get("content") or ""})
        return out


def chat_parser(parser: Any) -> Any:
    """What ``ChatInferencer._set_meta_template`` makes of a model's parser: promptweave's
    ``LMTemplateParser`` / ``APITemplateParser`` become the chat variants over the same meta
    template; anything else is kept."""
    if isinstance(parser, _tp.APITemplateParser):
        return APITemplateParser(parser.meta_template)
    if isinstance(parser, _tp.LMTemplateParser):
        return LMTemplateParser(parser.meta_template)
    return parser


class ChatOutputHandler:
    """Collects results like the reference's ``ChatOutputHandler`` (``results_dict`` keyed by
    ``str(idx)``)."""

    def __init__(self) -> None:
        self.results_dict: dict[str, dict[str, Any]] = {}

    def save_results(self, origin_prompt: Any, prediction: Any, idx: Any, gold: Any = None) -> None:
        result: dict[str, Any] = {}
        if gold:  # a falsy gold is not recorded (reference behaviour)
            result["gold"] = gold
        result.update(prediction=prediction, origin_prompt=origin_prompt)
        self.results_dict[str(idx)] = result

    def save_multiround_results(
        self, origin_prompt: Any, prediction: Any, idx: Any, gold: Any = None
    ) -> None:
        result = self.results_dict.get(
            str(idx), {"gold": [], "prediction": [], "origin_prompt": []}
        )
        result["gold"].append(gold)
        result["prediction"].append(prediction)
        result["origin_prompt"].append(origin_prompt)
        self.results_dict[str(idx)] = result
