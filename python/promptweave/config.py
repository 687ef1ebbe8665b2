"""Load OpenCompass / AISBench Python config files without the reference frameworks.

:func:`load_config` executes a config file the way ``mmengine.Config.fromfile`` does for these
frameworks (its "lazy import" mode) and returns plain data::

    cfg = load_config("configs/datasets/mmlu/mmlu_gen.py")
    for ds in cfg.datasets():
        ds["infer_cfg"]["prompt_template"]["template"]  # plain dicts, lists and strings
        ds["infer_cfg"]["retriever"]["type"]  # TypeRef('opencompass.openicl...', 'ZeroRetriever')

.. warning::

   A config file is Python code and loading it **executes it**, exactly as mmengine, OpenCompass
   and AISBench do. Only load configs you trust.

How the file is executed:

* ``with read_base(): from .x import y`` (and ``from ..a.b import c``) executes the sibling config
  file ``x.py`` and binds its top-level names. Absolute imports of config modules
  (``from opencompass.configs.datasets.mmlu.mmlu_gen import mmlu_datasets``,
  ``from ais_bench.benchmark.configs... import ...``) are resolved to files: against the
  ``search_path`` directories, then against an enclosing ``configs`` directory of the config
  being loaded that sits in a copy of the package's tree (``.../opencompass/configs``), then
  against an installed copy of the package (located without importing it; what the reference's
  import finds), and last against any other enclosing ``configs`` directory.
  Like mmengine, every importing file gets its own execution of a base file, and the values it
  binds are structural copies (dicts become attribute-accessible dicts with mmengine's
  ``ConfigDict`` merge semantics), so mutating them never leaks into other files.
* Every other import of ``opencompass``, ``ais_bench`` or ``mmengine`` (and of a few heavy
  machine-learning packages, see :data:`STUBBED_PACKAGES`) yields a *stand-in* object, whether or
  not the real package is installed; ``read_base`` from any of them is a no-op context manager.
  In the returned data a stand-in becomes a :class:`TypeRef`, a call of one a :class:`CallRef`.
  Imports of other modules (``os``, ``copy``, ``math``, ``numpy``, ...) are real; one that cannot
  be imported becomes a stand-in too.
* The imports are intercepted through the ``__import__`` of the config's own builtins, so nothing
  is added to ``sys.modules`` or ``sys.meta_path`` and concurrent loads do not interfere.

Failures (unreadable file, syntax error, missing base config, exception while executing) raise
:class:`~promptweave.errors.ConfigError` naming the file and line.
"""

from __future__ import annotations

import builtins
import copy
import functools
import importlib.util
import os
import traceback
import types
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from promptweave._flavor import AISBENCH, OPENCOMPASS, Flavor
from promptweave.chat_models import AIS_CHAT_SERVICE_MODELS, chat_meta_template
from promptweave.errors import ConfigError

__all__ = [
    "STUBBED_PACKAGES",
    "CallRef",
    "Config",
    "ModelPrompting",
    "TypeRef",
    "as_dumped",
    "load_config",
    "meta_template_of",
    "model_prompting",
]

FRAMEWORK_PACKAGES: Final = frozenset({"opencompass", "ais_bench", "mmengine"})
"""Packages whose imports always yield stand-ins (the frameworks the configs are written for)."""

STUBBED_PACKAGES: Final = FRAMEWORK_PACKAGES | frozenset(
    {"torch", "transformers", "vllm", "lmdeploy", "datasets", "modelscope", "sympy"}
)
"""Top-level packages whose imports yield stand-ins instead of being imported.

Besides the frameworks these are heavy packages that model/dataset configs import only to name a
dtype or a helper (``torch.bfloat16``); importing them would be slow and is never needed to build
prompts.
"""

PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------------------------
# Returned value types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypeRef:
    """A reference to a class or function of a framework, e.g. ``type=PromptTemplate``.

    ``module`` is the module it was imported from, ``qualname`` the dotted name inside it
    (``"MMLUDataset"`` or ``"MMLUDataset.load"``) and ``name`` its last component.
    ``str(ref)`` is the full dotted path, the same string mmengine's ``Config.to_dict()`` gives.
    """

    module: str
    name: str
    qualname: str = ""

    def __post_init__(self) -> None:
        if not self.qualname:
            object.__setattr__(self, "qualname", self.name)

    @property
    def path(self) -> str:
        """The full dotted path, ``module.qualname``."""
        return f"{self.module}.{self.qualname}" if self.module else self.qualname

    def __str__(self) -> str:
        return self.path


