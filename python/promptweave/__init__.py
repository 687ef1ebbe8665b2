"""promptweave: the prompts OpenCompass and AISBench build, byte for byte, rendered in Rust.

The top-level classes are the OpenCompass 0.5.4 flavour; :mod:`promptweave.aisbench` has the
AISBench 3.1 flavour under the same names.
"""

from promptweave import aisbench, chat, errors, opencompass, promptlib, retrievers
from promptweave._core import __version__
from promptweave.chat_template import ChatTemplate
from promptweave.config import Config, load_config
from promptweave.dataset import DatasetRenderer, RenderResult
from promptweave.errors import (
    ArgumentError,
    ConfigError,
    IceTokenError,
    LabelError,
    MetaTemplateError,
    PromptRenderError,
    PromptTypeError,
    RetrieverError,
    TemplateError,
    TemplateStructureError,
    UnknownRoleError,
)
from promptweave.opencompass import (
    APITemplateParser,
    BaseRetriever,
    ChatInferencer,
    Dataset,
    FixKRetriever,
    IndexListRetriever,
    LMTemplateParser,
    PromptList,
    PromptTemplate,
    RandomRetriever,
    RawPromptTemplate,
    SlidingWindowRetriever,
    ZeroRetriever,
    multiround_generate,
    multiround_generate_batch,
    safe_format,
)

__all__ = [
    "APITemplateParser",
    "ArgumentError",
    "BaseRetriever",
    "ChatInferencer",
    "ChatTemplate",
    "Config",
    "ConfigError",
    "Dataset",
    "DatasetRenderer",
    "FixKRetriever",
    "IceTokenError",
    "IndexListRetriever",
    "LMTemplateParser",
    "LabelError",
    "MetaTemplateError",
    "PromptList",
    "PromptRenderError",
    "PromptTemplate",
    "PromptTypeError",
    "RandomRetriever",
    "RawPromptTemplate",
    "RenderResult",
    "RetrieverError",
    "SlidingWindowRetriever",
    "TemplateError",
    "TemplateStructureError",
    "UnknownRoleError",
    "ZeroRetriever",
    "__version__",
    "aisbench",
    "chat",
    "errors",
    "load_config",
    "multiround_generate",
    "multiround_generate_batch",
    "opencompass",
    "promptlib",
    "retrievers",
    "safe_format",
]
