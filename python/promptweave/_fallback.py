"""Pure-Python reference implementations of the rendering algorithms.

This is the exact-semantics path: it is used when the Rust core cannot take an input (lone
surrogates, unusual value types, ...) and it is re-run by the public wrappers to raise the
precise exception of an error case. Behaviour follows the spec (``spec/01``, ``spec/02``)
byte-for-byte, with the error policy of ``DEVELOPERS.md``: where the reference raises, we raise
a :mod:`promptweave.errors` class that also derives from the builtin the reference raises
(``compat``) and, in the AISBench flavour, carries the AISBench error code; where the reference
prints to stdout, loops, or crashes later on a ``None``, we raise a clear error at the fault.

``t`` arguments are prompt templates and ``p`` arguments are model-side template parsers; see
:class:`TemplateLike` and :class:`ParserLike` for the attributes used.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from promptweave._flavor import AISBENCH
from promptweave.errors import (
    LabelError,
    MetaTemplateError,
    PromptRenderError,
    PromptTypeError,
    TemplateError,
    TemplateStructureError,
    UnknownRoleError,
    make_error,
)

if TYPE_CHECKING:
    from promptweave.prompt import PromptList

_PL = TypeVar("_PL", bound="PromptList")

__all__ = [
    "API_STRING_WARNING",
    "ParserLike",
    "TemplateLike",
    "api_parse",
    "api_raw_messages",
    "check_kwarg_collision",
    "encode_dialogue",
    "format_prompt_list",
    "generate_ice_item",
    "generate_item",
    "generate_label_prompt_item",
    "is_raw_messages",
    "lm_parse",
    "replace_in_item",
    "replace_in_prompt",
    "safe_format",
    "single_pass_format",
    "split_item",
]

API_STRING_WARNING = "Non-empty string in prompt template will be ignored in API models."

_SECTIONS = ("begin", "round", "end", "ice")

# AISBench error codes used at the sites below.
_UTILS_TYPE = "UTILS-TYPE-001"  # PromptList: PromptList spliced into a dict prompt
_MODEL_UNK = "MODEL-UNK-001"  # section markers (LM: bad pos only; API: all marker errors)
_MODEL_UNKNOWN_ROLE = "MODEL-PARAM-002"  # API: round role unknown, no usable fallback
_MODEL_MIX_STR = "MODEL-TYPE-001"  # API: str entry in a role list
_MODEL_NO_PROMPT = "MODEL-DATA-002"  # API (AIS): merged role has neither prompt nor prompt_mm


class TemplateLike(Protocol):
    """What the fallback needs from a prompt template."""

    @property
    def template(self) -> Any: ...
    @property
    def ice_token(self) -> str | None: ...
    @property
    def sep_token(self) -> str | None: ...
    @property
    def prompt_type(self) -> str: ...
    @property
    def substitution(self) -> str: ...
    @property
    def _flavor(self) -> str: ...
    @property
    def _prompt_list(self) -> type[PromptList]: ...


class ParserLike(Protocol):
    """What the fallback needs from a meta-template parser."""

    @property
    def meta_template(self) -> Any: ...
    @property
    def _flavor(self) -> str: ...
    @property
    def _prompt_list(self) -> type[PromptList]: ...


def _code(flavor: str, code: str) -> str | None:
    return code if flavor == AISBENCH else None


def _tname(obj: object) -> str:
    return type(obj).__name__


def _prompt_list_base() -> type[PromptList]:
    from promptweave.prompt import PromptList  # import cycle: prompt.py imports this module

    return PromptList


# ============================================================================ substitution


def safe_format(template: str, entry: Mapping[str, Any]) -> str:
    """Sequential substitution (spec 01 §1): for each key in order, ``str.replace`` every
    ``{key}`` of the current string by ``str(value)``."""
    result: str = _substitute(template, entry, "the template", None, single_pass=False)
    return result


def single_pass_format(template: str, entry: Mapping[str, Any]) -> str:
    """One left-to-right scan: each ``{name}`` (``name`` without braces) whose ``name`` is a key
    of ``entry`` becomes ``str(value)``; everything else is copied; inserted values are never
    rescanned."""
    result: str = _substitute(template, entry, "the template", None, single_pass=True)
    return result


def _sequential(text: Any, entry: Mapping[str, Any]) -> Any:
    for key, value in entry.items():
        text = text.replace(f"{{{key}}}", str(value))
    return text


def _scan(text: str, entry: Mapping[str, Any]) -> str:
    find = text.find
    out: list[str] = []
    pos = 0
    while True:
        open_ = find("{", pos)
        if open_ < 0:
            break
        close = find("}", open_ + 1)
        if close < 0:
            break
        inner = text.rfind("{", open_ + 1, close)
        if inner >= 0:  # nested '{': the innermost one may open a placeholder
            out.append(text[pos:inner])
            pos = inner
            continue
        name = text[open_ + 1 : close]
        if name in entry:
            out.append(text[pos:open_])
            out.append(str(entry[name]))
        else:
            out.append(text[pos : close + 1])
        pos = close + 1
    out.append(text[pos:])
    return "".join(out)


def _substitute(
    text: Any, entry: Mapping[str, Any], what: str, path: str | None, *, single_pass: bool
) -> Any:
    """Substitute ``entry`` into ``text``; a non-str ``text`` fails as in the reference (only
    once there is at least one key)."""
    if isinstance(text, str):
        return _scan(text, entry) if single_pass else _sequential(text, entry)
    if not entry:
        return text
    try:
        return _sequential(text, entry)
    except (AttributeError, TypeError) as exc:
        raise make_error(
            PromptTypeError,
            f"{what} is of type {_tname(text)}; placeholders can only be substituted into a str",
            compat=type(exc),
            path=path,
        ) from exc


def _as_kwargs(entry: Any) -> dict[str, Any]:
    """``dict(**entry)``: what the reference's ``**entry`` builds (str keys, mapping order)."""
    try:
        return dict(**entry)
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"the data row must be a mapping with str keys: {exc}",
            compat=TypeError,
        ) from exc


