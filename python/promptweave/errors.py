"""Exception hierarchy of promptweave.

Every error promptweave raises derives from :class:`PromptRenderError` and from the family the
spec recommends (``TemplateError`` is a ``ValueError``, ``PromptTypeError`` a ``TypeError``, ...).

Compatibility rule: where the reference (OpenCompass) raises a *different* builtin exception at
the same place -- ``AssertionError`` for a bad template type, ``KeyError`` for an unknown role,
``IndexError`` for an unbalanced section marker -- the raised class additionally derives from that
builtin, so ``except AssertionError`` / ``except KeyError`` written against the reference keeps
working. :func:`make_error` builds (and caches) those combined classes; they keep the family's
name, so tracebacks read ``PromptTypeError: template must be a str or a dict, got list``.

In the AISBench flavour the reference's error code (``ICLR-TYPE-001``, ...) is stored in
``.error_code`` and prefixed to the message as ``[ICLR-TYPE-001]``, as AISBench does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "ArgumentError",
    "ChatInputError",
    "ChatTemplateError",
    "ChatTemplateRaised",
    "ChatTemplateRenderError",
    "ChatTemplateSyntaxError",
    "ConfigError",
    "DoubleBosError",
    "DoubleBosWarning",
    "IceTokenError",
    "LabelError",
    "MetaTemplateError",
    "MultimodalContentError",
    "PromptRenderError",
    "PromptTypeError",
    "RetrieverError",
    "SameSplitWarning",
    "TemplateError",
    "TemplateStructureError",
    "UnknownRoleError",
    "join_text",
    "make_error",
]


class PromptRenderError(Exception):
    """Base class of every error raised by promptweave.

    Attributes:
        path: where the fault is, e.g. ``"template['round'][1]"`` or ``"prompt[7]"`` (or ``None``).
        error_code: the AISBench error code in the AISBench flavour (or ``None``).
    """

    path: str | None = None
    error_code: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduce(self)

    def __str__(self) -> str:
        # KeyError's str() is the repr of its argument; keep our messages readable instead.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class TemplateError(PromptRenderError, ValueError):
    """A prompt template is malformed."""


class IceTokenError(TemplateError, LookupError):
    """The ``ice_token`` is missing from a template that must contain it."""


class LabelError(TemplateError, KeyError):
    """A label is not one of the label-dict template's labels."""


class PromptTypeError(PromptRenderError, TypeError):
    """An item, value or argument has a type the operation cannot use."""


class MetaTemplateError(PromptRenderError, ValueError):
    """A model meta template is malformed."""


class UnknownRoleError(PromptRenderError, KeyError):
    """A dialogue item names a role that the meta template does not define."""


class TemplateStructureError(PromptRenderError, ValueError):
    """Section markers are unbalanced, mismatched or unknown."""


class ArgumentError(PromptRenderError, ValueError):
    """An argument has a value the operation does not accept (e.g. ``mode``)."""


class RetrieverError(PromptRenderError, ValueError):
    """A retriever was configured or used incorrectly."""


class MultimodalContentError(PromptRenderError, ValueError):
    """A multimodal prompt part is malformed.

    Attributes:
        tag: for a malformed ``content`` string (strict parsing), the ``<AIS_*>`` tag at fault
            (``None`` for untagged text), else ``None``.
        position: the character (code point) position of that tag or text in ``content``.
    """

    tag: str | None = None
    position: int | None = None


class ConfigError(PromptRenderError, ValueError):
    """An OpenCompass/AISBench config file cannot be loaded.

    Raised by :func:`promptweave.config.load_config` for an unreadable file, a syntax error, a
    base config that cannot be found, or an exception while executing the file; the message
    starts with ``file:line`` of the fault (``.path`` holds the same), ``.filename`` and
    ``.lineno`` hold its parts (``lineno`` is ``None`` when no line applies) and the original
    exception is chained as ``__cause__``.
    """

    filename: str | None = None
    lineno: int | None = None


class ChatTemplateError(PromptRenderError):
    """A model chat template (Jinja) failed to compile or to render.

    transformers raises ``jinja2`` exceptions at the same places (``TemplateSyntaxError``,
    ``TemplateError``, ``UndefinedError``); those derive from ``Exception`` only, and so does
    this family. Where transformers raises a Python builtin instead (``ZeroDivisionError``,
    ``RecursionError``, ``OverflowError``, ...), the error is also of that builtin family
    (:func:`chat_error`).

    ``.conversation`` is the index of the conversation in a batch (``render_many``) the error
    came from, ``None`` for one conversation.
    """

    conversation: int | None = None


class ChatTemplateSyntaxError(ChatTemplateError):
    """The chat template does not compile; the message names the line."""


class ChatTemplateRenderError(ChatTemplateError):
    """Rendering failed inside the template (an undefined attribute, a type error, ...)."""


