"""OpenCompass 0.5.4 flavour: the reference classes with OpenCompass's behaviour.

The top-level ``promptweave`` names are these.
"""

from promptweave import chat
from promptweave.chat_inferencer import ChatInferencer
from promptweave.multiround import multiround_generate, multiround_generate_batch
from promptweave.prompt import PromptList, safe_format
from promptweave.prompt_template import PromptTemplate
from promptweave.raw_prompt_template import RawPromptTemplate
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
    "ChatInferencer",
    "Dataset",
    "FixKRetriever",
    "IndexListRetriever",
    "LMTemplateParser",
    "PromptList",
    "PromptTemplate",
    "RandomRetriever",
    "RawPromptTemplate",
    "SlidingWindowRetriever",
    "ZeroRetriever",
    "chat",
    "multiround_generate",
    "multiround_generate_batch",
    "safe_format",
]