def check_kwarg_collision(kwargs: Mapping[str, Any], name: str, callee: str) -> None:
    """The reference passes the row as ``callee(..., **row)``, whose own parameter is ``name``
    (``safe_format(input_str, **kwargs)``, ``PromptList.format(self, **kwargs)``): a column of
    that name makes the call raise ``TypeError``. Raised here too (a ``PromptTypeError``)."""
    if name in kwargs:
        raise make_error(
            PromptTypeError,
            f"the data row has a column named {name!r}, which the reference's "
            f"{callee}({name}, **row) cannot take ({callee}() got multiple "
            f"values for argument {name!r})",
            compat=TypeError,
        )


def format_prompt_list(
    items: list[Any],
    entry: Mapping[str, Any],
    pl_cls: type[_PL],
    *,
    single_pass: bool = False,
) -> _PL:
    """``PromptList.format``: substitute into string items and dict items' ``prompt``."""
    out = pl_cls()
    for i, item in enumerate(items):
        if not single_pass and (not isinstance(item, dict) or "prompt" in item):
            # the reference's `safe_format(text, **entry)` of this item
            check_kwarg_collision(entry, "input_str", "safe_format")
        if isinstance(item, dict):
            new_item = copy.deepcopy(item)
            if "prompt" in item:
                new_item["prompt"] = _substitute(
                    item["prompt"],
                    entry,
                    f"the 'prompt' of PromptList item {i}",
                    f"prompt[{i}]['prompt']",
                    single_pass=single_pass,
                )
            out.append(new_item)
        else:
            out.append(
                _substitute(
                    item, entry, f"PromptList item {i}", f"prompt[{i}]", single_pass=single_pass
                )
            )
    return out


# ================================================================ PromptList replace helpers


def replace_in_item(item: Any, src: Any, dst: Any, index: int) -> Any:
    """``item.replace(src, dst)`` for a PromptList item that is not a dict."""
    try:
        return item.replace(src, dst)
    except (AttributeError, TypeError) as exc:
        if isinstance(item, str):
            msg = (
                f"cannot replace {src!r} by a value of type {_tname(dst)} in PromptList item "
                f"{index}: {exc}"
            )
        else:
            msg = (
                f"PromptList item {index} is of type {_tname(item)}; prompt items must be str "
                f"or dict ({exc})"
            )
        raise make_error(PromptTypeError, msg, compat=type(exc), path=f"prompt[{index}]") from exc


def replace_in_prompt(text: Any, src: Any, dst: Any, index: int, role: object, flavor: str) -> Any:
    """Replace ``src`` by ``dst`` in the ``prompt`` of a dict item (``PromptList.replace``)."""
    path = f"prompt[{index}]['prompt']"
    try:
        found = src in text
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"cannot look for {src!r} in the 'prompt' of PromptList item {index}, which is of type "
            f"{_tname(text)}: {exc}",
            compat=TypeError,
            path=path,
        ) from exc
    if not found:
        return text
    if isinstance(dst, _prompt_list_base()):
        raise make_error(
            PromptTypeError,
            f"Found keyword {src} in the 'prompt' of PromptList item {index} (role {role!r}); "
            "a PromptList can only be spliced into string items, not into a dict's prompt.",
            compat=TypeError,
            path=path,
            code=_code(flavor, _UTILS_TYPE),
        )
    try:
        return text.replace(src, dst)
    except (AttributeError, TypeError) as exc:
        raise make_error(
            PromptTypeError,
            f"cannot replace {src!r} by a value of type {_tname(dst)} in the 'prompt' of "
            f"PromptList item {index}: {exc}",
            compat=type(exc),
            path=path,
        ) from exc


def split_item(item: str, src: Any, index: int) -> list[str]:
    """``item.split(src)`` for splicing a PromptList into a string item."""
    try:
        return item.split(src)
    except ValueError as exc:  # empty separator
        raise make_error(
            TemplateError,
            f"cannot splice a PromptList at an empty token (PromptList item {index})",
            compat=ValueError,
            path=f"prompt[{index}]",
        ) from exc
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"cannot split PromptList item {index} on a value of type {_tname(src)}: {exc}",
            compat=TypeError,
            path=f"prompt[{index}]",
        ) from exc


# ================================================================== PromptTemplate


def _marker(section: str, pos: str) -> dict[str, str]:
    return {"section": section, "pos": pos}


def _extend(out: PromptList, value: Any, where: str) -> None:
    """``PromptList += value``: falsy adds nothing, a str one item, an iterable its items."""
    if not value:
        return
    if isinstance(value, str):
        out.append(value)
        return
    try:
        out.extend(value)
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"{where} must be a list of role dicts or strings, got {_tname(value)}",
            compat=TypeError,
            path=where,
        ) from exc


def encode_dialogue(tpl: dict[str, Any], ice: bool, pl_cls: type[PromptList]) -> PromptList:
    """Encode a dialogue template dict into a PromptList with section markers (spec 01 §3.2).

    Reference quirks kept: both markers of the ``end`` section are ``pos='end'``, a dict
    ``round`` contributes its keys, begin/end are dropped for in-context examples.
    """
    if not isinstance(tpl, Mapping):
        raise make_error(
            PromptTypeError,
            f"a dialogue template must be a dict with a 'round' key, got {_tname(tpl)}",
            compat=TypeError,
            path="template",
        )
    out = pl_cls()
    if not ice and "begin" in tpl:
        _add_section(out, "begin", "begin", tpl["begin"])
    section = "ice" if ice else "round"
    out.append(_marker(section, "begin"))
    if "round" not in tpl:
        raise make_error(
            TemplateError,
            f"dialogue template has no 'round' key (keys: {list(tpl)})",
            compat=KeyError,
            path="template['round']",
        )
    _extend(out, tpl["round"], "template['round']")
    out.append(_marker(section, "end"))
    if not ice and "end" in tpl:
        # the reference opens the end section with pos='end' too
        _add_section(out, "end", "end", tpl["end"])
    return out