@dataclass(frozen=True)
class CallRef:
    """The result of calling a stand-in at config time (or of ``functools.partial`` over one).

    ``target`` is what was called; ``args``/``kwargs`` the (converted) arguments; ``partial`` is
    true for ``functools.partial(target, ...)``.
    """

    target: TypeRef
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    partial: bool = False

    def __str__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        prefix = "partial" if self.partial else ""
        sep = ", " if self.partial and parts else ""
        if self.partial:
            return f"{prefix}({self.target}{sep}{', '.join(parts)})"
        return f"{self.target}({', '.join(parts)})"


def _is_dataset(value: object) -> bool:
    return isinstance(value, dict) and "infer_cfg" in value and "reader_cfg" in value


class Config(Mapping[str, Any]):
    """A loaded config: its public top-level names mapped to plain values.

    Values are dicts, lists, tuples, strings, numbers, ``None``, :class:`TypeRef` and
    :class:`CallRef`; callables the config itself defines and uses as values (e.g. a
    postprocessor function) are kept as they are. Imported modules/classes/functions, functions
    and classes defined at top level, and names starting with ``_`` are not part of the mapping.
    """

    __slots__ = ("_data", "flavor", "path")

    def __init__(self, data: dict[str, Any], *, path: Path, flavor: Flavor) -> None:
        self._data = data
        self.path = path
        self.flavor: Flavor = flavor

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Config({str(self.path)!r}, flavor={self.flavor!r}, keys={list(self._data)!r})"

    def to_dict(self) -> dict[str, Any]:
        """A (shallow) plain ``dict`` copy of the mapping."""
        return dict(self._data)

    def datasets(self) -> list[dict[str, Any]]:
        """Every dataset config (a dict with ``infer_cfg`` and ``reader_cfg``).

        Gathered, in order of first appearance, from the top-level values and from lists/tuples
        such as ``mmlu_datasets`` or ``datasets``; a dict reachable under several names (e.g. in
        ``mmlu_datasets`` and in ``datasets``) is listed once.
        """
        found: list[dict[str, Any]] = []
        seen: set[int] = set()

        def visit(value: object) -> None:
            if _is_dataset(value):
                assert isinstance(value, dict)
                if id(value) not in seen:
                    seen.add(id(value))
                    found.append(value)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    visit(item)

        for value in self._data.values():
            visit(value)
        return found

    def run_datasets(self) -> list[dict[str, Any]]:
        """The datasets the reference runs from this file, in its order: an evaluation
        config's ``datasets`` list; otherwise, as ``--datasets NAME`` reads a dataset config,
        every list under a name ending in ``_datasets``, concatenated in the file's order
        (a dataset under two such names is there twice). Entries that are not dataset configs
        are left out. Empty when neither gives a dataset (see :meth:`datasets`)."""
        value = self._data.get("datasets")
        if isinstance(value, (list, tuple)):
            picked = list(value)
        else:
            picked = [
                item
                for key, value in self._data.items()
                if key.endswith("_datasets") and isinstance(value, (list, tuple))
                for item in value
            ]
        return [d for d in picked if _is_dataset(d)]

    def run_models(self) -> list[dict[str, Any]]:
        """The models the reference runs from this file: its ``models`` list (of dicts);
        empty when it has none (see :meth:`models`)."""
        value = self._data.get("models")
        if not isinstance(value, (list, tuple)):
            return []
        return [m for m in value if isinstance(m, dict)]

    def models(self) -> list[dict[str, Any]]:
        """Every model config: the dicts of ``models`` (or ``*_models``) lists and any top-level
        dict, or dict in a top-level list, that has a ``meta_template`` key."""
        found: list[dict[str, Any]] = []
        seen: set[int] = set()

        def add(value: object, *, any_dict: bool) -> None:
            if isinstance(value, dict) and (any_dict or "meta_template" in value):
                if id(value) not in seen:
                    seen.add(id(value))
                    found.append(value)

        for key, value in self._data.items():
            is_models = key == "models" or key.endswith("_models")
            if isinstance(value, (list, tuple)):
                for item in value:
                    add(item, any_dict=is_models)
            else:
                add(value, any_dict=False)
        return found


def _type_name(t: Any) -> str:
    """The class name a config's ``type=`` refers to (a class, a dotted name, a TypeRef, a
    stand-in)."""
    if t is None:
        return ""
    name = getattr(t, "name", None) if not isinstance(t, type) else t.__name__
    if isinstance(name, str):
        return name
    return str(t).rsplit(".", 1)[-1]


