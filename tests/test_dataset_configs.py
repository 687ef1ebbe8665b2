"""Differential tests of :class:`promptweave.dataset.DatasetRenderer` on real dataset configs.

Every dataset config shipped in the reference wheels (``opencompass/configs/datasets/**`` of
OpenCompass 0.5.4, ``ais_bench/benchmark/configs/datasets/**`` of AISBench 3.1) is loaded with
promptweave's :func:`~promptweave.config.load_config`; those whose templates are
``PromptTemplate`` (string, dialogue, label dict) and whose retriever is Zero/FixK/Random/
SlidingWindow are rendered over synthetic rows (ASCII, CJK, emoji, braces, empty strings, ints,
floats, bools, nulls, values naming other columns, shuffled column order) and compared, row
by row, with the REFERENCE pipeline run through the reference classes (the ``reference``
fixture):

* the reference retriever over a reference dataset (``refload.make_dataset``: the framework's own
  ``DatasetReader`` over a HuggingFace ``DatasetDict``; the rows the templates see are checked to
  be exactly the rows handed to promptweave), ``retrieve()``, ``generate_ice``,
  ``generate_prompt_for_generate_task`` (gen) or ``generate_label_prompt`` for each label of
  ``get_labels`` (ppl), then ``parse_template`` with the reference ``LMTemplateParser`` /
  ``APITemplateParser``;
* for no meta template, real model meta templates of the OpenCompass wheel (loaded with
  ``load_config`` + ``meta_template_of``) and an API meta template;
* ``repr`` of every prompt must be equal; where the reference raises, promptweave must raise the
  same builtin family (AISBench errors: a ``PromptRenderError`` with the same error code).

The Rust batch path must render every one of these (``rust_rows == len(test)``): the rows are
plain, well-typed values.  Focused tests cover ``ice_indices=``, ``limit=``, ``max_seq_len``
trimming against the reference inferencers' loops, columnar inputs, the AISBench flavour, the
row-by-row path (``FORCE_PYTHON``) and the default mode of the other OpenCompass inferencers.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import importlib.util
import io
import random
import re
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import _golden_ns  # noqa: E402
from _wheels import configs_root  # noqa: E402

from promptweave import _backend, _core  # noqa: E402
from promptweave.config import load_config, meta_template_of  # noqa: E402
from promptweave.dataset import DatasetRenderer, _type_name  # noqa: E402
from promptweave.errors import (  # noqa: E402
    PromptRenderError,
    SameSplitWarning,
    UnknownRoleError,
)
from promptweave.retrievers import partial_indices  # noqa: E402
from promptweave.tokens import api_token_len  # noqa: E402

FLAVOR = {"oc": "opencompass", "ais": "aisbench"}

#: minimum number of config FILES rendered and compared per framework
MIN_FILES = {"oc": 200, "ais": 40}
#: sampling of the qualifying files (sorted; every k-th) to keep the run short
FILE_STEP = {"oc": 1, "ais": 1}
#: distinct dataset configs compared per file at most
MAX_DATASETS_PER_FILE = 2

RETRIEVERS = ("ZeroRetriever", "FixKRetriever", "RandomRetriever", "SlidingWindowRetriever")
GEN_INFERENCERS = ("GenInferencer",)
PPL_INFERENCERS = ("PPLInferencer",)

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SLOT = re.compile(r"\{([^{}]*)\}")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
AIS_CODE = re.compile(r"\[([A-Z0-9]+(?:-[A-Z0-9]+)+)\]")


# ============================================================================ the wheels


@functools.cache
def _load(path: Path) -> Any:
    return load_config(path)


# ============================================================================ model meta templates

#: real model configs of the OpenCompass wheel whose meta template is used (LM parser)
LM_MODEL_CONFIGS = {
    # SYSTEM, HUMAN and BOT rounds with begin/end markers (ChatML)
    "internlm2-sys": "models/hf_internlm/hf_internlm2_chat_7b_with_system.py",
    # HUMAN/BOT with leading newlines in begin
    "qwen": "models/qwen/ms_qwen_7b_chat.py",
    # a meta-level `begin` (instruction preamble) plus HUMAN/BOT
    "llama2-rft": "models/others/hf_gsm8k_rft_llama7b2_u13b.py",
    # HUMAN/BOT, end markers only on some roles
    "baichuan2": "models/baichuan/hf_baichuan2_7b_chat.py",
}
#: real API meta template (api_role with a reserved SYSTEM role)
API_MODEL_CONFIG = "models/hf_llama/hf_llama3_1_8b_instruct.py"


@dataclass(frozen=True)
class Meta:
    name: str
    template: Any
    api: bool


def renderer_for(infer: Any, reader: Any, meta: Meta, **kw: Any) -> DatasetRenderer:
    """promptweave's renderer of a dataset config for the model of ``meta``."""
    return DatasetRenderer(infer, reader, meta.template, api=meta.api, **kw)


@functools.cache
def _metas() -> tuple[Meta, ...]:
    root = configs_root("oc")
    metas = [Meta("none", None, False)]
    for name, rel in LM_MODEL_CONFIGS.items():
        (model,) = _load(root / rel).models()
        meta = meta_template_of(model)
        assert meta is not None, rel
        assert "round" in meta, rel
        metas.append(Meta(name, meta, False))
    (model,) = _load(root / API_MODEL_CONFIG).models()
    api_meta = meta_template_of(model)
    assert api_meta == {
        "round": [
            {"role": "HUMAN", "api_role": "HUMAN"},
            {"role": "BOT", "api_role": "BOT", "generate": True},
        ],
        "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
    }
    metas.append(Meta("api-llama3.1", api_meta, True))
    # the spec's documented LM meta template with a reserved SYSTEM role, begin and end
    metas.append(Meta("doc2-reserved-system", _golden_ns.META_DOC2, False))
    return tuple(metas)


# ============================================================================ the corpus


@dataclass
class Case:
    """One dataset config of one config file."""

    fw: str
    path: Path
    index: int
    dataset: dict[str, Any]
    kind: str  # string / dialogue / label-dict / label-dict(dialogue)
    retriever: str
    mode: str  # from the inferencer

    @property
    def rel(self) -> str:
        return f"{self.path.relative_to(configs_root(self.fw))}#{self.index}"

    @property
    def infer_cfg(self) -> dict[str, Any]:
        return self.dataset["infer_cfg"]

    @property
    def reader_cfg(self) -> dict[str, Any]:
        return self.dataset["reader_cfg"]


@dataclass
class Corpus:
    cases: list[Case] = field(default_factory=list)
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    files: int = 0


def _template_kind(template: Any) -> str:
    if isinstance(template, str):
        return "string"
    if isinstance(template, dict) and set(template) & {"begin", "round", "end"}:
        return "dialogue"
    if isinstance(template, dict):
        values = list(template.values())
        if any(isinstance(v, dict) for v in values):
            return "label-dict(dialogue)"
        return "label-dict"
    return type(template).__name__


def _classify(ds: Any) -> tuple[str | None, str, str, str]:
    """(skip reason or None, template kind, retriever, mode)."""
    reader = ds.get("reader_cfg")
    infer = ds.get("infer_cfg")
    if not isinstance(reader, dict):
        return f"reader_cfg is a {type(reader).__name__}", "", "", ""
    if not reader.get("input_columns"):
        return "reader_cfg without input_columns", "", "", ""
    if not isinstance(infer, dict):
        return "infer_cfg is not a dict", "", "", ""
    templates = [infer[k] for k in ("prompt_template", "ice_template") if k in infer]
    for t in templates:
        if not isinstance(t, dict):
            return f"template given as {type(t).__name__}", "", "", ""
        name = _type_name(t.get("type"))
        if name != "PromptTemplate":
            return f"template type {name}", "", "", ""
        if "template" not in t:
            return "PromptTemplate config without template", "", "", ""
        extra = set(t) - {"type", "template", "ice_token", "sep_token"}
        if extra:
            return f"PromptTemplate config with {sorted(extra)}", "", "", ""
    retriever = _type_name((infer.get("retriever") or {}).get("type")) or "ZeroRetriever"
    if retriever not in RETRIEVERS:
        return f"retriever {retriever}", "", "", ""
    inferencer = _type_name((infer.get("inferencer") or {}).get("type"))
    if inferencer in GEN_INFERENCERS:
        mode = "gen"
    elif inferencer in PPL_INFERENCERS:
        mode = "ppl"
    else:
        return f"inferencer {inferencer}", "", "", ""
    if not templates:
        kind = "none"
    else:
        main = infer.get("prompt_template") or infer.get("ice_template")
        kind = _template_kind(main["template"])
    return None, kind, retriever, mode


def _signature(ds: dict[str, Any]) -> str:
    infer = ds["infer_cfg"]
    return repr(
        (
            {k: infer.get(k) for k in ("prompt_template", "ice_template", "retriever")},
            _type_name((infer.get("inferencer") or {}).get("type")),
            ds["reader_cfg"].get("input_columns"),
            ds["reader_cfg"].get("output_column"),
        )
    )


@functools.cache
def _corpus(fw: str) -> Corpus:
    root = configs_root(fw) / "datasets"
    files = sorted(
        p
        for p in root.rglob("*.py")
        if p.name != "__init__.py"
        and "__pycache__" not in p.parts
        and "infer_cfg" in p.read_text("utf-8")
    )
    corpus = Corpus()
    seen: set[str] = set()
    qualifying: list[list[Case]] = []
    for path in files:
        cfg = _load(path)
        cases: list[Case] = []
        for i, ds in enumerate(cfg.datasets()):
            reason, kind, retriever, mode = _classify(ds)
            if reason is not None:
                corpus.skipped[reason] += 1
                continue
            sig = _signature(ds)
            if sig in seen:
                corpus.skipped["same templates as a dataset already selected"] += 1
                continue
            if len(cases) >= MAX_DATASETS_PER_FILE:
                corpus.skipped["per-file cap"] += 1
                continue
            seen.add(sig)
            cases.append(Case(fw, path, i, ds, kind, retriever, mode))
        if cases:
            qualifying.append(cases)
    for k, cases in enumerate(qualifying):
        if k % FILE_STEP[fw]:
            corpus.skipped["file not in the sample"] += len(cases)
            continue
        corpus.files += 1
        corpus.cases.extend(cases)
    return corpus


