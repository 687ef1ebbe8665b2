"""``PromptTemplate``: mirrors ``opencompass.openicl.icl_prompt_template.PromptTemplate``.

The template is validated here (with the reference's checks, in the reference's order) and
compiled once into a Rust ``CompiledTemplate``; each ``generate_*`` call renders in Rust. Inputs
the core does not model (lone surrogates, non-str template items, unusual ICE values, every error
case) are rendered by the pure-Python reference algorithm in :mod:`promptweave._fallback`, which
raises the documented exception.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, ClassVar, Literal

from promptweave import _backend, _core, _fallback
from promptweave._flavor import AISBENCH, OPENCOMPASS
from promptweave.errors import IceTokenError, PromptTypeError, TemplateError, make_error
from promptweave.prompt import PromptList

__all__ = ["BasePromptTemplate", "PromptTemplate"]

Substitution = Literal["compat", "single_pass"]
_DIALOGUE_KEYS = ("begin", "round", "end")


class BasePromptTemplate:
    """What every dataset-side template shares: the constructor's checks (in the reference's
    order, with the reference's error codes) and the dialogue encoding.

    Mirrors AISBench's ``BasePromptTemplate``, the base of ``PromptTemplate``,
    ``MMPromptTemplate`` and ``MultiTurnPromptTemplate``; its ``generate_*`` methods raise.

    Args:
        template: the template (a str or a dict).
        ice_token: where in-context examples go (``'</E>'``), or ``None``.
        sep_token: a token deleted from prompts, or ``None``.
    """

    _flavor: ClassVar[str] = OPENCOMPASS
    _prompt_list: ClassVar[type[PromptList]] = PromptList

    def __init__(
        self,
        template: dict[Any, Any] | str,
        ice_token: str | None = None,
        sep_token: str | None = None,
    ) -> None:
        self.template = template
        self._validate_types(ice_token, sep_token)
        self.ice_token = ice_token
        self.sep_token = sep_token
        self.prompt_type = "origin"
        self._check_template_legacy()

    # ------------------------------------------------------------------ construction
    def _code(self, code: str) -> str | None:
        return code if self._flavor == AISBENCH else None

    def _validate_types(self, ice_token: object, sep_token: object) -> None:
        if not isinstance(self.template, (str, dict)):
            raise make_error(
                PromptTypeError,
                f"Prompt template must be a str or a dict, but got {type(self.template)}",
                compat=AssertionError,
                path="template",
                code=self._code("ICLR-TYPE-001"),
            )
        for name, token in (("ice_token", ice_token), ("sep_token", sep_token)):
            if token is not None and not isinstance(token, str):
                raise make_error(
                    PromptTypeError,
                    f"{name}: Expected an object in [None, 'str'] type, but got "
                    f"{type(token).__name__}: {token!r}",
                    compat=TypeError,
                    path=name,
                    code=self._code("UTILS-TYPE-001"),
                )

    def _check_template_legacy(self) -> None:
        tok = self.ice_token
        if isinstance(self.template, dict):
            n = sum(key in self.template for key in _DIALOGUE_KEYS)
            self.prompt_type = "meta" if n == len(self.template) else "origin"
            for key, value in self.template.items():
                if not isinstance(value, (str, list, dict)):
                    raise make_error(
                        PromptTypeError,
                        "dictionary of template expects a str, list or a dict, but got "
                        f"{type(value)}, value: {value!r} (template[{key!r}])",
                        compat=TypeError,
                        path=f"template[{key!r}]",
                        code=self._code("ICLR-TYPE-002"),
                    )
                if isinstance(value, str) and tok and tok not in value:
                    raise self._missing_token(value, f"template[{key!r}]")
        elif tok and tok not in self.template:
            raise self._missing_token(self.template, "template")

    def _missing_token(self, text: str, path: str) -> Exception:
        return make_error(
            IceTokenError,
            f"ice_token {self.ice_token!r} not found in {path}: {text!r}",
            path=path,
            code=self._code("ICLR-PARAM-001"),
        )

    # ------------------------------------------------------------------ rendering
    def _not_implemented(self) -> Exception:
        return make_error(
            TemplateError,
            f"{type(self).__name__} does not supported to be called in base classes",
            compat=NotImplementedError,
            code=self._code("ICLR-UNK-001"),
        )

    def generate_ice_item(self, entry: Mapping[str, Any], label: Hashable) -> Any:
        """Not available on this template class (as in the reference)."""
        raise self._not_implemented()

    def generate_label_prompt_item(
        self,
        entry: Mapping[str, Any],
        ice: Any,
        label: Hashable,
        remain_sep: bool | None = False,
    ) -> Any:
        """Not available on this template class (as in the reference)."""
        raise self._not_implemented()

    def generate_item(
        self,
        entry: Mapping[str, Any],
        output_field: Hashable | None = None,
        output_field_replace_token: Any = "",
        ice_field_replace_token: Any = "",
    ) -> Any:
        """Not available on this template class (as in the reference)."""
        raise self._not_implemented()

    def _encode_template(self, prompt_template: Any, ice: bool) -> Any:
        """The reference's dialogue encoding (section markers included)."""
        if isinstance(prompt_template, str):
            return prompt_template
        return _fallback.encode_dialogue(prompt_template, ice, self._prompt_list)

    def __repr__(self) -> str:
        return (
            f"BasePromptTemplate({{\n\ttemplate: {self.template},\n\t"
            f"ice_token: {self.ice_token}\n}})"
        )


