"""``LMTemplateParser`` and ``APITemplateParser``: the model side (meta templates).

Mirror ``opencompass.models.base.LMTemplateParser`` and
``opencompass.models.base_api.APITemplateParser`` (and their AISBench twins). Dispatch, argument
checks and warnings stay in Python; the walks over a prompt list run in Rust
(``_core.MetaTemplate``), with the pure-Python reference algorithm as the exact fallback.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from promptweave import _backend, _core, _fallback
from promptweave._flavor import AISBENCH, OPENCOMPASS
from promptweave.errors import ArgumentError, MetaTemplateError, PromptTypeError, make_error
from promptweave.prompt import PromptList

__all__ = ["APITemplateParser", "LMTemplateParser"]

_IGNORED_TEXT = "Non-empty string in prompt template will be ignored in API models."
_API_ROLES = frozenset({"system", "user", "assistant"})


def is_prompt_list(obj: object) -> bool:
    """Ours, or any framework's ``PromptList`` (a list subclass of that name)."""
    return isinstance(obj, PromptList) or (
        isinstance(obj, list) and type(obj).__name__ == "PromptList"
    )


class _BaseParser:
    _flavor: ClassVar[str] = OPENCOMPASS
    _prompt_list: ClassVar[type[PromptList]] = PromptList
    _api: ClassVar[bool] = False

    def __init__(self, meta_template: dict[str, Any] | list[Any] | None = None) -> None:
        self.meta_template = meta_template
        self.roles: dict[Any, dict[str, Any]] = {}
        self.eos_token_id = (
            meta_template.get("eos_token_id") if isinstance(meta_template, dict) else None
        )
        self._compiled: _core.MetaTemplate | None = None
        if meta_template:
            self._validate(meta_template)
            if isinstance(meta_template, dict):
                try:
                    self._compiled = _core.MetaTemplate(meta_template)
                except _core.FallbackRequired:
                    self._compiled = None
        self._install_fast_methods()

    def _install_fast_methods(self) -> None:
        """Make a Rust method this instance's ``parse_template``, so that a per-row call goes
        straight into Rust, without a Python frame: it returns a ``str`` prompt as it is and
        renders a ``PromptList`` of this flavour with the compiled meta template, as the class
        method does (API: not OpenCompass raw messages, and not when a text item is ignored,
        which the class method warns about), and hands everything else to the class method. A
        subclass that overrides ``parse_template`` keeps its override."""
        self.__dict__.pop("parse_template", None)
        parser_class = APITemplateParser if self._api else LMTemplateParser
        if getattr(type(self), "parse_template", None) is parser_class.parse_template:
            self.__dict__["parse_template"] = _core.ParseMethod(
                self, self._compiled, self._prompt_list, self._flavor if self._api else None
            ).parse_template

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in ("meta_template", "roles") and "_compiled" in self.__dict__:
            # The reference reads both on every call; one replaced after construction is read
            # the same way by the Python path (the compiled form was made from the old one).
            object.__setattr__(self, "_compiled", None)
            self._install_fast_methods()

    def __getstate__(self) -> dict[str, Any]:
        # the compiled meta template (and a Rust method installed on the instance) are made
        # anew from the meta template, as the constructor makes them
        return {"meta_template": self.meta_template}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["meta_template"])  # type: ignore[misc]

    # ------------------------------------------------------------------ validation
    def _code(self, code: str) -> str | None:
        return code if self._flavor == AISBENCH and self._api else None

    def _meta_error(
        self, message: str, compat: type[BaseException], code: str, path: str
    ) -> Exception:
        return make_error(
            MetaTemplateError, message, compat=compat, code=self._code(code), path=path
        )

    def _validate(self, meta: Any) -> None:
        if isinstance(meta, list) and self._api and self._flavor == OPENCOMPASS:
            if not all(isinstance(m, dict) and m.get("role") in _API_ROLES for m in meta):
                raise self._meta_error(
                    f"meta_template is {meta}, not a list of dicts with role system/user/assistant",
                    AssertionError,
                    "MODEL-PARAM-004",
                    "meta_template",
                )
            return
        if not isinstance(meta, dict):
            # the reference asserts `'round' in meta_template`, then indexes it with 'round':
            # a str or list that passes the test (or a value `in` refuses) is a TypeError
            try:
                passes = "round" in meta
            except TypeError:
                passes = True
            raise self._meta_error(
                f"the meta template must be a dict with 'round', currently is {meta!r}"
                if passes
                else f"round is required in meta template, currently is {meta}",
                TypeError if passes else AssertionError,
                "MODEL-PARAM-004",
                "meta_template",
            )
        if "round" not in meta:
            raise self._meta_error(
                f"round is required in meta template, currently is {meta}",
                AssertionError,
                "MODEL-PARAM-004",
                "meta_template",
            )
        keys = ["round"]
        if "reserved_roles" in meta:
            keys.append("reserved_roles")
        # both are checked to be lists before any role is read, as the reference does
        for key in keys:
            if not isinstance(meta[key], list):
                raise self._meta_error(
                    f"meta template {key!r} must be a list, currently is {meta[key]!r}",
                    AssertionError,
                    "MODEL-TYPE-004",
                    f"meta_template[{key!r}]",
                )
        for key in keys:
            for i, item in enumerate(meta[key]):
                self._add_role(key, i, item)

    def _add_role(self, key: str, i: int, item: Any) -> None:
        where = f"meta_template[{key!r}][{i}]"
        if not isinstance(item, (str, dict)):
            raise self._meta_error(
                f"{where} must be a str or a dict, currently is {item!r}",
                AssertionError,
                "MODEL-TYPE-004",
                where,
            )
        if isinstance(item, str):
            return
        if "role" not in item:
            raise make_error(
                MetaTemplateError, f"{where} has no 'role'", compat=KeyError, path=where
            )
        if item["role"] in self.roles:
            raise self._meta_error(
                f"role in meta prompt must be unique! ({item['role']!r} in {where})",
                AssertionError,
                "MODEL-PARAM-005",
                where,
            )
        self.roles[item["role"]] = item.copy()
        if not self._api:
            for edge in ("begin", "end"):
                if isinstance(item.get(edge, ""), list):
                    raise make_error(
                        MetaTemplateError,
                        f"{where}[{edge!r}]: a list of str|int special tokens as the begin or "
                        "end of a role is not supported",
                        compat=NotImplementedError,
                        path=f"{where}[{edge!r}]",
                    )

    # ------------------------------------------------------------------ dispatch
    def _check_input(self, prompt: Any) -> None:
        if not isinstance(prompt, (str, list, tuple)):
            raise make_error(
                PromptTypeError,
                "prompt_template must be a string, list of strings, PromptList, or tuple of "
                f"strings, but got {type(prompt)}",
                compat=AssertionError,
                code=self._code("MODEL-TYPE-002"),
            )

    def _check_mode(self, mode: Any) -> None:
        if mode not in ("ppl", "gen"):
            raise make_error(
                ArgumentError,
                f"mode must be 'gen' or 'ppl', got {mode!r}",
                compat=AssertionError,
                code=self._code("MODEL-TYPE-003"),
            )


