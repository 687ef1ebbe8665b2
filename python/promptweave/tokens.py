"""Token counters for ``max_seq_len`` fitting: any callable, a HuggingFace ``tokenizers``
tokenizer or a tiktoken encoding (neither imported here), OpenCompass's API-model estimate
(:func:`api_token_len`) and a chat model's count (:func:`chat_token_counter`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "TokenCounter",
    "api_token_len",
    "as_token_counter",
    "chat_token_counter",
    "text_token_counter",
]

_WORD = re.compile(r"[A-Za-z0-9]+")
_CJK = re.compile(r"[\u4e00-\u9FFF]+")

TokenCounter = Callable[[str], int]


def as_token_counter(counter: Any) -> TokenCounter:
    """A ``str -> int`` token counter from a callable, a ``tokenizers.Tokenizer`` (its
    ``encode(text).ids``, special tokens as its post-processor adds them) or a tiktoken
    ``Encoding`` (``encode(text)``)."""
    encode = getattr(counter, "encode", None)
    if encode is not None:
        module = type(counter).__module__
        if module.startswith("tokenizers"):
            return lambda text: len(encode(text).ids)
        if module.startswith("tiktoken"):
            # the special-token check of tiktoken would reject prompts that quote them
            return lambda text: len(encode(text, disallowed_special=()))
        return lambda text: len(encode(text))
    if callable(counter):
        return lambda text: int(counter(text))
    raise TypeError(f"token_counter must be callable or have .encode(), got {counter!r}")


def text_token_counter(tokenizer: Any, add_special_tokens: bool) -> TokenCounter:
    """The number of tokens ``tokenizer`` makes of a text, with or without the special tokens
    its post-processor adds (BOS, ...): what a model class that tokenizes the final text with
    ``add_special_tokens=...`` gets. ``tokenizer``: a ``tokenizers.Tokenizer``, a transformers
    tokenizer, a tiktoken ``Encoding`` (which adds none) or anything
    :func:`as_token_counter` takes, then counted as it counts."""
    encode = getattr(tokenizer, "encode", None)
    module = type(tokenizer).__module__
    if encode is not None and module.startswith("tokenizers"):
        return lambda text: len(encode(text, add_special_tokens=add_special_tokens).ids)
    if encode is not None and module.startswith("transformers"):
        return lambda text: len(encode(text, add_special_tokens=add_special_tokens))
    return as_token_counter(tokenizer)


def api_token_len(text: str) -> int:
    """The token count OpenCompass's API models estimate (``BaseAPIModel.get_token_len``, which
    most of its API model classes keep): one per run of ASCII letters and digits, plus one per
    CJK unified ideograph (U+4E00..U+9FFF); everything else counts nothing."""
    return len(_WORD.findall(text)) + sum(len(run) for run in _CJK.findall(text))


def chat_token_counter(chat_template: Any, tokenizer: Any) -> TokenCounter:
    """How OpenCompass's chat-template models (HuggingFace, vLLM, LMDeploy "with chat
    template") count a prompt for ``max_seq_len``: the prompt's text as one user message,
    rendered by the chat template with ``add_generation_prompt=True`` and tokenized without
    adding special tokens. ``chat_template``: a :class:`~promptweave.ChatTemplate`;
    ``tokenizer``: a ``tokenizers.Tokenizer`` or a transformers tokenizer (both without
    special tokens added, as the reference counts), or anything :func:`as_token_counter`
    takes, then counted as it counts."""
    # (apply_chat_template(tokenize=True) adds no BOS/EOS of the tokenizer's post-processor)
    count = text_token_counter(tokenizer, add_special_tokens=False)

    def counter(text: str) -> int:
        message = [{"role": "user", "content": text}]
        return count(chat_template.render(message, add_generation_prompt=True))

    return counter