# ============================================================================ synthetic rows

STRINGS = [
    "What is 1+1?",
    'Hello, world! It\'s a "quoted" test.',
    "中文问题：一加一等于几？",  # noqa: RUF001 -- full-width punctuation on purpose
    "日本語のテキスト、한국어",
    "emoji 🙂👍🏽 and 🇫🇷",
    "{braces} in {{value}} }{",
    "",
    "line one\nline two\n\tindented",
    "A",
    "</E>",
    "   spaces   ",
    "{",
    "}",
    "naïve café — “curly”",
]
PLAIN_STRINGS = ["alpha", "beta gamma", "delta epsilon zeta", "eta", "theta iota kappa lambda"]


def _placeholders(infer: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for key in ("ice_template", "prompt_template"):
        t = infer.get(key)
        if isinstance(t, dict):
            for name in SLOT.findall(_text(t.get("template"))):
                if IDENT.match(name) and name not in found:
                    found.append(name)
    return found


def _text(template: Any) -> str:
    if isinstance(template, str):
        return template
    if isinstance(template, dict):
        return "\n".join(_text(v) for v in template.values())
    if isinstance(template, (list, tuple)):
        return "\n".join(_text(v) for v in template)
    return ""


def _input_columns(reader: dict[str, Any]) -> list[str]:
    cols = reader.get("input_columns") or []
    return cols.split() if isinstance(cols, str) else list(cols)


def _labels_of(infer: dict[str, Any]) -> list[Any] | None:
    """The label keys output values must come from (ICE labels first: generate_ice indexes the
    ice template with each example's own output value)."""
    for key in ("ice_template", "prompt_template"):
        t = infer.get(key)
        if isinstance(t, dict) and _template_kind(t.get("template")).startswith("label-dict"):
            return list(t["template"])
    return None


@dataclass
class Rows:
    train: list[dict[str, Any]]
    test: list[dict[str, Any]]
    columns: list[str]


def make_rows(case: Case, seed_extra: str = "", *, plain: bool = False) -> Rows | str:
    """Synthetic train/test rows for the config's columns (or a skip reason); ``plain``: ASCII
    words only (for the inferencer loops, which measure and post-process the prompts)."""
    infer, reader = case.infer_cfg, case.reader_cfg
    rng = random.Random(zlib.crc32(f"{case.rel}{seed_extra}".encode()))
    out_col = reader.get("output_column")
    columns: list[str] = []
    for c in [*_input_columns(reader), out_col, *_placeholders(infer)]:
        if c is not None and c not in columns:
            columns.append(c)
    rng.shuffle(columns)  # column order matters for safe_format chaining
    labels = _labels_of(infer)
    if labels is not None and len({type(x) for x in labels}) > 1:
        return "label keys of mixed types"

    def kind() -> str:
        if plain:
            return "str"
        r = rng.random()
        return "int" if r < 0.14 else "float" if r < 0.18 else "bool" if r < 0.20 else "str"

    kinds = {c: kind() for c in columns}

    def value(col: str) -> Any:
        if col == out_col and labels is not None:
            return rng.choice(labels)
        if kinds[col] == "int":
            return rng.choice([0, 1, 7, -3, 42, 10**12])
        if kinds[col] == "float":
            return rng.choice([0.5, 1.0, -2.25, 1e20, 3.14159, 1e-7])
        if kinds[col] == "bool":
            return rng.choice([True, False])
        if plain:
            return rng.choice(PLAIN_STRINGS)
        r = rng.random()
        if r < 0.12 and len(columns) > 1:  # a value naming another column: safe_format chaining
            return "see {" + rng.choice([c for c in columns if c != col]) + "}"
        if r < 0.14:
            return None  # a null in a string column
        return rng.choice(STRINGS)

    retriever = case.infer_cfg.get("retriever") or {}
    n_train = rng.randint(5, 12)
    fix = retriever.get("fix_id_list")
    if fix:
        n_train = max(n_train, max(fix) + 1)
    ice_num = retriever.get("ice_num")
    if isinstance(ice_num, int):
        n_train = max(n_train, ice_num)
    n_test = rng.randint(3, 6)
    train = [{c: value(c) for c in columns} for _ in range(n_train)]
    test = [{c: value(c) for c in columns} for _ in range(n_test)]
    return Rows(train, test, columns)


# ======================================================================= the reference pipeline


@functools.cache
def _refload() -> Any:
    return _golden_ns.import_refload()


@dataclass
class Outcome:
    """Per test row: the prompt (gen) or dict label -> prompt (ppl), or the exceptions raised."""

    prompts: list[Any] | None
    labels: list[Any] | None
    indices: list[list[int]] | None
    errors: list[BaseException]
    printed: str = ""  # what the reference printed (unknown roles, 06 §C)


def _ref_template(M: Any, cfg: Any) -> Any:
    if cfg is None:
        return None
    kw = {k: copy.deepcopy(v) for k, v in cfg.items() if k != "type"}
    return M.PromptTemplate(**kw)


def _ref_template_cfg(M: Any, cfg: Any) -> Any:
    if cfg is None:
        return None
    return {
        "type": M.PromptTemplate,
        **{k: copy.deepcopy(v) for k, v in cfg.items() if k != "type"},
    }


def make_ref_dataset(
    M: Any, train: list[dict[str, Any]], test: list[dict[str, Any]] | None, reader: dict[str, Any]
) -> Any:
    """What ``refload.make_dataset`` builds (the framework's own ``DatasetReader`` over a
    HuggingFace ``DatasetDict``; a single ``Dataset`` when ``test`` is ``None``), with the
    reader config's ``train_range`` / ``test_range`` too, which it does not take."""
    import types

    data = _golden_ns.hf_loaded(train) if test is None else _golden_ns.hf_loaded(test, train)
    input_columns = copy.deepcopy(reader.get("input_columns"))
    output_column = reader.get("output_column")
    if input_columns is None:
        input_columns = [k for k in train[0] if k != output_column]
    r = M.reader_module.DatasetReader(
        data,
        input_columns=input_columns,
        output_column=output_column,
        train_range=reader.get("train_range"),
        test_range=reader.get("test_range"),
    )
    return types.SimpleNamespace(
        reader=r, train=r.dataset["train"], test=r.dataset["test"], abbr="dataset"
    )


class RefPipeline:
    """The reference's retriever + prompt building for one dataset (shared by every meta)."""

    def __init__(
        self,
        M: Any,
        fw: str,
        infer: dict[str, Any],
        reader: dict[str, Any],
        rows: Rows,
        retriever_cfg: dict[str, Any] | None = None,
        loaded: dict[str, Any] | None = None,
    ) -> None:
        self.M, self.fw = M, fw
        self.rows = rows
        with contextlib.redirect_stderr(io.StringIO()):
            if loaded is None:
                # the rows as the templates see them: a reader with the columns only
                self.dataset = _refload().make_dataset(
                    M,
                    rows.train,
                    rows.test,
                    copy.deepcopy(reader.get("input_columns")),
                    reader.get("output_column"),
                )
            else:
                self.dataset = _golden_ns.reference_base_dataset(
                    M, rows.test, loaded.get("train", rows.train), reader, **loaded["base"]
                )
        self.pt_cfg = infer.get("prompt_template")
        self.it_cfg = infer.get("ice_template")
        rcfg = dict(retriever_cfg if retriever_cfg is not None else infer.get("retriever") or {})
        self.retriever_name = _type_name(rcfg.pop("type", None)) or "ZeroRetriever"
        self.retriever_kw = copy.deepcopy(rcfg)

    def template_rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The rows the reference templates see (test, train)."""
        return list(self.dataset.test), list(self.dataset.train)

    def _retriever(self) -> Any:
        with contextlib.redirect_stderr(io.StringIO()):
            return self._make_retriever()

    def _make_retriever(self) -> Any:
        cls = getattr(self.M, self.retriever_name)
        kw = dict(self.retriever_kw)
        if self.fw == "ais":
            kw["ice_template"] = _ref_template_cfg(self.M, self.it_cfg)
            kw["prompt_template"] = _ref_template_cfg(self.M, self.pt_cfg)
        return cls(self.dataset, **kw)

    def build(
        self, mode: str, labels: list[Any] | None = None, indices: list[list[int]] | None = None
    ) -> Outcome:
        """Un-parsed prompts per test row (gen) / per row and label (ppl); ``indices`` replaces
        the retriever's ``retrieve()``."""
        M, oc = self.M, self.fw == "oc"
        try:
            r = self._retriever()
            if indices is None:
                indices = [list(x) for x in r.retrieve()]
        except Exception as exc:
            return Outcome(None, None, None, [exc])
        it = _ref_template(M, self.it_cfg) if oc else None
        pt = _ref_template(M, self.pt_cfg) if oc else None
        tkw = {"ice_template": it, "prompt_template": pt} if oc else {}
        errors: list[BaseException] = []
        ices: list[Any] = []
        for idx in indices:
            try:
                ices.append(r.generate_ice(idx, ice_template=it) if oc else r.generate_ice(idx))
            except Exception as exc:
                errors.append(exc)
                ices.append(None)
        prompts: list[Any] = []
        if mode == "gen":
            for i, ice in enumerate(ices):
                if ice is None:
                    prompts.append(None)
                    continue
                try:
                    prompts.append(r.generate_prompt_for_generate_task(i, ice, **tkw))
                except Exception as exc:
                    errors.append(exc)
                    prompts.append(None)
            return Outcome(prompts, None, indices, errors)
        if labels is None:
            try:
                labels = list(r.get_labels(**tkw))
            except Exception as exc:
                return Outcome(None, None, indices, [*errors, exc])
        for i, ice in enumerate(ices):
            per: dict[Any, Any] = {}
            for label in labels:
                if ice is None:
                    per[label] = None
                    continue
                try:
                    per[label] = r.generate_label_prompt(i, ice, label, **tkw)
                except Exception as exc:
                    errors.append(exc)
                    per[label] = None
            prompts.append(per)
        return Outcome(prompts, list(labels), indices, errors)

    def parse(self, built: Outcome, meta: Meta, mode: str) -> Outcome:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            out = self._parse(built, meta, mode)
        out.printed = buf.getvalue()
        return out

    def _parse(self, built: Outcome, meta: Meta, mode: str) -> Outcome:
        if built.prompts is None:
            return built
        M = self.M
        errors = list(built.errors)
        try:
            parser = (M.APITemplateParser if meta.api else M.LMTemplateParser)(
                copy.deepcopy(meta.template)
            )
        except Exception as exc:
            return Outcome(None, built.labels, built.indices, [*errors, exc])

        def one(p: Any) -> Any:
            if p is None:
                return None
            try:
                return parser.parse_template(p, mode=mode)
            except Exception as exc:
                errors.append(exc)
                return None

        if built.labels is None:
            prompts = [one(p) for p in built.prompts]
        else:
            prompts = [{k: one(v) for k, v in per.items()} for per in built.prompts]
        return Outcome(prompts, built.labels, built.indices, errors)


# ============================================================================ comparison


def _family_matches(ours: BaseException, theirs: BaseException) -> bool:
    cls = type(theirs)
    if cls.__module__ == "builtins":
        return isinstance(ours, cls) and isinstance(ours, PromptRenderError)
    m = AIS_CODE.search(ANSI.sub("", str(theirs)))
    code = m.group(1) if m else None
    return isinstance(ours, PromptRenderError) and code is not None and ours.error_code == code


def _desc(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__name__}: {exc}"[:300]


def compare(ours: Any, ref: Outcome, n_test: int) -> str | None:
    """None when equal, else a description of the difference. ``n_test``: the test rows given
    (the reference renders those its reader config's ``test_range`` keeps)."""
    if ref.printed:  # promptweave never prints: it raises UnknownRoleError instead
        # (the reference pipeline builds every prompt before parsing any: when building raised
        # too, the reference's own inferencer stops at whichever comes first, so either will do)
        if ref.errors and any(_family_matches(ours, e) for e in ref.errors):
            return None
        if not isinstance(ours, UnknownRoleError):
            got = _desc(ours) if isinstance(ours, BaseException) else repr(ours.prompts)[:300]
            printed = ref.printed[:200]
            return f"reference printed {printed!r}; ours did not raise UnknownRoleError: {got}"
        return None
    if ref.errors:
        if not isinstance(ours, BaseException):
            return (
                f"reference raised {[_desc(e) for e in ref.errors[:2]]}, ours returned "
                + (repr(ours.prompts)[:600])
            )
        if not any(_family_matches(ours, e) for e in ref.errors):
            return (
                f"ours raised {_desc(ours)}; reference raised {[_desc(e) for e in ref.errors[:2]]}"
            )
        return None
    if isinstance(ours, BaseException):
        return f"ours raised {_desc(ours)}; reference returned {repr(ref.prompts)[:600]}"
    assert ref.prompts is not None
    if ref.labels is not None and list(ours.labels or []) != ref.labels:
        return f"labels: ours {ours.labels!r}, reference {ref.labels!r}"
    if len(ours.prompts) != len(ref.prompts):
        return f"{len(ours.prompts)} prompts, the reference {len(ref.prompts)} (of {n_test} rows)"
    if ours.ice_indices != ref.indices:
        return f"ice_indices: ours {ours.ice_indices!r}, reference {ref.indices!r}"
    for i, (a, b) in enumerate(zip(ours.prompts, ref.prompts, strict=True)):
        if repr(a) != repr(b) or type(a).__name__ != type(b).__name__:
            return (
                f"row {i}: ours {type(a).__name__} {a!r}\n      reference {type(b).__name__} {b!r}"
            )
        if isinstance(b, dict):
            for label, p in b.items():
                if type(a[label]).__name__ != type(p).__name__:
                    kinds = f"{type(a[label]).__name__} vs {type(p).__name__}"
                    return f"row {i} label {label!r}: type {kinds}"
    return None


def _fallback_reason(renderer: DatasetRenderer, rows: Rows, result: Any) -> str:
    """Why ``DatasetRenderer`` left the Rust path (best effort, for the report)."""
    from promptweave.retrievers import Dataset

    t, it, parser = renderer.template, renderer.ice_template, renderer.parser
    if t._compiled is None:
        return "template not compiled by the core"
    if it is not None and it._compiled is None:
        return "ice_template not compiled by the core"
    if parser.meta_template and parser._compiled is None:
        return "meta template not compiled by the core"
    labels = result.labels
    if labels is not None and any(t._label_index(x) is None for x in labels):
        return "a label is not a template key"
    dataset = Dataset(rows.test, rows.train, renderer.input_columns, renderer.output_column)
    sep, eos = renderer._separators(renderer._retriever(dataset))
    try:
        _core.render_dataset(
            t._compiled,
            it._compiled if it is not None else None,
            renderer._ice_labels(rows.train, result.ice_indices),
            sep,
            eos,
            renderer.output_column,
            renderer.gen_field_replace_token,
            parser._compiled,
            renderer.api,
            renderer.flavor == "aisbench",
            rows.test,
            rows.train,
            result.ice_indices,
            None if labels is None else [t._label_index(x) for x in labels],
            False,
            1,
        )
    except Exception as exc:
        return f"render_dataset raised {type(exc).__name__}: {exc}"
    return "unknown"


@dataclass
class Stats:
    files: set[str] = field(default_factory=set)
    datasets: int = 0
    renders: int = 0
    returned: int = 0  # renders that returned prompts (the rest raised like the reference)
    rust_rows: int = 0
    by_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    by_mode: collections.Counter[str] = field(default_factory=collections.Counter)
    by_meta: collections.Counter[str] = field(default_factory=collections.Counter)
    by_retriever: collections.Counter[str] = field(default_factory=collections.Counter)
    ref_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    fallbacks: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)