class ChatTemplateRaised(ChatTemplateError):
    """The template called ``raise_exception(message)``.

    ``str(err)`` is the template's message verbatim (as transformers raises it);
    ``.conversation`` is the index of the conversation in a batch (``None`` for one).
    """

    def __init__(self, message: str, conversation: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.conversation = conversation


class ChatInputError(ChatTemplateError, ValueError):
    """The inputs break a rule transformers enforces before rendering (``ValueError`` there),
    e.g. ``continue_final_message`` with ``add_generation_prompt`` or on an empty chat."""


#: what transformers (Jinja2 running Python) raises where the template engine reports these:
#: (pattern of the engine's message, the builtin exception of the same failure there)
_CHAT_BUILTINS: tuple[tuple[re.Pattern[str], type[BaseException]], ...] = (
    (re.compile(r"nested too deeply|recursion limit|maximum recursion"), RecursionError),
    (re.compile(r"range has too many elements"), OverflowError),
    (re.compile(r"^MemoryError:"), MemoryError),
    (re.compile(r"unable to calculate \S+ (?://|/|%) -?0(?:\.0*)? \(in "), ZeroDivisionError),
    # a power too large for Python to print (its digit limit)
    (re.compile(r"unable to calculate -?\d+ \*\* \d+ \(in "), ValueError),
    (re.compile(r"operator on unsupported types"), TypeError),
)


def chat_error(kind: str, message: str, conversation: int | None = None) -> ChatTemplateError:
    """The exception for a chat template failure of ``kind`` (``syntax``, ``render``,
    ``input``, ``raised``), of the builtin family transformers raises for the same failure
    where it raises a builtin (a ``ZeroDivisionError`` for ``1 // 0``, a ``RecursionError`` for
    a runaway recursion, ...), so that code catching those keeps catching them."""
    if kind == "raised":
        return ChatTemplateRaised(message, conversation)
    family: type[ChatTemplateError] = {
        "syntax": ChatTemplateSyntaxError,
        "input": ChatInputError,
    }.get(kind, ChatTemplateRenderError)
    cls = family
    for pattern, builtin in _CHAT_BUILTINS:
        if pattern.search(message):
            cls = _combined(family, builtin)
            break
    err = cls(message)
    err.conversation = conversation
    return err


class DoubleBosWarning(UserWarning):
    """The rendered chat starts with the BOS token and the tokenizer will add another one."""


class UnmodelledTruncationWarning(UserWarning):
    """The model config cuts prompts in a way promptweave does not render: the middle of a
    long prompt by tokens (``drop_middle``, ``mode='mid'``), or, for LMDeploy's chat model with
    ``drop_middle``, every message but the first."""


class SameSplitWarning(UserWarning):
    """Loaded data with a train split given, for a reader config whose ``train_split`` is its
    ``test_split``: the in-context examples come from the test rows, as in the reference."""


class DoubleBosError(ChatTemplateError, ValueError):
    """``double_bos='error'``: the rendered chat starts with the BOS token and the tokenizer
    will add another one."""


_COMBINED: dict[tuple[type, type], type] = {}


def _rebuild(
    family: type[PromptRenderError],
    compat: type[BaseException] | None,
    args: tuple[Any, ...],
    state: dict[str, Any],
) -> PromptRenderError:
    """Unpickle an error (the combined classes are made at run time, so pickle cannot find
    them by name): rebuild the class, then the instance."""
    cls = _combined(family, compat) if compat is not None else family
    err: PromptRenderError = cls(*args)
    err.__dict__.update(state)
    return err


def _reduce(self: PromptRenderError) -> tuple[Any, ...]:
    family, compat = getattr(type(self), "_pw_bases", (type(self), None))
    return (_rebuild, (family, compat, self.args, self.__dict__))


def _combined(family: type[PromptRenderError], compat: type[BaseException]) -> type:
    if issubclass(family, compat):
        return family
    cls = _COMBINED.get((family, compat))
    if cls is None:
        # Same name as the family: the compat base is an implementation detail.
        namespace = {"__module__": __name__, "_pw_bases": (family, compat), "__reduce__": _reduce}
        cls = type(family.__name__, (family, compat), namespace)
        _COMBINED[(family, compat)] = cls
    return cls


def add_note(exc: BaseException, note: str) -> None:
    """Add ``note`` to ``exc``'s notes, where Python has them (3.11+): where an error came from
    (a test row, an in-context example)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)


#: more threads than this are no faster (the work is split in blocks): larger counts are capped
MAX_THREADS = 64


def check_threads(threads: object, where: str) -> int | None:
    """A ``threads=`` argument: ``None`` (the default) or an ``int`` of at least 1 (capped at
    :data:`MAX_THREADS`); anything else raises ``TypeError`` / ``ValueError`` naming it."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(
            f"{where}: threads must be an int >= 1 or None, not {type(threads).__name__}"
        )
    if threads < 1:
        raise ArgumentError(f"{where}: threads must be >= 1, got {threads}")
    return min(threads, MAX_THREADS)


def make_error(
    family: type[PromptRenderError],
    message: str,
    *,
    compat: type[BaseException] | None = None,
    path: str | None = None,
    code: str | None = None,
) -> PromptRenderError:
    """Build an exception of ``family`` that is also an instance of ``compat``.

    ``code`` (the AISBench error code) is prefixed to the message as ``[CODE]``.
    """
    cls = _combined(family, compat) if compat is not None else family
    text = f"[{code}] {message}" if code else message
    try:
        err: PromptRenderError = cls(text)
    except TypeError:
        # a compat class whose constructor takes other arguments (UnicodeEncodeError takes
        # five): its nearest base that takes a message (ValueError for the Unicode errors)
        assert compat is not None
        for base in compat.__mro__[1:]:
            try:
                err = _combined(family, base)(text)
                break
            except TypeError:
                continue
        else:  # pragma: no cover - BaseException takes a message
            err = family(text)
    err.path = path
    err.error_code = code
    return err


def join_text(parts: Sequence[Any], describe: Callable[[Any], str]) -> str:
    """``"".join(parts)``; a part that is not a ``str`` raises a :class:`PromptTypeError` (also
    a ``TypeError``, as the reference's concatenation raises) whose message is
    ``describe(part)``."""
    try:
        return "".join(parts)
    except TypeError:
        bad = next(p for p in parts if not isinstance(p, str))
        raise make_error(PromptTypeError, describe(bad), compat=TypeError) from None