def as_dumped(value: Any) -> Any:
    """``value`` as the framework's run sees it: OpenCompass and AISBench write the config out
    (mmengine's ``Config.dump``, whose text lists every dict's keys sorted by ``str(key)``) and
    read it back before running it. Dicts become plain dicts with their keys in that order
    (so a label dict's labels, and a raw message's keys, come in that order); lists and tuples
    keep their order and type; other values are kept."""
    if isinstance(value, dict):
        items = sorted(dict.items(value), key=lambda kv: str(kv[0]))
        return {k: as_dumped(v) for k, v in items}
    if type(value) in (list, tuple):
        return type(value)(as_dumped(v) for v in value)
    return value


def meta_template_of(model_cfg: Mapping[str, Any]) -> Any:
    """The ``meta_template`` of a model config, or ``None`` when it has none."""
    return model_cfg.get("meta_template")


# How the model classes of OpenCompass 0.5.4 and AISBench 3.1 parse a prompt, by class name (the
# two frameworks agree on the names they share). Read from each class's constructor: which
# template parser it builds, and from what.
#
# Models that apply their tokenizer's chat template: the prompt is parsed by an
# APITemplateParser with the config's meta template, or the framework's default chat meta
# template when it has none, into the messages the chat template renders.
_CHAT_TEMPLATE_MODELS: Final = frozenset(
    {
        "HuggingFacewithChatTemplate",
        "VLLMwithChatTemplate",
        "TurboMindModelwithChatTemplate",
        "HuggingFaceQwen2VLwithChatTemplate",
        "VLLMOfflineVLModel",
        "QwenImageEditModel",
    }
)
# Models that parse with APITemplateParser(meta_template): message lists. OpenCompass's API
# models that keep BaseAPIModel's token estimate ...
_ESTIMATING_API_MODELS: Final = frozenset(
    {
        "BaseAPIModel",
        "AI360GPT",
        "BaiChuan",
        "BailingAPI",
        "BlueLMAPI",
        "ByteDance",
        "Claude",
        "ClaudeAllesAPIN",
        "ClaudeSDK",
        "DeepseekAPI",
        "Doubao",
        "ERNIEBot",
        "Gemini",
        "GeminiSDK",
        "Hunyuan",
        "KrGPT",
        "LightllmChatAPI",
        "LiteLLMAPI",
        "MiniMax",
        "MiniMaxChatCompletionV2",
        "Mistral",
        "MoonShot",
        "Nanbeige",
        "PanGu",
        "Qwen",
        "Rendu",
        "SenseTime",
        "StepFun",
        "TeleChat",
        "TeleChatStream",
        "UniGPT",
        "XunFei",
        "XunFeiSpark",
        "Yayi",
        "YiAPI",
        "ZhiPuAI",
        "ZhiPuV2AI",
    }
)
# ... OpenAI's classes (they count tokens with tiktoken) ...
_OPENAI_MODELS: Final = frozenset(
    {"OpenAI", "OpenAISDK", "OpenAISDKResponse", "OpenAISDKRollout", "OpenAISDKStreaming"}
)
# ... local models that parse like API models (and count with their own tokenizer) ...
_LOCAL_API_PARSER_MODELS: Final = frozenset(
    {"HuggingFaceChatGLM3", "LLaMA2AccessoryModel", "Llama2", "Llama2Chat", "Mixtral"}
)
# ... and AISBench's chat-completions service models: with no meta template in the config they
# use the default chat meta template (HUMAN/BOT rounds, a reserved SYSTEM role).
_DEFAULT_CHAT_META_MODELS: Final = AIS_CHAT_SERVICE_MODELS
_API_PARSER_MODELS: Final = (
    _ESTIMATING_API_MODELS
    | _OPENAI_MODELS
    | _LOCAL_API_PARSER_MODELS
    | _DEFAULT_CHAT_META_MODELS
    | frozenset({"VITAGenerateAPI"})
)
# Models that parse with LMTemplateParser(meta_template): strings. AISBench's completions
# service models (vLLM, TGI, Triton, MindIE) are API models that still send one string.
_LM_PARSER_MODELS: Final = frozenset(
    {
        "BaseModel",
        "BaseLMModel",
        "AlayaLM",
        "GLM130B",
        "HuggingFace",
        "HuggingFaceCausalLM",
        "InternLM",
        "InternTrain",
        "LightllmAPI",
        "ModelScope",
        "ModelScopeCausalLM",
        "TurboMindAPIModel",
        "TurboMindModel",
        "VLLM",
        "VLLMCustomAPI",
        "VLLMCustomAPIStream",
        "TGICustomAPI",
        "TGICustomAPIStream",
        "TritonCustomAPI",
        "TritonCustomAPIStream",
        "MindieStreamApi",
    }
)
# Models that parse with LMTemplateParser() whatever the config says (no meta template)
_NO_META_MODELS: Final = frozenset({"HuggingFaceBaseModel"})

