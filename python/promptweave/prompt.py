"""``PromptList`` and ``safe_format``: the intermediate prompt representation.

Mirrors ``opencompass.utils.prompt`` (and its AISBench twin) with the exact reference semantics
(spec 01 §1-2). The flavour of a ``PromptList`` class (``_flavor``) selects the few behaviours
that differ between the two frameworks: ``str()`` JSON-encodes dict prompts in AISBench, and
errors carry the AISBench error code.

Deliberate deviations from the reference (see spec 06 B#10): ``non_empty_list + PromptList``
concatenates instead of recursing forever, and reference crashes surface as promptweave errors
(:mod:`promptweave.errors`) that still derive from the builtin the reference raises.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar, cast

from promptweave import _backend, _core, _fallback
from promptweave._flavor import AISBENCH, OPENCOMPASS
from promptweave.errors import PromptTypeError, make_error

__all__ = ["PromptList", "safe_format"]

_PL = TypeVar("_PL", bound="PromptList")

# AISBench error code of ``str()`` on an invalid item (AISBenchTypeError in the reference).
_UTILS_TYPE = "UTILS-TYPE-001"


def safe_format(input_str: str, **kwargs: Any) -> str:
    """Replace every ``{key}`` of ``input_str`` by ``str(value)``, key by key in kwargs order.

    Sequential whole-string ``str.replace`` (spec 01 §1): text inserted for one key is scanned
    by every later key, placeholders of missing keys stay untouched, ``{{`` is not an escape.
    """
    result: str = format_entry(input_str, kwargs)
    return result


def format_entry(text: Any, entry: dict[str, Any]) -> Any:
    """``safe_format(text, **entry)``: in the Rust core when it can take the input, else the
    exact Python path (a non-str key or text, lone surrogates). With no key the reference
    returns its input unchanged (the same object)."""
    if not entry:
        return text
    if type(text) is str and not _backend.FORCE_PYTHON:
        try:
            return _core.safe_format(text, entry)
        except (_core.FallbackRequired, UnicodeEncodeError):
            pass
    _backend.note_fallback()
    return _fallback.safe_format(text, entry)


def _type_name(obj: object) -> str:
    return type(obj).__name__


class PromptList(list[Any]):
    """A list of prompt items: strings, section markers and role dicts (spec 01 §2).

    All operations return new instances of ``type(self)``; slicing returns a plain ``list``
    (as in the reference).
    """

    _flavor: ClassVar[str] = OPENCOMPASS

    # ------------------------------------------------------------------ helpers
    @classmethod
    def _code(cls, code: str) -> str | None:
        return code if cls._flavor == AISBENCH else None

    # ------------------------------------------------------------------ format
    def format(self: _PL, **kwargs: Any) -> _PL:
        """Substitute ``{key}`` placeholders in string items and in dict items' ``prompt``.

        Dict items are deep-copied; keys other than ``prompt`` are never touched. A non-str item
        (or non-str ``prompt``) cannot be formatted once there is at least one key.
        """
        if not _backend.FORCE_PYTHON:
            try:
                return type(self)(_core.format_prompt_list(self, kwargs))
            except (_core.FallbackRequired, UnicodeEncodeError):
                pass  # other item or value types, lone surrogates: the exact Python path
        return _fallback.format_prompt_list(self, kwargs, type(self))

    # ----------------------------------------------------------------- replace
    def replace(self: _PL, src: str, dst: Any) -> _PL:
        """Replace ``src`` by ``dst`` in string items and dict items' ``prompt``.

        ``dst`` may be a str, or a ``PromptList`` whose items are spliced into string items
        (empty fragments vanish; a ``src`` inside a dict prompt is then an error). With any
        other ``dst`` string items are dropped (reference behaviour, spec 01 §2.2).
        """
        cls = type(self)
        out = cls()
        for i, item in enumerate(self):
            if isinstance(item, str):
                if isinstance(dst, str):
                    out.append(_fallback.replace_in_item(item, src, dst, i))
                elif isinstance(dst, PromptList):
                    pieces = _fallback.split_item(item, src, i)
                    last = len(pieces) - 1
                    for j, piece in enumerate(pieces):
                        if piece:
                            out.append(piece)
                        if j < last:
                            out.extend(dst)
                # any other dst: the string item is dropped (reference quirk, spec 06 B#11)
            elif isinstance(item, dict):
                new_item = copy.deepcopy(item)
                if "prompt" in item:
                    new_item["prompt"] = _fallback.replace_in_prompt(
                        item["prompt"], src, dst, i, item.get("role"), cls._flavor
                    )
                out.append(new_item)
            else:
                out.append(_fallback.replace_in_item(item, src, dst, i))
        return out

    # -------------------------------------------------------------- operators
    def __add__(self: _PL, other: object) -> _PL:
        out = type(self)(self)
        if not other:
            return out
        if isinstance(other, str):
            out.append(other)
            return out
        if isinstance(other, list):
            out.extend(other)
            return out
        raise make_error(
            PromptTypeError,
            f"can only add a str or a list to a PromptList, not {_type_name(other)}",
            compat=TypeError,
        )

    def __radd__(self: _PL, other: object) -> _PL:
        cls = type(self)
        if not other:
            return cls(self)
        if isinstance(other, str):
            return cls([other, *self])
        if isinstance(other, (list, tuple)):
            # The reference recurses forever here (spec 06 B#10); concatenate instead.
            return cls([*other, *self])
        raise make_error(
            PromptTypeError,
            f"can only add a str, list or tuple to a PromptList, not {_type_name(other)}",
        )

    def __iadd__(self: _PL, other: object) -> _PL:
        if not other:
            return self
        if isinstance(other, str):
            self.append(other)
            return self
        try:
            self.extend(cast("Iterable[Any]", other))  # any iterable, as list += accepts
        except TypeError as exc:
            raise make_error(
                PromptTypeError,
                f"can only add a str or an iterable of items to a PromptList, "
                f"not {_type_name(other)}",
                compat=TypeError,
            ) from exc
        return self

    # -------------------------------------------------------------------- str
    def __str__(self) -> str:
        """Concatenate string items and dict items' ``prompt`` (AISBench: JSON-encoded)."""
        cls = type(self)
        ais = cls._flavor == AISBENCH
        if not _backend.FORCE_PYTHON:
            try:
                return _core.concat_prompts(self, ais)
            except _core.FallbackRequired:
                pass  # other item or prompt types, lone surrogates: the checks below
        parts: list[Any] = []
        for i, item in enumerate(self):
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict):
                if "prompt" in item:
                    parts.append(_json_prompt(item["prompt"], i) if ais else item["prompt"])
            else:
                raise make_error(
                    PromptTypeError,
                    f"Invalid type in prompt list when converting to string: item {i} is of type "
                    f"{_type_name(item)} (expected a str or a dict)",
                    compat=TypeError,
                    path=f"prompt[{i}]",
                    code=cls._code(_UTILS_TYPE),
                )
        for i, part in enumerate(parts):
            if not isinstance(part, str):
                index = _index_of_part(self, i)
                raise make_error(
                    PromptTypeError,
                    f"cannot convert PromptList to str: the 'prompt' of item {index} is of type "
                    f"{_type_name(part)}, expected a str",
                    compat=TypeError,
                    path=f"prompt[{index}]['prompt']",
                )
        return "".join(parts)


def _index_of_part(pl: PromptList, part_no: int) -> int:
    """Index in ``pl`` of the ``part_no``-th item contributing to ``str(pl)``."""
    seen = -1
    for i, item in enumerate(pl):
        if isinstance(item, str) or (isinstance(item, dict) and "prompt" in item):
            seen += 1
            if seen == part_no:
                return i
    return part_no  # pragma: no cover - unreachable


def _json_prompt(value: object, index: int) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise make_error(
            PromptTypeError,
            f"cannot convert PromptList to str: the 'prompt' of item {index} is not "
            f"JSON-serialisable: {exc}",
            compat=type(exc),
            path=f"prompt[{index}]['prompt']",
        ) from exc
