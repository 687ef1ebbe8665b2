"""The ``<AIS_*>`` tag grammar of AISBench's multimodal ``content`` field (spec 03 §3.2).

An AISBench multimodal row carries its parts in one string, e.g.
``<AIS_IMAGE_START>a.jpg<AIS_CONTENT_TAG><AIS_TEXT_START>What?<AIS_CONTENT_TAG>``.
:func:`parse_content` runs the Rust core's one-scan parser (``_core.parse_content``); the
pure-Python reference algorithm (``str.split`` / ``startswith`` / ``str.replace``) takes what Rust
cannot (lone surrogates, non-str content) and runs under ``FORCE_PYTHON``. The strict grammar and
its messages are the same in both paths (``tests/test_multimodal.py`` checks it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NoReturn

from promptweave import _backend, _core
from promptweave.errors import MultimodalContentError, make_error

__all__ = [
    "AIS_AUDIO_START",
    "AIS_CONTENT_TAG",
    "AIS_IMAGE_START",
    "AIS_TEXT_START",
    "AIS_VIDEO_START",
    "START_TAGS",
    "parse_content",
    "render_content",
]

AIS_TEXT_START = "<AIS_TEXT_START>"
AIS_IMAGE_START = "<AIS_IMAGE_START>"
AIS_VIDEO_START = "<AIS_VIDEO_START>"
AIS_AUDIO_START = "<AIS_AUDIO_START>"
AIS_CONTENT_TAG = "<AIS_CONTENT_TAG>"

#: part kind (the ``prompt_mm`` key) -> start tag, in the order the reference tests them
START_TAGS: dict[str, str] = {
    "text": AIS_TEXT_START,
    "image": AIS_IMAGE_START,
    "video": AIS_VIDEO_START,
    "audio": AIS_AUDIO_START,
}
_UNKNOWN_TAG = re.compile(r"<AIS_[A-Za-z0-9_]*>")


def parse_content(content: str, *, strict: bool = False) -> list[tuple[str, str]]:
    """The parts of an AISBench ``content`` string as ``(kind, payload)``, in content order.

    ``kind`` is ``'text'``, ``'image'``, ``'video'`` or ``'audio'``. Compat (default): exactly
    what ``format_mm`` extracts -- segments between ``<AIS_CONTENT_TAG>`` terminators that start
    with a start tag, minus every further occurrence of that tag; anything else is dropped.
    ``strict``: only ``START payload <AIS_CONTENT_TAG>`` (repeated, non-empty payloads without
    tags) is accepted, otherwise :class:`MultimodalContentError` (``.tag``, ``.position``).
    """
    if type(content) is str and not _backend.FORCE_PYTHON:
        try:
            return _core.parse_content(content, strict)
        except _core.FallbackRequired:
            pass
        except _core.MarkerError as exc:
            message, tag, position = exc.args
            raise _content_error(message, tag, position) from None
    _backend.note_fallback()
    return _py_parse_strict(content) if strict else _py_parse(content)


def render_content(parts: list[tuple[str, str]]) -> str:
    """The canonical content string of ``(kind, payload)`` parts (the inverse of
    :func:`parse_content` for payloads without tags)."""
    out: list[str] = []
    for kind, payload in parts:
        if kind not in START_TAGS:
            raise make_error(
                MultimodalContentError,
                f"unknown part kind {kind!r}; kinds are {list(START_TAGS)}",
                compat=KeyError,
            )
        out.append(f"{START_TAGS[kind]}{payload}{AIS_CONTENT_TAG}")
    return "".join(out)


def _py_parse(content: Any) -> list[tuple[str, str]]:
    """The reference algorithm, literally (also for non-str ``content``, which fails alike)."""
    try:
        segments = content.split(AIS_CONTENT_TAG)
    except (AttributeError, TypeError) as exc:
        raise make_error(
            MultimodalContentError,
            f"the 'content' field must be a str of <AIS_*> tagged segments, got "
            f"{type(content).__name__} ({exc})",
            compat=type(exc),
            path="content",
        ) from exc
    parts: list[tuple[str, str]] = []
    for segment in segments:
        for kind, tag in START_TAGS.items():
            if segment.startswith(tag):
                parts.append((kind, segment.replace(tag, "")))
                break
    return parts


def _content_error(message: str, tag: str | None, position: int) -> MultimodalContentError:
    err = MultimodalContentError(message)
    err.path = "content"
    err.tag = tag
    err.position = position
    return err


def _py_tags(content: str) -> Iterator[tuple[int, str | None, int]]:
    """``(position, kind or 'end' or None for an unknown tag, length)`` of every tag."""
    at = content.find("<AIS_")
    while at >= 0:
        if content.startswith(AIS_CONTENT_TAG, at):
            yield at, "end", len(AIS_CONTENT_TAG)
        else:
            kind = next((k for k, t in START_TAGS.items() if content.startswith(t, at)), None)
            if kind is not None:
                yield at, kind, len(START_TAGS[kind])
            else:
                m = _UNKNOWN_TAG.match(content, at)
                if m:
                    yield at, None, m.end() - at
        at = content.find("<AIS_", at + 1)


def _py_parse_strict(content: Any) -> list[tuple[str, str]]:
    """Strict parsing; the same scan and messages as the Rust core's ``parse_content_strict``."""
    if not isinstance(content, str):
        _py_parse(content)  # raises the reference's error for a non-str content
    parts: list[tuple[str, str]] = []
    start = 0
    opened: tuple[str, int, int] | None = None  # kind, tag position, payload start
    for at, kind, length in _py_tags(content):
        if opened is None:
            if at > start:
                _fail_untagged(start)
            if kind == "end":
                raise _content_error(
                    f"multimodal tag '{AIS_CONTENT_TAG}' at character {at} closes no segment",
                    AIS_CONTENT_TAG,
                    at,
                )
            if kind is None:
                _fail_unknown(content[at : at + length], at)
            opened = (kind, at, at + length)
            continue
        own, tag_at, cursor = opened
        if kind == "end":
            if at == cursor:
                tag = START_TAGS[own]
                raise _content_error(
                    f"multimodal tag '{tag}' at character {tag_at} has an empty payload",
                    tag,
                    tag_at,
                )
            parts.append((own, content[cursor:at]))
            start = at + length
            opened = None
        elif kind is None:
            _fail_unknown(content[at : at + length], at)
        else:
            tag = START_TAGS[kind]
            raise _content_error(
                f"multimodal tag '{tag}' at character {at} is inside another segment's payload",
                tag,
                at,
            )
    if opened is not None:
        tag = START_TAGS[opened[0]]
        raise _content_error(
            f"multimodal tag '{tag}' at character {opened[1]} is not closed by '{AIS_CONTENT_TAG}'",
            tag,
            opened[1],
        )
    if start < len(content):
        _fail_untagged(start)
    return parts


def _fail_untagged(position: int) -> NoReturn:
    raise _content_error(
        f"text at character {position} is outside any tagged segment (a segment starts with "
        "<AIS_TEXT_START>, <AIS_IMAGE_START>, <AIS_VIDEO_START> or <AIS_AUDIO_START>)",
        None,
        position,
    )


def _fail_unknown(tag: str, position: int) -> NoReturn:
    raise _content_error(f"unknown multimodal tag '{tag}' at character {position}", tag, position)