class LMTemplateParser(_BaseParser):
    """Renders prompts for string-input (local) models: one ``str`` per prompt.

    Args:
        meta_template: the model's meta template (``round``, ``reserved_roles``, ``begin``,
            ``end``, ``eos_token_id``) or ``None``.
    """

    def parse_template(self, prompt_template: Any, mode: str) -> Any:
        """Render a str / PromptList (or a list/tuple of them) for ``mode`` 'gen' or 'ppl'."""
        if mode == "gen" or mode == "ppl":
            # the common cases first: a zero-shot str, a PromptList of this flavour
            kind = type(prompt_template)
            if kind is str:
                return prompt_template
            compiled = self._compiled
            if kind is self._prompt_list and compiled is not None and not _backend.FORCE_PYTHON:
                try:
                    return compiled.render_lm(prompt_template, mode == "gen")
                except _core.FallbackRequired:
                    # the checks below would pass and call the core again: straight to Python
                    _backend.note_fallback()
                    return _fallback.lm_parse(self, prompt_template, mode)
        self._check_input(prompt_template)
        if not isinstance(prompt_template, str) and not is_prompt_list(prompt_template):
            return [self.parse_template(p, mode=mode) for p in prompt_template]
        self._check_mode(mode)
        if isinstance(prompt_template, str):
            return prompt_template
        try:
            if _backend.FORCE_PYTHON:
                pass
            elif self._compiled is not None:
                return self._compiled.render_lm(prompt_template, mode == "gen")
            if not self.meta_template:
                return _core.join_plain(prompt_template)
        except _core.FallbackRequired:
            pass
        _backend.note_fallback()
        return _fallback.lm_parse(self, prompt_template, mode)


class APITemplateParser(_BaseParser):
    """Renders prompts for API (chat) models: a PromptList of ``{'role', 'prompt'}`` messages.

    Args:
        meta_template: the model's meta template (``api_role`` per role) or ``None``;
            OpenCompass also accepts a list of ``{'role', 'content'}`` prefix messages.
    """

    _api = True

    def _is_raw_messages(self, prompt: Any) -> bool:
        if self._flavor != OPENCOMPASS or not isinstance(prompt, list) or not prompt:
            return False
        try:
            # the reference tests keys of dicts and substrings of strings alike
            return all("role" in x and "content" in x for x in prompt)
        except TypeError as exc:
            raise make_error(
                PromptTypeError, f"prompt item of unsupported type: {exc}", compat=TypeError
            ) from exc

    def parse_template(self, prompt_template: Any, mode: str) -> Any:
        """Render a str / PromptList (or a list/tuple of them) for ``mode`` 'gen' or 'ppl'."""
        self._check_input(prompt_template)
        if self._is_raw_messages(prompt_template):
            return _fallback.api_raw_messages(self, prompt_template)
        if not isinstance(prompt_template, str) and not is_prompt_list(prompt_template):
            return [self.parse_template(p, mode=mode) for p in prompt_template]
        self._check_mode(mode)
        if isinstance(prompt_template, str):
            return prompt_template
        try:
            if _backend.FORCE_PYTHON:
                pass
            elif self._compiled is not None:
                items, ignored = self._compiled.render_api(
                    prompt_template, mode == "gen", self._flavor == AISBENCH
                )
                for _ in range(ignored):
                    warnings.warn(_IGNORED_TEXT, stacklevel=2)
                return self._prompt_list(items)
            if not self.meta_template:
                text = _core.join_plain(prompt_template)
                # AISBench returns the (here empty) multimodal part list when there is no text
                return [] if self._flavor == AISBENCH and not text else text
        except _core.FallbackRequired:
            pass
        _backend.note_fallback()
        return _fallback.api_parse(self, prompt_template, mode)
