"""Stub of the Rust extension module (hand-written; checked with mypy.stubtest)."""

from collections.abc import Callable
from typing import Any, final

__version__: str

class FallbackRequired(Exception):
    """The Rust core cannot render this input; the pure-Python path must."""

class MarkerError(ValueError):
    """A strict multimodal content string is malformed.

    ``args`` is ``(message, tag or None, character position)``.
    """

def _set_force_python(on: bool) -> None:
    """The core's copy of ``promptweave._backend.FORCE_PYTHON`` (set by that module)."""

def _promote_young() -> bool:
    """Moves every object the cyclic collector tracks to its oldest generation (``gc.freeze()``
    then ``gc.unfreeze()``, with nothing run between them); ``False``, moving nothing, when
    objects are frozen already."""

def parse_content(content: str, strict: bool = False) -> list[tuple[str, str]]:
    """The ``<AIS_*>`` parts of ``content`` as ``(kind, payload)``, kind ``'text'``,
    ``'image'``, ``'video'`` or ``'audio'``; ``strict`` raises ``MarkerError`` for anything but
    ``START payload <AIS_CONTENT_TAG>`` repeated. Raises ``FallbackRequired`` for lone surrogates.
    """

def safe_format(template: str, entry: dict[str, Any]) -> str:
    """``safe_format`` with the reference's sequential semantics (one-scan fast path inside)."""

def single_pass_format(template: str, entry: dict[str, Any]) -> str:
    """Injection-free single-scan substitution."""

def concat_prompts(items: list[Any], json_prompts: bool = False) -> str:
    """``str(PromptList)``: str items and dict items' ``prompt`` (``json_prompts``: each as
    ``json.dumps`` writes it, as AISBench does), concatenated."""

def format_prompt_list(items: list[Any], entry: dict[str, Any]) -> list[Any]:
    """``PromptList.format(**entry)`` for plain items and values, as a list of the new items."""

def join_plain(items: list[Any]) -> str:
    """The no-meta-template newline join of a prompt list."""

@final
class CompiledTemplate:
    """A compiled prompt template (string, dialogue or label dict)."""

    def __new__(
        cls,
        template: Any,
        is_meta: bool,
        ice_token: str | None,
        sep_token: str | None,
        single_pass: bool,
        prompt_list: type[list[Any]] | None = None,
        labels: dict[Any, int] | None = None,
    ) -> CompiledTemplate: ...
    def unchanged(self) -> bool:
        """Whether the template's dicts and lists still hold what they held when it was
        compiled."""
    def ice_item(self, entry: Any, label: Any) -> Any:
        """``generate_ice_item`` (remembered per row identity)."""
    def label_prompt_item(self, entry: Any, ice: Any, label: Any, remain_sep: bool) -> Any:
        """``generate_label_prompt_item``."""
    def item(
        self,
        entry: Any,
        output_field: Any | None,
        output_field_replace_token: Any,
        ice: Any,
    ) -> Any:
        """``generate_item``."""

@final
class MetaTemplate:
    """A compiled model meta template."""

    def __new__(cls, meta: dict[str, Any]) -> MetaTemplate: ...
    def render_lm(self, prompt: list[Any], gen_mode: bool) -> str:
        """The LM walk."""
    def render_api(
        self, prompt: list[Any], gen_mode: bool, aisbench: bool
    ) -> tuple[list[Any], int]:
        """The API walk: messages (meta begin first when truthy) and the ignored-text count."""

@final
class ParseMethod:
    """``parse_template`` of an ``LMTemplateParser`` (``api=None``) or an ``APITemplateParser``
    (``api='opencompass'``/``'aisbench'``) for a ``str`` or a ``PromptList`` of the parser's
    flavour, installed on the parser as its own method; other inputs go to the class method."""

    def __new__(
        cls,
        parser: Any,
        meta: MetaTemplate | None,
        prompt_list: type[Any],
        api: str | None = None,
    ) -> ParseMethod: ...
    def parse_template(self, prompt_template: Any, mode: Any) -> Any: ...

@final
class TemplateMethods:
    """``PromptTemplate.generate_item`` / ``generate_ice_item`` / ``generate_label_prompt_item``
    rendered by a compiled template, installed on the template as its own methods; what the
    core does not model goes to the template's ``_generate_item_python`` /
    ``_generate_ice_item_python`` / ``_generate_label_prompt_item_python``."""

    def __new__(cls, template: Any, compiled: CompiledTemplate) -> TemplateMethods: ...
    def generate_item(
        self,
        entry: Any,
        output_field: Any = None,
        output_field_replace_token: Any = "",
        ice_field_replace_token: Any = "",
    ) -> Any: ...
    def generate_ice_item(self, entry: Any, label: Any) -> Any: ...
    def generate_label_prompt_item(
        self, entry: Any, ice: Any, label: Any, remain_sep: Any = False
    ) -> Any: ...

def render_dataset(
    template: CompiledTemplate,
    ice_template: CompiledTemplate | None,
    ice_labels: list[int],
    ice_separator: str,
    ice_eos_token: str,
    output_column: str | None,
    gen_field_replace_token: str,
    meta: MetaTemplate | None,
    api: bool,
    aisbench: bool,
    test_rows: list[dict[str, Any]],
    train_rows: list[dict[str, Any]],
    ice_indices: list[Any],
    ppl_labels: list[int] | None,
    ppl_label_objects: list[Any] | None,
    remain_sep: bool,
    prompt_list: type[Any] | None,
    threads: int,
) -> list[Any]:
    """Render every test row: one output per row (a dict label -> output in ppl mode)."""

@final
class CompiledChatTemplate:
    """A HuggingFace chat template compiled by the Rust core (transformers' semantics)."""

    def __new__(
        cls,
        source: str,
        plain_hook: Any | None = None,
        fast: bool = True,
        keep_none: bool = False,
        alias_reasoning: bool = True,
    ) -> CompiledChatTemplate: ...
    @property
    def source(self) -> str: ...
    @property
    def fast_path(self) -> bool:
        """Whether plain conversations can take the fast path (same output, fewer steps)."""
    def fast_render(self, messages: Any, variables: Any, add_generation_prompt: bool) -> str | None:
        """The fast path alone: ``None`` when the input is not plain or it gave up."""
    def render(
        self,
        messages: Any,
        variables: Any,
        add_generation_prompt: bool,
        continue_final: str | None = None,
    ) -> str: ...
    def render_many(
        self,
        conversations: Any,
        variables: Any,
        add_generation_prompt: bool,
        continue_final: str | None = None,
        threads: int | None = None,
    ) -> list[str]: ...

def render_raw_rows(
    rows: list[Any],
    indices: list[Any],
    shape_of: Callable[[Any], Any],
    required: list[str] | None = None,
) -> tuple[list[list[dict[str, Any]]], bool] | None:
    """``RawPromptTemplate`` rows for an API parser: per row the messages of
    ``shape_of(indices[i])`` copied, slot contents formatted with the row; and whether every
    row was seen to have every ``required`` column."""

def render_mm_rows(
    rows: list[dict[str, Any]],
    content_field: str,
    strict: bool,
    kinds: dict[str, tuple[dict[str, Any], str, bool, str]],
    skeleton: list[tuple[dict[str, Any], str | None]],
    wrap: Any | None = None,
) -> list[Any]:
    """Per ``MMPromptTemplate`` row, the API parser's messages around the row's content parts."""