# How OpenCompass's model classes count a prompt's tokens for its ``max_seq_len`` (the
# inferencers drop in-context examples until the prompt fits): the API models' estimate
# (_ESTIMATING_API_MODELS, no tokenizer needed) ...
# ... models that encode the prompt with their tokenizer, special tokens included ...
_TOKENIZER_COUNT_MODELS: Final = frozenset(
    {
        "HuggingFace",
        "HuggingFaceCausalLM",
        "HuggingFaceBaseModel",
        "ModelScope",
        "ModelScopeCausalLM",
        "VLLM",
        "TurboMindModel",
    }
)
# ... and the chat-template models, which count the chat template's rendering of the prompt's
# text as one user message (see promptweave.tokens.chat_token_counter).
_CHAT_COUNT_MODELS: Final = frozenset(
    {"HuggingFacewithChatTemplate", "VLLMwithChatTemplate", "TurboMindModelwithChatTemplate"}
)


@dataclass(frozen=True)
class ModelPrompting:
    """How a model config's class turns a dataset prompt into its input (see
    :func:`model_prompting`)."""

    #: the class name of the config's ``type`` (``''`` when it has none)
    model_class: str
    #: the meta template the model's parser uses (``None``: none)
    meta_template: Any
    #: it parses with ``APITemplateParser`` (message lists), not ``LMTemplateParser`` (strings)
    api: bool
    #: it applies its tokenizer's chat template to those messages (HuggingFace/vLLM/LMDeploy
    #: "with chat template" models): the final text needs that template
    chat_template: bool
    #: the class is one of the frameworks' model classes promptweave knows; otherwise the config's
    #: meta template and the string parser are assumed
    known: bool
    #: chat-template models: extra variables the class hands the chat template (vLLM's
    #: ``chat_template_kwargs``)
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: chat-template models: the class strips the tokenizer's BOS token from the rendered text
    #: (OpenCompass's LMDeploy chat model)
    strip_bos: bool = False
    #: where the class loads its tokenizer (``tokenizer_path``, else ``path``): a model
    #: directory or a HuggingFace hub name
    tokenizer: str | None = None
    #: chat-template models: a FastChat conversation template used instead of the tokenizer's
    #: chat template (``fastchat_template``)
    fastchat_template: str | None = None
    #: the config's ``max_seq_len``: OpenCompass drops in-context examples from prompts longer
    #: than that (AISBench does not)
    max_seq_len: int | None = None
    #: how the class counts tokens for that: ``'words'`` (API models' estimate,
    #: :func:`promptweave.tokens.api_token_len`), ``'tokenizer'`` (its tokenizer, special
    #: tokens included), ``'chat'`` (:func:`promptweave.tokens.chat_token_counter`) or ``None``
    #: (its own way: give a counter)
    token_count: str | None = None


def model_prompting(model_cfg: Mapping[str, Any], flavor: str = OPENCOMPASS) -> ModelPrompting:
    """How the model of ``model_cfg`` parses prompts, as its class does in OpenCompass 0.5.4 or
    AISBench 3.1: with which parser (``api``) and meta template -- the config's, the class's
    default when the config has none (AISBench's ``VLLMCustomAPIChat`` family, the chat-template
    models' default chat meta template of ``flavor``), or none at all (``HuggingFaceBaseModel``
    ignores the config's). ``flavor`` is the framework rendering the prompts."""
    name = _type_name(model_cfg.get("type"))
    meta = model_cfg.get("meta_template")
    length = model_cfg.get("max_seq_len")
    max_seq_len = length if isinstance(length, int) and not isinstance(length, bool) else None
    token_count = (
        "words"
        if name in _ESTIMATING_API_MODELS
        else "tokenizer"
        if name in _TOKENIZER_COUNT_MODELS
        else "chat"
        if name in _CHAT_COUNT_MODELS
        else None
    )
    tokenizer = model_cfg.get("tokenizer_path") or model_cfg.get("path")
    tokenizer = tokenizer if isinstance(tokenizer, str) and tokenizer else None
    if name in _CHAT_TEMPLATE_MODELS:
        kwargs = model_cfg.get("chat_template_kwargs") if name == "VLLMwithChatTemplate" else None
        return ModelPrompting(
            name,
            meta or chat_meta_template(flavor),
            True,
            True,
            True,
            chat_template_kwargs=dict(kwargs or {}),
            strip_bos=name == "TurboMindModelwithChatTemplate",
            tokenizer=tokenizer,
            fastchat_template=model_cfg.get("fastchat_template") or None,
            max_seq_len=max_seq_len,
            token_count=token_count,
        )
    if name in _API_PARSER_MODELS:
        if not meta and name in _DEFAULT_CHAT_META_MODELS:
            meta = chat_meta_template(AISBENCH)
        return ModelPrompting(
            name,
            meta or None,
            True,
            False,
            True,
            max_seq_len=max_seq_len,
            token_count=token_count,
            tokenizer=tokenizer,
        )
    if name in _NO_META_MODELS:
        return ModelPrompting(
            name,
            None,
            False,
            False,
            True,
            max_seq_len=max_seq_len,
            token_count=token_count,
            tokenizer=tokenizer,
        )
    known = name in _LM_PARSER_MODELS
    return ModelPrompting(
        name,
        meta,
        False,
        False,
        known,
        max_seq_len=max_seq_len,
        token_count=token_count,
        tokenizer=tokenizer,
    )


