"""AISBench 3.1 flavour: the reference classes with AISBench's behaviour.

Differences from OpenCompass (spec 06 §A): ``str(PromptList)`` JSON-encodes role prompts, the API
parser requires every rendered role to have a prompt and has no raw-message path, an empty prompt
without a meta template gives ``[]``, and errors carry AISBench's error codes (``.error_code``,
prefixed to the message).
"""

from typing import ClassVar

from promptweave import prompt as _prompt
from promptweave import prompt_template as _prompt_template
from promptweave import template_parser as _template_parser
from promptweave._flavor import AISBENCH
from promptweave.prompt import safe_format

__all__ = ["APITemplateParser", "LMTemplateParser", "PromptList", "PromptTemplate", "safe_format"]


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
