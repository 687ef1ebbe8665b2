"""Model-side chat templates: HuggingFace tokenizer chat templates rendered in Rust.

:class:`ChatTemplate` compiles the Jinja chat template of a model once (from a string, a
``tokenizer_config.json`` or a ``chat_template.jinja`` file) and renders conversations to the
string that transformers' ``tokenizer.apply_chat_template(..., tokenize=False)`` returns for the
same inputs: the same sandbox rules, whitespace handling (``trim_blocks``/``lstrip_blocks``),
``tojson`` (``json.dumps`` with ``ensure_ascii=False``), ``raise_exception``, ``strftime_now``,
``{% generation %}`` blocks, loop controls, Python string/list/dict methods, and transformers'
handling of the inputs (keys whose value is ``None`` are dropped, reasoning-field aliases,
``continue_final_message``, named templates with a ``tool_use`` variant).

transformers' handling of the messages changed twice: 5.21 started copying a message's reasoning
text between its names (``reasoning_content``, ``thinking``, ``reasoning``), and 5.23 started
dropping a message key whose value is ``None`` (OpenAI-style ``{"role": "assistant", "content":
None, "tool_calls": [...]}``) so that the template finds it undefined, where earlier versions
pass the ``None`` on (``{{ message.content }}`` prints ``None``). By default promptweave renders
as 5.23 and later; ``transformers_version='4.57.6'`` (any version string) renders as that
version does.

Guard rails (both off by default except the BOS warning, which only fires when the tokenizer is
known to add a BOS token itself):

* ``double_bos``: the rendered chat starts with the BOS token and the caller's tokenizer adds
  another when encoding (``add_bos_token`` in ``tokenizer_config.json``, or the
  ``tokenizer_adds_bos`` argument): ``'warn'`` (default, :class:`DoubleBosWarning`),
  ``'error'`` (:class:`DoubleBosError`) or ``'ignore'``.
* ``system``: ``'keep'`` (default, as transformers), ``'merge'`` (a leading system message is
  folded into the first user message, separated by ``system_separator``) or ``'auto'`` (keep,
  and merge only when the template raises an exception for the conversation as given).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from promptweave._core import CompiledChatTemplate
from promptweave.errors import (
    ArgumentError,
    ChatInputError,
    ChatTemplateError,
    ChatTemplateRaised,
    ConfigError,
    DoubleBosError,
    DoubleBosWarning,
    check_threads,
)

__all__ = ["ChatTemplate", "special_tokens_of"]

#: the named special tokens transformers passes to every chat template (``special_tokens_map``)
SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)

DoubleBos = Literal["warn", "error", "ignore"]
SystemHandling = Literal["keep", "merge", "auto"]

#: the transformers versions whose message handling changed (see the module documentation)
_ALIASES_REASONING_SINCE = (5, 21)
_DROPS_NONE_SINCE = (5, 23)


def _version_tuple(version: str) -> tuple[int, ...]:
    """``'4.57.6'`` -> ``(4, 57, 6)``; ``'5.24.0.dev0'`` -> ``(5, 24, 0)``."""
    numbers = re.match(r"\s*(\d+(?:\.\d+)*)", str(version))
    if numbers is None:
        raise ArgumentError(
            f"transformers_version must be a version string such as '4.57.6', got {version!r}"
        )
    return tuple(int(n) for n in numbers.group(1).split("."))


def _read_template(path: str) -> str:
    """The text of a template file (a ``ConfigError`` naming it when it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read chat template: {exc}") from exc


#: conversation types that are their own messages (no ``.messages`` to look up)
_SEQUENCES = (list, tuple)


def _plain(value: Any) -> Any:
    """transformers' ``_plain_template_data`` for the objects the Rust converter does not take
    directly (subclasses of str/int/float, mappings, dataclasses, pydantic models, numpy
    scalars); anything else becomes the placeholder ``"<TypeName>"``."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return dict(value.items())
    if isinstance(value, list):
        return list(value)
    if isinstance(value, tuple):
        return tuple(value)
    numpy = sys.modules.get("numpy")  # (no numpy object exists unless numpy was imported)
    if numpy is not None and isinstance(value, numpy.generic):
        # a numpy scalar; an array is not one: it becomes the placeholder "<ndarray>"
        return value.item()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump()
    return f"<{type(value).__name__}>"


#: lone surrogates (code points with no UTF-8 form) and their stand-ins in the Rust engine:
#: plane 15's private use code points U+F0000..U+F07FF, one per surrogate, in order
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_STAND_IN = re.compile("[\U000f0000-\U000f07ff]")
_SHIFT = 0xF0000 - 0xD800


def _to_stand_in(m: re.Match[str]) -> str:
    return chr(ord(m.group()) + _SHIFT)


def _from_stand_in(m: re.Match[str]) -> str:
    return chr(ord(m.group()) - _SHIFT)


#: a stand-in as Python's ``repr`` writes it (``\U000f003d``; ``\U000F003D`` after ``upper``),
#: which is how a surrogate's (``\ud83d``, ``\UD83D``) must read
_STAND_IN_REPR = re.compile(r"\\U000([fF])0([0-7][0-9a-fA-F]{2})")


def _surrogate_repr(m: re.Match[str]) -> str:
    code = 0xD800 + int(m.group(2), 16)
    return f"\\u{code:04x}" if m.group(1) == "f" else f"\\U{code:04X}"


#: deeper than this the Rust converter refuses the input (and reports it)
_MAX_DEPTH = 200


class _Surrogates:
    """Inputs with lone surrogates made renderable, and the outputs made right again.

    Python text may hold lone surrogates (``"\\ud800"``, from a broken JSON escape, say);
    Jinja2 renders them like any character, but they have no UTF-8 form, so the Rust engine
    cannot hold them. Each is replaced by a stand-in, a private use character of plane 15, one
    per surrogate (which, like a surrogate, is one character that no filter changes); after
    rendering the stand-ins are replaced back. That is only sound when the input and the
    template had no such private use character already: ``clash`` is then set.

    The values are copied the way the Rust converter reads them: exact ``dict``/``list``/
    ``tuple`` copied with their text replaced, other objects made plain data by the
    converter's hook (``_plain``) first, and inside what the hook gives, any other object is
    its ``"<TypeName>"`` placeholder.
    """

    def __init__(self) -> None:
        self.escaped = False
        self.clash = False

    def text(self, s: str) -> str:
        if _STAND_IN_REPR.search(s) is not None:
            self.clash = True
        if s.isascii():
            return s
        if _STAND_IN.search(s) is not None:
            self.clash = True
        if _LONE_SURROGATE.search(s) is None:
            return s
        self.escaped = True
        # (a regular expression replaces the few surrogates; str.translate would visit every
        # character in Python code)
        return _LONE_SURROGATE.sub(_to_stand_in, s)

    def value(self, obj: Any, depth: int = 0, hook: bool = True) -> Any:
        kind = type(obj)
        if kind is str:
            return self.text(obj)
        if obj is None or kind in (bool, int, float):
            return obj
        if depth > _MAX_DEPTH:
            return obj  # the converter refuses it, naming the depth
        if kind is dict:
            return {
                self.value(k, depth + 1, hook): self.value(v, depth + 1, hook)
                for k, v in obj.items()
            }
        if kind is list:
            return [self.value(x, depth + 1, hook) for x in obj]
        if kind is tuple:
            return tuple(self.value(x, depth + 1, hook) for x in obj)
        if hook:
            return self.value(_plain(obj), depth + 1, hook=False)
        return f"<{kind.__name__}>"

    def conversation(self, chat: Any) -> Any:
        """A conversation (a list or tuple of messages, or an object with ``.messages``)."""
        messages = chat if type(chat) in _SEQUENCES else getattr(chat, "messages", chat)
        if type(messages) is tuple:
            return tuple(self.value(m, 1) for m in messages)
        try:
            items = list(messages)
        except TypeError:
            return chat  # the converter reports it
        return [self.value(m, 1) for m in items]

    def variables(self, variables: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return [(self.text(k), self.value(v, 1)) for k, v in variables]

    @staticmethod
    def restore(text: str) -> str:
        return _STAND_IN_REPR.sub(_surrogate_repr, _STAND_IN.sub(_from_stand_in, text))

    @staticmethod
    def in_template(source: str) -> bool:
        """Whether a template's own text has stand-ins (which would be taken for surrogates)."""
        return _STAND_IN.search(source) is not None or _STAND_IN_REPR.search(source) is not None


def _refuse_clash(clash: bool, index: int | None) -> None:
    if clash:
        where = "" if index is None else f"conversation {index}: "
        raise ChatInputError(
            f"{where}the input has lone surrogates (text with no UTF-8 form, which promptweave "
            "renders with private use characters U+F0000..U+F07FF standing in for them) and "
            "also has such private use characters of its own, or the template has: it cannot "
            "be rendered exactly"
        )


def _restored_error(exc: ChatTemplateError) -> ChatTemplateError:
    """A rendering error of stood-in input, with the surrogates back in its message."""
    if isinstance(exc, ChatTemplateRaised):
        return ChatTemplateRaised(_Surrogates.restore(exc.message), exc.conversation)
    return type(exc)(_Surrogates.restore(str(exc)))


def _token_text(value: Any) -> str | None:
    """A special token from a tokenizer config: a string or an AddedToken dict."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    content = getattr(value, "content", None)
    return content if isinstance(content, str) else str(value)


def special_tokens_of(config: Mapping[str, Any]) -> dict[str, str]:
    """The named special tokens of a tokenizer config, as transformers hands them to templates."""
    out: dict[str, str] = {}
    for name in SPECIAL_TOKEN_NAMES:
        text = _token_text(config.get(name))
        if text is not None:
            out[name] = text
    return out


def _templates_of(value: Any, where: str) -> dict[str, str] | str:
    """A tokenizer config's ``chat_template``: a string, or named templates (a list of
    ``{'name', 'template'}`` dicts or a dict)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        named = dict(value)
    elif isinstance(value, list):
        named = {}
        for i, entry in enumerate(value):
            if not (isinstance(entry, Mapping) and "name" in entry and "template" in entry):
                raise ConfigError(
                    f"{where}: chat_template[{i}] must be a dict with 'name' and 'template'"
                )
            named[entry["name"]] = entry["template"]
    else:
        raise ConfigError(f"{where}: has no chat_template (got {type(value).__name__})")
    for name, template in named.items():
        if not isinstance(template, str):
            raise ConfigError(f"{where}: chat_template {name!r} is not a string")
    return named