def _add_section(out: Any, section: str, first_pos: str, body: Any) -> None:
    """A ``begin``/``end`` section: its markers around its items (a list) or its one item."""
    out.append(_marker(section, first_pos))
    if isinstance(body, list):
        out.extend(body)
    else:
        out.append(body)
    out.append(_marker(section, "end"))


def _select(t: TemplateLike, label: Any) -> Any:
    """The template used for ``label`` (spec 01 §3.3, ice / label-prompt columns)."""
    template = t.template
    if isinstance(template, str) or t.prompt_type == "meta":
        return template
    try:
        return template[label]
    except KeyError:
        raise make_error(
            LabelError,
            f"label {label!r} is not one of the template's labels {list(template)}",
            path=f"template[{label!r}]",
        ) from None
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"cannot select the template of label {label!r}: {exc}",
            compat=TypeError,
            path="template",
        ) from exc


def _select_first(t: TemplateLike) -> Any:
    """The template used by ``generate_item``: label dicts use their first key (quirk)."""
    template = t.template
    if isinstance(template, str) or t.prompt_type != "origin":
        return template
    keys = list(template.keys())
    if not keys:
        raise make_error(
            TemplateError, "label-dict template has no labels", compat=IndexError, path="template"
        )
    return template[keys[0]]


def _encode(t: TemplateLike, tpl: Any, ice: bool) -> Any:
    if isinstance(tpl, str):
        return tpl
    return encode_dialogue(tpl, ice, t._prompt_list)


def _insert_ice(enc: Any, token: str, ice: Any) -> Any:
    """Replace the ice token by the in-context examples (str.replace / PromptList.replace)."""
    if isinstance(enc, str):
        if not isinstance(ice, str):
            raise make_error(
                PromptTypeError,
                f"a str prompt template needs a str in-context example, got {_tname(ice)} "
                f"(replace() argument 2 must be str, not {_tname(ice)})",
                compat=TypeError,
                path="template",
            )
        return enc.replace(token, ice)
    return enc.replace(token, ice)


def _render(t: TemplateLike, enc: Any, kwargs: dict[str, Any]) -> Any:
    single = t.substitution == "single_pass"
    if isinstance(enc, str):
        if not single:
            check_kwarg_collision(kwargs, "input_str", "safe_format")
        return _substitute(enc, kwargs, "the template", "template", single_pass=single)
    if not single:
        check_kwarg_collision(kwargs, "self", "PromptList.format")
    return format_prompt_list(enc, kwargs, t._prompt_list, single_pass=single)


def generate_ice_item(t: TemplateLike, entry: Mapping[str, Any], label: Any) -> Any:
    """One in-context example (spec 01 §3.4)."""
    enc = _encode(t, _select(t, label), True)
    if t.sep_token is not None:
        # The reference computes this replacement and discards it (spec 06 B#3): the sep token
        # stays in in-context examples. Done for its errors only.
        enc.replace(t.sep_token, "")
    if t.ice_token is not None:
        enc = enc.replace(t.ice_token, "")
    return _render(t, enc, _as_kwargs(entry))


def generate_label_prompt_item(
    t: TemplateLike,
    entry: Mapping[str, Any],
    ice: Any,
    label: Any,
    remain_sep: bool | None = False,
) -> Any:
    """The PPL prompt of one label (spec 01 §3.5)."""
    enc = _encode(t, _select(t, label), False)
    sep = None if remain_sep else t.sep_token
    if t.substitution == "single_pass":
        kwargs = _as_kwargs(entry)
        return _sp_render(t, enc, kwargs, ice, sep_pre=sep, sep_post=None)
    if sep is not None:
        enc = enc.replace(sep, "")
    if t.ice_token is not None:
        enc = _insert_ice(enc, t.ice_token, ice)
    return _render(t, enc, _as_kwargs(entry))


def generate_item(
    t: TemplateLike,
    entry: Mapping[str, Any],
    output_field: Any = None,
    output_field_replace_token: Any = "",
    ice_field_replace_token: Any = "",
) -> Any:
    """The generation prompt (spec 01 §3.6)."""
    enc = _encode(t, _select_first(t), False)
    if t.substitution == "single_pass":
        ice = ice_field_replace_token
        if (
            t.ice_token is not None
            and t.sep_token is not None
            and isinstance(ice, (str, _prompt_list_base()))
        ):
            ice = ice.replace(t.sep_token, "")  # compat removes the sep token from the ICE too
        kwargs = _masked(entry, output_field, output_field_replace_token)
        return _sp_render(t, enc, kwargs, ice, sep_pre=None, sep_post=t.sep_token)
    if t.ice_token is not None:
        enc = _insert_ice(enc, t.ice_token, ice_field_replace_token)
    if t.sep_token is not None:
        enc = enc.replace(t.sep_token, "")
    return _render(t, enc, _masked(entry, output_field, output_field_replace_token))


