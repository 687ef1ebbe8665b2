"""The whole-dataset job: every test row rendered exactly as OpenCompass's inferencers would.

:class:`DatasetRenderer` is built from a dataset config's ``infer_cfg`` (``ice_template``,
``prompt_template``, ``retriever``, ``inferencer``) and ``reader_cfg`` plus a model's
``meta_template``. :meth:`DatasetRenderer.render` retrieves in-context examples, renders them
(``generate_ice``), renders each row around them (``generate_item`` in gen mode, one
``generate_label_prompt_item`` per label in ppl mode) and applies the model side
(``parse_template``) -- in one Rust call with the interpreter released, each distinct list of
in-context examples rendered once. Inputs the Rust job does not take (``max_seq_len`` trimming,
rows with differing columns, unusual values) go through the same steps row by row with the
mirrored classes, which reproduce the reference exactly.

AISBench-only templates are rendered row by row with the mirrored classes, as AISBench's
inferencers drive them: an ``MMPromptTemplate`` (``GenInferencer``: ``generate_item`` then the
model's ``parse_template(prompt, 'gen')``; an API parser gives messages whose prompt is the part
list, the LM parser renders ``prompt_mm`` as an empty prompt, as the reference does) and a
``MultiTurnPromptTemplate`` (``MultiTurnGenInferencer``: one model input per request of the row,
for ``infer_mode`` ``'every_with_gt'`` or ``'last'``; ``'every'`` needs the model's replies, see
:func:`promptweave.aisbench.multiturn_requests`).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, cast

from promptweave import _backend, _core
from promptweave._flavor import AISBENCH, OPENCOMPASS
from promptweave.chat_models import chat_meta_template, convert_chat_messages, format_fastchat
from promptweave.chat_template import ChatTemplate
from promptweave.config import _type_name
from promptweave.errors import (
    ArgumentError,
    PromptRenderError,
    TemplateError,
    UnmodelledTruncationWarning,
    add_note,
    check_threads,
    make_error,
)
from promptweave.raw_prompt_template import flat_dict, immutable
from promptweave.retrievers import partial_indices, prepare_loaded
from promptweave.tokens import TokenCounter, api_token_len, as_token_counter

__all__ = ["DatasetRenderer", "RenderResult", "as_rows"]

Mode = Literal["gen", "ppl"]
#: inferencers that score generation prompts (their 'ppl' parse)
PPL_ONLY = ("PPLOnlyInferencer", "InferencePPLOnlyInferencer")
Flow = Literal["multimodal", "multiturn", "chat"]
#: AISBench-only template classes, rendered row by row: class name -> flow
_AIS_FLOWS: dict[str, Flow] = {
    "MMPromptTemplate": "multimodal",
    "MultiTurnPromptTemplate": "multiturn",
}
_INFER_MODES = ("every", "last", "every_with_gt")
#: inferencers whose model inputs are built with the model itself: what an agent or a search
#: sends cannot be rendered from the dataset (inferencer -> what builds them)
_MODEL_BUILT_PROMPTS = {
    "AgentInferencer": "the agent (its protocol, tools and each step's replies)",
    "AttackInferencer": "the adversarial prompt search, which queries the model",
    "ToTInferencer": "the thoughts the model generates and evaluates",
    "BFCLV3FunctionCallInferencer": "the tool calls the model makes and their executed results",
}
#: inferencers whose prompts are built from something promptweave does not model
_CHATML_SOURCE = "each row's own chatml_question messages (not the prompt template)"
_NOT_MODELLED = {"ChatMLInferencer": _CHATML_SOURCE, "ParallelChatMLInferencer": _CHATML_SOURCE}
#: OpenCompass's ChatInferencer and its parallel variant (the same chats)
_CHAT_INFERENCERS = ("ChatInferencer", "ParallelChatInferencer")
_SLOT = re.compile(r"\{([^{}]*)\}")


def as_rows(data: Any, split: str = "test") -> list[dict[str, Any]]:
    """Rows as a list of dicts from a list of dicts (used as it is), a dict of column lists, a
    pandas DataFrame, a pyarrow Table or a HuggingFace ``datasets.Dataset`` (none of them
    imported here)."""
    if data is None:
        return []
    from promptweave.retrievers import _rows_of

    return _rows_of(data, split)


@dataclass
class RenderResult:
    """What :meth:`DatasetRenderer.render` produced.

    Attributes:
        prompts: per test row, the model input: a ``str`` (LM models), a ``PromptList`` of
            ``{'role', 'prompt'}`` messages (API models), or in ppl mode a dict label -> input.
            For a ``MultiTurnPromptTemplate`` (AISBench) or a ``ChatInferencer`` config
            (OpenCompass): the list of the row's model inputs, one per request the inferencer
            sends in ``infer_mode``.
        ice_indices: per test row, the in-context example indices actually used (after any
            ``max_seq_len`` trimming).
        labels: the ppl labels (``None`` in gen mode).
        mode: ``'gen'`` or ``'ppl'``.
        missing_columns: template placeholder -> number of rows that lack that column (the
            placeholder is left in the prompt, as the reference does).
        rust_rows: how many rows the Rust job rendered (the rest went row by row).
        infer_mode: the multi-turn ``infer_mode`` the requests are of (``None`` for other
            templates and inferencers).
        messages: with a chat template, the chat messages each prompt was rendered from
            (``None`` otherwise).
        test_indices: per rendered row, its position in the test rows given to
            :meth:`~DatasetRenderer.render`: ``range(len(prompts))`` for rows used as given; a
            list with ``loaded=True`` (the reader config's ``test_range`` selects rows and the
            dataset's ``n`` repeats them).
        normalizing: with ``normalizing_str`` (OpenCompass ppl mode), per row, label ->
            ``{'context', 'normalizing_prompt'}``: the prompt before the template's
            ``sep_token`` (whose tokens the scored prompt's loss skips: ``mask_length``) and
            ``normalizing_str`` + the answer after it (scored with ``normalizing_str``'s tokens
            skipped), the second model input ``PPLInferencer`` scores per label; ``None``
            otherwise.
    """

    prompts: list[Any]
    ice_indices: list[list[int]]
    labels: list[Any] | None
    mode: Mode
    missing_columns: dict[str, int] = field(default_factory=dict)
    rust_rows: int = 0
    infer_mode: str | None = None
    messages: list[Any] | None = None
    test_indices: Sequence[int] = ()
    normalizing: list[dict[Any, dict[str, str]]] | None = None


class _Rendered(NamedTuple):
    prompts: list[Any]
    used: list[list[int]]
    #: rows rendered by the Rust dataset job
    rust_rows: int
    #: every row is known to have the template's columns when the first one has them
    uniform: bool
    #: every test row is known to have every column the prompt template uses
    test_complete: bool = False
    #: ``normalizing_str`` (OpenCompass ppl): per row, label -> its context and normalizing prompt
    normalizing: list[dict[Any, dict[str, str]]] | None = None


class _Job(NamedTuple):
    """What the render paths take: the rows, each test row's in-context example indices, the
    labels (ppl mode; ``None`` in gen mode) and the retriever."""

    test: list[dict[str, Any]]
    train: list[dict[str, Any]]
    indices: list[list[int]]
    labels: list[Any] | None
    retriever: Any


def _note_chat_row(exc: BaseException, nested: list[Any] | None) -> None:
    """An error of the chat template's batch says which test row (and, for a row of several
    requests, which request) it came from: the batch's conversation index (the error's
    ``.conversation``, which ``render_many`` sets), mapped back to the row."""
    index = getattr(exc, "conversation", None)
    if not isinstance(index, int):
        return
    if nested is None:
        add_note(exc, f"while applying the chat template to test row {index}")
        return
    at = 0
    for row, requests in enumerate(nested):
        if index < at + len(requests):
            note = f"while applying the chat template to test row {row} (request {index - at})"
            add_note(exc, note)
            return
        at += len(requests)


#: AISBench 3.1's service models that make no perplexity request (``get_ppl_request_body``;
#: VLLMCustomAPI and VLLMCustomAPIChat and their variants do) ...
_AIS_NO_PPL_API_MODELS: Final = frozenset(
    {
        "MindieStreamApi",
        "TGICustomAPI",
        "TGICustomAPIStream",
        "TritonCustomAPI",
        "TritonCustomAPIStream",
        "VITAGenerateAPI",
    }
)
#: ... and its local models, which its PPLInferencer (a service-model inferencer) cannot drive
_AIS_LOCAL_MODELS: Final = frozenset(
    {
        "HuggingFace",
        "HuggingFaceCausalLM",
        "HuggingFaceBaseModel",
        "HuggingFacewithChatTemplate",
        "HuggingFaceQwen2VLwithChatTemplate",
        "QwenImageEditModel",
        "VLLMOfflineVLModel",
    }
)


def _refuse_ais_ppl(model_cfg: Mapping[str, Any], model_class: str) -> None:
    """AISBench 3.1 cannot score perplexity with this model: raise what it raises (its error
    code, the built-in type), instead of rendering prompts no model would get."""
    if model_cfg.get("stream") == True:  # noqa: E712  (the reference's own test)
        raise make_error(
            ArgumentError,
            f"{model_class or 'the model'} has stream=True: AISBench's PPLInferencer refuses "
            "stream mode for perplexity (ppl) inference",
            compat=ValueError,
            code="ICLI-PARAM-007",
            path="stream",
        )
    if model_class in _AIS_NO_PPL_API_MODELS:
        raise make_error(
            ArgumentError,
            f"{model_class} makes no perplexity (ppl) request: AISBench says 'PPL is not "
            "supported for this model' (models that do: VLLMCustomAPI, VLLMCustomAPIChat)",
            compat=NotImplementedError,
            code="ICLI-IMPL-008",
        )
    if model_class in _AIS_LOCAL_MODELS:
        raise make_error(
            ArgumentError,
            f"{model_class} is a local model: AISBench 3.1's PPLInferencer drives service "
            "models only, and fails with it (AttributeError: 'PPLInferencer' object has no "
            "attribute 'inference'); render the ppl prompts with a service model "
            "(VLLMCustomAPI, VLLMCustomAPIChat) or without a model",
            compat=AttributeError,
        )


def _warn_unmodelled_truncation(model_cfg: Mapping[str, Any], model_class: str) -> None:
    """The model options that cut prompts after they are rendered, by tokens (the model's own
    tokenizer, at generation time): said, since the rendered prompt is not what such a model
    receives when the prompt is long."""
    if model_cfg.get("drop_middle"):
        extra = ""
        if model_class == "TurboMindModelwithChatTemplate":
            extra = (
                "; this class also sends only the first message's text of a prompt of several "
                "messages"
            )
        warnings.warn(
            f"{model_class or 'the model'} has drop_middle=True: prompts longer than its "
            f"max_seq_len are cut in the middle by tokens, which is not rendered here{extra}",
            UnmodelledTruncationWarning,
            stacklevel=3,
        )
    elif model_cfg.get("mode") == "mid":
        warnings.warn(
            f"{model_class or 'the model'} has mode='mid': prompts longer than its max_seq_len "
            "(less max_out_len) are cut in the middle by tokens, which is not rendered here",
            UnmodelledTruncationWarning,
            stacklevel=3,
        )


@contextlib.contextmanager
def _row_note(i: int) -> Iterator[None]:
    """An exception raised inside says which test row it came from (Python 3.11+ notes)."""
    try:
        yield
    except Exception as exc:
        add_note(exc, f"while rendering test row {i}")
        raise


class _IgnoredOutput:
    """An output handler that keeps nothing (the requests are what is rendered)."""

    def save_results(self, **_: Any) -> None:
        pass

    def save_multiround_results(self, **_: Any) -> None:
        pass


_IGNORED_OUTPUT = _IgnoredOutput()


#: the reference template classes' constructor parameters (the first one is required)
_TEMPLATE_PARAMS = ("template", "ice_token", "sep_token")
_RAW_PARAMS = ("messages", "format_variables", "ice_token")


def _template_args(
    cfg: Mapping[str, Any], name: str, params: tuple[str, ...], what: str
) -> dict[str, Any]:
    """The keyword arguments a template config gives its class (``type`` left out), checked
    against the reference class's constructor: an unknown or missing argument is the
    ``TypeError`` the reference's config builder raises, naming the config entry."""
    args = {k: v for k, v in cfg.items() if k != "type"}
    unknown = [k for k in args if k not in params]
    if unknown:
        raise make_error(
            TemplateError,
            f"{what}: {name} got an unexpected keyword argument {unknown[0]!r} "
            f"(its arguments are {', '.join(params)})",
            compat=TypeError,
        )
    if params[0] not in args:
        raise make_error(
            TemplateError,
            f"{what}: {name} is missing its required argument {params[0]!r}",
            compat=TypeError,
        )
    return args


