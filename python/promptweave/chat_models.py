"""The chat-model bridge: from a parsed prompt to a model's chat template (spec 02 §4).

OpenCompass's and AISBench's local chat models (HuggingFace, vLLM, LMDeploy "with chat template")
do not use a string meta template. They parse the dataset prompt with an ``APITemplateParser``
(the model config's ``meta_template``, else a default), turn the resulting role list into
OpenAI-style messages, and hand those to ``tokenizer.apply_chat_template(messages,
add_generation_prompt=True, tokenize=False)``. This module reproduces the two steps before the
template; :class:`promptweave.ChatTemplate` is the template.

The defaults differ between the frameworks, and that difference shows in the prompts:

* OpenCompass maps ``SYSTEM`` to a *round* role spoken as ``HUMAN`` (its system-role fallback),
  so every user turn ends with ``"\\n"`` and a system prompt is folded into the first user turn;
* AISBench keeps ``SYSTEM`` as a reserved role with ``api_role='SYSTEM'``: a system message
  stays one, and user turns have no trailing newline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from promptweave._flavor import AISBENCH, OPENCOMPASS
from promptweave.errors import PromptTypeError, UnknownRoleError, make_error

__all__ = [
    "AIS_CHAT_SERVICE_MODELS",
    "CHAT_ROLES",
    "FASTCHAT_TEMPLATES",
    "ais_request_messages",
    "ais_sendable",
    "chat_meta_template",
    "chat_parser",
    "convert_base_messages",
    "convert_chat_messages",
    "format_fastchat",
]

#: the role names the conversion knows (any other role is an error, as in the reference)
CHAT_ROLES = {"HUMAN": "user", "BOT": "assistant", "SYSTEM": "system"}

#: AISBench 3.1's chat-completions service models: they send the parser's messages as the
#: request's ``messages`` (:func:`ais_request_messages`)
AIS_CHAT_SERVICE_MODELS = frozenset(
    {
        "VLLMCustomAPIChat",
        "VLLMCustomAPIChatStream",
        "VLLMFunctionCallAPIChat",
        "VllmMultiturnAPIChatStream",
    }
)
#: their role names (any other role is sent as it is)
_AIS_REQUEST_ROLES = {"HUMAN": "user", "BOT": "assistant", "SYSTEM": "system", "TOOL": "tool"}


def ais_sendable(item: Any) -> bool:
    """Whether AISBench's chat service models can send ``item`` of a model input: a message
    (a dict with ``'prompt'``), not a meta template's ``begin`` string."""
    return isinstance(item, Mapping) and "prompt" in item