def run_case(case: Case, M: Any, stats: Stats, metas: tuple[Meta, ...]) -> None:
    rows = make_rows(case)
    if isinstance(rows, str):
        stats.skipped[rows] += 1
        return
    infer, reader = case.infer_cfg, case.reader_cfg
    ref = RefPipeline(M, case.fw, infer, reader, rows)
    # the rows the reference templates see are exactly the rows given to promptweave
    seen_test, seen_train = ref.template_rows()
    assert [list(r.items()) for r in seen_test] == [list(r.items()) for r in rows.test], case.rel
    assert [list(r.items()) for r in seen_train] == [list(r.items()) for r in rows.train], case.rel

    runs: list[tuple[str, str, bool]] = [(case.mode, "config", False)]  # (mode, tag, explicit)
    if case.mode == "ppl" and case.kind.startswith("label-dict"):
        runs.append(("ppl", "explicit-labels", True))
    elif case.mode == "gen" and case.kind.startswith("label-dict"):
        runs.append(("ppl", "forced-ppl", True))
    elif case.mode == "ppl":
        runs = [("ppl", "explicit-labels", True)]  # get_labels falls back to set order
    stats.files.add(str(case.path))
    stats.datasets += 1
    stats.by_kind[case.kind] += 1
    stats.by_retriever[case.retriever] += 1
    for mode, tag, explicit in runs:
        built = ref.build(mode)
        for meta in metas:
            expected = ref.parse(built, meta, mode)
            labels = expected.labels if explicit else None
            renderer: DatasetRenderer | None = None
            try:
                renderer = renderer_for(
                    infer,
                    reader,
                    meta,
                    flavor=FLAVOR[case.fw],
                    mode=mode if tag != "config" else None,
                    labels=labels,
                )
                ours: Any = renderer.render(rows.test, rows.train)
            except Exception as exc:
                ours = exc
            where = (
                f"{case.fw}:{case.rel} "
                f"[{case.kind}, {case.retriever}, {mode}/{tag}, meta={meta.name}]"
            )
            stats.renders += 1
            stats.by_mode[f"{mode}/{tag}"] += 1
            stats.by_meta[meta.name] += 1
            if expected.errors:
                stats.ref_errors[type(expected.errors[0]).__name__] += 1
            diff = compare(ours, expected, len(rows.test))
            if not isinstance(ours, BaseException):
                stats.returned += 1
                stats.rust_rows += ours.rust_rows
            if diff is not None:
                stats.mismatches.append(f"{where}\n    {diff}")
            elif _backend.FORCE_PYTHON:
                pass  # the row-by-row path on purpose
            elif not isinstance(ours, BaseException) and ours.rust_rows != len(rows.test):
                assert renderer is not None
                stats.fallbacks.append(f"{where}: {_fallback_reason(renderer, rows, ours)}")


def _report(fw: str, stats: Stats, corpus: Corpus, elapsed: float) -> str:
    lines = [
        f"[{fw}] {len(stats.files)} config files, {stats.datasets} dataset configs, "
        f"{stats.renders} renders compared in {elapsed:.1f}s",
        f"  template kinds: {dict(stats.by_kind)}",
        f"  retrievers: {dict(stats.by_retriever)}",
        f"  modes: {dict(stats.by_mode)}",
        f"  metas: {dict(stats.by_meta)}",
        f"  reference raised (renders): {dict(stats.ref_errors)}",
        f"  skipped dataset configs: {dict(corpus.skipped + stats.skipped)}",
        f"  Rust fallbacks: {len(stats.fallbacks)}",
        *(f"    {x}" for x in stats.fallbacks[:20]),
        f"  mismatches: {len(stats.mismatches)}",
        *(f"    {x}" for x in stats.mismatches[:30]),
    ]
    return "\n".join(lines)


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_dataset_configs_match_reference(
    fw: str, reference: dict[str, Any], capfd: pytest.CaptureFixture[str]
) -> None:
    M = reference[fw]
    corpus = _corpus(fw)
    metas = _metas()
    stats = Stats()
    start = time.perf_counter()
    for case in corpus.cases:
        run_case(case, M, stats, metas)
    report = _report(fw, stats, corpus, time.perf_counter() - start)
    print("\n" + report)
    assert not stats.mismatches, report
    assert len(stats.files) >= MIN_FILES[fw], report
    assert not stats.fallbacks, report
    assert "appropriate role" not in capfd.readouterr().out, "promptweave printed"