def _json_object(path: str, what: str) -> Mapping[str, Any]:
    """The JSON object in file ``path`` (a ``ConfigError`` naming the file and ``what`` it
    should hold otherwise)."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc}") from exc
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: a {what} must be a JSON object")
    return value


def _legacy_special_tokens(directory: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The named special tokens of a model directory's ``special_tokens_map.json``, which
    transformers' tokenizer loading lets override the config's when the config has no
    ``added_tokens_decoder`` (the layout of tokenizers saved before that key existed)."""
    path = os.path.join(directory, "special_tokens_map.json")
    if "added_tokens_decoder" in config or not os.path.isfile(path):
        return {}
    tokens = _json_object(path, "special tokens map")
    return {name: tokens[name] for name in SPECIAL_TOKEN_NAMES if name in tokens}


def _template_files(directory: str) -> str | dict[str, str] | None:
    """The chat templates of a model directory's template files, as transformers' tokenizer
    loading takes them: ``chat_template.jinja`` is the default template and each
    ``additional_chat_templates/NAME.jinja`` a named one; a lone default is a plain string;
    ``None`` when there are no such files (the config's ``chat_template`` stands)."""
    templates: dict[str, str] = {}
    default = os.path.join(directory, "chat_template.jinja")
    if os.path.isfile(default):
        templates["default"] = _read_template(default)
    extra = os.path.join(directory, "additional_chat_templates")
    if os.path.isdir(extra):
        for name in sorted(os.listdir(extra)):
            path = os.path.join(extra, name)
            if name.endswith(".jinja") and os.path.isfile(path):
                templates[name.removesuffix(".jinja")] = _read_template(path)
    if not templates:
        return None
    if len(templates) == 1 and "default" in templates:
        return templates["default"]
    return templates


