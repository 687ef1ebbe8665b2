"""Multi-round generation: OpenCompass ``GenInferencer(multiround=True)`` (spec 03 §2.1).

A conversation (a list of OpenAI-style messages, typically rendered by a
:class:`~promptweave.RawPromptTemplate` such as ``[{'expand_column': 'dialogue'}]``) is walked
once; every assistant message whose ``content`` is falsy (``''``, ``None`` or missing) is a
*generation slot*. For each slot in order the model sees everything before it -- earlier
generated replies included, non-empty assistant messages kept as ground truth -- and its reply
is written into the slot, so later turns see it.

The model is a user-supplied callable ``generate(model_input) -> str``. ``model_input`` is the
history list itself, or, with a ``template_parser`` (e.g. ``APITemplateParser(meta)``), what the
model's parser makes of it (``parser.parse_template(history, mode='gen')``), exactly what the
reference hands to the model's ``generate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from promptweave.errors import ArgumentError, PromptTypeError, make_error

__all__ = [
    "generation_slots",
    "multiround_generate",
    "multiround_generate_batch",
    "multiround_input_lengths",
]


class TemplateParserLike(Protocol):
    """Anything with the model-side ``parse_template(prompt, mode)``."""

    def parse_template(self, prompt_template: Any, mode: str) -> Any: ...


def generation_slots(chat: Sequence[Any]) -> list[int]:
    """Indices of the assistant messages of ``chat`` to generate: dicts with ``role ==
    'assistant'`` and a falsy (or missing) ``content``."""
    return [
        i
        for i, msg in enumerate(chat)
        if isinstance(msg, dict) and msg.get("role") == "assistant" and not msg.get("content", "")
    ]


def _assistant_contents(chat: Sequence[Any]) -> list[Any]:
    return [
        msg["content"] for msg in chat if isinstance(msg, dict) and msg.get("role") == "assistant"
    ]


def multiround_generate(
    chat: list[Any],
    generate: Callable[[Any], Any],
    *,
    template_parser: TemplateParserLike | None = None,
) -> list[Any]:
    """Fill every generation slot of ``chat`` **in place**, turn by turn, and return the
    contents of all assistant messages in order (given and generated).

    Args:
        chat: the conversation; its slot dicts receive the replies (``content``).
        generate: called once per slot with the model input for ``chat[:slot]``; returns the
            reply.
        template_parser: when given, the model input is
            ``template_parser.parse_template(chat[:slot], mode='gen')``; otherwise the history
            list itself (a new list holding the conversation's own message dicts).

    Raises:
        PromptTypeError: ``chat`` is not a list.
    """
    if not isinstance(chat, list):
        raise make_error(
            PromptTypeError,
            f"chat must be a list of messages, got {type(chat).__name__}",
            compat=TypeError,
        )
    for slot in generation_slots(chat):
        history = chat[:slot]
        model_input = (
            history if template_parser is None else template_parser.parse_template(history, "gen")
        )
        chat[slot]["content"] = generate(model_input)
    return _assistant_contents(chat)


def multiround_generate_batch(
    chats: Sequence[list[Any]],
    generate: Callable[[Any], Any],
    *,
    template_parser: TemplateParserLike | None = None,
    max_workers: int = 1,
) -> list[list[Any]]:
    """:func:`multiround_generate` over several conversations (a batch of the reference's
    ``_generate_multiround``); returns one list of assistant contents per chat.

    With ``max_workers > 1`` the chats advance concurrently in a thread pool (``generate`` must
    then be thread-safe); the turns of one chat are always strictly sequential. With the default
    ``1`` the chats are processed one after another. (The reference schedules single turns on a
    pool of ``batch_size`` workers, so the *interleaving* of calls across chats depends on
    timing there; each chat's inputs and results do not.)
    """
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise make_error(ArgumentError, f"max_workers must be a positive int, got {max_workers!r}")
    if max_workers == 1 or len(chats) <= 1:
        return [multiround_generate(c, generate, template_parser=template_parser) for c in chats]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        futures = [
            pool.submit(multiround_generate, c, generate, template_parser=template_parser)
            for c in chats
        ]
        return [f.result() for f in futures]


def multiround_input_lengths(chat: Sequence[Any], get_token_len: Callable[[str], int]) -> list[int]:
    """The input length the model saw at each assistant turn of a filled conversation:
    cumulative ``get_token_len`` of the contents before each assistant message (the
    reference's ``_compute_multiround_input_lengths``, used with ``dump_res_length``).

    A message's text is its ``content`` (else its ``prompt``, else ``''``), a non-dict item is
    its own text, and a non-str text is counted as ``str(text)``.
    """
    lengths: list[int] = []
    total = 0
    for msg in chat:
        if isinstance(msg, dict):
            role = msg.get("role", "")
            content = msg.get("content", msg.get("prompt", ""))
        else:
            role, content = "", msg
        if not isinstance(content, str):
            content = str(content)
        if role == "assistant":
            lengths.append(total)
        total += get_token_len(content)
    return lengths