pytestmark = pytest.mark.usefixtures("quiet_reference_logs")


def test_harness_detects_differences(reference: dict[str, Any]) -> None:
    """Self-check: a one-character change of one prompt is reported for every kind of output."""
    M = reference["oc"]
    seen: set[tuple[str, str]] = set()
    for case in _corpus("oc").cases:
        key = (case.kind, case.mode)
        if key in seen:
            continue
        rows = make_rows(case)
        if isinstance(rows, str):
            continue
        ref = RefPipeline(M, "oc", case.infer_cfg, case.reader_cfg, rows)
        for meta in (_metas()[0], _metas()[-2]):  # none (strings), API (message lists)
            expected = ref.parse(ref.build(case.mode), meta, case.mode)
            if expected.errors or expected.printed:
                continue
            ours = DatasetRenderer(
                case.infer_cfg, case.reader_cfg, meta.template, api=meta.api, labels=expected.labels
            ).render(rows.test, rows.train)
            assert compare(ours, expected, len(rows.test)) is None
            last = ours.prompts[-1]
            target = last[list(last)[-1]] if isinstance(last, dict) else last
            if isinstance(target, str):
                mutated = target + " "
            elif target and isinstance(target[-1], dict):
                mutated = type(target)([*target[:-1], {**target[-1], "prompt": "x"}])
            else:
                continue
            if isinstance(last, dict):
                last[list(last)[-1]] = mutated
            else:
                ours.prompts[-1] = mutated
            assert compare(ours, expected, len(rows.test)) is not None, case.rel
            seen.add(key)
    assert {("dialogue", "gen"), ("string", "gen"), ("label-dict", "ppl")} <= seen, seen


# ============================================================================ the Python path


