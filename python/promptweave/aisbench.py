"""AISBench 3.1 flavour: the reference classes with AISBench's behaviour.

Differences from OpenCompass (spec 06 §A): ``str(PromptList)`` JSON-encodes role prompts, the API
parser requires every rendered role to have a prompt and has no raw-message path, an empty prompt
without a meta template gives ``[]``, and errors carry AISBench's error codes (``.error_code``,
prefixed to the message). Retrievers take their templates as configs in the constructor (no
``SlidingWindowRetriever``) and ``FixKRetriever`` rejects negative ids.
"""

from typing import ClassVar

from promptweave import prompt as _prompt
from promptweave import prompt_template as _prompt_template
from promptweave import retrievers as _retrievers
from promptweave import template_parser as _template_parser
from promptweave._flavor import AISBENCH
from promptweave.prompt import safe_format

__all__ = [
    "APITemplateParser",
    "BaseRetriever",
    "Dataset",
    "FixKRetriever",
    "IndexListRetriever",
    "LMTemplateParser",
    "PromptList",
    "PromptTemplate",
    "RandomRetriever",
    "ZeroRetriever",
    "safe_format",
]


class PromptList(_prompt.PromptList):
    """``PromptList`` with AISBench behaviour."""

    _flavor: ClassVar[str] = AISBENCH


class PromptTemplate(_prompt_template.PromptTemplate):
    """``PromptTemplate`` with AISBench behaviour."""

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