class DatasetRenderer:
    """Renders a whole dataset as OpenCompass's (or AISBench's) inferencers would.

    Args:
        infer_cfg: the dataset's ``infer_cfg``: ``ice_template`` / ``prompt_template`` (config
            dicts or ``PromptTemplate`` objects), ``retriever`` (config dict), ``inferencer``.
        reader_cfg: the dataset's ``reader_cfg`` (``input_columns``, ``output_column``, and
            ``train_range`` / ``test_range``, which ``render(..., loaded=True)`` applies as
            the reference's ``DatasetReader`` does).
        meta_template: the model's meta template (``None`` for none).
        api: render for an API model (``APITemplateParser``: message lists) instead of a
            string model (``LMTemplateParser``).
        flavor: ``'opencompass'`` or ``'aisbench'`` behaviour.
        mode: ``'gen'`` or ``'ppl'``; default from the inferencer type (generation prompts of
            ``PPLOnlyInferencer`` / ``InferencePPLOnlyInferencer`` come in the 'ppl' parse the
            model scores).
        labels: ppl labels (default: the reference's ``get_labels``).
        gen_field_replace_token: what the output column is masked with in gen mode.
        max_seq_len: drop in-context examples from the end until the prompt fits, as
            OpenCompass's ``GenInferencer`` / ``PPLInferencer`` do (needs ``token_counter``).
        token_counter: a callable ``str -> int``, a ``tokenizers.Tokenizer`` or a tiktoken
            encoding.
        threads: threads for the rows the core renders with the interpreter released
            (default 1: on 2 cores a second thread measured no faster).
        infer_mode: for an AISBench ``MultiTurnPromptTemplate``: ``'every_with_gt'`` (one request
            per answer slot, gold answers in the history) or ``'last'`` (one request, the whole
            dialogue); default: the inferencer config's ``infer_mode``, else ``'every'`` (as
            ``MultiTurnGenInferencer``). ``'every'`` is refused: its requests hold the model's
            replies (use :func:`promptweave.aisbench.multiturn_requests` with ``generate=``).
            Not used by other templates.
        abbr, n, k: the dataset config's ``abbr``, ``n`` (repetitions of every row) and ``k``
            (``n >= k`` is checked, as the reference does), for ``render(..., loaded=True)``;
            :meth:`from_config` takes them from the dataset config.
        chat_template: render for a local chat model (HuggingFace/vLLM/LMDeploy "with chat
            template"): a :class:`~promptweave.ChatTemplate`, or a path to a model directory,
            a ``tokenizer_config.json`` or a ``.jinja`` file. Prompts are parsed with the API parser
            (``meta_template``, else the framework's default chat meta template, see
            :mod:`promptweave.chat_models`), converted to chat messages and rendered with
            ``add_generation_prompt=True``; every prompt is then a ``str``
            (:attr:`RenderResult.messages` keeps the messages). gen mode only.
        chat_template_kwargs: extra variables for the chat template (a vLLM chat model's
            ``chat_template_kwargs``, e.g. ``enable_thinking``).
        strip_bos: remove the tokenizer's BOS token from the start of each rendered text, as
            OpenCompass's LMDeploy chat model does before handing the text to its engine.
        fastchat_template: render for a chat model configured with ``fastchat_template`` (the
            FastChat conversation template it formats messages with instead of its tokenizer's
            chat template; ``'vicuna'``): parsed and converted as with ``chat_template``, then
            formatted by :func:`promptweave.chat_models.format_fastchat`. gen mode only.
    """

    def __init__(
        self,
        infer_cfg: Mapping[str, Any],
        reader_cfg: Mapping[str, Any] | None = None,
        meta_template: Any = None,
        *,
        api: bool = False,
        flavor: str = OPENCOMPASS,
        mode: Mode | None = None,
        labels: Sequence[Any] | None = None,
        gen_field_replace_token: str = "",
        max_seq_len: int | None = None,
        token_counter: Any = None,
        normalizing_str: str | None = None,
        threads: int | None = None,
        infer_mode: str | None = None,
        chat_template: Any = None,
        abbr: str = "dataset",
        n: int = 1,
        k: int | Sequence[int] = 1,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        strip_bos: bool = False,
        fastchat_template: str | None = None,
    ) -> None:
        if flavor not in (OPENCOMPASS, AISBENCH):
            raise ValueError(f"flavor must be 'opencompass' or 'aisbench', got {flavor!r}")
        self.flavor = flavor
        #: the dataset config's ``abbr``, ``n`` and ``k`` (``render(..., loaded=True)``)
        self.abbr, self.n, self.k = abbr, n, k
        max_k = max(k) if isinstance(k, Sequence) else k
        if max_k > n:
            raise make_error(
                ArgumentError,
                f"Maximum value of `k` ({max_k}) must be less than or equal to `n` ({n})",
                compat=AssertionError if flavor == OPENCOMPASS else ValueError,
                code="DSET-PARAM-002" if flavor == AISBENCH else None,
            )
        reader_cfg = dict(reader_cfg or infer_cfg.get("reader_cfg") or {})
        self.input_columns = reader_cfg.get("input_columns")
        self.output_column: str | None = reader_cfg.get("output_column")
        #: the reader config's ranges (``None``: the whole split), checked here
        self.train_range: Any = reader_cfg.get("train_range")
        self.test_range: Any = reader_cfg.get("test_range")
        #: the splits' names in the loaded data (OpenCompass's ``subdivision`` names them)
        self.train_split = str(reader_cfg.get("train_split", "train"))
        self.test_split = str(reader_cfg.get("test_split", "test"))
        for split, size in (("train", self.train_range), ("test", self.test_range)):
            partial_indices(0, size, split, flavor)
        self.ice_template = self._template(infer_cfg.get("ice_template"), "ice_template")
        self.prompt_template = self._template(infer_cfg.get("prompt_template"), "prompt_template")
        self.retriever_cfg = dict(infer_cfg.get("retriever") or {"type": "ZeroRetriever"})
        self.inferencer_cfg = dict(infer_cfg.get("inferencer") or {})
        self.mode: Mode = mode or self._mode_of(self.inferencer_cfg)
        #: how the generation prompts are parsed for the model: PPLOnlyInferencer and
        #: InferencePPLOnlyInferencer score them (``get_ppl_from_template``: the 'ppl' parse,
        #: which differs from the 'gen' parse for dialogue templates under a meta template)
        self.parse_mode: Mode = self.mode
        if self.mode == "gen" and _type_name(self.inferencer_cfg.get("type")) in PPL_ONLY:
            self.parse_mode = "ppl"
        self.infer_mode: str | None = None
        self.flow: Flow | None
        inferencer = _type_name(self.inferencer_cfg.get("type"))
        if inferencer in _MODEL_BUILT_PROMPTS:
            raise make_error(
                TemplateError,
                f"{inferencer}'s model inputs are built with {_MODEL_BUILT_PROMPTS[inferencer]}; "
                "they cannot be rendered from the dataset. To see the prompt template's prompts, "
                "render the config with its inferencer set to GenInferencer",
            )
        if inferencer in _NOT_MODELLED:
            raise make_error(
                TemplateError,
                f"{inferencer} builds its prompts from {_NOT_MODELLED[inferencer]}, which "
                "promptweave does not render",
            )
        if inferencer in _CHAT_INFERENCERS:
            # OpenCompass's ChatInferencer: one chat per row (from the prompt template, if any,
            # or the columns), its requests per infer_mode; in-context examples are not used
            if self.flavor != OPENCOMPASS:
                raise make_error(
                    TemplateError,
                    "ChatInferencer is an OpenCompass inferencer; render with "
                    "flavor='opencompass' (AISBench's multi-turn datasets use "
                    "MultiTurnPromptTemplate)",
                )
            if self.mode == "ppl":
                raise make_error(
                    TemplateError, "ChatInferencer builds generation prompts only (no ppl mode)"
                )
            self.template = self.prompt_template
            self.flow = "chat"
            self.infer_mode = self._infer_mode(infer_mode, chat=True)
        else:
            self.template = self._final_template()
            self.flow = self._flow_of(self.template)
        if self.flow is not None and self.mode == "ppl":
            raise make_error(
                TemplateError,
                f"a {type(self.template).__name__} builds generation prompts only; it cannot be "
                "rendered in ppl mode",
            )
        if self.flow == "multiturn":
            self.infer_mode = self._infer_mode(infer_mode)
        self.labels = list(labels) if labels is not None else None
        self.chat_template: ChatTemplate | None = None
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.strip_bos = strip_bos
        self.fastchat_template = fastchat_template or None
        if chat_template is not None and self.fastchat_template is not None:
            raise ArgumentError(
                "give chat_template or fastchat_template, not both: a chat model formats its "
                "messages with one of them"
            )
        if chat_template is not None or self.fastchat_template is not None:
            if self.mode == "ppl":
                raise ArgumentError(
                    "a chat template renders generation prompts (add_generation_prompt=True, as "
                    "the reference's chat models); it cannot be used in ppl mode"
                )
            if self.fastchat_template is not None:
                format_fastchat([], self.fastchat_template)  # an unknown name fails here
            else:
                self.chat_template = _as_chat_template(chat_template)
            # a chat model parses with an API parser: its meta template, else the default one
            api = True
            meta_template = meta_template or chat_meta_template(flavor)
        self.api = api
        self.meta_template = meta_template
        if getattr(self.template, "prompt_type", None) == "raw_messages" and not api:
            # the reference's LMTemplateParser fails on message lists with a bare AssertionError
            raise make_error(
                TemplateError,
                "a RawPromptTemplate renders OpenAI-style messages, which only API / chat models "
                "take: render with api=True (promptweave render --api)",
                compat=AssertionError,
            )
        parser_cls = self._m.APITemplateParser if api else self._m.LMTemplateParser
        self.parser = parser_cls(meta_template)
        self.gen_field_replace_token = gen_field_replace_token
        self.max_seq_len = max_seq_len
        self.token_counter: TokenCounter | None = (
            as_token_counter(token_counter) if token_counter is not None else None
        )
        if max_seq_len is not None and self.token_counter is None:
            raise ValueError("max_seq_len needs a token_counter")
        if max_seq_len is not None and flavor == AISBENCH:
            raise ValueError(
                "AISBench never trims in-context examples by max_seq_len; use the opencompass "
                "flavour to reproduce OpenCompass's trimming"
            )
        self.normalizing_str = normalizing_str
        #: CLPInferencer keeps one token spare: it trims while ``count + 1 > max_seq_len``
        self._clp = _type_name(self.inferencer_cfg.get("type")) == "CLPInferencer"
        self._spare_tokens = 1 if self._clp else 0
        # one thread by default: on 2 cores a second rendering thread measured no faster
        self.threads = check_threads(threads, "DatasetRenderer") or 1

    @property
    def _m(self) -> Any:
        """The flavour's module (a property, not an attribute: a renderer copies and pickles
        as plain data)."""
        from promptweave import aisbench, opencompass

        return aisbench if self.flavor == AISBENCH else opencompass

    @classmethod
    def from_config(
        cls, dataset_cfg: Mapping[str, Any], model_cfg: Mapping[str, Any] | None = None, **kw: Any
    ) -> DatasetRenderer:
        """From a dataset config dict and, optionally, a model config dict: the prompts are then
        parsed as that model's class parses them (:func:`promptweave.config.model_prompting`:
        message lists for API models, the class's default meta template where the config has
        none), and, in the OpenCompass flavour, in-context examples are dropped from prompts
        longer than the model's ``max_seq_len`` as OpenCompass's inferencers drop them -- counted
        with ``token_counter=`` if given, else with the API models' estimate
        (:func:`promptweave.tokens.api_token_len`) for the classes that use it.
        ``meta_template=`` / ``api=`` / ``max_seq_len=`` override what the model config gives."""
        meta = kw.pop("meta_template", None)
        chat_model = False
        if model_cfg is not None:
            from promptweave.config import model_prompting

            flavor = kw.get("flavor", OPENCOMPASS)
            inferencer = dataset_cfg["infer_cfg"].get("inferencer") or {}
            # (an inferencer that is not a dict is refused by the constructor)
            mode = kw.get("mode") or (
                cls._mode_of(inferencer) if isinstance(inferencer, Mapping) else None
            )
            prompting = model_prompting(model_cfg, flavor)
            chat_model = prompting.chat_template
            if flavor == AISBENCH and mode == "ppl":
                _refuse_ais_ppl(model_cfg, prompting.model_class)
            _warn_unmodelled_truncation(model_cfg, prompting.model_class)
            if meta is None:
                meta = prompting.meta_template
            kw.setdefault("api", prompting.api)
            # OpenCompass drops in-context examples from prompts longer than the model's
            # max_seq_len: with the caller's token counter, or the API models' estimate
            if (
                prompting.max_seq_len is not None
                and flavor == OPENCOMPASS
                and "max_seq_len" not in kw
            ):
                if kw.get("token_counter") is not None:
                    kw["max_seq_len"] = prompting.max_seq_len
                elif prompting.token_count == "words":
                    kw["max_seq_len"] = prompting.max_seq_len
                    kw["token_counter"] = api_token_len
            if kw.get("chat_template") is not None:
                kw.setdefault("chat_template_kwargs", prompting.chat_template_kwargs)
                kw.setdefault("strip_bos", prompting.strip_bos)
            elif prompting.fastchat_template and mode == "gen":
                kw.setdefault("fastchat_template", prompting.fastchat_template)
        for key in ("abbr", "n", "k"):
            if key in dataset_cfg:
                kw.setdefault(key, dataset_cfg[key])
        renderer = cls(dataset_cfg["infer_cfg"], dataset_cfg.get("reader_cfg"), meta, **kw)
        chat = renderer.chat_template
        if chat_model and chat is not None:
            # the chat-template classes never give their model a second BOS token: HuggingFace
            # and vLLM encode the text without special tokens, LMDeploy strips the BOS from it
            # first; the default double-BOS warning (about a caller's own encoding) does not
            # apply. A check the caller asked for ('error') is kept.
            if chat.double_bos == "warn" and chat.tokenizer_adds_bos:
                chat = copy.copy(chat)
                chat.double_bos = "ignore"
                renderer.chat_template = chat
        return renderer

    # ------------------------------------------------------------------ configuration
    def _template(self, cfg: Any, what: str) -> Any:
        if cfg is None:
            return None
        if isinstance(cfg, self._m.PromptTemplate):
            return cfg
        if self.flavor == AISBENCH and isinstance(
            cfg, (self._m.MMPromptTemplate, self._m.MultiTurnPromptTemplate)
        ):
            return cfg
        if not isinstance(cfg, Mapping):
            raise make_error(TemplateError, f"{what} must be a config dict, got {cfg!r}")
        name = _type_name(cfg.get("type")) or "PromptTemplate"
        if name in _AIS_FLOWS:
            if self.flavor != AISBENCH:
                raise make_error(
                    TemplateError,
                    f"{what}: {name} is an AISBench template; render with flavor='aisbench' "
                    "(promptweave render --flavor aisbench)",
                )
            # rendered row by row by the mirrored class, as AISBench's inferencers do
            cls = getattr(self._m, name)
            return cls(**_template_args(cfg, name, _TEMPLATE_PARAMS, what))
        if name == "RawPromptTemplate" and self.flavor == OPENCOMPASS:
            # OpenAI-style messages: rendered row by row by the mirrored class
            return self._m.RawPromptTemplate(**_template_args(cfg, name, _RAW_PARAMS, what))
        if name != "PromptTemplate":
            raise make_error(
                TemplateError, f"{what}: template type {name!r} is not supported by the renderer"
            )
        return self._m.PromptTemplate(**_template_args(cfg, name, _TEMPLATE_PARAMS, what))

    def _flow_of(self, template: Any) -> Flow | None:
        if self.flavor != AISBENCH:
            return None
        if isinstance(template, self._m.MMPromptTemplate):
            return "multimodal"
        if isinstance(template, self._m.MultiTurnPromptTemplate):
            return "multiturn"
        return None

    def _infer_mode(self, infer_mode: str | None, chat: bool = False) -> str:
        """The multi-turn mode of AISBench's ``MultiTurnGenInferencer`` (default ``'every'``) or,
        with ``chat``, of OpenCompass's ``ChatInferencer`` (default ``'last'``): the argument,
        else the inferencer config's, else the default. ``'every'`` sends the model's own
        replies back, so its requests cannot be rendered: refused, naming the Python API that
        drives a model instead."""
        mode = infer_mode if infer_mode is not None else self.inferencer_cfg.get("infer_mode")
        default = "last" if chat else "every"
        if mode is None:
            mode = default
        if mode not in _INFER_MODES:
            if chat:
                raise make_error(
                    ArgumentError,
                    f"ChatInferencer's infer_mode must be one of {list(_INFER_MODES)}, got "
                    f"{mode!r}",
                    compat=AssertionError,
                    path="infer_mode",
                )
            raise make_error(
                ArgumentError,
                "multiturn mode out of range. Multiturn dialogue infer model only supports every、"
                f"last or every_with_gt, but got {mode}",
                path="infer_mode",
                code="ICLI-PARAM-002",
            )
        if mode == "every":
            inferencer = "ChatInferencer" if chat else "MultiTurnGenInferencer"
            source = (
                "given"
                if infer_mode is not None
                else "set by the inferencer config"
                if "infer_mode" in self.inferencer_cfg
                else f"{inferencer}'s default"
            )
            drive = (
                "promptweave.ChatInferencer(generate, parser, 'every')"
                if chat
                else "promptweave.aisbench.multiturn_requests(template, row, 'every', parser, "
                "generate=...)"
            )
            raise make_error(
                ArgumentError,
                f"infer_mode 'every' ({source}) sends the model's own replies back in each later "
                "request, so its requests cannot be rendered without a model: render "
                "infer_mode='every_with_gt' (gold answers in the history) or 'last' (promptweave "
                f"render --infer-mode ...), or drive the model with {drive}",
                path="infer_mode",
            )
        return str(mode)

    @staticmethod
    def _mode_of(inferencer_cfg: Mapping[str, Any]) -> Mode:
        # Only PPLInferencer / LLInferencer build one prompt per label. CLPInferencer builds
        # generation prompts (parsed in 'gen' mode); PPLOnlyInferencer and
        # InferencePPLOnlyInferencer build generation prompts too, which the model scores in
        # their 'ppl' parse (`parse_mode`; the inferencers' saved origin_prompt is the 'gen'
        # parse, the same text for string templates).
        name = _type_name(inferencer_cfg.get("type"))
        if name in ("PPLInferencer", "LLInferencer"):
            return "ppl"
        return "gen"

    def _final_template(self) -> Any:
        """The retriever's template combination matrix (spec 04 §4.1)."""
        pt, it = self.prompt_template, self.ice_template
        code = "ICLR-IMPL-002" if self.flavor == AISBENCH else None
        if pt is not None and it is not None:
            if pt.ice_token is None:
                raise make_error(
                    TemplateError,
                    "ice_token of prompt_template is not provided",
                    compat=NotImplementedError,
                    code=code,
                )
            return pt
        if it is not None:
            if it.ice_token is None:
                raise make_error(
                    TemplateError,
                    "ice_token of ice_template is not provided",
                    compat=NotImplementedError,
                    code=code,
                )
            return it
        if pt is not None:
            return pt
        raise make_error(
            TemplateError,
            "Leaving prompt as empty is not supported",
            compat=NotImplementedError,
            code="ICLR-IMPL-003" if self.flavor == AISBENCH else None,
        )

    # ------------------------------------------------------------------ rendering
    def _retriever(self, dataset: Any, ice_indices: Any = None) -> Any:
        """The configured retriever over ``dataset``. With ``ice_indices`` (computed elsewhere), a
        retriever promptweave does not have (BM25, TopK, ...) becomes an ``IndexListRetriever``
        with the configured separators: only they matter once the indices are known."""
        from promptweave import retrievers

        cfg = dict(self.retriever_cfg)
        name = _type_name(cfg.pop("type", None)) or "ZeroRetriever"
        cls = getattr(self._m, name, None)
        if cls is None and self.flavor != AISBENCH:
            cls = getattr(retrievers, name, None)
        if cls is None and ice_indices is not None:
            cls = self._m.IndexListRetriever
            cfg = {k: cfg[k] for k in ("ice_separator", "ice_eos_token") if k in cfg}
            cfg["ice_indices"] = ice_indices
        if cls is None and self.flavor == AISBENCH and hasattr(retrievers, name):
            raise make_error(
                TemplateError,
                f"retriever {name!r} is an OpenCompass retriever; AISBench 3.1 has only "
                "ZeroRetriever, FixKRetriever and RandomRetriever (render with "
                "flavor='opencompass', or pass the indices as ice_indices= / --ice-indices FILE)",
            )
        if cls is None:
            raise make_error(
                TemplateError,
                f"retriever {name!r} is not available; compute the in-context example indices "
                "elsewhere and pass them as ice_indices= (promptweave render: --ice-indices FILE)",
            )
        if self.flavor == AISBENCH:
            cfg.setdefault("ice_template", self._cfg_of(self.ice_template))
            cfg.setdefault("prompt_template", self._cfg_of(self.prompt_template))
        return cls(dataset, **cfg)

    @staticmethod
    def _cfg_of(template: Any) -> Any:
        if template is None:
            return None
        return {
            "type": type(template),
            "template": template.template,
            "ice_token": template.ice_token,
            "sep_token": template.sep_token,
        }

    def _separators(self, retriever: Any) -> tuple[str, str]:
        it = self.ice_template
        if it is not None and it.prompt_type == "meta":
            return "", ""
        return retriever.ice_separator, retriever.ice_eos_token

    def render(
        self,
        test: Any,
        train: Any = None,
        *,
        ice_indices: Sequence[Sequence[int]] | None = None,
        limit: int | None = None,
        strict: bool = False,
        progress: Callable[[int], None] | None = None,
        loaded: bool = False,
    ) -> RenderResult:
        """Render every test row (the first ``limit`` ones if given).

        By default the rows are those the reference's templates see (its reader's splits, as
        ``dataset.test`` / ``dataset.train`` give them), used as they are; without ``train`` the
        examples come from the test rows. ``loaded=True`` takes them as a dataset's ``load()``
        returned them and prepares them first as the framework's ``BaseDataset`` and
        ``DatasetReader`` do: ``subdivision``/``idx`` columns, repetition ``n`` times (the
        dataset config's ``n``) and the reader config's ``train_range``/``test_range``
        (``'[0:64]'``: a slice; a count or a fraction: a seeded shuffle), in the framework's
        order (:func:`promptweave.retrievers.prepare_loaded`). ``limit`` then keeps the first
        test rows; :attr:`RenderResult.test_indices` gives each rendered row's position in
        ``test``.

        ``ice_indices`` (one list of train indices per test row) replaces the configured
        retriever, so any external retriever (BM25, embeddings) plugs in. ``strict`` turns a
        template placeholder whose column is missing from a row into an error naming both.
        """
        from promptweave.retrievers import Dataset

        test_rows = as_rows(test, "test")
        test_indices: list[int] | range = range(len(test_rows))
        if loaded:
            test_rows, train_rows, test_indices = prepare_loaded(
                test_rows,
                as_rows(train, "train") if train is not None else None,
                abbr=self.abbr,
                n=self.n,
                train_range=self.train_range,
                test_range=self.test_range,
                flavor=self.flavor,
                train_split=self.train_split,
                test_split=self.test_split,
            )
        else:
            # the examples come from the whole train split (the test split when there is none)
            train_rows = as_rows(train, "train") if train is not None else test_rows
        if limit is not None:
            test_rows = test_rows[:limit]
            test_indices = test_indices[:limit]
        dataset = Dataset._of_rows(test_rows, train_rows, self.input_columns, self.output_column)
        if ice_indices is not None:
            ice_indices = list(ice_indices)[: len(test_rows)]
        retriever = self._retriever(dataset, ice_indices)
        # lists are passed on as they are (FixK hands every row the same list object); zero-shot
        # rows share one empty list, so the job groups them at no cost
        indices: list[list[int]]
        if ice_indices is None and type(retriever).__name__ == "ZeroRetriever":
            indices = [[]] * len(test_rows)
        elif ice_indices is None:
            indices = list(retriever.retrieve())
        else:
            indices = cast("list[list[int]]", list(ice_indices)[: len(test_rows)])
        if strict:
            self._missing_columns(test_rows, train_rows, indices, strict=True, uniform=False)
        labels = None
        if self.mode == "ppl":
            labels = self.labels if self.labels is not None else self._labels(test_rows)
        prompts, used, rust_rows, uniform, test_complete, rendered_normalizing = self._render_rows(
            _Job(test_rows, train_rows, indices, labels, retriever), progress
        )
        missing = self._missing_columns(
            test_rows, train_rows, indices, False, uniform, test_complete
        )
        messages = None
        if self.chat_template is not None or self.fastchat_template is not None:
            prompts, messages = self._apply_chat_template(prompts)
        return RenderResult(
            prompts,
            used,
            labels,
            self.mode,
            missing,
            rust_rows,
            infer_mode=self.infer_mode,
            messages=messages,
            test_indices=test_indices,
            normalizing=rendered_normalizing,
        )

    def _apply_chat_template(self, prompts: list[Any]) -> tuple[list[Any], list[Any]]:
        """Parsed prompts -> chat messages -> the chat template's strings (a multi-turn row's
        requests each)."""
        nested = self.flow in ("multiturn", "chat")
        flat = [p for row in prompts for p in row] if nested else prompts
        conversations = convert_chat_messages(flat)
        if self.fastchat_template is not None:
            texts = format_fastchat(conversations, self.fastchat_template)
        else:
            assert self.chat_template is not None
            try:
                texts = self.chat_template.render_many(
                    conversations, add_generation_prompt=True, **self.chat_template_kwargs
                )
            except Exception as exc:
                _note_chat_row(exc, prompts if nested else None)
                raise
            bos = self.chat_template.special_tokens.get("bos_token") if self.strip_bos else None
            if bos:
                texts = [t.removeprefix(bos) for t in texts]
        if not nested:
            return texts, conversations
        out_texts: list[Any] = []
        out_messages: list[Any] = []
        at = 0
        for row in prompts:
            out_texts.append(texts[at : at + len(row)])
            out_messages.append(conversations[at : at + len(row)])
            at += len(row)
        return out_texts, out_messages

    def _labels(self, test_rows: list[dict[str, Any]]) -> list[Any]:
        """``get_labels`` (spec 04 §4.2); the last rule keeps the reference's set order."""
        pt, it = self.prompt_template, self.ice_template
        if pt is not None and isinstance(getattr(pt, "template", None), dict):
            return list(pt.template.keys())
        if (
            it is not None
            and it.ice_token is not None
            and isinstance(getattr(it, "template", None), dict)
        ):
            return list(it.template.keys())
        col = self.output_column
        return list({row[col] for row in test_rows}) if col is not None else []

    def _missing_columns(
        self,
        test: list[dict[str, Any]],
        train: list[dict[str, Any]],
        indices: list[list[int]],
        strict: bool,
        uniform: bool,
        test_complete: bool = False,
    ) -> dict[str, int]:
        """Placeholders whose column a row lacks: test rows for the prompt template (the
        output column is masked in gen mode, so it is always there), the used train rows for
        the ICE template. ``uniform``: every row of a split has the same columns, so the first
        one is checked for all. ``test_complete``: every test row is known to have them."""
        missing: dict[str, int] = {}

        def check(slots: set[str], rows: list[tuple[int, dict[str, Any]]], split: str) -> None:
            weight = 1
            if uniform and rows:
                rows, weight = rows[:1], len(rows)
            elif len(rows) > 1:
                # the rows that lack a slot (a dict's keys view compares with a set in C)
                rows = [(i, row) for i, row in rows if not row.keys() >= slots]
            for i, row in rows:
                for name in sorted(slots.difference(row)):
                    if strict:
                        raise make_error(
                            TemplateError,
                            f"{split} row {i} has no column {name!r}, which the template uses "
                            f"(columns: {list(row)})",
                            compat=KeyError,
                            path=f"{split}[{i}]",
                        )
                    missing[name] = missing.get(name, 0) + weight

        slots = set() if test_complete else self._test_slots()
        if slots:
            if uniform:
                check(slots, list(enumerate(test[:1])), "test")
            else:
                # only the rows that lack a slot are listed (a keys view compares with a set)
                lacking = [i for i, row in enumerate(test) if not row.keys() >= slots]
                check(slots, [(i, test[i]) for i in lacking], "test")
            if uniform and test and missing:
                missing = {k: v * len(test) for k, v in missing.items()}
        if self.ice_template is not None:
            ice_slots = _slots(self.ice_template)
            if ice_slots:
                check(ice_slots, [(i, train[i]) for i in _used_rows(indices, len(train))], "train")
        return missing

    def _test_slots(self) -> set[str]:
        """The columns a test row's prompt uses (the output column is masked in gen mode)."""
        if self.flow == "multimodal":
            # the parts come from the row's tagged content string, whatever the placeholders
            return {str(getattr(self.template, "content_field", "content"))}
        if self.flow == "multiturn":
            return {"question", "answer"}  # every answer is present (no output masking)
        if self.flow == "chat":
            return set()  # a chat may come from list columns or dialogues, not the template
        slots = _slots(self.template)
        if self.mode == "gen" and self.output_column is not None:
            slots.discard(self.output_column)
        return slots

    # ------------------------------------------------------------------ the two paths
    def _render_rows(self, job: _Job, progress: Callable[[int], None] | None) -> _Rendered:
        if (
            job.labels is not None
            and self.max_seq_len is not None
            and self.flavor == OPENCOMPASS
            and getattr(self.template, "prompt_type", None) == "raw_messages"
            and any(job.indices)
        ):
            # the token count of a message list is a list (one per message), which
            # PPLInferencer compares with max_seq_len as it is
            raise make_error(
                ArgumentError,
                "OpenCompass's PPLInferencer cannot trim the in-context examples of a "
                "RawPromptTemplate by max_seq_len: it compares the messages' token counts (a "
                "list) with max_seq_len and fails (TypeError); render without max_seq_len",
                compat=TypeError,
            )
        if self.flow == "chat":
            return self._render_chat_rows(job.test, progress)
        if (
            _backend.FORCE_PYTHON
            or (self.max_seq_len is not None and self.flow is not None)
            or self._normalizing
        ):
            # (normalizing_str splits each label's prompt before it is parsed: row by row)
            return self._render_rows_python(job, progress)
        if self.max_seq_len is None:
            return self._render_rows_fast(job, progress)
        # max_seq_len: every row whole on the fast paths, then the rows that are too long
        # trimmed; an error sends the dataset row by row, so that the reference's first error
        # is the one raised
        try:
            whole = self._render_rows_fast(job, progress)
        except Exception:
            return self._render_rows_python(job, None)
        return self._fit(whole, job, self.max_seq_len - self._spare_tokens)

    def _render_rows_fast(self, job: _Job, progress: Callable[[int], None] | None) -> _Rendered:
        """The batch flows, else the Rust job, else row by row (which trims as it goes when
        ``max_seq_len`` is set)."""
        test, train, indices, labels, retriever = job
        if labels is None and self.parse_mode == self.mode:
            fast = self._render_flow_batch(test, train, indices, retriever)
            if fast is not None:
                if progress is not None:
                    progress(len(test))
                # the batch says whether it saw every test row's columns
                prompts, complete = fast
                return _Rendered(prompts, indices, 0, False, complete)
        # the Rust job parses generation prompts in 'gen' mode: a 'ppl' parse of them differs
        # only for dialogue templates, which then take the row-by-row path
        ppl_parse_differs = self.parse_mode != self.mode and any(
            getattr(t, "prompt_type", None) == "meta"
            for t in (self.prompt_template, self.ice_template)
        )
        if (
            self.flow is None
            and getattr(self.template, "prompt_type", None) != "raw_messages"
            and not ppl_parse_differs
        ):
            sep, eos = self._separators(retriever)
            out = self._render_rust(test, train, indices, labels, sep, eos)
            if out is not None:
                if progress is not None:
                    progress(len(test))
                # the Rust job only takes rows that all have the same columns
                return _Rendered(out, indices, len(test), True)
            _backend.note_fallback()
        return self._render_rows_python(job, progress)

    def _render_chat_rows(
        self, test: list[dict[str, Any]], progress: Callable[[int], None] | None
    ) -> _Rendered:
        """OpenCompass ``ChatInferencer``: each row's chat (``get_chat_list``) run in its mode by
        :class:`promptweave.ChatInferencer`, the model inputs of its requests kept (``last``:
        one, the history before the last assistant message; ``every_with_gt``: one per
        assistant message, gold history)."""
        from promptweave.chat_inferencer import ChatInferencer

        assert self.infer_mode is not None
        requests: list[Any] = []

        def keep(model_input: Any) -> Any:
            requests.append(model_input)
            return ""

        chats = ChatInferencer(keep, self.parser, self.infer_mode)
        given = self.input_columns
        prompts: list[Any] = []
        for i, row in enumerate(test):
            with _row_note(i):
                if given is None:
                    columns = [c for c in row if c != self.output_column]
                else:
                    # (a str is split on whitespace, as the reference's DatasetReader does)
                    columns = given.split() if isinstance(given, str) else list(given)
                chat = chats.build_chat(row, columns, self.output_column, self.template)
                chats.infer(chat, i, _IGNORED_OUTPUT)
            prompts.append(list(requests))
            requests.clear()
            if progress is not None:
                progress(1)
        return _Rendered(prompts, [[] for _ in test], 0, False)

    def _fit(self, whole: _Rendered, job: _Job, limit: int) -> _Rendered:
        """``whole`` with the rows whose prompt (any label's, in ppl mode) is longer than
        ``limit`` re-rendered row by row with the trimming loop -- the same prompts as trimming
        every row, as a row that fits is never trimmed."""
        prompts, used = list(whole.prompts), list(whole.used)
        labels = job.labels
        redone = 0
        for i, prompt in enumerate(prompts):
            parsed = prompt.values() if labels is not None else (prompt,)
            if used[i] and any(self._count(p) > limit for p in parsed):
                with _row_note(i):
                    prompts[i], used[i] = self._render_one(
                        job.test[i], job.retriever, used[i], labels
                    )
                redone += 1
        rust_rows = max(whole.rust_rows - redone, 0)
        return _Rendered(prompts, used, rust_rows, whole.uniform, whole.test_complete)

    def _render_rows_python(self, job: _Job, progress: Callable[[int], None] | None) -> _Rendered:
        """Every row through the mirrored classes (:meth:`_render_one`)."""
        prompts: list[Any] = []
        used: list[list[int]] = []
        normalizing: list[dict[Any, dict[str, str]]] | None = [] if self._normalizing else None
        for i, row in enumerate(job.test):
            info: dict[Any, dict[str, str]] | None = {} if normalizing is not None else None
            with _row_note(i):
                prompt, idx = self._render_one(row, job.retriever, job.indices[i], job.labels, info)
            prompts.append(prompt)
            used.append(idx)
            if normalizing is not None and info is not None:
                normalizing.append(info)
            if progress is not None:
                progress(1)
        return _Rendered(prompts, used, 0, False, normalizing=normalizing)

    # ------------------------------------------------------------------ batch flows
    def _render_flow_batch(
        self,
        test: list[dict[str, Any]],
        train: list[dict[str, Any]],
        indices: list[list[int]],
        retriever: Any,
    ) -> tuple[list[Any], bool] | None:
        """The row-by-row flows in one batch, and whether every test row is known to have the
        template's columns (``None``: not applicable here, or some row needs the mirrored
        classes -- they then render every row and raise what the reference raises).

        * ``RawPromptTemplate`` (API models): each distinct list of in-context examples is
          rendered once; per row the template's messages are copied, their contents formatted
          (``_core.safe_format``) and the examples' messages copied in.
        * ``MMPromptTemplate`` (API models): the parser's output for the template is computed
          once with an empty part list per ``prompt_mm`` item; per row the Rust core parses the
          ``content`` string, builds the part dicts and copies the messages around them.
        """
        if not self.api:
            return None
        # the batch creates many objects at once: the collector would walk the whole heap
        # several times for nothing
        with _collector_paused(len(test)):
            try:
                if self.flow == "multimodal":
                    # every row had the content field (its only column): the batch refuses a
                    # row without it
                    out = self._render_mm_batch(test)
                    return None if out is None else (out, True)
                raw = getattr(self.template, "prompt_type", None) == "raw_messages"
                if self.flow is None and raw:
                    return self._render_raw_batch(test, train, indices, retriever)
            except (_core.FallbackRequired, TypeError, UnicodeEncodeError):
                return None
        return None

    def _render_raw_batch(
        self,
        test: list[dict[str, Any]],
        train: list[dict[str, Any]],
        indices: list[list[int]],
        retriever: Any,
    ) -> tuple[list[Any], bool] | None:
        t, it = self.template, self.ice_template
        if self.flavor != OPENCOMPASS or it is None or it.prompt_type != "raw_messages":
            return None
        plan = _raw_plan(t)
        if plan is None:
            return None
        meta = self.parser.meta_template

        def shape_of(idx: list[int]) -> Any:
            return self._raw_shape(plan, retriever._generate_ice(idx, it))

        # per distinct index list, its shape; per row, the copies and formats in Rust (which
        # also sees whether each row has the template's columns)
        done = _core.render_raw_rows(test, indices, shape_of, sorted(self._test_slots()))
        if done is None:
            return None
        out, complete = done
        if meta and isinstance(meta, list):
            # an API meta template of prefix messages, merged into each row's own copies
            out = [_fallback_merge_prefix(meta, messages) for messages in out]
        return out, complete

    @staticmethod
    def _raw_shape(
        plan: list[Any], ice: Any
    ) -> tuple[list[dict[str, Any]], list[tuple[int, str]]] | None:
        """The messages of a row with in-context examples ``ice`` (``generate_ice``'s output):
        the dicts to copy, and where a content is formatted with the row."""
        if isinstance(ice, list) and ice:
            if not all(_plain_message(m) for m in ice):
                return None
            if plan.count(None) > 1:
                return None  # the same dicts at two places: the parser's deep copy shares them
        else:
            ice = []  # a str ICE is dropped by generate_item
        flat: list[dict[str, Any]] = []
        slots: list[tuple[int, str]] = []
        for seg in plan:
            if seg is None:
                flat.extend(ice)
            else:
                msg, fmt = seg
                if fmt:
                    slots.append((len(flat), msg["content"]))
                flat.append(msg)
        if not flat:
            return None  # an empty prompt is not a message list for the parser
        return flat, slots

    def _render_mm_batch(self, test: list[dict[str, Any]]) -> list[Any] | None:
        plan = self._mm_plan()
        if plan is None:
            return None
        skeleton, kinds, wrap = plan
        t = self.template
        return _core.render_mm_rows(
            test, str(t.content_field), bool(t.strict), kinds, skeleton, wrap
        )

    def _mm_plan(self) -> tuple[list[Any], dict[str, Any], Any] | None:
        """``(skeleton, part templates, PromptList class)`` of an ``MMPromptTemplate`` rendered
        for an API parser, computed once; ``None`` when the template is not of the plain form
        (a ``round`` of role dicts whose ``prompt_mm`` dicts hold plain part templates, no text
        items) the batch handles."""
        cached = getattr(self, "_pw_mm_plan", False)
        if cached is not False:
            return cast("tuple[list[Any], dict[str, Any], Any] | None", cached)
        plan = None
        try:
            plan = self._build_mm_plan()
        except Exception:  # anything unusual: the mirrored classes render (and raise) row by row
            plan = None
        self._pw_mm_plan = plan
        return plan

    def _build_mm_plan(self) -> tuple[list[Any], dict[str, Any], Any] | None:
        import copy

        t = self.template
        if not t.check_mm_template():
            return None  # the reference warns on every row
        encoded = t._encode_template(t.format_mm_url(t.template, {}), ice=False)
        kinds: dict[str, Any] = {}
        holes: list[list[Any]] = []
        probe = type(encoded)()
        for item in encoded:
            if not isinstance(item, dict):
                return None  # str items are formatted with the row
            new_item = copy.deepcopy(item)
            if "prompt_mm" in item:
                mm = item["prompt_mm"]
                if not isinstance(mm, dict) or not mm:
                    return None
                for kind, part in mm.items():
                    spec = _mm_part_spec(kind, part)
                    if spec is None:
                        return None
                    if kinds.setdefault(kind, spec) != spec:
                        return None  # differing part templates per item: row by row
                hole: list[Any] = []
                holes.append(hole)
                new_item["prompt_mm"] = hole
            probe.append(new_item)
        if not holes:
            return None
        if len(holes) > 1:
            return None  # several prompt_mm items: row by row
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            parsed = self.parser.parse_template(probe, mode="gen")
        if not isinstance(parsed, list):
            return None
        skeleton: list[Any] = []
        found = 0
        for msg in parsed:
            if type(msg) is not dict:
                return None
            hole_key = None
            for k, v in msg.items():
                if type(k) is not str:
                    return None
                if any(v is h for h in holes):
                    if hole_key is not None or v:
                        return None
                    hole_key = k
                    found += 1
                elif not immutable(v):
                    return None
            skeleton.append((msg, hole_key))
        if found != len(holes) or any(holes):
            return None
        wrap = type(parsed) if type(parsed) is not list else None
        return skeleton, kinds, wrap

    def _render_rust(
        self,
        test: list[dict[str, Any]],
        train: list[dict[str, Any]],
        indices: list[list[int]],
        labels: list[Any] | None,
        sep: str,
        eos: str,
    ) -> list[Any] | None:
        t, it, parser = self.template, self.ice_template, self.parser
        compiled = getattr(t, "_compiled", None)
        if compiled is None or (it is not None and getattr(it, "_compiled", None) is None):
            return None
        meta = parser.meta_template
        if meta and parser._compiled is None:
            return None
        ice_labels = self._ice_labels(train, indices)
        if ice_labels is None:
            return None  # the row-by-row path raises the reference's error for that example
        ppl_labels = None
        if labels is not None:
            ppl_labels = [t._label_index(label) for label in labels]
            if any(x is None for x in ppl_labels):
                return None
        # the call creates many objects at once: the collector would walk the whole heap
        # several times for nothing
        # (gen mode for a string model: the output is str objects, which the collector
        # does not track: nothing to move, nothing to collect first)
        containers = self.api or self.mode == "ppl"
        with _collector_paused(len(test) if containers else 0):
            try:
                return _core.render_dataset(
                    t._compiled,
                    it._compiled if it is not None else None,
                    ice_labels,
                    sep,
                    eos,
                    self.output_column,
                    self.gen_field_replace_token,
                    parser._compiled,
                    self.api,
                    self.flavor == AISBENCH,
                    test,
                    train,
                    indices,
                    ppl_labels,
                    labels,
                    self._normalizing,
                    self._m.PromptList if self.api and meta else None,
                    self.threads,
                )
            except (_core.FallbackRequired, OverflowError, TypeError, UnicodeEncodeError):
                # (a lone surrogate in a separator cannot reach the core as UTF-8: the Python path)
                return None
            except ValueError as exc:
                if isinstance(exc, PromptRenderError):
                    raise
                # a value's own str() failed (an int past Python's digit limit): the job reads every
                # value once, the reference only those it formats (never a masked answer): the
                # Python path renders, or raises, as the reference does
                return None

    def _ice_labels(
        self, train: list[dict[str, Any]], indices: list[list[int]]
    ) -> list[int] | None:
        """Per train row, the label-dict ``ice_template``'s body index for the row's answer
        (rows no example uses: 0). ``None`` when an example's answer is not one of the
        template's labels (or it has no answer column): the reference's ``generate_ice_item``
        raises for it, and so does the row-by-row path."""
        it = self.ice_template
        if it is None or not it._labels or not indices:
            return []
        used = _used_rows(indices, len(train))
        col = self.output_column
        out = [0] * len(train)
        for i in used:
            if not 0 <= i < len(train):
                continue
            if col is None or col not in train[i]:
                return None
            label = it._label_index(train[i][col])
            if label is None:
                return None
            out[i] = label
        return out

    def _render_one(
        self,
        row: dict[str, Any],
        retriever: Any,
        idx: list[int],
        labels: list[Any] | None,
        normalizing: dict[Any, dict[str, str]] | None = None,
    ) -> tuple[Any, list[int]]:
        """One row through the mirrored classes: the retriever's ``generate_ice`` (spec 04 §3),
        the template, the parser; ``max_seq_len`` trimming as OpenCompass's inferencers.
        ``normalizing`` (``normalizing_str``) receives each label's context and normalizing
        prompt."""
        idx = list(idx)
        if labels is None:

            def build(ids: list[int]) -> tuple[Any, Any]:
                """The model input and what the trimming counts: the inferencer's own parse
                (PPLOnlyInferencer counts the 'gen' parse of what it scores in 'ppl' mode)."""
                ice = retriever._generate_ice(ids, self.ice_template)
                prompt = self.template.generate_item(
                    row,
                    output_field=self.output_column,
                    output_field_replace_token=self.gen_field_replace_token,
                    ice_field_replace_token=ice,
                )
                if self.flow == "multiturn":
                    inputs = self._multiturn_inputs(prompt)
                    return inputs, inputs
                out = self.parser.parse_template(prompt, mode=self.parse_mode)
                if self.max_seq_len is None or self.parse_mode == self.mode:
                    return out, out
                return out, self.parser.parse_template(prompt, mode=self.mode)

            out, counted = build(idx)
            limit = None if self.max_seq_len is None else self.max_seq_len - self._spare_tokens
            while limit is not None and idx and self._count(counted) > limit:
                if self._clp and getattr(self.template, "prompt_type", None) == "meta":
                    # its trimming loop hands the model the unparsed prompt list (section
                    # markers and all) and counts that: not a prompt to reproduce
                    raise make_error(
                        ArgumentError,
                        "OpenCompass's CLPInferencer trims in-context examples of a dialogue "
                        "template into an unparsed prompt list (section markers included), "
                        "which is not a model input; render without max_seq_len",
                    )
                idx = idx[:-1]
                out, counted = build(idx)
            return out, idx
        result: dict[Any, Any] = {}
        remain = self._normalizing
        for label in labels:
            # OpenCompass trims in place: later labels start from the trimmed examples
            def build_label(ids: list[int], label: Any = label) -> tuple[Any, Any]:
                ice = retriever._generate_ice(ids, self.ice_template)
                prompt = self.template.generate_label_prompt_item(row, ice, label, remain)
                return prompt, self.parser.parse_template(prompt, mode="ppl")

            prompt, out = build_label(idx)
            while self.max_seq_len is not None and idx and self._count(out) > self.max_seq_len:
                idx = idx[:-1]
                prompt, out = build_label(idx)
            if remain:
                scored, context, normalizing_prompt = self._split_at_sep(prompt)
                out = self.parser.parse_template(scored, mode="ppl")
                if normalizing is not None:
                    normalizing[label] = {
                        "context": context,
                        "normalizing_prompt": normalizing_prompt,
                    }
            result[label] = out
        return result, idx

    @property
    def _normalizing(self) -> bool:
        """OpenCompass's ``PPLInferencer`` with ``normalizing_str`` (AISBench's takes the
        argument and ignores it)."""
        return (
            self.normalizing_str is not None and self.flavor == OPENCOMPASS and self.mode == "ppl"
        )

    def _split_at_sep(self, prompt: Any) -> tuple[str, str, str]:
        """OpenCompass ``PPLInferencer``'s ``normalizing_str`` step on a label prompt rendered
        with its ``sep_token`` kept: the scored prompt (the first ``sep_token`` and every later
        one removed), the context before it and ``normalizing_str`` + the answer after it."""
        if not isinstance(prompt, str):
            raise make_error(
                TemplateError,
                "Prompt must be a string when normalizing_str is set (a label prompt rendered to "
                f"a {type(prompt).__name__})",
                compat=AssertionError,
            )
        holder = self.prompt_template if self.prompt_template is not None else self.ice_template
        sep = holder.sep_token if holder is not None else None
        if not isinstance(sep, str):
            raise make_error(
                TemplateError,
                "normalizing_str splits each label prompt at the template's sep_token, but "
                f"{'prompt_template' if self.prompt_template is not None else 'ice_template'} "
                f"has sep_token={sep!r}",
                compat=TypeError,
            )
        pos = prompt.find(sep)
        context = prompt[0:pos]
        answer = prompt[pos:].replace(sep, "")
        assert self.normalizing_str is not None
        return context + answer, context, self.normalizing_str + answer

    def _multiturn_inputs(self, prompt: Any) -> list[Any]:
        """The model inputs of the requests ``MultiTurnGenInferencer`` sends for one row."""
        from promptweave.multiturn import multiturn_prompt_requests

        assert self.infer_mode is not None
        requests = multiturn_prompt_requests(prompt, self.infer_mode, self.parser)
        return [request.model_input for request in requests]

    def _count(self, parsed: Any) -> int:
        counter = self.token_counter
        assert counter is not None
        if isinstance(parsed, list) and not isinstance(parsed, self._m.PromptList):
            return sum(counter(str(p)) for p in parsed)
        return counter(str(parsed))