def _masked(entry: Mapping[str, Any], output_field: Any, token: Any) -> dict[str, Any]:
    """The keyword arguments the template is formatted with: the row's, or with
    ``output_field`` the reference's ``entry = copy.deepcopy(entry); entry[output_field] =
    token`` (its errors, and the copy's values, which the template then ``str()``s; an existing
    column keeps its position: chaining order)."""
    if output_field is None:
        return _as_kwargs(entry)
    copied = copy.deepcopy(entry)
    copied[output_field] = token  # type: ignore[index]
    kwargs = _as_kwargs(copied)
    if not isinstance(output_field, str):
        raise make_error(
            PromptTypeError,
            f"output_field must be a str column name, got {output_field!r} "
            "(keywords must be strings)",
            compat=TypeError,
        )
    return kwargs


# ---------------------------------------------------------------- single-pass rendering


def _split_token(text: str, token: str) -> list[str]:
    # str.replace('', x) inserts x around every character: the same as splitting there.
    return ["", *text, ""] if token == "" else text.split(token)


def _sp_render(
    t: TemplateLike,
    enc: Any,
    kwargs: dict[str, Any],
    ice: Any,
    *,
    sep_pre: str | None,
    sep_post: str | None,
) -> Any:
    """Single-pass rendering: substitute the template pieces, then insert the ICE.

    ``sep_pre`` is removed from template text before the ice token is located, ``sep_post``
    from each template piece after (the caller removes it from ``ice`` as needed).
    """
    token = t.ice_token
    flavor = t._flavor
    pl_base = _prompt_list_base()

    def piece(text: str) -> str:
        if sep_post is not None:
            text = text.replace(sep_post, "")
        return _scan(text, kwargs)

    def with_ice(text: str) -> str:  # ``text`` has had ``sep_pre`` removed already
        if token is None:
            return piece(text)
        pieces = _split_token(text, token)
        if len(pieces) == 1:
            return piece(text)
        joiner: str = ice  # callers guarantee a str ICE when the token occurs
        return joiner.join(piece(p) for p in pieces)

    def text_with_ice(text: str) -> str:
        if sep_pre is not None:
            text = text.replace(sep_pre, "")
        return with_ice(text)

    if isinstance(enc, str):
        if token is not None and not isinstance(ice, str):
            _insert_ice(enc, token, ice)  # raises the str-template / non-str ICE error
        return text_with_ice(enc)

    out = t._prompt_list()
    for i, item in enumerate(enc):
        if isinstance(item, str):
            if token is None or isinstance(ice, str):
                out.append(text_with_ice(item))
            elif isinstance(ice, pl_base):
                text = item if sep_pre is None else item.replace(sep_pre, "")
                pieces = _split_token(text, token)
                for j, part in enumerate(pieces):
                    if part:
                        out.append(piece(part))
                    if j < len(pieces) - 1:
                        out.extend(copy.deepcopy(x) if isinstance(x, dict) else x for x in ice)
            # any other ICE type: the string item is dropped, as in compat mode
        elif isinstance(item, dict):
            new_item = copy.deepcopy(item)
            if "prompt" in item:
                text = item["prompt"]
                role = item.get("role")
                if isinstance(text, str):
                    if sep_pre is not None:
                        text = text.replace(sep_pre, "")
                    if token is not None and token in text and not isinstance(ice, str):
                        replace_in_prompt(text, token, ice, i, role, flavor)  # raises
                    new_item["prompt"] = with_ice(text)
                else:
                    for src, dst in ((sep_pre, ""), (token, ice), (sep_post, "")):
                        if src is not None:
                            text = replace_in_prompt(text, src, dst, i, role, flavor)
                    new_item["prompt"] = _substitute(
                        text,
                        kwargs,
                        f"the 'prompt' of PromptList item {i}",
                        f"prompt[{i}]['prompt']",
                        single_pass=True,
                    )
            out.append(new_item)
        else:
            value = item
            for src, dst in ((sep_pre, ""), (token, ice), (sep_post, "")):
                if src is not None:
                    value = replace_in_item(value, src, dst, i)
            out.append(
                _substitute(value, kwargs, f"PromptList item {i}", f"prompt[{i}]", single_pass=True)
            )
    return out


# ==================================================================== meta templates


def _is_marker(item: Any) -> bool:
    return isinstance(item, dict) and "section" in item


def _join_no_meta(prompt: list[Any], collect_mm: bool) -> tuple[str, list[Any]]:
    """No meta template: newline join of non-empty texts (spec 02 §2.3, §3.5)."""
    parts: list[str] = []
    mm: list[Any] = []
    sep = ""
    for i, item in enumerate(prompt):
        if isinstance(item, dict) and set(item.keys()) == {"section", "pos"}:
            continue
        if isinstance(item, str):
            if item:
                parts.append(sep + item)
        else:
            try:
                text = item.get("prompt", "")
            except AttributeError as exc:
                raise make_error(
                    PromptTypeError,
                    f"prompt[{i}] is of type {_tname(item)}; prompt items must be str or dict",
                    compat=AttributeError,
                    path=f"prompt[{i}]",
                ) from exc
            if text:
                if not isinstance(text, str):
                    raise make_error(
                        PromptTypeError,
                        f"the 'prompt' of prompt[{i}] is of type {_tname(text)}, expected a str",
                        compat=TypeError,
                        path=f"prompt[{i}]['prompt']",
                    )
                parts.append(sep + text)
            elif collect_mm:
                parts_mm = item.get("prompt_mm", "")
                if parts_mm:
                    try:
                        mm.extend(parts_mm)
                    except TypeError as exc:
                        raise make_error(
                            PromptTypeError,
                            f"the 'prompt_mm' of prompt[{i}] must be a list of content parts, "
                            f"got {_tname(parts_mm)}",
                            compat=TypeError,
                            path=f"prompt[{i}]['prompt_mm']",
                        ) from exc
        sep = "\n"
    return "".join(parts), mm


