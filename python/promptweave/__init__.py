"""promptweave: the prompts OpenCompass and AISBench build, byte for byte, rendered in Rust.

The top-level classes are the OpenCompass 0.5.4 flavour; :mod:`promptweave.aisbench` has the
AISBench 3.1 flavour under the same names.
"""

from promptweave import aisbench, errors, opencompass
from promptweave._core import __version__
from promptweave.errors import (
    ArgumentError,
    IceTokenError,
    LabelError,
    MetaTemplateError,
    PromptRenderError,
    PromptTypeError,
    TemplateError,
    TemplateStructureError,
    UnknownRoleError,
)
from promptweave.opencompass import (
    APITemplateParser,
    LMTemplateParser,
    PromptList,
    PromptTemplate,
    safe_format,
)

__all__ = [
    "APITemplateParser",
    "ArgumentError",
    "IceTokenError",
    "LMTemplateParser",
    "LabelError",
    "MetaTemplateError",
    "PromptList",
    "PromptRenderError",
    "PromptTemplate",
    "PromptTypeError",
    "TemplateError",
    "TemplateStructureError",
    "UnknownRoleError",
    "__version__",
    "aisbench",
    "errors",
    "opencompass",
    "safe_format",
]
