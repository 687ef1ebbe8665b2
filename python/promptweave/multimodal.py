"""AISBench multimodal prompts: the ``<AIS_*>`` content tags, ``format_mm``, ``MMPromptTemplate``.

Mirrors ``ais_bench.benchmark.utils.prompt`` (the tags, ``PromptList.format_mm``,
``is_mm_prompt``) and ``icl_prompt_template_mm.MMPromptTemplate`` (spec 03 §3). The ``content``
string of a row is parsed by :func:`promptweave.markers.parse_content` (the Rust core, with the
pure-Python reference algorithm as fallback).

Compat behaviour (the default) keeps the reference's quirks (spec 06 B#26): the field must be
called ``content``; only ``{question}`` (text parts) and ``{image}``/``{video}``/``{audio}`` (URLs)
are substituted inside parts; other dict items are deep-copied unformatted. ``strict=True`` makes a
malformed content string (untagged text, unterminated, empty, nested or unknown tags) raise
:class:`~promptweave.errors.MultimodalContentError` naming the tag and its character position.
Where the reference crashes, a promptweave error deriving from the reference's builtin is raised.
"""

from __future__ import annotations

import ast
import copy
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from promptweave import _fallback
from promptweave.errors import (
    MultimodalContentError,
    PromptRenderError,
    PromptTypeError,
    TemplateError,
    make_error,
)
from promptweave.markers import (
    AIS_AUDIO_START,
    AIS_CONTENT_TAG,
    AIS_IMAGE_START,
    AIS_TEXT_START,
    AIS_VIDEO_START,
    parse_content,
    render_content,
)
from promptweave.prompt import PromptList
from promptweave.prompt_template import BasePromptTemplate

__all__ = [
    "AIS_AUDIO_START",
    "AIS_CONTENT_TAG",
    "AIS_IMAGE_START",
    "AIS_TEXT_START",
    "AIS_VIDEO_START",
    "MMPromptTemplate",
    "format_mm",
    "is_mm_prompt",
    "parse_content",
    "render_content",
]

_MM_TYPES = ("text", "image_url", "video_url", "audio_url")
_MM_KEY_CODE = "ICLR-PARAM-003"  # AISBench: a prompt_mm dict key that is not a part type
_LOG = logging.getLogger(__name__)
_PL = TypeVar("_PL", bound=PromptList)

# ============================================================================== format_mm


def _part_error(exc: Exception, message: str, path: str) -> PromptRenderError:
    return make_error(MultimodalContentError, f"{message} ({exc})", compat=type(exc), path=path)


def _fill(template: Any, key: str, value: str, path: str) -> Any:
    """``safe_format(template, **{key: value})``: a non-str template fails as in the reference."""
    try:
        return template.replace(f"{{{key}}}", value)
    except (AttributeError, TypeError) as exc:
        raise _part_error(
            exc, f"{path} is of type {type(template).__name__}; it must be a str", path
        ) from exc


def _build_part(mm: Any, kind: str, payload: str, where: str) -> Any:
    """A deep copy of the ``kind`` part template of ``mm`` with ``payload`` filled in."""
    try:
        part = copy.deepcopy(mm[kind])
    except KeyError as exc:
        raise _part_error(
            exc,
            f"the content has a {kind} segment but {where} has no {kind!r} part template",
            where,
        ) from exc
    except (TypeError, IndexError) as exc:
        raise _part_error(
            exc, f"{where} must be a dict of part templates, got {type(mm).__name__}", where
        ) from exc
    field = "text" if kind == "text" else f"{kind}_url"
    placeholder = "question" if kind == "text" else kind
    path = f"{where}[{kind!r}][{field!r}]"
    try:
        value = part[field]
        if kind != "text" and isinstance(value, dict):
            value["url"] = _fill(value["url"], placeholder, payload, f"{path}['url']")
        else:
            part[field] = _fill(value, placeholder, payload, path)
    except PromptRenderError:
        raise
    except (KeyError, TypeError, IndexError) as exc:
        raise _part_error(exc, f"cannot fill the {kind} part template {part!r}", path) from exc
    return part