def _lookup(table: Mapping[Any, Any], key: Any, where: str) -> Any:
    """``table.get(key)``, with a clear error for an unhashable role name."""
    try:
        return table.get(key)
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"the role of {where} must be a str, got {_tname(key)} ({key!r})",
            compat=TypeError,
            path=f"{where}['role']",
        ) from exc


class _Walker:
    """Shared machinery of the LM and API meta-template walks (spec 02 §2.4, §3.4)."""

    def __init__(self, p: ParserLike, api: bool) -> None:
        self.p = p
        self.api = api
        self.flavor = p._flavor
        self.meta = p.meta_template

    # ------------------------------------------------------------------ errors
    def _fail_list_meta(self, what: str, compat: type[BaseException]) -> NoReturn:
        raise make_error(
            MetaTemplateError,
            "a list meta_template (OpenAI message prefix) only applies to raw message lists; "
            f"it has no {what} to render a PromptList with",
            compat=compat,
            path="meta_template",
        )

    def roles(self) -> dict[Any, dict[str, Any]]:
        roles: dict[Any, dict[str, Any]] | None = getattr(self.p, "roles", None)
        if roles is None or not isinstance(self.meta, Mapping):
            self._fail_list_meta("roles", AttributeError)
        return roles

    def meta_round(self) -> list[Any]:
        if not isinstance(self.meta, Mapping):
            self._fail_list_meta("'round'", TypeError)
        meta_round: list[Any] = self.meta["round"]
        return meta_round

    def role_names(self) -> list[Any]:
        return list(self.roles())

    @staticmethod
    def role_of(item: Any, where: str) -> Any:
        try:
            return item["role"]
        except KeyError:
            raise make_error(
                TemplateError,
                f"{where} has no 'role' key: {item!r}",
                compat=KeyError,
                path=where,
            ) from None
        except (TypeError, IndexError) as exc:
            raise make_error(
                PromptTypeError,
                f"{where} must be a role dict, got {_tname(item)}: {item!r}",
                compat=type(exc),
                path=where,
            ) from exc

    # ------------------------------------------------------------- structure
    def split_rounds(self, dialogue: list[Any], start: int) -> list[int]:
        """Cut points of the rounds of a round/ice section (spec 02 §2.4.2)."""
        meta_round = self.meta_round()
        positions = {cfg["role"]: k for k, cfg in enumerate(meta_round) if not isinstance(cfg, str)}
        last = -1
        cuts = [0]
        for j, item in enumerate(dialogue):
            if isinstance(item, str):
                continue
            where = f"prompt[{start + j}]"
            role = self.role_of(item, where)
            pos = _lookup(positions, role, where)
            if pos is None:
                pos = self._fallback_position(item, role, positions, where)
            if pos <= last:
                cuts.append(j)
            last = pos
        cuts.append(len(dialogue))
        return cuts

    def _fallback_position(
        self, item: Any, role: Any, positions: dict[Any, int], where: str
    ) -> int:
        round_roles = list(positions)
        if not self.api:
            raise make_error(
                UnknownRoleError,
                f"{where} {item!r} has role {role!r}, which is not a role of the meta "
                f"template's round {round_roles} (inside a round section the LM parser ignores "
                "fallback_role and reserved_roles)",
                path=f"{where}['role']",
            )
        has_fallback = isinstance(item, Mapping) and "fallback_role" in item
        fallback = item["fallback_role"] if has_fallback else None
        if has_fallback:
            pos: int | None = _lookup(positions, fallback, where)
            if pos is not None:
                return pos
        detail = (
            f"and its fallback_role {fallback!r} is not one either"
            if has_fallback
            else "and it has no fallback_role"
        )
        raise make_error(
            UnknownRoleError,
            f"{where} {item!r} neither has an appropriate role nor a fallback role: role "
            f"{role!r} is not a role of the meta template's round {round_roles}, {detail}",
            path=f"{where}['role']",
            code=_code(self.flavor, _MODEL_UNKNOWN_ROLE),
        )

    def update_role_dict(
        self, items: Any, where: str, base: int | None = None
    ) -> dict[Any, dict[str, Any]]:
        """A deep copy of the role table updated by the role dicts of ``items``.

        ``items`` is a round (a slice of the prompt starting at index ``base``) or one item of
        a begin/end section (a dict, or a list of items) found at ``where``.
        """
        roles = self.roles()
        role_dict = copy.deepcopy(roles)
        if isinstance(items, dict):
            items = [items]
            wheres = [where]
        elif isinstance(items, list) or self.api:
            try:
                items = list(items)
            except TypeError as exc:
                raise make_error(
                    PromptTypeError,
                    f"{where} is of type {_tname(items)}; prompt items must be str or dict",
                    compat=TypeError,
                    path=where,
                ) from exc
            if base is None:
                wheres = [f"{where}[{k}]" for k in range(len(items))]
            else:
                wheres = [f"prompt[{base + k}]" for k in range(len(items))]
        else:
            raise make_error(
                PromptTypeError,
                f"{where} is of type {_tname(items)}; prompt items must be str or dict",
                compat=AssertionError,
                path=where,
            )
        for item, item_where in zip(items, wheres, strict=True):
            if not isinstance(item, dict):
                continue
            role = self.role_of(item, item_where)
            if _lookup(roles, role, item_where) is None:
                fallback = item.get("fallback_role")
                if not fallback:
                    raise make_error(
                        UnknownRoleError,
                        f"{item_where} {item!r} neither has an appropriate role nor a fallback "
                        f"role: role {role!r} is not one of the meta template roles "
                        f"{self.role_names()}",
                        path=f"{item_where}['role']",
                    )
                if _lookup(role_dict, fallback, item_where) is None:
                    raise make_error(
                        UnknownRoleError,
                        f"{item_where} {item!r} has role {role!r} and fallback_role "
                        f"{fallback!r}, neither of which is a meta template role "
                        f"{self.role_names()}",
                        path=f"{item_where}['fallback_role']",
                    )
                role = fallback
            role_dict[role].update(item)
        return role_dict

    def merged_role(
        self, node: Any, role_dict: dict[Any, dict[str, Any]], where: str
    ) -> dict[str, Any]:
        role = self.role_of(node, where)
        merged: dict[str, Any] | None = _lookup(role_dict, role, where)
        if merged is None:
            merged = _lookup(role_dict, node.get("fallback_role"), where)
        if merged is None:
            raise make_error(
                UnknownRoleError,
                f"{where} {node!r} neither has an appropriate role nor a fallback role "
                f"(meta template roles: {self.role_names()})",
                compat=AttributeError,
                path=f"{where}['role']",
            )
        return merged

    def walk_sections(
        self,
        prompt: list[Any],
        mode: str,
        on_text: Callable[[str], None],
        on_round: Callable[[Any, dict[str, Any], bool], bool],
        on_single: Callable[[Any, int, str], bool],
    ) -> bool:
        """The section walk both parsers share (spec 02 §2.4.1): texts where they are met,
        each round of a round/ice section (with its updated role table and whether it is the
        generation round), each item of a begin/end section. The callbacks return whether to go
        on; the walk returns the same."""
        generate = True
        stack: list[tuple[Any, int]] = []
        for i, item in enumerate(prompt):
            if not generate:
                break
            if isinstance(item, str):
                on_text(item)
            elif _is_marker(item):
                closed = self.check_marker(item, i, stack)
                if closed is None or closed[0] not in ("round", "ice"):
                    continue
                name, start = closed
                dialogue = prompt[start:i]
                cuts = self.split_rounds(dialogue, start)
                meta_round = self.meta_round()
                last = len(cuts) - 2
                for k in range(len(cuts) - 1):
                    role_dict = self.update_role_dict(
                        dialogue[cuts[k] : cuts[k + 1]], "prompt", start + cuts[k]
                    )
                    for_gen = mode == "gen" and k == last and name == "round"
                    generate = on_round(meta_round, role_dict, for_gen)
            elif not stack:
                self.outside_section(item, i)
            elif stack[-1][0] in ("begin", "end"):
                generate = on_single(item, i, stack[-1][0])
        return generate

    def check_marker(self, item: dict[str, Any], i: int, stack: list[tuple[Any, int]]) -> Any:
        """Handle a section marker; returns the closed section ``(name, start)`` or None."""
        api_code = _code(self.flavor, _MODEL_UNK) if self.api else None
        if "pos" not in item:
            raise make_error(
                TemplateStructureError,
                f"section marker prompt[{i}] {item!r} has no 'pos' key",
                compat=KeyError,
                path=f"prompt[{i}]",
            )
        pos = item["pos"]
        if pos == "end":
            if not stack:
                if item.get("section") == "end":
                    msg = (
                        f"prompt[{i}] closes a section that was never opened. This is the "
                        "PromptTemplate 'end' section quirk: the reference encodes BOTH markers "
                        "of an 'end' section as {'section': 'end', 'pos': 'end'}, so any "
                        "meta-template parse that reaches an 'end' section fails (all ppl uses, "
                        "and gen without a generate role)"
                    )
                else:
                    msg = f"section end marker prompt[{i}] {item!r} has no open section"
                raise make_error(
                    TemplateStructureError, msg, compat=IndexError, path=f"prompt[{i}]"
                )
            name, start = stack.pop()
            if name != item["section"]:
                raise make_error(
                    TemplateStructureError,
                    f"section end marker prompt[{i}] closes section {item['section']!r} but "
                    f"the open section is {name!r} (opened at prompt[{start - 1}])",
                    compat=AssertionError,
                    path=f"prompt[{i}]",
                    code=api_code,
                )
            return name, start
        if pos == "begin":
            if item["section"] not in _SECTIONS:
                raise make_error(
                    TemplateStructureError,
                    f"section marker prompt[{i}] opens unknown section {item['section']!r}; "
                    "sections are 'begin', 'round', 'end' and 'ice'",
                    compat=AssertionError,
                    path=f"prompt[{i}]",
                    code=api_code,
                )
            stack.append((item["section"], i + 1))
            return None
        raise make_error(
            TemplateStructureError,
            f"Invalid pos {pos} in section marker prompt[{i}]; pos must be 'begin' or 'end'",
            compat=ValueError,
            path=f"prompt[{i}]['pos']",
            code=_code(self.flavor, _MODEL_UNK),
        )

    @staticmethod
    def outside_section(item: Any, i: int) -> NoReturn:
        raise make_error(
            TemplateStructureError,
            f"prompt[{i}] {item!r} is outside any section; with a meta template every role "
            "item must sit between section markers",
            compat=IndexError,
            path=f"prompt[{i}]",
        )


