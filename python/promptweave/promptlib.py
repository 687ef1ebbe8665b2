"""prompt-lib's few-shot string prompts: ``make_prompt`` and the query that follows it (spec 05).

Mirrors ``prompt_lib/prompts/utils.py`` of ``reasoning-machines/prompt-lib``: a seeded shuffle of
the examples (``random.Random(seed).sample`` -- Python's own generator, so the order is the
reference's by construction), then plain concatenation::

    non-CoT:  question_prefix + question + intra + answer_prefix + final_answer_prefix + answer
              + intra + inter
    CoT:      question_prefix + question + intra + answer_prefix + thought + ' '
              + final_answer_prefix + answer + intra + inter

The prompt therefore ends with ``inter_example_sep``; :func:`make_query` appends the test question
and the answer prefix, stripped of surrounding whitespace unless the model is a code model.
The assembly is a few string concatenations per example, so it stays in Python.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptweave.errors import ArgumentError, PromptTypeError, join_text, make_error

__all__ = [
    "Example",
    "PromptConfig",
    "PromptStr",
    "is_code_model",
    "make_prompt",
    "make_query",
]


@dataclass
class Example:
    """One few-shot example: the question, its final answer and the chain of thought."""

    question: str
    answer: str
    thought: str


@dataclass
class PromptStr:
    """A literal prompt, used as is (``make_prompt`` ignores all its other arguments)."""

    prompt_str: str


@dataclass
class PromptConfig:
    """The separators and prefixes of a prompt (prompt-lib's defaults)."""

    question_prefix: str = "Q: "
    answer_prefix: str = "A: "
    final_answer_prefix: str = "The answer is "
    intra_example_sep: str = "\n"
    inter_example_sep: str = "\n\n"

    @staticmethod
    def from_args(args: Any) -> PromptConfig:
        """From command-line arguments (attributes named like the fields): the two characters
        backslash-``n`` become a newline; no other escape is interpreted."""
        return PromptConfig(
            question_prefix=args.question_prefix.replace("\\n", "\n"),
            answer_prefix=args.answer_prefix.replace("\\n", "\n"),
            final_answer_prefix=args.final_answer_prefix.replace("\\n", "\n"),
            intra_example_sep=args.intra_example_sep.replace("\\n", "\n"),
            inter_example_sep=args.inter_example_sep.replace("\\n", "\n"),
        )

    @staticmethod
    def from_dict(config_dict: Mapping[str, Any]) -> PromptConfig:
        return PromptConfig(**config_dict)


def make_prompt(
    prompt_examples: Sequence[Example] | PromptStr,
    prompt_config: PromptConfig,
    num_prompt_examples: int,
    seed: Any,
    is_cot_prompt: bool,
) -> str:
    """The few-shot prompt: ``num_prompt_examples`` examples (``-1``: all of them) drawn and
    ordered by ``random.Random(seed).sample``, each rendered as in the module docstring.

    Raises:
        ArgumentError: ``num_prompt_examples`` is neither ``-1`` nor in ``0..len(examples)``
            (also a ``ValueError``, as ``random.sample`` raises).
        PromptTypeError: the examples are not a sequence, or a field is not a str (also a
            ``TypeError``).
    """
    if isinstance(prompt_examples, PromptStr):
        return prompt_examples.prompt_str
    chosen = _sample(prompt_examples, num_prompt_examples, seed)
    cfg = prompt_config

    def text(*parts: Any) -> str:
        return join_text(
            parts,
            lambda bad: f"make_prompt concatenates str fields; got {type(bad).__name__} {bad!r}",
        )

    # Example by example, each field read where the reference reads it: an error is the one
    # the reference's concatenation meets first (a bad field before a malformed later example).
    pieces: list[str] = []
    for ex in chosen:
        pieces.append(text(cfg.question_prefix, ex.question, cfg.intra_example_sep))
        if is_cot_prompt:
            pieces.append(text(cfg.answer_prefix, ex.thought, " "))
            pieces.append(text(cfg.final_answer_prefix, ex.answer, cfg.intra_example_sep))
        else:
            pieces.append(
                text(cfg.answer_prefix, cfg.final_answer_prefix, ex.answer, cfg.intra_example_sep)
            )
        pieces.append(text(cfg.inter_example_sep))
    return "".join(pieces)


def _sample(population: Any, num: Any, seed: Any) -> list[Any]:
    """``random.Random(seed).sample(population, k)`` (``k = len(population)`` for ``num ==
    -1``) with clearer errors."""
    k = num
    try:
        rng = random.Random(seed)
    except (ValueError, TypeError) as exc:  # e.g. a str seed with a lone surrogate
        raise make_error(
            ArgumentError if isinstance(exc, ValueError) else PromptTypeError,
            f"seed {seed!r} cannot seed random.Random: {exc}",
            compat=ValueError if isinstance(exc, ValueError) else TypeError,
        ) from exc
    try:
        if num == -1:
            k = len(population)
        return rng.sample(population, k)
    except ValueError as exc:
        raise make_error(
            ArgumentError,
            f"num_prompt_examples must be -1 or between 0 and {len(population)}, got {k!r} ({exc})",
            compat=ValueError,
        ) from exc
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"cannot sample {k!r} prompt examples from a {type(population).__name__} with seed "
            f"{seed!r}: {exc}",
            compat=TypeError,
        ) from exc


def is_code_model(model_name: str) -> bool:
    """prompt-lib's test: a model whose name contains ``"code"`` keeps the answer prefix's
    trailing whitespace (other models get it stripped)."""
    return "code" in model_name


def make_query(
    prompt: str | PromptStr,
    prompt_config: PromptConfig,
    question: str,
    code_model: bool = False,
) -> str:
    """The model input for ``question`` after the few-shot ``prompt``::

        prompt + question_prefix + question + intra_example_sep + AP

    where ``AP`` is ``answer_prefix.strip()``, or ``answer_prefix`` itself for a code model
    (see :func:`is_code_model`) -- prompt-lib strips it because "davinci doesn't like prompts
    that end with a space". A :class:`PromptStr` prompt is used as its ``prompt_str``.
    """
    text = prompt.prompt_str if isinstance(prompt, PromptStr) else prompt
    cfg = prompt_config
    answer_prefix = cfg.answer_prefix if code_model else cfg.answer_prefix.strip()
    return text + cfg.question_prefix + question + cfg.intra_example_sep + answer_prefix
