"""``RawPromptTemplate``: mirrors ``opencompass.openicl.icl_raw_prompt_template.RawPromptTemplate``.

OpenAI-style messages end to end (spec 03 §1): no ``PromptList``, no section markers, no meta
template. A template is a list of

* message dicts (``role`` in system/user/assistant, ``content``): deep-copied, and with
  ``format_variables`` their str ``content`` goes through ``safe_format`` with the data row;
* ``{'expand_column': col}``: replaced by a deep copy of the row's message list in ``col``
  (never formatted);
* strings: the one equal to ``ice_token`` is where in-context examples (a message list) go,
  every other string is dropped.

The substitution runs in the Rust core (``_core.safe_format``, the reference's sequential
semantics); rows it cannot take (lone surrogates, non-str keys, ...) go to the pure-Python
algorithm, which raises the reference's exception. The walk itself stays in Python: it is a
handful of dict copies per row.

Reference quirks kept on purpose (spec 06 B#23): ``generate_item`` ignores ``output_field`` (the
answer is not masked) and ``generate_label_prompt_item`` ignores the ICE and the label.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping
from typing import Any

from promptweave import _fallback
from promptweave.errors import PromptTypeError, TemplateError, make_error
from promptweave.prompt import format_entry

__all__ = ["RawPromptTemplate"]

_VALID_ROLES = frozenset({"system", "user", "assistant"})
_EXPAND = "expand_column"


class RawPromptTemplate:
    """A prompt template made of OpenAI-style messages (OpenCompass ``RawPromptTemplate``).

    Args:
        messages: message dicts, ``{'expand_column': column}`` placeholders and strings (the
            one equal to ``ice_token`` marks where in-context examples go).
        format_variables: substitute ``{column}`` placeholders in str message contents.
        ice_token: the in-context-example placeholder string.

    Raises:
        PromptTypeError: ``messages`` is not a list, or an element is neither a dict nor a str
            (also a ``TypeError``, as in the reference).
        TemplateError: a message dict lacks ``role``/``content`` or has a role other than
            system/user/assistant (also a ``ValueError``, as in the reference).
    """

    def __init__(
        self,
        messages: list[Any],
        format_variables: bool = True,
        ice_token: str = "</E>",
    ) -> None:
        _validate_messages(messages)
        self.messages = messages
        self.format_variables = format_variables
        self.ice_token = ice_token
        self.sep_token: str | None = None
        self.prompt_type = "raw_messages"

    # ------------------------------------------------------------------ rendering
    def generate_item(
        self,
        entry: Mapping[str, Any],
        output_field: Hashable | None = None,
        output_field_replace_token: Any = "",
        ice_field_replace_token: Any = "",
    ) -> list[Any]:
        """The messages for ``entry``, with the in-context messages at each ``ice_token``.

        ``ice_field_replace_token`` is inserted only when it is a non-empty list (its very
        items, not copies); a str ICE is dropped. ``output_field`` and
        ``output_field_replace_token`` are accepted for interface compatibility and ignored:
        the answer is **not** masked (reference behaviour, spec 06 B#23).
        """
        del output_field, output_field_replace_token  # ignored, as in the reference
        return self._walk(entry, ice_field_replace_token, keep_ice=True)

    def generate_ice_item(self, entry: Mapping[str, Any], label: Any = None) -> list[Any]:
        """One in-context example: the messages for ``entry`` without any string element
        (``label`` is ignored)."""
        del label  # ignored, as in the reference
        return self._walk(entry, None, keep_ice=False)

    def generate_label_prompt_item(
        self,
        entry: Mapping[str, Any],
        ice: Any = "",
        label: Any = None,
        remain_sep: bool | None = False,
    ) -> list[Any]:
        """``generate_item(entry)``: the ICE and the label are ignored (reference behaviour,
        spec 06 B#23 -- perplexity scoring with raw messages never shows in-context examples)."""
        del ice, label, remain_sep  # ignored, as in the reference
        return self.generate_item(entry)

    def _walk(self, entry: Mapping[str, Any], ice: Any, *, keep_ice: bool) -> list[Any]:
        """Spec 03 §1.2 (``keep_ice``) / §1.3: one pass over ``self.messages``.

        ``self.messages`` is walked on every call (not compiled) so that a template whose list
        is modified after construction renders like the reference's.
        """
        result: list[Any] = []
        row: _Row | None = None
        for i, item in enumerate(self.messages):
            if isinstance(item, str):
                # the ICE goes in only where the token is, and only as a non-empty list
                if keep_ice and item == self.ice_token and ice and isinstance(ice, list):
                    result.extend(ice)
                continue
            if isinstance(item, dict) and _EXPAND in item:
                result.extend(_expanded(entry, item[_EXPAND], i))
                continue
            if not keep_ice and not isinstance(item, dict):
                continue  # generate_ice_item only renders dicts
            msg = _copy_message(item)
            if self.format_variables and _has_str_content(msg, i):
                if row is None:
                    row = _Row(entry)
                msg["content"] = row.format(msg["content"])
            result.append(msg)
        return result

    def __repr__(self) -> str:
        return f"RawPromptTemplate(messages={self.messages}, ice_token={self.ice_token})"


# ---------------------------------------------------------------------- validation


def _validate_messages(messages: Any) -> None:
    """The reference's constructor checks, in its order (spec 03 §1.1)."""
    if not isinstance(messages, list):
        raise make_error(
            PromptTypeError, f"messages must be a list, got {type(messages)}", path="messages"
        )
    for i, msg in enumerate(messages):
        if isinstance(msg, str):
            continue  # the ICE placeholder (or text that is dropped)
        path = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise make_error(
                PromptTypeError, f"{path} must be a dict or str, got {type(msg)}", path=path
            )
        if _EXPAND in msg:
            continue
        for key in ("role", "content"):
            if key not in msg:
                raise make_error(TemplateError, f"{path} missing {key!r} key", path=path)
        role = msg["role"]
        try:
            valid = role in _VALID_ROLES
        except TypeError:  # an unhashable role: the reference's set lookup raises TypeError
            raise make_error(
                PromptTypeError,
                f"{path} has invalid role: {role!r} (a role must be one of {sorted(_VALID_ROLES)})",
                path=f"{path}['role']",
            ) from None
        if not valid:
            raise make_error(TemplateError, f"{path} has invalid role: {role}", path=path)


# ---------------------------------------------------------------------- helpers


def _expanded(entry: Mapping[str, Any], column: Any, index: int) -> list[Any]:
    """A deep copy of ``entry[column]`` when it is a list, else nothing (spec 03 §1.2)."""
    try:
        value = entry[column] if column in entry else None
    except TypeError as exc:  # e.g. an unhashable column name
        raise make_error(
            PromptTypeError,
            f"messages[{index}]: cannot look up expand_column {column!r} in the data row: {exc}",
            compat=TypeError,
            path=f"messages[{index}]['expand_column']",
        ) from exc
    return copy.deepcopy(value) if isinstance(value, list) else []


_IMMUTABLE = (str, int, float, bool, type(None))


def immutable(value: Any) -> bool:
    """A value of an immutable builtin type (its deep copy is itself)."""
    return type(value) in _IMMUTABLE


def flat_dict(item: Any) -> bool:
    """A dict of str keys and immutable values: ``item.copy()`` is its deep copy."""
    return type(item) is dict and all(type(k) is str and immutable(v) for k, v in item.items())


def _copy_message(item: Any) -> Any:
    """``copy.deepcopy(item)``; a flat dict (the usual message) copies shallowly, which gives
    the same result faster."""
    return item.copy() if flat_dict(item) else copy.deepcopy(item)


def _has_str_content(msg: Any, index: int) -> bool:
    try:
        return "content" in msg and isinstance(msg["content"], str)
    except TypeError as exc:  # a non-dict item put into ``messages`` after construction
        raise make_error(
            PromptTypeError,
            f"messages[{index}] is of type {type(msg).__name__}; expected a message dict or a str",
            compat=TypeError,
            path=f"messages[{index}]",
        ) from exc


class _Row:
    """The data row as ``safe_format`` keyword arguments, built on first use."""

    def __init__(self, entry: Mapping[str, Any]) -> None:
        self.kwargs = _fallback._as_kwargs(entry)  # `**entry`: str keys, mapping order
        # the reference calls `safe_format(content, **entry)`
        _fallback.check_kwarg_collision(self.kwargs, "input_str", "safe_format")

    def format(self, content: str) -> str:
        result: str = format_entry(content, self.kwargs)
        return result