# ---------------------------------------------------------------------- LM parser


class _LMWalker(_Walker):
    def prompt2str(
        self, node: Any, role_dict: dict[Any, dict[str, Any]], for_gen: bool, where: str
    ) -> tuple[str, bool]:
        if isinstance(node, str):
            return node, True
        if isinstance(node, dict):
            return self.role2str(node, role_dict, for_gen, where)
        if not isinstance(node, list):
            raise make_error(
                PromptTypeError,
                f"{where} is of type {_tname(node)}; prompt items must be str or dict",
                compat=AssertionError,
                path=where,
            )
        if not node:
            if where == "meta_template['round']":
                raise make_error(
                    MetaTemplateError,
                    "meta_template['round'] is empty; there is nothing to render a round with",
                    compat=UnboundLocalError,
                    path=where,
                )
            raise make_error(
                TemplateStructureError,
                f"{where} is an empty list inside a begin/end section",
                compat=UnboundLocalError,
                path=where,
            )
        parts: list[str] = []
        cont = True
        for k, sub in enumerate(node):
            text, cont = self.prompt2str(sub, role_dict, for_gen, f"{where}[{k}]")
            parts.append(text)
            if not cont:
                break
        return "".join(parts), cont

    def role2str(
        self,
        node: dict[str, Any],
        role_dict: dict[Any, dict[str, Any]],
        for_gen: bool,
        where: str,
    ) -> tuple[str, bool]:
        merged = self.merged_role(node, role_dict, where)
        begin = merged.get("begin", "")
        who = _role_source(node, role_dict)
        if for_gen and merged.get("generate", False):
            if not isinstance(begin, str):
                self._bad_text(who, "begin", begin)
            return begin, False
        text = merged.get("prompt", "")
        end = merged.get("end", "")
        for key, value in (("prompt", text), ("end", end), ("begin", begin)):
            if not isinstance(value, str):
                self._bad_text(who, key, value)
        return begin + text + end, True

    @staticmethod
    def _bad_text(who: str, key: str, value: Any) -> NoReturn:
        raise make_error(
            PromptTypeError,
            f"the {key!r} of {who} is of type {_tname(value)} ({value!r}); role texts must be str",
            compat=TypeError,
            path=key,
        )

    def walk(self, prompt: list[Any], mode: str) -> str:
        out: list[str] = []

        def on_round(meta_round: Any, role_dict: dict[str, Any], for_gen: bool) -> bool:
            text, go_on = self.prompt2str(meta_round, role_dict, for_gen, "meta_template['round']")
            out.append(text)
            return go_on

        def on_single(item: Any, i: int, section: str) -> bool:
            where = f"prompt[{i}]"
            role_dict = self.update_role_dict(item, where)
            text, go_on = self.prompt2str(item, role_dict, False, where)
            out.append(text)
            return go_on

        generate = self.walk_sections(prompt, mode, out.append, on_round, on_single)
        body = "".join(out)
        begin = self.meta.get("begin", "")
        if not isinstance(begin, str):
            raise make_error(
                MetaTemplateError,
                f"meta_template['begin'] must be a str, got {_tname(begin)} ({begin!r})",
                compat=TypeError,
                path="meta_template['begin']",
            )
        result = begin + body
        if generate:
            end = self.meta.get("end", "")
            if not isinstance(end, str):
                raise make_error(
                    MetaTemplateError,
                    f"meta_template['end'] must be a str, got {_tname(end)} ({end!r})",
                    compat=TypeError,
                    path="meta_template['end']",
                )
            result += end
        return result


