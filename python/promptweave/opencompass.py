"""OpenCompass 0.5.4 flavour: the reference classes with OpenCompass's behaviour.

The top-level ``promptweave`` names are these.
"""

from promptweave.prompt import PromptList, safe_format
from promptweave.prompt_template import PromptTemplate
from promptweave.template_parser import APITemplateParser, LMTemplateParser

__all__ = ["APITemplateParser", "LMTemplateParser", "PromptList", "PromptTemplate", "safe_format"]