# --------------------------------------------------------------------------------------------
# Stand-ins
# --------------------------------------------------------------------------------------------


class _StandIn:
    """Stand-in for a class/function/value imported from a stubbed package."""

    _pw_module: str
    _pw_qualname: str

    def __init__(self, module: str, qualname: str) -> None:
        object.__setattr__(self, "_pw_module", module)
        object.__setattr__(self, "_pw_qualname", qualname)
        object.__setattr__(self, "__module__", module)
        object.__setattr__(self, "__name__", qualname.rpartition(".")[2])
        object.__setattr__(self, "__qualname__", qualname)

    def _pw_ref(self) -> TypeRef:
        return TypeRef(self._pw_module, self._pw_qualname.rpartition(".")[2], self._pw_qualname)

    def __getattr__(self, name: str) -> _StandIn:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StandIn(self._pw_module, f"{self._pw_qualname}.{name}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot set {name!r} on stand-in {self}")

    def __call__(self, *args: Any, **kwargs: Any) -> _CallResult:
        return _CallResult(self, args, kwargs)

    def __str__(self) -> str:
        return str(self._pw_ref())

    def __repr__(self) -> str:
        return f"<stand-in {self}>"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _StandIn)
        return (self._pw_module, self._pw_qualname) == (other._pw_module, other._pw_qualname)

    def __hash__(self) -> int:
        return hash((self._pw_module, self._pw_qualname))

    def __copy__(self) -> _StandIn:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _StandIn:
        return self

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        # ``class MyEvaluator(BaseEvaluator): ...`` in a config
        return (object,)