def _role_source(node: Any, role_dict: Mapping[Any, Any]) -> str:
    """``role 'X'``, and where its texts came from when that is its fallback role's entry of
    the meta template (``X`` is not one of the meta template's roles)."""
    role = node.get("role") if isinstance(node, dict) else None
    fallback = node.get("fallback_role") if isinstance(node, dict) else None
    try:
        own = role in role_dict
    except TypeError:  # an unhashable role
        own = True
    if own or fallback is None:
        return f"role {role!r}"
    return f"role {role!r} (the meta template's role {fallback!r}, its fallback_role)"


def lm_parse(p: ParserLike, prompt: Any, mode: str) -> str:
    """``LMTemplateParser.parse_template`` for one str or PromptList (spec 02 §2.3-2.4)."""
    if isinstance(prompt, str):
        return prompt
    if not p.meta_template:
        return _join_no_meta(prompt, collect_mm=False)[0]
    return _LMWalker(p, api=False).walk(prompt, mode)


# --------------------------------------------------------------------- API parser


def _iadd(left: Any, right: Any) -> Any:
    """``left += right`` as Python evaluates it, without mutating a list ``left``: on a copy
    of it, of its class (a ``PromptList``'s ``+=`` appends a str where a list's adds its
    characters)."""
    if isinstance(left, list):
        out = copy.copy(left)
        out += right
        return out
    return left + right


