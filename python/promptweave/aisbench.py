"""AISBench 3.1 flavour: the reference classes with AISBench's behaviour.

Differences from OpenCompass (spec 06 §A): ``str(PromptList)`` JSON-encodes role prompts, the API
parser requires every rendered role to have a prompt and has no raw-message path, an empty prompt
without a meta template gives ``[]``, and errors carry AISBench's error codes (``.error_code``,
prefixed to the message). Retrievers take their templates as configs in the constructor (no
``SlidingWindowRetriever``) and ``FixKRetriever`` rejects negative ids.

AISBench-only: ``MMPromptTemplate`` (multimodal ``prompt_mm`` parts from the ``<AIS_*>`` tagged
``content`` field, ``PromptList.format_mm``, ``is_mm_prompt``), ``MultiTurnPromptTemplate`` and
:func:`multiturn_requests`, the requests of ``MultiTurnGenInferencer`` per ``infer_mode``.
"""

from typing import Any, ClassVar

from promptweave import multimodal as _multimodal
from promptweave import multiturn as _multiturn
from promptweave import prompt as _prompt
from promptweave import prompt_template as _prompt_template
from promptweave import retrievers as _retrievers
from promptweave import template_parser as _template_parser
from promptweave._flavor import AISBENCH
from promptweave.multimodal import (
    AIS_AUDIO_START,
    AIS_CONTENT_TAG,
    AIS_IMAGE_START,
    AIS_TEXT_START,
    AIS_VIDEO_START,
    is_mm_prompt,
    parse_content,
    render_content,
)
from promptweave.multiturn import (
    INFER_MODES,
    MultiTurnRequest,
    get_round_index,
    multiturn_prompt_requests,
    multiturn_requests,
)
from promptweave.prompt import safe_format

__all__ = [
    "AIS_AUDIO_START",
    "AIS_CONTENT_TAG",
    "AIS_IMAGE_START",
    "AIS_TEXT_START",
    "AIS_VIDEO_START",
    "INFER_MODES",
    "APITemplateParser",
    "BasePromptTemplate",
    "BaseRetriever",
    "Dataset",
    "FixKRetriever",
    "IndexListRetriever",
    "LMTemplateParser",
    "MMPromptTemplate",
    "MultiTurnPromptTemplate",
    "MultiTurnRequest",
    "PromptList",
    "PromptTemplate",
    "RandomRetriever",
    "ZeroRetriever",
    "get_round_index",
    "is_mm_prompt",
    "multiturn_prompt_requests",
    "multiturn_requests",
    "parse_content",
    "render_content",
    "safe_format",
]


class PromptList(_prompt.PromptList):
    """``PromptList`` with AISBench behaviour (and ``format_mm``)."""

    _flavor: ClassVar[str] = AISBENCH

    def format_mm(self, **kwargs: Any) -> "PromptList":
        """Fill every ``prompt_mm`` item with the parts of ``kwargs['content']``; format str
        items with every key; copy other dicts unformatted (spec 03 §3.3)."""
        return _multimodal.format_mm(self, kwargs)


class BasePromptTemplate(_prompt_template.BasePromptTemplate):
    """``BasePromptTemplate`` (AISBench): construction checks only; ``generate_*`` raise."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_list: ClassVar[type[_prompt.PromptList]] = PromptList


class PromptTemplate(_prompt_template.PromptTemplate):
    """``PromptTemplate`` with AISBench behaviour."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_list: ClassVar[type[_prompt.PromptList]] = PromptList


class MMPromptTemplate(_multimodal.MMPromptTemplate):
    """``MMPromptTemplate`` (AISBench): ``prompt_mm`` parts from the row's tagged ``content``."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_list: ClassVar[type[_prompt.PromptList]] = PromptList


class MultiTurnPromptTemplate(_multiturn.MultiTurnPromptTemplate):
    """``MultiTurnPromptTemplate`` (AISBench): the round repeated per (question, answer)."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_list: ClassVar[type[_prompt.PromptList]] = PromptList


class LMTemplateParser(_template_parser.LMTemplateParser):
    """``LMTemplateParser`` with AISBench behaviour."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_list: ClassVar[type[_prompt.PromptList]] = PromptList


class APITemplateParser(_template_parser.APITemplateParser):
    """``APITemplateParser`` with AISBench behaviour."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_list: ClassVar[type[_prompt.PromptList]] = PromptList


class Dataset(_retrievers.Dataset):
    """``Dataset`` whose argument checks carry AISBench error codes."""

    _flavor: ClassVar[str] = AISBENCH


class BaseRetriever(_retrievers._AISBaseRetriever):
    """``BaseRetriever`` with AISBench behaviour: templates are configs given to the constructor
    (``dict(type=PromptTemplate, template=..., ice_token=...)``), methods take no templates."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_template = PromptTemplate


class ZeroRetriever(_retrievers._AISZeroRetriever):
    """``ZeroRetriever`` with AISBench behaviour (``ice_separator`` is a parameter)."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_template = PromptTemplate


class FixKRetriever(_retrievers._AISFixKRetriever):
    """``FixKRetriever`` with AISBench behaviour (negative ids are rejected)."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_template = PromptTemplate


class RandomRetriever(_retrievers._AISRandomRetriever):
    """``RandomRetriever`` with AISBench behaviour (same indices as OpenCompass)."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_template = PromptTemplate


class IndexListRetriever(_retrievers._AISIndexListRetriever):
    """Explicit per-row ICE index lists (promptweave addition), AISBench API."""

    _flavor: ClassVar[str] = AISBENCH
    _prompt_template = PromptTemplate