def format_mm(
    items: _PL,
    kwargs: Mapping[str, Any],
    *,
    strict: bool = False,
    content_field: str = "content",
) -> _PL:
    """``PromptList.format_mm(**kwargs)`` (AISBench): every dict item with ``prompt_mm`` gets the
    list of parts built from ``kwargs['content']``; other dicts are deep-copied unformatted; str
    items are formatted with every key (spec 03 §3.3)."""
    out = type(items)()
    parsed: list[tuple[str, str]] | None = None
    for i, item in enumerate(items):
        if isinstance(item, dict):
            new_item = copy.deepcopy(item)
            if "prompt_mm" in item:
                mm = item.get("prompt_mm", {})
                if parsed is None:
                    parsed = _parse_field(kwargs, strict, content_field)
                where = f"prompt[{i}]['prompt_mm']"
                new_item["prompt_mm"] = [_build_part(mm, k, p, where) for k, p in parsed]
            out.append(new_item)
        else:
            _fallback.check_kwarg_collision(kwargs, "input_str", "safe_format")
            out.append(
                _fallback._substitute(
                    item, kwargs, f"PromptList item {i}", f"prompt[{i}]", single_pass=False
                )
            )
    return out


def _parse_field(kwargs: Mapping[str, Any], strict: bool, field: str) -> list[tuple[str, str]]:
    try:
        content = kwargs[field]
    except KeyError:
        raise make_error(
            MultimodalContentError,
            f"the data row has no {field!r} field; the parts of a multimodal prompt come from "
            f"its <AIS_*> tagged {field!r} string (row keys: {list(kwargs)})",
            compat=KeyError,
            path=f"entry[{field!r}]",
        ) from None
    return parse_content(content, strict=strict)


# ============================================================================ is_mm_prompt


def is_mm_prompt(prompt: Any) -> bool:
    """AISBench ``is_mm_prompt``: a list of messages whose ``content`` are part lists with a
    text/image/video/audio part. ``False`` as soon as one message's ``content`` is not a list
    (so for the API parser's own output, keyed ``prompt``: spec 06 B#28)."""
    if not isinstance(prompt, list):
        return False
    for i, message in enumerate(prompt):
        content = _get(message, "content", f"prompt[{i}]")
        if not isinstance(content, list):
            return False
        for k, part in enumerate(content):
            if _get(part, "type", f"prompt[{i}]['content'][{k}]") in _MM_TYPES:
                return True
    return False


def _get(obj: Any, key: str, where: str) -> Any:
    try:
        return obj.get(key)
    except AttributeError as exc:
        raise make_error(
            PromptTypeError,
            f"{where} is of type {type(obj).__name__}; messages and parts must be dicts",
            compat=AttributeError,
            path=where,
        ) from exc


# ========================================================================= MMPromptTemplate