class _APIWalker(_Walker):
    def prompt2api(
        self, node: Any, role_dict: dict[Any, dict[str, Any]], for_gen: bool, where: str
    ) -> tuple[Any, bool]:
        if isinstance(node, dict):
            return self.role2api(node, role_dict, for_gen, where)
        is_meta = where == "meta_template['round']"
        res: list[Any] = []
        cont = True
        for k, sub in enumerate(node):
            sub_where = f"{where}[{k}]"
            if isinstance(sub, str):
                raise make_error(
                    MetaTemplateError if is_meta else PromptTypeError,
                    f"Mixing str without explicit role is not allowed in API models! "
                    f"({sub_where} is the string {sub!r})",
                    compat=TypeError,
                    path=sub_where,
                    code=_code(self.flavor, _MODEL_MIX_STR),
                )
            message, cont = self.role2api(sub, role_dict, for_gen, sub_where)
            if message:
                res.append(message)
            if not cont:
                break
        return res, cont

    def role2api(
        self, node: Any, role_dict: dict[Any, dict[str, Any]], for_gen: bool, where: str
    ) -> tuple[dict[str, Any] | None, bool]:
        merged = self.merged_role(node, role_dict, where)
        if for_gen and merged.get("generate", False):
            return None, False
        if "api_role" not in merged:
            raise make_error(
                MetaTemplateError,
                f"meta template role {merged.get('role')!r} has no 'api_role' (needed by API "
                "models to name the message role)",
                compat=KeyError,
                path="meta_template['round']",
            )
        res: dict[str, Any] = {"role": merged["api_role"]}
        try:
            if self.flavor != AISBENCH or "prompt" in merged:
                text = merged.get("begin", "")
                text = _iadd(text, merged.get("prompt", ""))
                text = _iadd(text, merged.get("end", ""))
                res["prompt"] = text
            elif "prompt_mm" in merged:
                res["prompt"] = merged.get("prompt_mm", [])
            else:
                raise make_error(
                    TemplateError,
                    f"Invalid prompt content: without 'prompt' or 'prompt_mm' param! Role "
                    f"{merged.get('role')!r} ({where}) gets no 'prompt' from this round of the "
                    "dialogue and has no default 'prompt' in the meta template",
                    path=where,
                    code=_code(self.flavor, _MODEL_NO_PROMPT),
                )
        except TypeError as exc:
            raise make_error(
                PromptTypeError,
                f"cannot build the text of {_role_source(node, role_dict)}: begin/prompt/end "
                f"must be str ({exc})",
                compat=TypeError,
                path=where,
            ) from exc
        return res, True

    def walk(self, prompt: list[Any], mode: str) -> Any:
        pl_cls = self.p._prompt_list
        out: list[Any] = []
        for_gen_mode = mode == "gen"

        def on_text(item: str) -> None:
            if item.strip():
                warnings.warn(API_STRING_WARNING, UserWarning, stacklevel=5)

        def on_round(meta_round: Any, role_dict: dict[str, Any], for_gen: bool) -> bool:
            messages, go_on = self.prompt2api(
                meta_round, role_dict, for_gen, "meta_template['round']"
            )
            out.extend(messages)
            return bool(go_on)

        def on_single(item: Any, i: int, section: str) -> bool:
            where = f"prompt[{i}]"
            role_dict = self.update_role_dict(item, where)
            if isinstance(item, dict):
                message, _ = self.role2api(item, role_dict, for_gen_mode, where)
                if message is None:
                    raise make_error(
                        TemplateStructureError,
                        f"{where} {item!r} in the {section!r} section resolves to the "
                        "meta template's generate role; in gen mode the API parser can only "
                        "stop at the last round, not inside a begin/end section",
                        compat=TypeError,
                        path=where,
                    )
                out.append(message)
                return True
            self.prompt2api(item, role_dict, for_gen_mode, where)
            raise make_error(
                TemplateStructureError,
                f"{where} is of type {_tname(item)} inside the {section!r} section; "
                "the API parser needs each item of a begin/end section to be a role dict",
                compat=TypeError,
                path=where,
            )

        self.walk_sections(prompt, mode, on_text, on_round, on_single)
        if not out:
            raise make_error(
                TemplateStructureError,
                "the prompt renders no message at all (no role item inside any section)",
                compat=IndexError,
                path="prompt",
            )
        merged = pl_cls([out[0]])
        last_role = out[0]["role"]
        for message in out[1:]:
            if message["role"] == last_role:
                try:
                    merged[-1]["prompt"] = _iadd(merged[-1]["prompt"], "\n" + message["prompt"])
                except TypeError as exc:
                    raise make_error(
                        PromptTypeError,
                        f"cannot merge consecutive {last_role!r} messages: {exc}",
                        compat=TypeError,
                    ) from exc
            else:
                last_role = message["role"]
                merged.append(message)
        begin = self.meta.get("begin", None)
        if begin:
            merged.insert(0, begin)
        return merged


def api_parse(p: ParserLike, prompt: Any, mode: str) -> Any:
    """``APITemplateParser.parse_template`` for one str or PromptList (spec 02 §3.4-3.5)."""
    if isinstance(prompt, str):
        return prompt
    if not p.meta_template:
        text, mm = _join_no_meta(prompt, collect_mm=p._flavor == AISBENCH)
        if p._flavor == AISBENCH and not text:
            return mm
        return text
    return _APIWalker(p, api=True).walk(prompt, mode)


# ----------------------------------------------------------------- raw messages (OC)


def is_raw_messages(prompt: Any) -> bool:
    """OC's raw-messages test: a non-empty list (PromptList included) whose every element
    contains both ``'role'`` and ``'content'`` (key test for dicts, substring test for str)."""
    if not isinstance(prompt, list) or not prompt:
        return False
    for i, element in enumerate(prompt):
        try:
            if not ("role" in element and "content" in element):
                return False
        except TypeError as exc:
            raise make_error(
                PromptTypeError,
                f"prompt[{i}] is of type {_tname(element)}; a prompt list holds str, dict or "
                "message items",
                compat=TypeError,
                path=f"prompt[{i}]",
            ) from exc
    return True


def api_raw_messages(p: ParserLike, prompt: Any) -> Any:
    """OC raw-messages path: a deep copy, merged with a list meta template (spec 02 §3.3)."""
    messages = copy.deepcopy(prompt)
    meta = p.meta_template
    if not (meta and isinstance(meta, list)):
        return messages
    try:
        return _merge_prefix(meta, messages)
    except (TypeError, KeyError, AttributeError) as exc:
        if isinstance(exc, PromptRenderError):
            raise
        raise make_error(
            PromptTypeError,
            f"cannot merge the meta_template message prefix into the messages: {exc!r}",
            compat=type(exc),
            path="prompt",
        ) from exc


def _merge_prefix(meta: list[Any], messages: list[Any]) -> list[Any]:
    result: list[Any] = []
    m = 0
    k = 0
    n = len(messages)
    while m < len(meta):
        meta_role = meta[m]["role"]
        if k < n and meta_role == messages[k]["role"]:
            merged = messages[k]
            merged["content"] = meta[m]["content"] + merged["content"]
            result.append(merged)
            m += 1
            k += 1
        elif k < n and any(messages[j]["role"] == meta_role for j in range(k, n)):
            result.append(messages[k])
            k += 1
        else:
            result.append(copy.deepcopy(meta[m]))
            m += 1
    result.extend(messages[k:])
    return result