class PromptTemplate(BasePromptTemplate):
    """A dataset-side prompt template: a string, a dialogue (``begin``/``round``/``end``) or a
    label dict (label -> string or dialogue, for perplexity scoring).

    Args:
        template: the template.
        ice_token: where in-context examples go (``'</E>'``), or ``None``.
        sep_token: a token deleted from prompts (kept in PPL prompts with ``remain_sep``).
        substitution: ``'compat'`` (default) reproduces the reference byte for byte, including
            its order-dependent sequential substitution and the re-formatting of in-context
            examples with the test row; ``'single_pass'`` substitutes the template in one scan
            (values are never rescanned) and inserts in-context examples after substitution.
    """

    def __init__(
        self,
        template: dict[Any, Any] | str,
        ice_token: str | None = None,
        sep_token: str | None = None,
        *,
        substitution: Substitution = "compat",
    ) -> None:
        self.template = template
        self._validate_types(ice_token, sep_token)
        if substitution not in ("compat", "single_pass"):
            raise ValueError(
                f"substitution must be 'compat' or 'single_pass', got {substitution!r}"
            )
        self.ice_token = ice_token
        self.sep_token = sep_token
        self.substitution: Substitution = substitution
        self.prompt_type = "origin"
        self._check_template_legacy()
        self._compile()

    #: the attributes the compiled template is made from: setting one after construction
    #: compiles the template again (the reference reads them at every call)
    _COMPILED_FROM: ClassVar[frozenset[str]] = frozenset(
        {"template", "ice_token", "sep_token", "substitution", "prompt_type"}
    )

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in self._COMPILED_FROM and "_compiled" in self.__dict__:
            self._recompile()

    def _current(self) -> _core.CompiledTemplate | None:
        """The compiled template, compiled again first when the template's dicts or lists were
        changed in place since (the reference reads its template at every call)."""
        compiled = self._compiled
        if compiled is not None and not compiled.unchanged():
            self._recompile()
            compiled = self._compiled
        return compiled

    def _recompile(self) -> None:
        """Compile the template again from its attributes; one the core cannot take is left
        to the pure-Python path (which raises the reference's error when it is used)."""
        try:
            self._compile()
        except Exception:
            object.__setattr__(self, "_compiled", None)
            self._install_fast_methods()

    def _install_fast_methods(self) -> None:
        """Make Rust methods this instance's ``generate_item`` and ``generate_ice_item``, so
        that a per-row call goes straight into Rust, without a Python frame: they render with
        the compiled template and hand what it does not model to the Python methods below. A
        subclass that overrides one keeps its override."""
        names = ("generate_item", "generate_ice_item", "generate_label_prompt_item")
        for name in names:
            self.__dict__.pop(name, None)
        if self._compiled is None:
            return
        methods = _core.TemplateMethods(self, self._compiled)
        cls = type(self)
        for name in names:
            if getattr(cls, name) is getattr(PromptTemplate, name):
                self.__dict__[name] = getattr(methods, name)

    def _compile(self) -> None:
        self._labels: dict[Hashable, int] = {}
        if isinstance(self.template, dict) and self.prompt_type == "origin":
            self._labels = {label: i for i, label in enumerate(self.template)}
        try:
            self._compiled: _core.CompiledTemplate | None = _core.CompiledTemplate(
                self.template,
                self.prompt_type == "meta",
                self.ice_token,
                self.sep_token,
                self.substitution == "single_pass",
                self._prompt_list,
                self._labels or None,
            )
        except (_core.FallbackRequired, UnicodeEncodeError):
            # (a token with a lone surrogate has no UTF-8 form: the pure-Python path renders it)
            self._compiled = None
        self._install_fast_methods()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "ice_token": self.ice_token,
            "sep_token": self.sep_token,
            "substitution": self.substitution,
            "prompt_type": self.prompt_type,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "prompt_type" not in state:  # pickled by an earlier version
            self.__init__(  # type: ignore[misc]
                state["template"],
                state["ice_token"],
                state["sep_token"],
                substitution=state["substitution"],
            )
            return
        # the attributes as they are (set after construction, too: not checked again, as a
        # copy of the reference's template is not), then compiled
        for name in ("template", "ice_token", "sep_token", "substitution", "prompt_type"):
            object.__setattr__(self, name, state[name])
        self._recompile()

    # ------------------------------------------------------------------ rendering
    # Each method tries the Rust core (which resolves the label, renders and returns the
    # flavour's PromptList); inputs it does not model raise FallbackRequired and are rendered
    # by the pure-Python reference algorithm, which also raises the reference's errors.

    def _label_index(self, label: Any) -> int | None:
        """The body index for ``label`` (``None``: not one of a label dict's labels)."""
        if not self._labels:
            return 0
        try:
            return self._labels[label]
        except (KeyError, TypeError):
            return None

    def generate_ice_item(self, entry: Mapping[str, Any], label: Hashable) -> Any:
        """Render one in-context example from ``entry`` (its own answer included)."""
        compiled = self._current()
        if compiled is not None and not _backend.FORCE_PYTHON:
            try:
                return compiled.ice_item(entry, label)
            except _core.FallbackRequired:
                pass
        return self._generate_ice_item_python(entry, label)

    def _generate_ice_item_python(self, entry: Mapping[str, Any], label: Hashable) -> Any:
        _backend.note_fallback()
        return _fallback.generate_ice_item(self, entry, label)

    def generate_label_prompt_item(
        self,
        entry: Mapping[str, Any],
        ice: Any,
        label: Hashable,
        remain_sep: bool | None = False,
    ) -> Any:
        """Render the perplexity prompt of ``label`` for ``entry`` with ``ice`` spliced in."""
        compiled = self._current()
        if compiled is not None and not _backend.FORCE_PYTHON:
            try:
                return compiled.label_prompt_item(entry, ice, label, bool(remain_sep))
            except _core.FallbackRequired:
                pass
        return self._generate_label_prompt_item_python(entry, ice, label, remain_sep)

    def _generate_label_prompt_item_python(
        self, entry: Mapping[str, Any], ice: Any, label: Hashable, remain_sep: bool | None
    ) -> Any:
        _backend.note_fallback()
        return _fallback.generate_label_prompt_item(self, entry, ice, label, remain_sep)

    def generate_item(
        self,
        entry: Mapping[str, Any],
        output_field: Hashable | None = None,
        output_field_replace_token: Any = "",
        ice_field_replace_token: Any = "",
    ) -> Any:
        """Render the generation prompt for ``entry``, the output column masked."""
        compiled = self._current()
        if compiled is not None and not _backend.FORCE_PYTHON:
            try:
                return compiled.item(
                    entry, output_field, output_field_replace_token, ice_field_replace_token
                )
            except _core.FallbackRequired:
                pass
        return self._generate_item_python(
            entry, output_field, output_field_replace_token, ice_field_replace_token
        )

    def _generate_item_python(
        self,
        entry: Mapping[str, Any],
        output_field: Hashable | None,
        output_field_replace_token: Any,
        ice_field_replace_token: Any,
    ) -> Any:
        _backend.note_fallback()
        return _fallback.generate_item(
            self, entry, output_field, output_field_replace_token, ice_field_replace_token
        )

    def __repr__(self) -> str:
        return (
            f"PromptTemplate({{\n\ttemplate: {self.template},\n\tice_token: {self.ice_token}\n}})"
        )
