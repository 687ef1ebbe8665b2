"""OpenCompass 0.5.4 flavour: the reference classes with OpenCompass's behaviour.

The top-level ``promptweave`` names are these.
"""

from promptweave.prompt import PromptList, safe_format
from promptweave.prompt_template import PromptTemplate
from promptweave.retrievers import (
    BaseRetriever,
    Dataset,
    FixKRetriever,
    IndexListRetriever,
    RandomRetriever,
    SlidingWindowRetriever,
    ZeroRetriever,
)
from promptweave.template_parser import APITemplateParser, LMTemplateParser

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
    "SlidingWindowRetriever",
    "ZeroRetriever",
    "safe_format",
]