class _CallResult(_StandIn):
    """What calling a stand-in returns; becomes a :class:`CallRef`."""

    _pw_target: _StandIn
    _pw_args: tuple[Any, ...]
    _pw_kwargs: dict[str, Any]

    def __init__(self, target: _StandIn, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__(target._pw_module, f"{target._pw_qualname}()")
        object.__setattr__(self, "_pw_target", target)
        object.__setattr__(self, "_pw_args", args)
        object.__setattr__(self, "_pw_kwargs", kwargs)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class _StubModule(types.ModuleType):
    """Stand-in module: every attribute is a :class:`_StandIn` (``read_base`` is a no-op)."""

    def __init__(self, name: str, session: _Session, submodule: str = "") -> None:
        super().__init__(name)
        self.__pw_session = session
        # ``import a.b.c`` binds ``a`` with ``a.b`` and ``a.b.c`` known to be modules
        if submodule:
            head, _, rest = submodule.partition(".")
            setattr(self, head, _StubModule(f"{name}.{head}", session, rest))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name == "read_base":
            return self.__pw_session.read_base
        return _StandIn(self.__name__, name)


class _ReadBase:
    """``read_base`` of any framework: a no-op context manager that marks base imports."""

    def __init__(self) -> None:
        self.depth = 0

    def __call__(self) -> _ReadBase:
        return self

    def __enter__(self) -> _ReadBase:
        self.depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1


class _AttrDict(dict[Any, Any]):
    """The dicts a base config exports (mmengine's ``ConfigDict`` semantics, without laziness)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute '{name}'"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, _hook(value))

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Recursive update, as ``ConfigDict.update``: nested dicts are merged."""
        if len(args) > 1:
            raise TypeError("update only accept one positional argument")
        other: dict[Any, Any] = {}
        if args:
            src = args[0]
            items = dict.items(src) if isinstance(src, dict) else dict(src).items()
            other.update(items)
        other.update(kwargs)
        for key, value in other.items():
            current = self.get(key)
            if key in self and isinstance(current, dict) and isinstance(value, dict):
                current.update(value)
            else:
                self[key] = value

    # `|`, `|=` as addict's ``Dict`` (``ConfigDict``'s base): a structural copy of the left
    # side, then the recursive update (nested dicts merged, not replaced as by ``dict``'s `|`)
    def __or__(self, other: Any) -> Any:
        return _merged(self, other) if isinstance(other, dict) else NotImplemented

    def __ror__(self, other: Any) -> Any:
        return _merged(other, self) if isinstance(other, dict) else NotImplemented

    def __ior__(self, other: Any) -> Any:
        self.update(other)
        return self

    def pop(self, key: Any, default: Any = None) -> Any:
        return super().pop(key, default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        self[key] = default
        return self[key]

    def copy(self) -> _AttrDict:
        return _AttrDict(dict.items(self))

    __copy__ = copy

    def deepcopy(self) -> _AttrDict:
        """``addict.Dict.deepcopy``."""
        result: _AttrDict = copy.deepcopy(self)
        return result

    def to_dict(self) -> dict[Any, Any]:
        """``addict.Dict.to_dict``: a plain-dict deep conversion."""
        result: dict[Any, Any] = _to_builtin(self)
        return result


def _merged(left: dict[Any, Any], right: dict[Any, Any]) -> _AttrDict:
    """``left | right`` of config dicts: a structural copy of ``left`` updated recursively."""
    new: _AttrDict = _export_copy(left)
    new.update(right)
    return new


def _to_builtin(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _to_builtin(v) for k, v in dict.items(value)}
    if type(value) in (list, tuple):
        return type(value)(_to_builtin(v) for v in value)
    return value


def _hook(value: Any) -> Any:
    """``ConfigDict._hook``: plain dicts stored into a config dict become config dicts."""
    if type(value) is dict:
        return _AttrDict((k, _hook(v)) for k, v in value.items())
    if type(value) in (list, tuple):
        return type(value)(_hook(v) for v in value)
    return value


def _export_copy(value: Any) -> Any:
    """Structural copy of a value a base config exports (``_dict_to_config_dict_lazy``)."""
    if isinstance(value, dict):
        return _AttrDict((k, _export_copy(v)) for k, v in dict.items(value))
    if type(value) in (list, tuple):
        return type(value)(_export_copy(v) for v in value)
    return value


# --------------------------------------------------------------------------------------------
# Conversion to plain data
# --------------------------------------------------------------------------------------------

_DROPPED_TOP_LEVEL: Final = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    _StandIn,
    _ReadBase,
)


def _plain(value: Any, memo: dict[int, Any]) -> Any:
    key = id(value)
    if key in memo:
        return memo[key]
    out: Any
    if isinstance(value, _CallResult):
        out = CallRef(
            _plain(value._pw_target, memo),
            tuple(_plain(a, memo) for a in value._pw_args),
            {k: _plain(v, memo) for k, v in value._pw_kwargs.items()},
        )
    elif isinstance(value, _StandIn):
        out = value._pw_ref()
    elif isinstance(value, dict):
        out = {}
        memo[key] = out
        for k, v in dict.items(value):
            out[k] = _plain(v, memo)
        return out
    elif isinstance(value, list):
        out = []
        memo[key] = out
        out.extend(_plain(v, memo) for v in value)
        return out
    elif isinstance(value, tuple) and type(value) is tuple:
        out = tuple(_plain(v, memo) for v in value)
    elif isinstance(value, functools.partial) and isinstance(value.func, _StandIn):
        out = CallRef(
            _plain(value.func, memo),
            tuple(_plain(a, memo) for a in value.args),
            {k: _plain(v, memo) for k, v in value.keywords.items()},
            partial=True,
        )
    else:
        return value
    memo[key] = out
    return out


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


class _ConfigImportError(ImportError):
    """A base config import that cannot be resolved."""


def _relative_path_for(level: int, name: str, importer: Path) -> Path:
    base = importer.parent
    for _ in range(level - 1):
        base = base.parent
    return base.joinpath(*name.split(".")) if name else base


class _Session:
    """State of one :func:`load_config` call."""

    def __init__(self, root: Path, search_path: Sequence[Path]) -> None:
        self.root = root
        self.search_path = list(search_path)
        self.read_base = _ReadBase()
        self.loading: list[Path] = []
        self.files: set[str] = set()
        self.frameworks: set[str] = set()
        # (id of the importer's globals, base file) -> exported module; mmengine executes a base
        # once per importing file, so the cache is per importer. `_alive` pins the globals.
        self._bases: dict[tuple[int, Path], types.ModuleType] = {}
        self._alive: list[dict[str, Any]] = []
        self.builtins = dict(builtins.__dict__)
        self.builtins["__import__"] = self._import

    # -- executing files ------------------------------------------------------------------

    def execute(self, path: Path, module_name: str) -> dict[str, Any]:
        """Execute one config file and return its globals."""
        if path in self.loading:
            chain = " -> ".join(str(p) for p in [*self.loading, path])
            raise _ConfigImportError(f"circular config import: {chain}")
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise _error(f"{path}: cannot read config file: {reason}", path, None) from exc
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                code = compile(source, str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            line = exc.lineno
            at = f"{path}:{line}" if line is not None else str(path)  # (a NUL byte: no line)
            raise _error(f"{at}: SyntaxError: {exc.msg}", path, line) from exc
        except ValueError as exc:  # e.g. source with null bytes
            raise _error(f"{path}: invalid config source: {exc}", path, None) from exc
        namespace: dict[str, Any] = {
            "__builtins__": self.builtins,
            "__file__": str(path),
            "__name__": module_name,
        }
        self._alive.append(namespace)
        self.files.add(str(path))
        self.loading.append(path)
        # ``read_base`` of the importing file does not extend into the imported one
        outer_depth, self.read_base.depth = self.read_base.depth, 0
        try:
            exec(code, namespace)
        except ConfigError:
            raise
        except Exception as exc:
            found = self._config_line(exc)
            where, lineno = (Path(found[0]), found[1]) if found else (path, None)
            prefix = f"{where}:{lineno}" if lineno is not None else str(where)
            kind = "ImportError" if isinstance(exc, _ConfigImportError) else type(exc).__name__
            raise _error(f"{prefix}: {kind}: {exc}", where, lineno) from exc
        finally:
            self.loading.pop()
            self.read_base.depth = outer_depth
        return namespace

    def _config_line(self, exc: BaseException) -> tuple[str, int] | None:
        frames = traceback.extract_tb(exc.__traceback__)
        for frame in reversed(frames):
            if frame.filename in self.files and frame.lineno is not None:
                return frame.filename, frame.lineno
        return None

    def load_base(self, path: Path, module_name: str, importer: dict[str, Any]) -> types.ModuleType:
        """Execute a base config for ``importer`` and wrap what it exports in a module."""
        key = (id(importer), path)
        module = self._bases.get(key)
        if module is None:
            namespace = self.execute(path, module_name)
            module = types.ModuleType(module_name)
            module.__file__ = str(path)
            for name, value in namespace.items():
                if not name.startswith("__"):
                    setattr(module, name, _export_copy(value))
            self._bases[key] = module
        return module

    # -- the config's __import__ ----------------------------------------------------------

    def _import(
        self,
        name: str,
        globals: Mapping[str, Any] | None = None,
        locals: Mapping[str, Any] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> types.ModuleType:
        importer_ns: dict[str, Any] = globals if isinstance(globals, dict) else {}
        file = importer_ns.get("__file__")
        importer = Path(file) if isinstance(file, str) else self.root
        if level > 0:
            return self._import_relative(name, importer, importer_ns, fromlist, level)
        top = name.partition(".")[0]
        parts = name.split(".")
        if fromlist and (self.read_base.depth > 0 or "configs" in parts[1:]):
            path = self._resolve_absolute(parts, importer)
            if path is not None:
                if top in FRAMEWORK_PACKAGES:
                    self.frameworks.add(top)
                return self.load_base(path, name, importer_ns)
            if self.read_base.depth > 0:
                raise _ConfigImportError(
                    f"cannot find the base config module {name!r} (searched "
                    f"{', '.join(str(p) for p in self._search_roots(parts, importer)) or '-'})"
                )
        if top in STUBBED_PACKAGES:
            if top in FRAMEWORK_PACKAGES:
                self.frameworks.add(top)
            return self._stub(name, fromlist)
        try:
            module: types.ModuleType = builtins.__import__(
                name, globals, locals, fromlist or (), level
            )
        except ImportError:
            return self._stub(name, fromlist)
        return module

    def _stub(self, name: str, fromlist: Sequence[str] | None) -> _StubModule:
        if fromlist:
            return _StubModule(name, self)
        top, _, rest = name.partition(".")
        return _StubModule(top, self, rest)

    def _import_relative(
        self,
        name: str,
        importer: Path,
        importer_ns: dict[str, Any],
        fromlist: Sequence[str] | None,
        level: int,
    ) -> types.ModuleType:
        target = _relative_path_for(level, name, importer)
        dotted = "." * level + name
        file = target.with_name(target.name + ".py") if name else None
        if file is not None and file.is_file():
            return self.load_base(file, dotted, importer_ns)
        if target.is_dir():
            # ``from . import x`` / ``from .pkg import x``: each name is a config file in the dir
            package = types.ModuleType(dotted)
            for item in fromlist or ():
                sub = target / f"{item}.py"
                if item == "*" or not sub.is_file():
                    raise _ConfigImportError(
                        f"cannot import {item!r} from {dotted!r}: {sub} is not a config file"
                    )
                sep = "" if dotted.endswith(".") else "."
                setattr(package, item, self.load_base(sub, f"{dotted}{sep}{item}", importer_ns))
            return package
        raise _ConfigImportError(
            f"cannot find the config module {dotted!r} imported by {importer} "
            f"(no file {file if file is not None else target})"
        )

    def _search_roots(self, parts: list[str], importer: Path) -> list[Path]:
        """Candidate files for the absolute config module ``parts``, best first."""
        candidates: list[Path] = []
        rel_full = Path(*parts[:-1], parts[-1] + ".py")
        try:
            cut = parts.index("configs", 1)
        except ValueError:
            cut = -1
        rel_cfg = Path(*parts[cut + 1 : -1], parts[-1] + ".py") if cut >= 0 else None
        for directory in self.search_path:
            candidates.append(directory / rel_full)
            if rel_cfg is not None:
                candidates.append(directory / rel_cfg)
        exact: list[Path] = []
        loose: list[Path] = []
        if rel_cfg is not None:
            prefix = parts[: cut + 1]  # e.g. ['ais_bench', 'benchmark', 'configs']
            for start in (importer, self.root):
                for ancestor in start.parents:
                    if ancestor.name != "configs":
                        continue
                    tail = ancestor.parts[-len(prefix) :]
                    (exact if list(tail) == prefix else loose).append(ancestor / rel_cfg)
            candidates.extend(exact)
        # the installed package (what the reference's import finds) before a `configs`
        # directory that is not a copy of the package's own tree (a user's edited copies)
        try:
            spec = importlib.util.find_spec(parts[0])
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                candidates.append(Path(location).joinpath(*parts[1:-1], parts[-1] + ".py"))
        candidates.extend(loose)
        unique: list[Path] = []
        for candidate in candidates:
            if candidate not in unique:
                unique.append(candidate)
        return unique

    def _resolve_absolute(self, parts: list[str], importer: Path) -> Path | None:
        for candidate in self._search_roots(parts, importer):
            if candidate.is_file():
                return Path(os.path.abspath(candidate))
        return None


def _error(message: str, path: Path, line: int | None) -> ConfigError:
    err = ConfigError(message)
    err.path = f"{path}:{line}" if line is not None else str(path)
    err.filename = str(path)
    err.lineno = line
    return err


def _detect_flavor(session: _Session) -> Flavor:
    """``aisbench`` when the configs import ``ais_bench``; else ``opencompass`` when they import
    ``opencompass``; else (no framework import at all) from where the files live."""
    if "ais_bench" in session.frameworks:
        return AISBENCH
    if "opencompass" not in session.frameworks:
        for file in session.files:
            if "ais_bench" in Path(file).parts:
                return AISBENCH
    return OPENCOMPASS


def load_config(path: PathLike, *, search_path: Sequence[PathLike] = ()) -> Config:
    """Execute the OpenCompass/AISBench config file ``path`` and return its data.

    Loading **executes the file** (and the base configs it imports), as mmengine does.

    Args:
        path: the config file.
        search_path: directories to resolve absolute config imports
            (``from opencompass.configs.datasets.x import y``) against, tried first. Each is tried
            both as a ``sys.path``-style root (``<dir>/opencompass/configs/datasets/x.py``) and
            as a ``configs`` directory (``<dir>/datasets/x.py``).

    Raises:
        ConfigError: the file cannot be read, has a syntax error, imports a base config that
            cannot be found, or raises while executing; the message names the file and line.
    """
    root = Path(os.path.abspath(os.fspath(path)))
    session = _Session(root, [Path(os.path.abspath(os.fspath(p))) for p in search_path])
    if not root.is_file():
        reason = "is a directory" if root.is_dir() else "no such file"
        raise _error(f"{root}: cannot read config file: {reason}", root, None)
    namespace = session.execute(root, root.stem)
    memo: dict[int, Any] = {}
    data: dict[str, Any] = {}
    for name, value in namespace.items():
        if name.startswith("_"):
            continue
        if isinstance(value, _DROPPED_TOP_LEVEL) and not isinstance(value, _CallResult):
            continue
        data[name] = _plain(value, memo)
    flavor = _detect_flavor(session)
    return Config(data, path=root, flavor=flavor)