def ais_request_messages(prompt: Any) -> list[dict[str, Any]]:
    """The ``messages`` of the request AISBench 3.1's chat service models
    (:data:`AIS_CHAT_SERVICE_MODELS`) send for the model input ``prompt`` -- the API parser's
    output, as :class:`~promptweave.DatasetRenderer` gives it: a ``str`` is one user message;
    each ``{'role', 'prompt'}`` message becomes ``{'content': prompt, 'role': ...}`` (HUMAN,
    BOT, SYSTEM, TOOL as user, assistant, system, tool; another role as it is), its other keys
    copied after those two, in that key order (the request's JSON bytes). An item that is not
    a message (a meta template's ``begin`` string) makes the reference fail: a
    :class:`~promptweave.errors.PromptTypeError` (a ``TypeError``) names it."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(prompt):
        if not ais_sendable(item):
            what = "a dict without 'prompt'" if isinstance(item, Mapping) else repr(item)[:80]
            raise make_error(
                PromptTypeError,
                f"item {i} of the model input is {what}, not a message: AISBench's chat service "
                "models cannot send it (the reference fails on it); a meta template's 'begin' "
                "string is such an item",
                compat=TypeError if not isinstance(item, Mapping) else KeyError,
            )
        role = item.get("role", "")
        msg = {"content": item["prompt"], "role": _AIS_REQUEST_ROLES.get(role, role)}
        for key, value in item.items():
            if key not in ("role", "prompt"):
                msg[key] = value
        messages.append(msg)
    return messages


def chat_meta_template(flavor: str = OPENCOMPASS) -> dict[str, Any]:
    """The meta template a chat model uses when its config has none (a fresh dict)."""
    if flavor == AISBENCH:
        return {
            "round": [
                {"role": "HUMAN", "api_role": "HUMAN"},
                {"role": "BOT", "api_role": "BOT", "generate": True},
            ],
            "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
        }
    if flavor != OPENCOMPASS:
        raise ValueError(f"flavor must be 'opencompass' or 'aisbench', got {flavor!r}")
    return {
        "round": [
            {"role": "HUMAN", "api_role": "HUMAN"},
            # OpenCompass speaks SYSTEM as HUMAN on purpose
            {"role": "SYSTEM", "api_role": "HUMAN"},
            {"role": "BOT", "api_role": "BOT", "generate": True},
        ]
    }


def chat_parser(meta_template: Any = None, flavor: str = OPENCOMPASS) -> Any:
    """The ``APITemplateParser`` a chat model parses prompts with: its own meta template, or
    :func:`chat_meta_template` when it has none (an empty one counts as none)."""
    from promptweave import aisbench, opencompass

    module: Any = aisbench if flavor == AISBENCH else opencompass
    return module.APITemplateParser(meta_template or chat_meta_template(flavor))


def _message(item: Any, index: int) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise make_error(
            PromptTypeError,
            f"prompt item {index} is a {type(item).__name__}, not a role dict "
            "(did the prompt go through the API parser?)",
            compat=TypeError,
            path=f"prompt[{index}]",
        )
    if "prompt" not in item:
        raise make_error(
            UnknownRoleError,
            f"prompt item {index} has no 'prompt' key: {dict(item)!r}",
            compat=KeyError,
            path=f"prompt[{index}]",
        )
    role = item.get("role")
    if role not in CHAT_ROLES:
        raise make_error(
            UnknownRoleError,
            f"prompt item {index} has role {role!r}; a chat model takes HUMAN, BOT and SYSTEM",
            compat=KeyError,
            path=f"prompt[{index}]",
        )
    return {"role": CHAT_ROLES[role], "content": item["prompt"]}


def convert_chat_messages(
    inputs: Iterable[Any], merge_role: bool = True, skip_empty_prompt: bool = True
) -> list[list[dict[str, Any]]]:
    """Parsed prompts (a ``str`` or a role list each) -> chat messages, as the reference's
    ``_convert_chat_messages``: a string is one user message; items with an empty prompt are
    skipped; ``HUMAN``/``BOT``/``SYSTEM`` become ``user``/``assistant``/``system``;
    consecutive messages of one role are merged with ``"\\n"``."""
    outputs: list[list[dict[str, Any]]] = []
    for prompt in inputs:
        messages: list[dict[str, Any]] = []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            for i, item in enumerate(prompt):
                if skip_empty_prompt and isinstance(item, Mapping) and not item.get("prompt", 1):
                    continue
                messages.append(_message(item, i))
        if merge_role:
            merged: list[dict[str, Any]] = []
            for m in messages:
                if merged and merged[-1]["role"] == m["role"]:
                    merged[-1]["content"] += "\n" + m["content"]
                else:
                    merged.append(m)
            messages = merged
        outputs.append(messages)
    return outputs


def convert_base_messages(inputs: Iterable[Any]) -> list[str]:
    """Parsed prompts -> one string each for a base (non-chat) model: the items' prompts joined
    with no separator, as the reference's ``_convert_base_messages``."""
    outputs: list[str] = []
    for prompt in inputs:
        if isinstance(prompt, str):
            outputs.append(prompt)
            continue
        parts = []
        for i, item in enumerate(prompt):
            if not ais_sendable(item):
                raise make_error(
                    PromptTypeError,
                    f"prompt item {i} is not a role dict with a 'prompt'",
                    compat=KeyError if isinstance(item, Mapping) else TypeError,
                    path=f"prompt[{i}]",
                )
            parts.append(item["prompt"])
        outputs.append("".join(parts))
    return outputs


#: FastChat conversation templates the chat models' ``fastchat_template`` can name, as
#: ``get_conversation_template(name)`` resolves them in fschat 0.2.36: name -> (system message,
#: user role, assistant role, separator after the system message and the user turns,
#: separator after the assistant turns). Every ``fastchat_template`` of the wheels' model
#: configs is ``'vicuna'`` (FastChat's ``vicuna_v1.1``: ``ADD_COLON_TWO`` separators).
FASTCHAT_TEMPLATES: dict[str, tuple[str, str, str, str, str]] = {
    "vicuna": (
        "A chat between a curious user and an artificial intelligence assistant. "
        "The assistant gives helpful, detailed, and polite answers to the user's questions.",
        "USER",
        "ASSISTANT",
        " ",
        "</s>",
    ),
}


def format_fastchat(conversations: Iterable[Sequence[Mapping[str, Any]]], name: str) -> list[str]:
    """Chat messages -> the text a FastChat conversation template makes of them, as the
    reference chat models do with ``fastchat_template=name``: system messages are dropped, user
    and assistant turns take the template's roles, and an open assistant turn ends the text.

    Raises:
        ValueError: an unknown template name, or a role other than user/assistant/system."""
    if name not in FASTCHAT_TEMPLATES:
        known = ", ".join(repr(n) for n in FASTCHAT_TEMPLATES)
        raise make_error(
            PromptTypeError,
            f"FastChat template {name!r} is not supported (supported: {known})",
            compat=ValueError,
        )
    system, user, assistant, sep, sep2 = FASTCHAT_TEMPLATES[name]
    roles = {"user": user, "assistant": assistant}
    out = []
    for i, messages in enumerate(conversations):
        turns: list[tuple[str, Any]] = []
        for m in messages:
            role = m["role"]
            if role == "system":
                continue
            if role not in roles:
                raise make_error(
                    PromptTypeError,
                    f"conversation {i}: unknown role {role!r} for FastChat template {name!r}",
                    compat=ValueError,
                )
            turns.append((roles[role], m["content"]))
        turns.append((assistant, None))
        text = system + sep
        for k, (role, content) in enumerate(turns):
            if content:
                text += f"{role}: {content}" + (sep if k % 2 == 0 else sep2)
            else:
                text += f"{role}:"
        out.append(text)
    return out