def _plain_message(msg: Any) -> bool:
    """A flat dict (``dict.copy()`` is its deep copy) with the keys the raw-message parser
    checks."""
    return flat_dict(msg) and "role" in msg and "content" in msg


def _raw_plan(template: Any) -> list[Any] | None:
    """A ``RawPromptTemplate``'s messages as the batch renders them: ``None`` where the
    in-context examples go, ``(message, format content?)`` per message dict; ``None`` for
    templates with ``expand_column`` items or non-plain messages (rendered row by row)."""
    plan: list[Any] = []
    for item in template.messages:
        if isinstance(item, str):
            if item == template.ice_token:
                plan.append(None)
            continue
        if not _plain_message(item):
            return None
        plan.append((item, bool(template.format_variables) and type(item["content"]) is str))
    return plan


#: a batch of at least this many rows is a large batch (``_collector_paused``)
_LARGE_BATCH_ROWS = 1000
#: a large batch that leaves more than this many times the collector's first threshold of new
#: tracked objects has them moved to the oldest generation when it ends (``_collector_paused``)
_PROMOTE_FACTOR = 10


@contextlib.contextmanager
def _collector_paused(rows: int) -> Iterator[None]:
    """The cyclic collector off for a batch of ``rows`` rows, and back as the caller had it
    when the batch ends (however it ends).

    A batch makes its output with the collector off, so the collector's count of new objects
    is by then far past its threshold, and the first allocation after ``gc.enable()`` would
    start a young collection that walks the whole output at once only to find it alive and
    move it on (a quarter of a multimodal batch's time). That output is long-lived. So before a
    large batch the young generations are collected (a few thousand objects at most: a
    fraction of a millisecond; garbage the caller made before the call is freed now, not held
    until a full collection), and after it, when the count is that high, every object in the
    young generations -- the output, and what else was made meanwhile -- is moved straight to
    the oldest generation, where full collections still see it (``_core._promote_young``;
    nothing is moved when the caller has frozen objects with ``gc.freeze()``).
    """
    was_enabled = gc.isenabled()
    large = was_enabled and rows >= _LARGE_BATCH_ROWS and gc.get_freeze_count() == 0
    if large:
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            threshold = gc.get_threshold()[0]
            if large and threshold > 0 and gc.get_count()[0] > _PROMOTE_FACTOR * threshold:
                _core._promote_young()
            gc.enable()