class MMPromptTemplate(BasePromptTemplate):
    """AISBench's ``MMPromptTemplate``: a dialogue whose role items carry ``prompt_mm`` part
    templates (``text``/``image``/``video``/``audio``), filled from the row's ``content``.

    Args:
        template: ``dict(round=[dict(role='HUMAN', prompt_mm={...})], ...)``.
        ice_token, sep_token: accepted and checked as by every template; ignored.
        strict: reject malformed ``content`` strings (:class:`MultimodalContentError`) instead
            of dropping what the reference drops.
        content_field: the row field holding the tagged string (the reference hard-codes
            ``'content'``).
    """

    def __init__(
        self,
        template: dict[Any, Any] | str,
        ice_token: str | None = None,
        sep_token: str | None = None,
        *,
        strict: bool = False,
        content_field: str = "content",
    ) -> None:
        super().__init__(template, ice_token, sep_token)
        self.strict = strict
        self.content_field = content_field

    def check_mm_template(self) -> bool:
        """Whether the template is ``{'round': [items that all have prompt_mm], ...}``."""
        if not isinstance(self.template, dict) or "round" not in self.template:
            return False
        for k, data in enumerate(_round_items(self.template)):
            if "prompt_mm" not in _keys(data, k):
                return False
        return True

    def format_mm_url(self, template: Any, entry: Mapping[str, Any]) -> Any:
        """A deep copy of ``template`` (the reference's ``mm_url`` renaming never applies)."""
        res_template = copy.deepcopy(template)
        for k, data in enumerate(_round_items(res_template)):
            _keys(data, k)
        return res_template

    def get_mm_template(self, item: Any) -> list[Any]:
        """``item['prompt_mm']`` as a part list (a dict ``{part type: value}`` is converted)."""
        try:
            value = item["prompt_mm"]
        except (KeyError, TypeError, IndexError) as exc:
            raise _part_error(exc, f"cannot read 'prompt_mm' of {item!r}", "prompt_mm") from exc
        if isinstance(value, list):
            return value
        return _mm_dict_to_parts(value)

    def generate_item(
        self,
        entry: Mapping[str, Any],
        output_field: Any = None,
        output_field_replace_token: Any = "",
        ice_field_replace_token: Any = "",
    ) -> Any:
        """The PromptList of the dialogue with every ``prompt_mm`` turned into its parts.

        ``output_field``, the replace tokens and the ICE are ignored (as in the reference).
        """
        if not self.check_mm_template():
            _LOG.warning(
                "Expected to get template with round and prompt_mm, but got %s", self.template
            )
        template = self.format_mm_url(self.template, entry)
        encoded = self._encode_template(template, ice=False)
        kwargs = _fallback._as_kwargs(entry)
        if isinstance(encoded, list):  # (a str has no `format_mm` in the reference)
            _fallback.check_kwarg_collision(kwargs, "self", "PromptList.format_mm")
        result = format_mm(encoded, kwargs, strict=self.strict, content_field=self.content_field)
        for i, item in enumerate(result):
            try:
                has_mm = "prompt_mm" in item
            except TypeError as exc:
                raise make_error(
                    PromptTypeError,
                    f"prompt[{i}] is of type {type(item).__name__}; prompt items must be str or "
                    f"dict ({exc})",
                    compat=TypeError,
                    path=f"prompt[{i}]",
                ) from exc
            if has_mm:  # a str item mentioning 'prompt_mm' fails here, as in the reference
                result[i]["prompt_mm"] = self.get_mm_template(item)
        return result

    def __repr__(self) -> str:
        return (
            f"MMPromptTemplate({{\n\ttemplate: {self.template},\n\tice_token: {self.ice_token}\n}})"
        )


def _round_items(template: Any) -> Any:
    try:
        return iter(template["round"])
    except KeyError as exc:
        raise make_error(
            TemplateError,
            f"a multimodal template needs a 'round' list (keys: {list(template)})",
            compat=KeyError,
            path="template['round']",
        ) from exc
    except TypeError as exc:
        raise make_error(
            PromptTypeError,
            f"a multimodal template must be a dict with a 'round' list, got "
            f"{type(template).__name__} ({exc})",
            compat=TypeError,
            path="template",
        ) from exc


def _keys(data: Any, k: int) -> Any:
    try:
        return data.keys()
    except AttributeError as exc:
        raise make_error(
            PromptTypeError,
            f"template['round'][{k}] is of type {type(data).__name__}; the round items of a "
            f"multimodal template must be role dicts ({exc})",
            compat=AttributeError,
            path=f"template['round'][{k}]",
        ) from exc


def _mm_dict_to_parts(value: Any) -> list[Any]:
    """The reference's unreachable ``{type: value}`` -> part list conversion (spec 03 §3.3 4.)."""
    res: list[Any] = []
    try:
        keys = list(value.keys())
    except AttributeError as exc:
        raise _part_error(exc, "'prompt_mm' must be a list or a dict", "prompt_mm") from exc
    for key in keys:
        if key not in _MM_TYPES:
            raise make_error(
                MultimodalContentError,
                "The keys in prompt_mm must be one of: text, image_url, video_url or audio_url, "
                f"but got {key}",
                path=f"prompt_mm[{key!r}]",
                code=_MM_KEY_CODE,
            )
        url = value[key]
        try:
            if url.startswith("[") and url.endswith("]"):  # mm_custom: several urls
                res.extend({"type": key, key: u} for u in ast.literal_eval(url))
                continue
        except (AttributeError, TypeError, ValueError, SyntaxError, MemoryError) as exc:
            raise _part_error(
                exc, f"cannot read the {key} value {url!r}", f"prompt_mm[{key!r}]"
            ) from exc
        res.append({"type": key, key: url})
    return res