def test_python_path_matches_reference(
    reference: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row-by-row path (``FORCE_PYTHON``) on a sample of the same configs."""
    monkeypatch.setattr(_backend, "FORCE_PYTHON", True)
    mismatches: list[str] = []
    n = 0
    for fw, step in (("oc", 3), ("ais", 2)):
        stats = Stats()
        metas = tuple(m for m in _metas() if m.name in ("none", "internlm2-sys", "api-llama3.1"))
        for case in _corpus(fw).cases[::step]:
            run_case(case, reference[fw], stats, metas)
        mismatches += stats.mismatches
        n += stats.datasets
        assert stats.returned > 0
        assert stats.rust_rows == 0, "FORCE_PYTHON renders went through Rust"
    assert n >= 150
    assert not mismatches, "\n".join(mismatches[:20])


# ============================================================================ other retrievers


def _cases_with(fw: str, pred: Callable[[Case], bool], n: int) -> list[Case]:
    out = [c for c in _corpus(fw).cases if pred(c)]
    assert len(out) >= min(n, 3), f"too few {fw} configs for this test"
    step = max(1, len(out) // n)
    return out[::step][:n]


def _has_ice(case: Case) -> bool:
    return "ice_template" in case.infer_cfg


def _check_run(
    case: Case,
    M: Any,
    rows: Rows,
    meta: Meta,
    mode: str,
    *,
    retriever_cfg: dict[str, Any] | None = None,
    indices: list[list[int]] | None = None,
    flavor: str | None = None,
    loaded: dict[str, Any] | None = None,
    **render_kw: Any,
) -> tuple[Any, Outcome]:
    """Ours vs the reference for one dataset config with overrides; returns (ours, expected).
    ``loaded={'base': {'abbr', 'n'}, 'train': rows or None}``: the rows are a dataset's loaded
    data (one split when ``train`` is ``None``), prepared by the reference's ``BaseDataset``
    and by ``render(..., loaded=True)``."""
    fw = case.fw if flavor is None else {"opencompass": "oc", "aisbench": "ais"}[flavor]
    ref = RefPipeline(M, fw, case.infer_cfg, case.reader_cfg, rows, retriever_cfg, loaded)
    built = ref.build(mode, indices=indices)
    expected = ref.parse(built, meta, mode)
    infer = dict(case.infer_cfg)
    if retriever_cfg is not None:
        infer["retriever"] = retriever_cfg
    try:
        ours: Any = DatasetRenderer(
            infer,
            case.reader_cfg,
            meta.template,
            api=meta.api,
            flavor=FLAVOR[fw],
            mode=mode,
            labels=expected.labels,
            **(loaded["base"] if loaded else {}),
        ).render(
            rows.test,
            loaded.get("train", rows.train) if loaded else rows.train,
            ice_indices=indices,
            loaded=loaded is not None,
            **render_kw,
        )
    except Exception as exc:
        ours = exc
    diff = compare(ours, expected, len(rows.test))
    assert diff is None, f"{fw}:{case.rel} [{meta.name}, {mode}, {retriever_cfg}]\n    {diff}"
    return ours, expected


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_random_and_sliding_window_retrievers(fw: str, reference: dict[str, Any]) -> None:
    """No wheel config uses them: swap them into configs that have an ice_template."""
    M = reference[fw]
    cases = _cases_with(fw, _has_ice, 12)
    metas = _metas()
    checked = 0
    for k, case in enumerate(cases):
        rows = make_rows(case, "random")
        assert not isinstance(rows, str)
        n_train = len(rows.train)
        cfgs: list[dict[str, Any]] = [
            {
                "type": "RandomRetriever",
                "ice_num": 1 + k % min(4, n_train),
                "seed": [43, 0, 7][k % 3],
            },
        ]
        if fw == "oc":
            cfgs.append({"type": "SlidingWindowRetriever", "k": 1 + k % 3})
        for rcfg in cfgs:
            for meta in (metas[0], metas[1 + k % 5]):
                ours, _ = _check_run(case, M, rows, meta, case.mode, retriever_cfg=rcfg)
                if not isinstance(ours, BaseException):
                    assert ours.rust_rows == len(rows.test), case.rel
                    checked += 1
    assert checked >= 12


# ============================================================================ ice_indices=, limit=


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_explicit_ice_indices(fw: str, reference: dict[str, Any]) -> None:
    M = reference[fw]
    metas = _metas()
    checked = raised = 0
    cases = _cases_with(fw, _has_ice, 10) + _cases_with(fw, lambda c: not _has_ice(c), 4)
    for k, case in enumerate(cases):
        rows = make_rows(case, "indices")
        assert not isinstance(rows, str)
        rng = random.Random(k)
        n = len(rows.train)
        shapes = [
            [[] for _ in rows.test],  # no examples at all
            [[rng.randrange(n) for _ in range(rng.randint(0, 4))] for _ in rows.test],  # ragged
            [[n - 1, 0, n - 1] for _ in rows.test],  # repeated indices, reversed order
        ]
        for indices in shapes:
            meta = metas[k % len(metas)]
            ours, _ = _check_run(case, M, rows, meta, case.mode, indices=[list(x) for x in indices])
            if isinstance(ours, BaseException):
                raised += 1
                continue
            assert ours.ice_indices == indices
            assert ours.rust_rows == len(rows.test), case.rel
            checked += 1
    assert checked >= 20
    assert raised >= 1  # examples without an ice_template: AssertionError / [ICLR-PARAM-002]


#: retrievers promptweave does not have (they need a model or extra data): rendered from index
#: lists computed elsewhere
MODEL_RETRIEVERS = ("TopkRetriever", "BM25Retriever", "MDLRetriever", "VotekRetriever")


def _model_retriever_cases() -> list[Case]:
    """The OpenCompass dataset configs (one per template signature, two per file at most) whose
    retriever is one of :data:`MODEL_RETRIEVERS` and which otherwise qualify for the corpus."""
    root = configs_root("oc") / "datasets"
    cases: list[Case] = []
    seen: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        text = path.read_text("utf-8")
        if "__pycache__" in path.parts or not any(r in text for r in MODEL_RETRIEVERS):
            continue
        per_file = 0
        for i, ds in enumerate(_load(path).datasets()):
            infer = ds.get("infer_cfg") or {}
            name = _type_name((infer.get("retriever") or {}).get("type"))
            if name not in MODEL_RETRIEVERS or per_file >= MAX_DATASETS_PER_FILE:
                continue
            # classify as if the retriever were FixK: the rest of the config must qualify
            probe = {**ds, "infer_cfg": {**infer, "retriever": {"type": "FixKRetriever"}}}
            reason, kind, _, mode = _classify(probe)
            if reason is not None or _signature(ds) in seen:
                continue
            seen.add(_signature(ds))
            per_file += 1
            cases.append(Case("oc", path, i, ds, kind, name, mode))
    return cases


def test_model_retriever_configs_render_from_given_indices(reference: dict[str, Any]) -> None:
    """Real configs whose retriever needs a model (TopK, BM25, MDL): without indices a clear
    error; with ``ice_indices`` the prompts the reference builds from the same indices (its
    retrievers share ``BaseRetriever.generate_ice``, so a FixK retriever with the config's
    separators stands in for them on the reference side)."""
    M = reference["oc"]
    cases = _model_retriever_cases()
    assert {c.retriever for c in cases} >= {"TopkRetriever", "BM25Retriever", "MDLRetriever"}
    metas = _metas()
    checked = 0
    for k, case in enumerate(cases):
        rows = make_rows(case, "model-retriever")
        assert not isinstance(rows, str)
        renderer = DatasetRenderer(case.infer_cfg, case.reader_cfg)
        with pytest.raises(PromptRenderError, match=f"{case.retriever}' is not available"):
            renderer.render(rows.test, rows.train)
        rng = random.Random(k)
        indices = [
            [rng.randrange(len(rows.train)) for _ in range(rng.randint(0, 3))] for _ in rows.test
        ]
        cfg = case.infer_cfg["retriever"]
        stand_in: dict[str, Any] = {"type": "FixKRetriever", "fix_id_list": [0]}
        stand_in.update({k: cfg[k] for k in ("ice_separator", "ice_eos_token") if k in cfg})
        modes = [case.mode] if case.mode == "gen" or case.kind.startswith("label") else []
        for mode in modes:
            meta = metas[k % len(metas)]
            ref = RefPipeline(M, "oc", case.infer_cfg, case.reader_cfg, rows, stand_in)
            expected = ref.parse(ref.build(mode, indices=indices), meta, mode)
            renderer = renderer_for(
                case.infer_cfg, case.reader_cfg, meta, mode=mode, labels=expected.labels
            )
            ours = renderer.render(rows.test, rows.train, ice_indices=[list(x) for x in indices])
            diff = compare(ours, expected, len(rows.test))
            assert diff is None, f"{case.rel} [{case.retriever}, {meta.name}, {mode}]\n    {diff}"
            assert ours.ice_indices == indices
            assert ours.rust_rows == len(rows.test), case.rel
            checked += 1
    assert checked >= 5, [c.rel for c in cases]


def test_aisbench_flavour_has_no_sliding_window_retriever() -> None:
    """AISBench 3.1 has no SlidingWindowRetriever: a clear error in that flavour (the
    OpenCompass class is not used with AISBench's constructor arguments), unless the indices
    are given."""
    infer = {
        "ice_template": {"template": "Q: {q} A: {a}"},
        "prompt_template": {"template": "</E>Q: {q} A:", "ice_token": "</E>"},
        "retriever": {"type": "SlidingWindowRetriever", "k": 1, "ice_separator": " | "},
        "inferencer": {"type": "GenInferencer"},
    }
    reader = {"input_columns": ["q"], "output_column": "a"}
    rows = [{"q": "one", "a": "1"}, {"q": "two", "a": "2"}]
    ais = DatasetRenderer(infer, reader, flavor="aisbench")
    with pytest.raises(PromptRenderError, match=r"an OpenCompass retriever; AISBench 3\.1 has"):
        ais.render(rows)
    given = ais.render(rows, ice_indices=[[1], [0]]).prompts
    assert given == ["Q: two A: 2\nQ: one A:", "Q: one A: 1\nQ: two A:"]
    oc = DatasetRenderer(infer, reader).render(rows).prompts
    assert oc[1] == "Q: one A: 1\nQ: two A:"


# ============================================================================ reader ranges

#: (train_range, test_range) pairs: slices, shuffled counts, fractions, no-ops (<= 0 or >= the
#: split's size) and a fraction small enough to keep no row
READER_RANGES: list[tuple[Any, Any]] = [
    (None, "[0:2]"),
    (None, "[1:]"),
    (None, " [ : : 2 ] "),
    (None, "[-2:]"),
    (None, "[3:1]"),
    (None, 2),
    (None, 0.5),
    (None, 0.01),
    (None, 0),
    (None, -4),
    (None, 10**6),
    (3, None),
    (0.5, "[1:3]"),
    ("[2:]", 2),
    (True, 1),
]


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_partial_indices_match_the_reference_reader(fw: str, reference: dict[str, Any]) -> None:
    """``partial_indices`` picks the rows ``load_partial_dataset`` picks, in its order, and fails
    like it on a float that is not a fraction."""
    from datasets import Dataset as HFDataset

    load_partial = reference[fw].reader_module.load_partial_dataset
    sizes: list[Any] = [None, 0, 1, 2, 3, 5, 7, 8, 9, -1, 0.1, 0.25, 0.5, 0.99, True]
    sizes += ["[0:3]", "[:5]", "[2:]", "[::3]", "[-3:]", "[1:-1]", "[ 4 : 1 : -1 ]", "[9:20]"]
    sizes += [1.0, 2.5, 3.0]  # the reference slices with these unless the split is smaller
    # expressions the reference evaluates (`index_list{size}`): some select rows, some fail
    # (OpenCompass raises; AISBench warns and keeps the whole split)
    sizes += ["0:2", "[:2]+[4]", "[1:4][::-1]", "[::0]", "[:1e2]", "[1]", "[7]", "[1, -1]"]
    sizes += ["[:len(index_list)//2]", "[i for i in index_list if i % 2]", "['a']"]
    flavor = {"oc": "opencompass", "ais": "aisbench"}[fw]
    checked = failing = 0
    for total in (0, 1, 2, 5, 8, 13):
        hf = HFDataset.from_list([{"i": i} for i in range(total)])
        for size in sizes:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    want = [r["i"] for r in load_partial(hf, size)]
            except Exception as exc:
                with pytest.raises(type(exc), match=r"test_range="):
                    partial_indices(total, size, "test", flavor)
                failing += 1
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert partial_indices(total, size, "test", flavor) == want, (total, size)
            checked += 1
    assert checked > 100
    assert failing > (5 if fw == "ais" else 30)


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_dataset_ranges_like_the_reader(fw: str, reference: dict[str, Any]) -> None:
    """``retrievers.Dataset(train_range=, test_range=)`` keeps the rows the reference
    ``DatasetReader`` keeps, from two splits or from one (both ranges then cut the same rows)."""
    from promptweave.retrievers import Dataset

    M = reference[fw]
    test = [{"q": f"q{i}", "a": f"a{i}"} for i in range(9)]
    train = [{"q": f"t{i}", "a": f"b{i}"} for i in range(7)]
    for train_range, test_range in READER_RANGES:
        reader = {"input_columns": ["q"], "output_column": "a"}
        reader.update(train_range=train_range, test_range=test_range)
        for ref, ours in (
            (
                make_ref_dataset(M, train, test, reader),
                Dataset(test, train, train_range=train_range, test_range=test_range),
            ),
            (
                make_ref_dataset(M, test, None, reader),
                Dataset(test, None, train_range=train_range, test_range=test_range),
            ),
        ):
            where = (train_range, test_range)
            assert ours.test == [dict(r) for r in ref.test], where
            assert ours.train == [dict(r) for r in ref.train], where
            assert [test[i] for i in ours.test_indices] == ours.test, where


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_from_loaded_like_base_dataset(fw: str, reference: dict[str, Any]) -> None:
    """``Dataset.from_loaded`` gives the rows (``subdivision``/``idx`` included) the real
    ``BaseDataset`` gives, for ranges x repetitions x one or two splits x split names."""
    from promptweave.retrievers import Dataset

    M = reference[fw]
    test = [{"q": f"q{i}", "a": f"a{i}"} for i in range(6)]
    train = [{"q": f"t{i}", "a": f"b{i}", "idx": -i} for i in range(5)]  # idx: overwritten
    checked = 0
    for j, (train_range, test_range) in enumerate(READER_RANGES):
        for n in (1, 2, 3):
            # ("test", "test"): one split read as both (SciEval's reader config); the train
            # rows given are not used, with a warning
            for two, names in (
                (False, ("train", "test")),
                (True, ("dev", "val")),
                (True, ("test", "test")),
            ):
                reader = {"input_columns": ["q"], "output_column": "a"}
                reader.update(train_range=train_range, test_range=test_range)
                reader.update(train_split=names[0], test_split=names[1])
                with contextlib.redirect_stderr(io.StringIO()):
                    ref = _golden_ns.reference_base_dataset(
                        M, test, train if two else None, reader, abbr=f"ds{j}", n=n
                    )
                same = names[0] == names[1]
                with pytest.warns(SameSplitWarning) if same else contextlib.nullcontext():
                    ours = Dataset.from_loaded(
                        test,
                        train if two else None,
                        flavor=FLAVOR[fw],
                        abbr=f"ds{j}",
                        n=n,
                        train_range=train_range,
                        test_range=test_range,
                        train_split=names[0],
                        test_split=names[1],
                    )
                where = (train_range, test_range, n, names)
                assert repr(ours.test) == repr([dict(r) for r in ref.test]), where
                assert repr(ours.train) == repr([dict(r) for r in ref.train]), where
                pairs = zip(ours.test_indices, ours.test, strict=True)
                got = [(test[i]["q"], r["q"]) for i, r in pairs]
                assert all(a == b for a, b in got), where
                checked += 1
    assert checked == len(READER_RANGES) * 9


def test_reader_range_errors_are_clear() -> None:
    from promptweave.errors import PromptTypeError, RetrieverError

    with pytest.raises(NameError, match=r"train_range='\[len\(x\)\]'.*evaluates") as info:
        partial_indices(5, "[len(x)]", "train")
    assert isinstance(info.value, RetrieverError)
    with pytest.raises(RetrieverError, match="step cannot be zero"):
        partial_indices(5, "[::0]")
    with pytest.raises(PromptTypeError, match=r"test_range: expected .* got list"):
        partial_indices(5, [0, 1])
    # checked when the renderer is made
    infer = {"prompt_template": {"type": "PromptTemplate", "template": "{q}"}}
    with pytest.raises(ValueError, match="test_range"):
        DatasetRenderer(infer, {"input_columns": ["q"], "test_range": "rows 0-5"})


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_loaded_rows_of_every_config(fw: str, reference: dict[str, Any]) -> None:
    """The CLI's default: the rows are the dataset's loaded data, prepared with each config's
    own reader config (its split names -- ``train_split='test'`` in about 200 of them --, its
    ranges), as one split or two, for every config of the corpus. Where the config reads both
    splits from one, the train split given is unused, with a ``SameSplitWarning``."""
    M = reference[fw]
    metas = _metas()
    checked = same_split = 0
    for k, case in enumerate(_corpus(fw).cases):
        rows = make_rows(case, seed_extra="loaded-own")
        assert not isinstance(rows, str)
        names = (
            case.reader_cfg.get("train_split") or "train",
            case.reader_cfg.get("test_split") or "test",
        )
        # one split (a Dataset) works in the reference only under the default split names
        one_split = k % 2 == 0 and names == ("train", "test")
        loaded = {"base": {"abbr": f"ds{k}", "n": 1}, **({"train": None} if one_split else {})}
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ours, _ = _check_run(case, M, rows, metas[k % len(metas)], case.mode, loaded=loaded)
        warned = any(issubclass(w.category, SameSplitWarning) for w in seen)
        if not isinstance(ours, BaseException):
            assert warned == (names[0] == names[1] and not one_split), case.rel
            same_split += warned
            checked += 1
    assert checked >= MIN_FILES[fw]
    assert same_split >= 5


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_loaded_rows(fw: str, reference: dict[str, Any]) -> None:
    """``render(..., loaded=True)``: the rows are a dataset's loaded data, prepared as the real
    ``BaseDataset`` and ``DatasetReader`` prepare them (``subdivision``/``idx``, ``n``
    repetitions -- whole splits in OpenCompass, each row in AISBench --, the reader config's
    ``train_range``/``test_range`` before or after them); one split or two; for configs with
    in-context examples, every retriever, gen and ppl. ``RenderResult.test_indices`` names the
    loaded rows rendered."""
    from promptweave.retrievers import prepared_test_size

    M = reference[fw]
    metas = _metas()
    checked = 0
    for k, case in enumerate(_cases_with(fw, _has_ice, 5)):
        for j, (train_range, test_range) in enumerate(READER_RANGES):
            dataset = copy.deepcopy(case.dataset)
            dataset["reader_cfg"] = dict(
                case.reader_cfg, train_range=train_range, test_range=test_range
            )
            ranged = Case(
                case.fw, case.path, case.index, dataset, case.kind, case.retriever, case.mode
            )
            rows = make_rows(ranged, seed_extra=f"loaded{j}")
            assert not isinstance(rows, str)
            meta = metas[(k + j) % len(metas)]
            n = 1 + (k + j) % 3
            # one loaded split serves both only under the default split names (with others the
            # reference's reader fails to find them: promptweave takes the one split for both)
            names = (case.reader_cfg.get("train_split"), case.reader_cfg.get("test_split"))
            one_split = j % 2 == 0 and names[0] in (None, "train") and names[1] in (None, "test")
            split: dict[str, Any] = {"train": None} if one_split else {}
            loaded = {"base": {"abbr": f"ds{k}", "n": n}, **split}
            # a config reading both splits from one (SciEval: train_split='test') makes the
            # loaded data one split of that name: the train rows given are not used
            same = (names[0] or "train") == (names[1] or "test") and not one_split
            with pytest.warns(SameSplitWarning) if same else contextlib.nullcontext():
                ours, _ = _check_run(ranged, M, rows, meta, case.mode, loaded=loaded)
            if isinstance(ours, BaseException):
                continue
            size = prepared_test_size(len(rows.test), n=n, test_range=test_range, flavor=FLAVOR[fw])
            assert len(ours.test_indices) == len(ours.prompts) == size
            assert set(ours.test_indices) <= set(range(len(rows.test)))
            checked += 1
    assert checked >= 40


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_limit(fw: str, reference: dict[str, Any]) -> None:
    M = reference[fw]
    metas = _metas()
    for k, case in enumerate(_cases_with(fw, lambda c: True, 12)):
        rows = make_rows(case, "limit")
        assert not isinstance(rows, str)
        meta = metas[k % len(metas)]
        for limit in (0, 1, len(rows.test) - 1, len(rows.test) + 3):
            head = Rows(rows.train, rows.test[:limit], rows.columns)
            ours, _ = _check_run(case, M, head, meta, case.mode)  # the reference on test[:limit]
            try:
                got = DatasetRenderer(
                    case.infer_cfg,
                    case.reader_cfg,
                    meta.template,
                    api=meta.api,
                    flavor=FLAVOR[fw],
                    mode=case.mode,
                    labels=None if isinstance(ours, BaseException) else ours.labels,
                ).render(rows.test, rows.train, limit=limit)
            except Exception as exc:
                raised: BaseException | None = exc
            else:
                raised = None
            if raised is not None or isinstance(ours, BaseException):
                assert type(raised) is type(ours), case.rel
                continue
            assert repr(got.prompts) == repr(ours.prompts), (case.rel, limit)
            assert got.ice_indices == ours.ice_indices


def test_limit_keeps_the_whole_test_split_as_train() -> None:
    """Without ``train`` the test rows are the train split; ``limit`` picks test rows only, so
    fixed examples beyond the limit stay available (the reference's ``test_range`` does not touch
    the train split either)."""
    infer = {
        "ice_template": {"type": "PromptTemplate", "template": "{q}->{a}"},
        "prompt_template": {"type": "PromptTemplate", "template": "</E>{q}->", "ice_token": "</E>"},
        "retriever": {"type": "FixKRetriever", "fix_id_list": [3, 4]},
        "inferencer": {"type": "GenInferencer"},
    }
    reader = {"input_columns": ["q"], "output_column": "a"}
    rows = [{"q": f"q{i}", "a": f"a{i}"} for i in range(5)]
    r = DatasetRenderer(infer, reader)
    full = r.render(rows)
    assert (
        r.render(rows, limit=2).prompts
        == full.prompts[:2]
        == [
            "q3->a3\nq4->a4\nq0->",
            "q3->a3\nq4->a4\nq1->",
        ]
    )


# ============================================================================ max_seq_len


_FAKE_MODELS: dict[str, tuple[type, type]] = {}


def _fake_models(M: Any) -> tuple[type, type]:
    if M.name not in _FAKE_MODELS:
        _FAKE_MODELS[M.name] = _make_fake_models(M)
    return _FAKE_MODELS[M.name]


def _make_fake_models(M: Any) -> tuple[type, type]:
    import numpy as np

    class FakeLM(M.BaseModel):  # type: ignore[misc,name-defined]
        """Local model stand-in: one token per character; records the get_ppl inputs."""

        def __init__(self, meta_template: Any = None) -> None:
            super().__init__(path="fake", meta_template=meta_template)
            self.ppl_inputs: list[Any] = []

        def get_token_len(self, prompt: str) -> int:
            return len(prompt)

        def generate(self, inputs: Any, max_out_len: int, **kw: Any) -> list[str]:
            return ["" for _ in inputs]

        def get_ppl(self, inputs: Any, mask_length: Any = None) -> Any:
            self.ppl_inputs.extend(inputs)
            return np.array([float(len(x)) for x in inputs])

    class FakeAPI(M.BaseAPIModel):  # type: ignore[misc,name-defined]
        """API model stand-in (keeps BaseAPIModel.get_token_len)."""

        def __init__(self, meta_template: Any = None) -> None:
            super().__init__(path="fake", meta_template=meta_template)

        def generate(self, inputs: Any, max_out_len: int, **kw: Any) -> list[str]:
            return ["" for _ in inputs]

    return FakeLM, FakeAPI


def _trim_cases() -> list[tuple[Case, Rows]]:
    out = []
    for case in _cases_with("oc", lambda c: c.retriever == "FixKRetriever", 16):
        rows = make_rows(case, "trim", plain=True)
        assert not isinstance(rows, str)
        out.append((case, rows))
    return out


def test_max_seq_len_golden_inf_cases() -> None:
    """Spec 04 §5/§6 golden cases INF-01..04 (GenInferencer) and INF-06/07 (PPLInferencer)."""
    reader = {"input_columns": ["question"], "output_column": "answer"}
    train = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(4)]
    test = [{"question": "QQ", "answer": "AA"}]
    gen = {
        "ice_template": {"type": "PromptTemplate", "template": "{question}:{answer}"},
        "prompt_template": {
            "type": "PromptTemplate",
            "template": "</E>{question}:{answer}",
            "ice_token": "</E>",
        },
        "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1, 2]},
        "inferencer": {"type": "GenInferencer"},
    }
    for max_seq_len, want in (
        (None, "q0:a0\nq1:a1\nq2:a2\nQQ:"),
        (20, "q0:a0\nq1:a1\nQQ:"),
        (14, "q0:a0\nQQ:"),
        (5, "\nQQ:"),
    ):
        r = DatasetRenderer(
            gen, reader, max_seq_len=max_seq_len, token_counter=len if max_seq_len else None
        )
        assert r.render(test, train).prompts == [want]
    train = [{"question": f"q{i}", "answer": "A"} for i in range(3)]
    test = [{"question": "QQ", "answer": "A"}]
    lab = {"A": "A", "LONGER": "LONGERLABEL"}
    for order, want in (
        (["A", "LONGER"], {"A": "q0->A\nq1->A\nQQ->A", "LONGER": "\nQQ->LONGERLABEL"}),
        (["LONGER", "A"], {"LONGER": "\nQQ->LONGERLABEL", "A": "\nQQ->A"}),
    ):
        ppl = {
            "ice_template": {
                "type": "PromptTemplate",
                "template": {k: "{question}->" + lab[k] for k in order},
            },
            "prompt_template": {
                "type": "PromptTemplate",
                "template": {k: "</E>{question}->" + lab[k] for k in order},
                "ice_token": "</E>",
            },
            "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1, 2]},
            "inferencer": {"type": "PPLInferencer"},
        }
        r = DatasetRenderer(ppl, reader, max_seq_len=20, token_counter=len)
        res = r.render(test, train)
        assert res.prompts == [want]
        assert list(res.prompts[0]) == order
        assert res.ice_indices == [[]]


def test_max_seq_len_matches_gen_inferencer(reference: dict[str, Any], tmp_path: Path) -> None:
    """OC ``GenInferencer.get_generation_prompt_list_from_retriever_indices`` trimming loop with
    a 1-token-per-character local model and an API model (``BaseAPIModel.get_token_len``), on
    FixK configs of the wheel, at lengths that keep all, some and none of the examples."""
    M = reference["oc"]
    FakeLM, FakeAPI = _fake_models(M)
    metas = [
        m for m in _metas() if m.name in ("none", "internlm2-sys", "llama2-rft", "api-llama3.1")
    ]
    trimmed = checked = 0
    for case, rows in _trim_cases():
        if case.mode != "gen":
            continue
        ref = RefPipeline(M, "oc", case.infer_cfg, case.reader_cfg, rows)
        it, pt = _ref_template(M, ref.it_cfg), _ref_template(M, ref.pt_cfg)
        for meta in metas:
            model = (FakeAPI if meta.api else FakeLM)(copy.deepcopy(meta.template))
            counter = api_token_len if meta.api else len
            built = ref.build("gen")
            if built.errors or not built.prompts:
                continue
            try:
                full = [model.get_token_len_from_template(p, mode="gen") for p in built.prompts]
            except KeyError:  # a SYSTEM role this meta template does not know
                continue
            for max_seq_len in sorted(
                {min(full) // 3, min(full) - 1, (min(full) + max(full)) // 2, max(full)}
            ):
                r = ref._retriever()
                inf = M.GenInferencer(
                    model=model,
                    max_out_len=8,
                    max_seq_len=max_seq_len,
                    output_json_filepath=str(tmp_path),
                )
                prompts = inf.get_generation_prompt_list_from_retriever_indices(
                    r.retrieve(),
                    r,
                    "",
                    max_seq_len=max_seq_len,
                    ice_template=it,
                    prompt_template=pt,
                )
                want = [model.parse_template(p, mode="gen") for p in prompts]
                res = DatasetRenderer(
                    case.infer_cfg,
                    case.reader_cfg,
                    meta.template,
                    api=meta.api,
                    max_seq_len=max_seq_len,
                    token_counter=counter,
                ).render(rows.test, rows.train)
                assert repr(res.prompts) == repr(want), (case.rel, meta.name, max_seq_len)
                fixed = list(case.infer_cfg["retriever"]["fix_id_list"])
                assert all(idx == fixed[: len(idx)] for idx in res.ice_indices)
                trimmed += any(len(idx) < len(fixed) for idx in res.ice_indices)
                checked += 1
    assert checked >= 20
    assert trimmed >= 10


def test_api_token_len_is_the_reference_estimate(reference: dict[str, Any]) -> None:
    """``promptweave.tokens.api_token_len`` == OpenCompass's ``BaseAPIModel.get_token_len`` on
    generated text (ASCII words, CJK, other scripts, full-width forms, punctuation)."""
    _, FakeAPI = _fake_models(reference["oc"])
    model = FakeAPI(None)
    rng = random.Random(7)
    alphabet = [*"aZ9 _-.'\n\t", "中", "文", "\u4e00", "\u9fff", "\u3400", "é", "\uff11", "😀"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert api_token_len(text) == model.get_token_len(text), repr(text)


def test_model_max_seq_len_like_the_infer_task(reference: dict[str, Any], tmp_path: Path) -> None:
    """``from_config(dataset, model_cfg)`` drops in-context examples by the model config's
    ``max_seq_len`` as OpenCompass's infer task does (it hands the model's max_seq_len to the
    inferencer): an API class that keeps BaseAPIModel's estimate with no counter given, a
    local model with the caller's counter; a class that counts with tiktoken and no counter is
    left untrimmed."""
    M = reference["oc"]
    FakeLM, FakeAPI = _fake_models(M)
    api_meta = next(m for m in _metas() if m.name == "api-llama3.1").template
    lm_meta = next(m for m in _metas() if m.name == "internlm2-sys").template
    trimmed = checked = 0
    for case, rows in _trim_cases():
        if case.mode != "gen":
            continue
        ref = RefPipeline(M, "oc", case.infer_cfg, case.reader_cfg, rows)
        built = ref.build("gen")
        if built.errors or not built.prompts:
            continue
        it, pt = _ref_template(M, ref.it_cfg), _ref_template(M, ref.pt_cfg)
        ds = {"infer_cfg": case.infer_cfg, "reader_cfg": case.reader_cfg}
        for cls, meta, fake, kw in (
            ("Gemini", api_meta, FakeAPI, {}),
            ("HuggingFaceCausalLM", lm_meta, FakeLM, {"token_counter": len}),
        ):
            model = fake(copy.deepcopy(meta))
            try:
                full = [model.get_token_len_from_template(p, mode="gen") for p in built.prompts]
            except KeyError:
                continue
            limit = (min(full) + max(full)) // 2
            r = ref._retriever()
            inf = M.GenInferencer(
                model=model, max_out_len=8, max_seq_len=limit, output_json_filepath=str(tmp_path)
            )
            prompts = inf.get_generation_prompt_list_from_retriever_indices(
                r.retrieve(), r, "", max_seq_len=limit, ice_template=it, prompt_template=pt
            )
            want = [model.parse_template(p, mode="gen") for p in prompts]
            cfg = {"type": cls, "meta_template": meta, "max_seq_len": limit}
            res = DatasetRenderer.from_config(ds, cfg, **kw).render(rows.test, rows.train)
            assert repr(res.prompts) == repr(want), (case.rel, cls, limit)
            fixed = list(case.infer_cfg["retriever"]["fix_id_list"])
            trimmed += any(len(idx) < len(fixed) for idx in res.ice_indices)
            checked += 1
        # OpenAISDK counts with tiktoken: without a counter its max_seq_len is not applied
        cfg = {"type": "OpenAISDK", "meta_template": api_meta, "max_seq_len": 1}
        res = DatasetRenderer.from_config(ds, cfg).render(rows.test, rows.train)
        untrimmed = DatasetRenderer.from_config(ds, {**cfg, "max_seq_len": None})
        assert res.prompts == untrimmed.render(rows.test, rows.train).prompts
    assert checked >= 10
    assert trimmed >= 5


def test_max_seq_len_matches_ppl_inferencer(reference: dict[str, Any], tmp_path: Path) -> None:
    """OC ``PPLInferencer.inference`` (in-place trimming that carries over to later labels):
    the inputs its model receives, label by label, equal ours."""
    M = reference["oc"]
    FakeLM, _ = _fake_models(M)
    metas = [m for m in _metas() if m.name in ("none", "qwen", "doc2-reserved-system")]
    checked = trimmed = 0
    for case, rows in _trim_cases():
        if case.mode != "ppl":
            continue
        ref = RefPipeline(M, "oc", case.infer_cfg, case.reader_cfg, rows)
        it, pt = _ref_template(M, ref.it_cfg), _ref_template(M, ref.pt_cfg)
        labels = ref.build("ppl").labels
        assert labels is not None
        for meta in metas:
            probe = FakeLM(copy.deepcopy(meta.template))
            built = ref.build("ppl", labels=labels)
            assert built.prompts is not None
            lens = [
                probe.get_token_len_from_template(p, mode="ppl")
                for per in built.prompts
                for p in per.values()
            ]
            for max_seq_len in sorted({min(lens) - 1, (min(lens) + max(lens)) // 2, max(lens)}):
                model = FakeLM(copy.deepcopy(meta.template))
                inf = M.PPLInferencer(
                    model=model,
                    max_seq_len=max_seq_len,
                    labels=labels,
                    output_json_filepath=str(tmp_path),
                )
                with contextlib.redirect_stderr(io.StringIO()):
                    inf.inference(
                        ref._retriever(),
                        ice_template=it,
                        prompt_template=pt,
                        output_json_filepath=str(tmp_path),
                        output_json_filename="p",
                    )
                n = len(rows.test)
                want = [
                    {label: model.ppl_inputs[j * n + i] for j, label in enumerate(labels)}
                    for i in range(n)
                ]
                res = DatasetRenderer(
                    case.infer_cfg,
                    case.reader_cfg,
                    meta.template,
                    labels=labels,
                    max_seq_len=max_seq_len,
                    token_counter=len,
                ).render(rows.test, rows.train)
                assert repr(res.prompts) == repr(want), (case.rel, meta.name, max_seq_len)
                fixed = list(case.infer_cfg["retriever"]["fix_id_list"])
                trimmed += any(len(idx) < len(fixed) for idx in res.ice_indices)
                checked += 1
    assert checked >= 6
    assert trimmed >= 3


# ============================================================================ columnar inputs


def _columnar_forms(rows: list[dict[str, Any]]) -> dict[str, Any]:
    columns = list(rows[0])
    forms: dict[str, Any] = {
        "dict of lists": {c: [r[c] for r in rows] for c in columns},
        "tuple of dicts": tuple(rows),
        "generator": (dict(r) for r in rows),
    }
    try:
        import datasets
    except ImportError:
        pass
    else:
        forms["datasets.Dataset"] = datasets.Dataset.from_list(rows)
    try:
        import pyarrow as pa
    except ImportError:
        pass
    else:
        forms["pyarrow.Table"] = pa.Table.from_pylist(rows)
    try:
        import pandas as pd
    except ImportError:
        pass
    else:
        forms["pandas.DataFrame"] = pd.DataFrame(rows, columns=columns)
    return forms


@contextlib.contextmanager
def _no_pyarrow() -> Iterator[None]:
    """``promptweave`` row conversion sees pyarrow as not installed."""
    import promptweave.retrievers as rows_module

    real = importlib.import_module

    def fake(name: str, *args: Any) -> Any:
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError(name)
        return real(name, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rows_module.importlib, "import_module", fake)
        yield


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_columnar_inputs(fw: str) -> None:
    """Every columnar form of the rows gives the prompts of the list of dicts (and stays on the
    Rust path)."""
    metas = _metas()
    checked: collections.Counter[str] = collections.Counter()
    for k, case in enumerate(_cases_with(fw, lambda c: True, 10)):
        rows = make_rows(case, "columnar")
        assert not isinstance(rows, str)
        meta = metas[k % len(metas)]
        try:
            renderer = DatasetRenderer(
                case.infer_cfg, case.reader_cfg, meta.template, api=meta.api, flavor=FLAVOR[fw]
            )
            want = renderer.render(rows.test, rows.train)
        except Exception:
            continue
        if want.mode == "ppl" and not isinstance(
            renderer.prompt_template.template if renderer.prompt_template else None, dict
        ):
            continue  # set-ordered labels: not comparable across renders
        tests, trains = _columnar_forms(rows.test), _columnar_forms(rows.train)
        for name in tests:
            with contextlib.ExitStack() as stack:
                if name == "pandas.DataFrame" and k % 2:  # without pyarrow: pandas' own values
                    stack.enter_context(_no_pyarrow())
                got = renderer.render(tests[name], trains[name])
            assert repr(got.prompts) == repr(want.prompts), (case.rel, name)
            assert got.ice_indices == want.ice_indices
            assert got.rust_rows == len(rows.test), (case.rel, name)
            checked[name] += 1
    assert min(checked.values()) >= 5, checked
    assert {"dict of lists", "generator"} <= set(checked)


# ============================================================================ AISBench specifics


def test_ais_configs_with_opencompass_flavour(reference: dict[str, Any]) -> None:
    """The AIS configs rendered with the OpenCompass flavour match the OpenCompass reference
    (the flavours differ in errors and retriever checks, not in these prompts)."""
    stats = Stats()
    metas = tuple(m for m in _metas() if m.name in ("none", "qwen", "api-llama3.1"))
    for case in _corpus("ais").cases[::3]:
        rows = make_rows(case)
        assert not isinstance(rows, str)
        for meta in metas:
            _check_run(case, reference["oc"], rows, meta, case.mode, flavor="opencompass")
            stats.renders += 1
    assert stats.renders >= 40


def test_ais_error_codes_on_ais_configs(reference: dict[str, Any]) -> None:
    """AIS configs made invalid: FixK ids out of range ([ICLR-PARAM-004]; OpenCompass indexes
    negative ids from the end), a prompt_template without its ice_token ([ICLR-IMPL-002])."""
    fixk = _cases_with("ais", lambda c: c.retriever == "FixKRetriever", 6)
    codes: collections.Counter[str] = collections.Counter()
    for k, case in enumerate(fixk):
        rows = make_rows(case, "codes")
        assert not isinstance(rows, str)
        meta = _metas()[k % len(_metas())]
        n = len(rows.train)
        for bad in ([-1, 0], [0, n], [n + 5]):
            rcfg = {**case.infer_cfg["retriever"], "fix_id_list": bad}
            for flavor in ("aisbench", "opencompass"):
                M = reference["ais" if flavor == "aisbench" else "oc"]
                ours, _ = _check_run(
                    case, M, rows, meta, case.mode, retriever_cfg=rcfg, flavor=flavor
                )
                if isinstance(ours, PromptRenderError) and ours.error_code:
                    codes[ours.error_code] += 1
        infer = copy.deepcopy(case.infer_cfg)
        if "prompt_template" in infer and "ice_template" in infer:
            infer["prompt_template"].pop("ice_token", None)
            broken = Case(
                "ais",
                case.path,
                case.index,
                {**case.dataset, "infer_cfg": infer},
                case.kind,
                case.retriever,
                case.mode,
            )
            ours, _ = _check_run(broken, reference["ais"], rows, meta, case.mode)
            assert isinstance(ours, PromptRenderError), ours
            codes[str(ours.error_code)] += 1
    assert codes["ICLR-PARAM-004"] >= 6, codes
    assert codes["ICLR-IMPL-002"] >= 1, codes


# ============================================================================ other inferencers

#: OpenCompass inferencers that are not Gen/PPL: how they build the model input from the retriever
#: (build mode, parse mode).  CLP: ``generate_prompt_for_generate_task`` then
#: ``parse_template(.., 'gen')``; PPLOnly / InferencePPLOnly: the same prompts, scored through
#: ``get_ppl_from_template`` (``parse_template(.., 'ppl')``; the saved ``origin_prompt`` is the
#: 'gen' parse); LL: ``generate_label_prompt`` per label, ``parse_template(.., 'ppl')``.
OTHER_INFERENCERS = {
    "CLPInferencer": ("gen", "gen"),
    "PPLOnlyInferencer": ("gen", "ppl"),
    "InferencePPLOnlyInferencer": ("gen", "ppl"),
    "LLInferencer": ("ppl", "ppl"),
}


def test_other_inferencers_default_mode(reference: dict[str, Any]) -> None:
    """Every wheel config using CLP / PPLOnly / InferencePPLOnly / LL inferencers, rendered with
    the mode ``DatasetRenderer`` derives from the inferencer, equals what that inferencer feeds
    its model."""
    M = reference["oc"]
    root = configs_root("oc") / "datasets"
    failures: list[str] = []
    checked: collections.Counter[str] = collections.Counter()
    for path in sorted(root.rglob("*.py")):
        text = path.read_text("utf-8")
        if not any(name in text for name in OTHER_INFERENCERS):
            continue
        for i, ds in enumerate(_load(path).datasets()):
            infer = ds["infer_cfg"]
            name = _type_name((infer.get("inferencer") or {}).get("type"))
            if name not in OTHER_INFERENCERS:
                continue
            build_mode, parse_mode = OTHER_INFERENCERS[name]
            kind = _template_kind(
                (infer.get("prompt_template") or infer["ice_template"])["template"]
            )
            case = Case("oc", path, i, ds, kind, "ZeroRetriever", build_mode)
            rows = make_rows(case)
            assert not isinstance(rows, str)
            ref = RefPipeline(M, "oc", infer, ds["reader_cfg"], rows)
            built = ref.build(build_mode)
            for meta in _metas():
                expected = ref.parse(built, meta, parse_mode)
                try:
                    ours: Any = DatasetRenderer(
                        infer,
                        ds["reader_cfg"],
                        meta.template,
                        api=meta.api,
                        labels=expected.labels,
                    ).render(rows.test, rows.train)
                except Exception as exc:
                    ours = exc
                diff = compare(ours, expected, len(rows.test))
                if diff is not None:
                    failures.append(f"{name} {case.rel} [{kind}, meta={meta.name}]\n    {diff}")
                checked[name] += 1
    assert set(checked) == set(OTHER_INFERENCERS), checked
    assert not failures, f"{len(failures)} of {sum(checked.values())}:\n" + "\n".join(failures[:12])


@pytest.mark.parametrize("inferencer", ["PPLOnlyInferencer", "InferencePPLOnlyInferencer"])
def test_ppl_only_inferencer_dialogue_model_input(
    reference: dict[str, Any], inferencer: str
) -> None:
    """The PPL-only inferencers score the 'ppl' parse of their generation prompts: for a
    dialogue template under a meta template it differs from the 'gen' parse (the inferencers'
    saved origin_prompt), and the renderer gives the scored one."""
    M = reference["oc"]
    infer = {
        "prompt_template": {
            "type": "PromptTemplate",
            "template": {
                "round": [
                    {"role": "HUMAN", "prompt": "{text}"},
                    {"role": "BOT", "prompt": "{answer}"},
                ]
            },
        },
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": inferencer},
    }
    reader = {"input_columns": ["text"], "output_column": "answer"}
    rows = Rows(
        [{"text": "t1", "answer": "a1"}],  # train
        [{"text": "t0", "answer": "a0"}, {"text": "t2", "answer": "a2"}],  # test
        ["text", "answer"],
    )
    ref = RefPipeline(M, "oc", infer, reader, rows)
    differs = 0
    for meta in _metas():
        expected = ref.parse(ref.build("gen"), meta, "ppl")  # what get_ppl_from_template scores
        ours = DatasetRenderer(infer, reader, meta.template, api=meta.api).render(
            rows.test, rows.train
        )
        assert compare(ours, expected, 2) is None, meta.name
        differs += expected.prompts != ref.parse(ref.build("gen"), meta, "gen").prompts
    assert differs > 0  # the case is one where the two parses differ


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_model_built_prompts_are_refused(fw: str) -> None:
    """Configs whose inferencer builds the model inputs with the model (an agent, an
    adversarial search, tree-of-thought, executed tool calls) are refused with a clear error
    naming it, instead of being rendered as if GenInferencer built them."""
    from promptweave.dataset import _MODEL_BUILT_PROMPTS

    root = configs_root(fw) / "datasets"
    seen: dict[str, int] = collections.Counter()
    for path in sorted(root.rglob("*.py")):
        text = path.read_text("utf-8")
        if "__pycache__" in path.parts or not any(n in text for n in _MODEL_BUILT_PROMPTS):
            continue
        for ds in _load(path).datasets():
            infer = ds.get("infer_cfg") or {}
            name = _type_name((infer.get("inferencer") or {}).get("type"))
            if name not in _MODEL_BUILT_PROMPTS:
                continue
            with pytest.raises(PromptRenderError, match=f"{name}'s model inputs are built with"):
                DatasetRenderer(infer, ds.get("reader_cfg"), flavor=FLAVOR[fw])
            seen[name] += 1
    want = (
        {"AgentInferencer", "AttackInferencer", "ToTInferencer"}
        if fw == "oc"
        else {"BFCLV3FunctionCallInferencer"}
    )
    print(fw, dict(seen))
    assert set(seen) == want, seen


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_template_arguments_are_checked_like_the_reference_classes(
    fw: str, reference: dict[str, Any]
) -> None:
    """A template config is built as the framework builds it (its keys are the class's keyword
    arguments): a key the class does not take, or a missing template, is the TypeError the
    reference class raises, naming the config entry -- not a KeyError from inside the renderer.
    (OpenCompass's ``humanevalx_0shot_nocot_gen_3e4bbd`` writes ``prompt=`` for ``template=``.)"""
    ns = reference[fw]
    flavor = FLAVOR[fw]
    cases: list[tuple[str, dict[str, Any]]] = [
        ("PromptTemplate", {"prompt": "Q: {q}"}),
        ("PromptTemplate", {"ice_token": "</E>"}),
        ("PromptTemplate", {"template": "Q: {q}", "ice_token": None, "extra": 1}),
    ]
    if fw == "oc":
        cases += [
            ("RawPromptTemplate", {"template": [{"role": "user", "content": "{q}"}]}),
            ("RawPromptTemplate", {"format_variables": False}),
        ]
    else:
        cases += [
            ("MMPromptTemplate", {"prompt_mm": {}}),
            ("MultiTurnPromptTemplate", {"round": []}),
        ]
    for name, args in cases:
        with pytest.raises(TypeError):
            getattr(ns, name)(**args)  # what the framework's config builder runs
        infer = {
            "prompt_template": {"type": name, **args},
            "retriever": {"type": "ZeroRetriever"},
            "inferencer": {"type": "GenInferencer"},
        }
        with pytest.raises(TypeError, match=f"prompt_template: {name} ") as info:
            DatasetRenderer(infer, {"input_columns": ["q"], "output_column": "a"}, flavor=flavor)
        assert isinstance(info.value, PromptRenderError)
    # the arguments the classes take still build them
    infer = {
        "prompt_template": {"type": "PromptTemplate", "template": "Q: {q}", "sep_token": None},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    out = DatasetRenderer(infer, {"input_columns": ["q"], "output_column": "a"}, flavor=flavor)
    assert out.render([{"q": "x", "a": "y"}]).prompts == ["Q: x"]
