"""Token counters for ``max_seq_len`` fitting: any callable, a HuggingFace ``tokenizers``
tokenizer or a tiktoken encoding (neither imported here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["TokenCounter", "as_token_counter"]

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