class ChatTemplate:
    """A HuggingFace chat template compiled once (see the module documentation).

    Args:
        template: the Jinja source, or named templates (``{'default': ..., 'tool_use': ...}``)
            as a tokenizer config may hold them.
        special_tokens: ``bos_token``, ``eos_token``, ... as the template sees them (strings or
            AddedToken dicts); ``bos_token=``/``eos_token=`` are shortcuts.
        tokenizer_adds_bos: whether the tokenizer that will encode the rendered string adds a
            BOS token itself (``add_bos_token``); enables the ``double_bos`` check.
        double_bos: ``'warn'``, ``'error'`` or ``'ignore'`` (see the module documentation).
        system: ``'keep'``, ``'merge'`` or ``'auto'``; ``system_separator`` joins a merged
            system message and the first user message.
        transformers_version: the transformers version to render as (``None``: 5.23 and later);
            it decides whether ``None``-valued message keys are dropped and reasoning fields
            aliased.
    """

    def __init__(
        self,
        template: str | Mapping[str, str],
        *,
        special_tokens: Mapping[str, Any] | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
        tokenizer_adds_bos: bool = False,
        double_bos: DoubleBos = "warn",
        system: SystemHandling = "keep",
        system_separator: str = "\n\n",
        transformers_version: str | None = None,
    ) -> None:
        if double_bos not in ("warn", "error", "ignore"):
            raise ArgumentError(
                f"double_bos must be 'warn', 'error' or 'ignore', got {double_bos!r}"
            )
        if system not in ("keep", "merge", "auto"):
            raise ArgumentError(f"system must be 'keep', 'merge' or 'auto', got {system!r}")
        version = None if transformers_version is None else _version_tuple(transformers_version)
        self._transformers_version = None if version is None else str(transformers_version)
        self._drop_none = version is None or version >= _DROPS_NONE_SINCE
        self._alias_reasoning = version is None or version >= _ALIASES_REASONING_SINCE
        named = _templates_of(template, "template")
        self._named: dict[str, str] = {} if isinstance(named, str) else named
        self._default_source: str | None = named if isinstance(named, str) else None
        tokens = special_tokens_of(special_tokens or {})
        if bos_token is not None:
            tokens["bos_token"] = bos_token
        if eos_token is not None:
            tokens["eos_token"] = eos_token
        self.special_tokens: dict[str, str] = tokens
        self._variables_cache: tuple[dict[str, str], list[tuple[str, Any]]] | None = None
        self.tokenizer_adds_bos = bool(tokenizer_adds_bos)
        self.double_bos: DoubleBos = double_bos
        self.system: SystemHandling = system
        self.system_separator = system_separator
        self._compiled: dict[str, CompiledChatTemplate] = {}
        # the template a call without `chat_template` and `tools` uses, once selected
        self._default_compiled: CompiledChatTemplate | None = None
        # compile eagerly so a broken template fails here, as transformers fails on first use
        for source in self._sources():
            self._compile(source)

    def __getstate__(self) -> dict[str, Any]:
        # the compiled templates (Rust objects) are made anew from the sources, as the
        # constructor makes them
        return {
            "template": dict(self._named) if self._named else self._default_source,
            "special_tokens": dict(self.special_tokens),
            "tokenizer_adds_bos": self.tokenizer_adds_bos,
            "double_bos": self.double_bos,
            "system": self.system,
            "system_separator": self.system_separator,
            "transformers_version": self._transformers_version,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        template = state.pop("template")
        self.__init__(template, **state)  # type: ignore[misc]

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_tokenizer_config(
        cls, config: str | os.PathLike[str] | Mapping[str, Any], **options: Any
    ) -> ChatTemplate:
        """From a ``tokenizer_config.json`` (its path, the model directory holding it, or the
        loaded dict): its ``chat_template`` (string or named templates), special tokens and
        ``add_bos_token``. Given a path, the files of the model directory are read as
        transformers' ``from_pretrained`` reads them: ``chat_template.jinja`` (the default
        template) and ``additional_chat_templates/*.jinja`` (named ones) take priority over the
        config's ``chat_template``, and a ``special_tokens_map.json`` overrides its special
        tokens when the config has no ``added_tokens_decoder``."""
        where = "tokenizer config"
        if not isinstance(config, Mapping):
            where = os.fspath(config)
            directory = os.path.dirname(where)
            given_directory = os.path.isdir(where)
            if given_directory:
                directory, where = where, os.path.join(where, "tokenizer_config.json")
            loaded: Mapping[str, Any] = {}  # a directory with template files and no config
            if not given_directory or os.path.exists(where):
                loaded = _json_object(where, "tokenizer config")
            loaded = {**loaded, **_legacy_special_tokens(directory, loaded)}
            files = _template_files(directory)
            config = {**loaded, "chat_template": files} if files is not None else loaded
        template = _templates_of(config.get("chat_template"), where)
        options.setdefault("special_tokens", config)
        options.setdefault("tokenizer_adds_bos", bool(config.get("add_bos_token", False)))
        return cls(template, **options)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **options: Any) -> ChatTemplate:
        """From a ``.jinja`` template file, a ``tokenizer_config.json`` (by extension) or a
        model directory (see :meth:`from_tokenizer_config`)."""
        where = os.fspath(path)
        if where.endswith(".json") or os.path.isdir(where):
            return cls.from_tokenizer_config(where, **options)
        return cls(_read_template(where), **options)

    # -- template selection -----------------------------------------------------------------

    def _sources(self) -> list[str]:
        return (
            [self._default_source]
            if self._default_source is not None
            else list(self._named.values())
        )

    @property
    def transformers_version(self) -> str | None:
        """The transformers version rendered as (``None``: 5.23 and later); fixed at
        construction (the compiled templates hold what it decides)."""
        return self._transformers_version

    @property
    def template(self) -> str | dict[str, str]:
        """The template source (or the named templates)."""
        return self._default_source if self._default_source is not None else dict(self._named)

    def _compile(self, source: str) -> CompiledChatTemplate:
        compiled = self._compiled.get(source)
        if compiled is None:
            compiled = CompiledChatTemplate(
                source,
                _plain,
                keep_none=not self._drop_none,
                alias_reasoning=self._alias_reasoning,
            )
            self._compiled[source] = compiled
        return compiled

    def _select(self, chat_template: str | None, tools: Any) -> CompiledChatTemplate:
        # transformers' get_chat_template
        if self._named:
            if chat_template is not None and chat_template in self._named:
                return self._compile(self._named[chat_template])
            if chat_template is None:
                if tools is not None and "tool_use" in self._named:
                    return self._compile(self._named["tool_use"])
                if "default" in self._named:
                    return self._compile(self._named["default"])
                raise ChatInputError(
                    "This model has multiple chat templates with no default specified! Please "
                    "either pass a chat template or the name of the template you wish to use to "
                    "the `chat_template` argument. Available template names are "
                    f"{sorted(self._named)}."
                )
        if chat_template is not None:
            return self._compile(chat_template)
        assert self._default_source is not None
        return self._compile(self._default_source)

    # -- rendering ----------------------------------------------------------------------------

    def _variables(
        self, tools: Any, documents: Any, extra: Mapping[str, Any]
    ) -> list[tuple[str, Any]]:
        if tools is None and documents is None and not extra:
            # the usual call: the variables are remembered while special_tokens is unchanged
            cached = self._variables_cache
            if cached is not None and cached[0] == self.special_tokens:
                return cached[1]
            variables = self._make_variables(None, None, {})
            self._variables_cache = (dict(self.special_tokens), variables)
            return variables
        return self._make_variables(tools, documents, extra)

    def _make_variables(
        self, tools: Any, documents: Any, extra: Mapping[str, Any]
    ) -> list[tuple[str, Any]]:
        schemas: list[Any] | None = None
        if tools is not None:
            schemas = []
            for tool in tools:
                if isinstance(tool, dict):
                    schemas.append(tool)
                elif callable(tool):
                    schemas.append(_json_schema(tool))
                else:
                    raise ChatInputError(
                        "Tools should either be a JSON schema, or a callable function with type "
                        "hints and a docstring suitable for auto-conversion to a schema."
                    )
        if documents is not None:
            for document in documents:
                if not isinstance(document, dict):
                    raise ChatInputError(
                        "Documents should be a list of dicts with 'title' and 'text' keys!"
                    )
        variables: dict[str, Any] = {**self.special_tokens, **extra}
        variables["tools"] = schemas
        variables["documents"] = documents
        return list(variables.items())

    @staticmethod
    def _continue_field(
        continue_final_message: bool | str, add_generation_prompt: bool
    ) -> str | None:
        if not continue_final_message:
            return None
        if add_generation_prompt:
            raise ChatInputError(
                "continue_final_message and add_generation_prompt are not compatible. Use "
                "continue_final_message when you want the model to continue the final message, "
                "and add_generation_prompt when you want to add a header that will prompt it to "
                "start a new assistant message instead."
            )
        return continue_final_message if isinstance(continue_final_message, str) else "content"

    def _merge_system(self, messages: Sequence[Any]) -> list[Any]:
        msgs = list(messages)
        if not msgs or not isinstance(msgs[0], Mapping) or msgs[0].get("role") != "system":
            return msgs
        system = msgs[0].get("content")
        rest = msgs[1:]
        for i, m in enumerate(rest):
            if isinstance(m, Mapping) and m.get("role") == "user":
                content = m.get("content")
                if isinstance(system, str) and isinstance(content, str):
                    merged = dict(m)
                    merged["content"] = f"{system}{self.system_separator}{content}"
                    rest[i] = merged
                    return rest
                break
        # no user message to fold into: the system text becomes the first user message
        return [{"role": "user", "content": system}, *rest]

    def _check_bos(self, rendered: str, index: int | None) -> None:
        if not self.tokenizer_adds_bos or self.double_bos == "ignore":
            return
        bos = self.special_tokens.get("bos_token")
        if not bos:
            return
        if rendered.startswith(bos):
            where = "" if index is None else f"conversation {index}: "
            msg = (
                f"{where}the rendered chat starts with the BOS token {bos!r} and the tokenizer "
                "adds one too (add_bos_token): encode it with add_special_tokens=False, or the "
                "model sees two BOS tokens"
            )
            if self.double_bos == "error":
                raise DoubleBosError(msg)
            warnings.warn(msg, DoubleBosWarning, stacklevel=3)

    def _conversation(self, messages: Any, index: int | None) -> Any:
        """One conversation's messages (a ``Conversation``'s ``.messages``), checked non-empty
        and, with ``system='merge'``, its system message folded in."""
        # (a list or tuple is the conversation itself: no attribute lookup that fails)
        chat = messages if type(messages) in _SEQUENCES else getattr(messages, "messages", messages)
        if isinstance(chat, (list, tuple)) and len(chat) == 0:
            where = "" if index is None else f"conversation {index}: "
            raise ChatInputError(
                f"{where}Cannot apply chat template to an empty conversation. "
                "Provide at least one message."
            )
        return self._merge_system(chat) if self.system == "merge" else chat

    def _render_auto(
        self,
        compiled: CompiledChatTemplate,
        chat: Any,
        variables: list[tuple[str, Any]],
        add_generation_prompt: bool,
        field: str | None,
        index: int | None,
    ) -> str:
        """``system='auto'``: as given; when the template raises, once more with the system
        message merged (the error stands when there is none to merge)."""
        try:
            return self._render_one(compiled, chat, variables, add_generation_prompt, field)
        except ChatTemplateRaised as exc:
            merged = self._merge_system(chat)
            if merged == list(chat):
                if index is None:
                    raise
                raise ChatTemplateRaised(exc.message, index) from None
        return self._render_one(compiled, merged, variables, add_generation_prompt, field)

    def _render_one(
        self,
        compiled: CompiledChatTemplate,
        chat: Any,
        variables: list[tuple[str, Any]],
        add_generation_prompt: bool,
        field: str | None = None,
    ) -> str:
        """``compiled.render``, and when the input has lone surrogates, rendered with them
        stood in for (:class:`_Surrogates`)."""
        try:
            return compiled.render(chat, variables, add_generation_prompt, field)
        except ChatInputError:
            out = self._render_escaped(compiled, chat, variables, add_generation_prompt, field)
            if out is None:
                raise
            return out

    @staticmethod
    def _render_escaped(
        compiled: CompiledChatTemplate,
        chat: Any,
        variables: list[tuple[str, Any]],
        add_generation_prompt: bool,
        field: str | None = None,
    ) -> str | None:
        """One conversation rendered with its lone surrogates stood in for; ``None`` when it
        has none (the caller's error stands)."""
        sur = _Surrogates()
        escaped_chat = sur.conversation(chat)
        escaped_vars = sur.variables(variables)
        if not sur.escaped:
            return None
        _refuse_clash(sur.clash or _Surrogates.in_template(compiled.source), None)
        try:
            out = compiled.render(escaped_chat, escaped_vars, add_generation_prompt, field)
        except ChatTemplateError as exc:
            raise _restored_error(exc) from None
        return sur.restore(out)

    @staticmethod
    def _render_many(
        compiled: CompiledChatTemplate,
        chats: Sequence[Any],
        variables: list[tuple[str, Any]],
        add_generation_prompt: bool,
        field: str | None,
        threads: int | None,
    ) -> list[str]:
        """``compiled.render_many``, and when conversations have lone surrogates, rendered
        with them stood in for (:class:`_Surrogates`), the others as they are."""
        try:
            return compiled.render_many(chats, variables, add_generation_prompt, field, threads)
        except ChatInputError:
            sur = _Surrogates()
            escaped_vars = sur.variables(variables)
            everywhere, shared_clash = sur.escaped, sur.clash
            shared_clash |= _Surrogates.in_template(compiled.source)
            escaped: list[Any] = []
            restore: list[bool] = []
            for i, chat in enumerate(chats):
                sur.escaped = sur.clash = False
                escaped.append(sur.conversation(chat))
                restore.append(everywhere or sur.escaped)
                if restore[-1]:
                    _refuse_clash(sur.clash or shared_clash, i)
            if not any(restore):
                raise
        try:
            outs = compiled.render_many(
                escaped, escaped_vars, add_generation_prompt, field, threads
            )
        except ChatTemplateError as exc:
            raise _restored_error(exc) from None
        return [_Surrogates.restore(o) if r else o for o, r in zip(outs, restore, strict=True)]

    def render(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        tools: Sequence[Any] | None = None,
        documents: Sequence[Any] | None = None,
        chat_template: str | None = None,
        **extra: Any,
    ) -> str:
        """The string ``apply_chat_template(messages, tokenize=False, ...)`` returns.

        ``extra`` keyword arguments are template variables (they override special tokens).
        """
        if (
            type(messages) is list
            and messages
            and continue_final_message is False
            and tools is None
            and documents is None
            and chat_template is None
            and not extra
            and self.system == "keep"
        ):
            # the usual call (nothing to check or convert): the default template and the
            # remembered variables
            default = self._default_compiled
            if default is None:
                default = self._default_compiled = self._select(None, None)
            variables = self._variables(None, None, extra)
            out = self._render_one(default, messages, variables, add_generation_prompt)
            if self.tokenizer_adds_bos:
                self._check_bos(out, None)
            return out
        # transformers' order of checks: template, empty chat, continue, tools and documents
        compiled = self._select(chat_template, tools)
        chat = self._conversation(messages, None)
        field = self._continue_field(continue_final_message, add_generation_prompt)
        variables = self._variables(tools, documents, extra)
        if self.system == "auto":
            out = self._render_auto(compiled, chat, variables, add_generation_prompt, field, None)
        else:
            out = self._render_one(compiled, chat, variables, add_generation_prompt, field)
        self._check_bos(out, None)
        return out

    def render_many(
        self,
        conversations: Iterable[Sequence[Any]],
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        tools: Sequence[Any] | None = None,
        documents: Sequence[Any] | None = None,
        chat_template: str | None = None,
        threads: int | None = None,
        **extra: Any,
    ) -> list[str]:
        """Render many conversations; the same result as calling :meth:`render` on each. An
        error names the conversation's index.

        ``threads=1`` (the default) reads, renders and makes the strings block by block on
        this thread, rendering with the interpreter released. ``threads=2`` (or more: the same)
        pipelines the batch: this thread reads the next block and makes the strings of the
        last while a second thread renders (which needs no interpreter). That shortens the
        wall-clock time by about a quarter to a third when a second core is free, and costs
        about 15% more CPU time in all."""
        threads = check_threads(threads, "render_many")
        compiled = self._select(chat_template, tools)
        if not isinstance(conversations, (list, tuple)):
            conversations = list(conversations)
        if self.system != "keep":
            chats = [self._conversation(c, i) for i, c in enumerate(conversations)]
        try:
            field = self._continue_field(continue_final_message, add_generation_prompt)
            variables = self._variables(tools, documents, extra)
        except Exception:
            # transformers reports an empty conversation first
            for i, c in enumerate(conversations):
                self._conversation(c, i)
            raise
        if self.system == "auto":
            outs = [
                self._render_auto(compiled, c, variables, add_generation_prompt, field, i)
                for i, c in enumerate(chats)
            ]
        elif self.system == "merge":
            outs = self._render_many(
                compiled, chats, variables, add_generation_prompt, field, threads
            )
        else:
            # the core takes a Conversation's .messages and refuses empty conversations itself
            outs = self._render_many(
                compiled, conversations, variables, add_generation_prompt, field, threads
            )
        if self.tokenizer_adds_bos and self.double_bos != "ignore":
            for i, out in enumerate(outs):
                self._check_bos(out, i)
        return outs

    def __repr__(self) -> str:
        names = f" named={sorted(self._named)}" if self._named else ""
        return f"<ChatTemplate{names} special_tokens={sorted(self.special_tokens)}>"


def _json_schema(func: Callable[..., Any]) -> Any:
    """A callable tool's JSON schema, as transformers' ``get_json_schema`` makes it (that
    function is used when transformers is installed)."""
    try:
        from transformers.utils.chat_template_utils import get_json_schema
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ChatInputError(
            "a callable tool needs transformers (pip install transformers) to build its JSON "
            "schema; pass the schema as a dict instead"
        ) from exc
    return get_json_schema(func)