def _mm_part_spec(kind: Any, part: Any) -> tuple[Any, ...] | None:
    """``(part template, field, nested url dict?, placeholder)`` of a ``prompt_mm`` part
    template the Rust core fills exactly as ``format_mm``; ``None`` otherwise."""
    if kind not in ("text", "image", "video", "audio") or type(part) is not dict:
        return None
    field = "text" if kind == "text" else f"{kind}_url"
    placeholder = "{question}" if kind == "text" else f"{{{kind}}}"
    if field not in part:
        return None
    for k, v in part.items():
        if type(k) is not str or (k != field and not immutable(v)):
            return None
    value = part[field]
    if type(value) is str:
        return (part, field, False, placeholder)
    if kind != "text" and type(value) is dict and type(value.get("url")) is str:
        if flat_dict(value):
            return (part, field, True, placeholder)
    return None


def _fallback_merge_prefix(meta: list[Any], messages: list[Any]) -> list[Any]:
    from promptweave import _fallback

    return _fallback._merge_prefix(meta, messages)


def _as_chat_template(value: Any) -> ChatTemplate:
    """A :class:`ChatTemplate`, or one loaded from a model directory, tokenizer config or
    ``.jinja`` path."""
    if isinstance(value, ChatTemplate):
        return value
    if isinstance(value, (str, os.PathLike)):
        return ChatTemplate.from_file(value)
    raise ArgumentError(
        "chat_template must be a ChatTemplate or a path to a model directory, a "
        f"tokenizer_config.json or a .jinja file, got {type(value).__name__}"
    )


def _slots(template: Any) -> set[str]:
    """The ``{name}`` placeholders of a template (computed once per template object)."""
    cached: set[str] | None = getattr(template, "_pw_slots", None)
    if cached is None:
        text = getattr(template, "template", None)
        if text is None:  # RawPromptTemplate
            text = getattr(template, "messages", "")
        cached = set(_SLOT.findall(_template_text(text)))
        template._pw_slots = cached
    return set(cached)


def _used_rows(indices: Sequence[Sequence[int]], n: int) -> list[int]:
    """The train rows some test row uses (index lists shared between rows counted once)."""
    distinct = dict(zip(map(id, indices), indices, strict=True)).values()
    return sorted({i for idx in distinct for i in idx if 0 <= i < n})


def _template_text(template: Any) -> str:
    """All text of a template (for finding its placeholders)."""
    if isinstance(template, str):
        return template
    if isinstance(template, Mapping):
        return "\n".join(_template_text(v) for v in template.values())
    if isinstance(template, Iterable):
        return "\n".join(_template_text(v) for v in template)
    return ""
