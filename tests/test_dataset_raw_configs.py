"""Differential test of ``DatasetRenderer(api=True)`` on the wheel's ``RawPromptTemplate`` configs.

Every dataset config file of OpenCompass 0.5.4 (``opencompass/configs/datasets/**``) that
mentions ``RawPromptTemplate`` is loaded with :func:`promptweave.load_config`; the datasets whose
``prompt_template`` is a ``RawPromptTemplate`` (and ``ice_template``, if any, too) and whose
retriever is Zero/FixK are rendered over synthetic rows (ASCII, CJK, braces; OpenAI-style message
lists for ``{'expand_column': col}`` columns) and compared, row by row, with the reference pipeline
(``refload.make_dataset``, the reference ``RawPromptTemplate`` and retriever, ``generate_ice`` +
``generate_prompt_for_generate_task`` and ``APITemplateParser.parse_template(prompt, 'gen')``),
with no meta template and with a list meta template.  Where the reference raises, promptweave
must raise the same builtin exception family.
"""

from __future__ import annotations

import builtins
import collections
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from _wheels import configs_root  # noqa: E402

import promptweave  # noqa: E402
from promptweave.dataset import _type_name  # noqa: E402

#: minimum number of datasets compared (or all available, if fewer)
MIN_DATASETS = 20
#: distinct dataset configs compared per file at most (keeps the run short)
MAX_PER_FILE = 16
RETRIEVERS = ("ZeroRetriever", "FixKRetriever")
N_TEST = 3

SLOT = re.compile(r"\{([^{}]*)\}")
STRINGS = [
    "What is 1+1?",
    "中文问题：一加一等于几？",  # noqa: RUF001 -- full-width punctuation on purpose
    "{braces} in {{value}} }{",
    "plain",
    "日本語 and {x}",
    "",
]
#: OpenAI-style message lists for ``expand_column`` columns (uniform keys: the reference reads
#: rows back from Arrow, which would fill missing keys with ``None``)
MESSAGE_LISTS = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}],
    [
        {"role": "system", "content": "sys {question}"},
        {"role": "user", "content": "你好 {braces}"},
    ],
    [{"role": "user", "content": "only one"}],
    [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c {{d}}"},
    ],
]
META_LIST = [{"role": "system", "content": "META "}]
METAS = {"none": None, "list": META_LIST}


def _configs_root() -> Path:
    return configs_root("oc") / "datasets"


@dataclass
class Case:
    rel: str
    dataset: dict[str, Any]
    retriever: str


@dataclass
class Corpus:
    cases: list[Case] = field(default_factory=list)
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    files: int = 0


def _classify(ds: Any) -> str | None:
    """The skip reason, or ``None`` when the dataset is compared."""
    infer, reader = ds.get("infer_cfg"), ds.get("reader_cfg")
    if not isinstance(infer, dict) or not isinstance(reader, dict):
        return "infer_cfg/reader_cfg not a dict"
    pt = infer.get("prompt_template")
    if not isinstance(pt, dict) or _type_name(pt.get("type")) != "RawPromptTemplate":
        name = _type_name(pt.get("type")) if isinstance(pt, dict) else type(pt).__name__
        return f"prompt_template {name}"
    it = infer.get("ice_template")
    if it is not None and (
        not isinstance(it, dict) or _type_name(it.get("type")) != "RawPromptTemplate"
    ):
        return "ice_template not a RawPromptTemplate"
    retriever = _type_name((infer.get("retriever") or {}).get("type")) or "ZeroRetriever"
    if retriever not in RETRIEVERS:
        return f"retriever {retriever}"
    return None


def _signature(ds: dict[str, Any]) -> str:
    infer, reader = ds["infer_cfg"], ds["reader_cfg"]
    return repr(
        (
            {k: infer.get(k) for k in ("prompt_template", "ice_template", "retriever")},
            reader.get("input_columns"),
            reader.get("output_column"),
        )
    )


@functools.cache
def _corpus() -> Corpus:
    root = _configs_root()
    files = sorted(
        p
        for p in root.rglob("*.py")
        if "__pycache__" not in p.parts and "RawPromptTemplate" in p.read_text("utf-8")
    )
    corpus = Corpus()
    seen: set[str] = set()
    for path in files:
        taken = 0
        for i, ds in enumerate(promptweave.load_config(path).datasets()):
            reason = _classify(ds)
            if reason is None and _signature(ds) in seen:
                reason = "same templates as a dataset already selected"
            if reason is None and taken >= MAX_PER_FILE:
                reason = "per-file cap"
            if reason is not None:
                corpus.skipped[reason] += 1
                continue
            seen.add(_signature(ds))
            taken += 1
            retriever = _type_name(ds["infer_cfg"]["retriever"].get("type")) or "ZeroRetriever"
            corpus.cases.append(Case(f"{path.relative_to(root)}#{i}", ds, retriever))
        corpus.files += taken > 0
    return corpus


# ============================================================================ synthetic rows


def _messages(infer: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for key in ("ice_template", "prompt_template"):
        if infer.get(key):
            out.extend(infer[key]["messages"])
    return out


def _rows(case: Case, n: int, offset: int) -> list[dict[str, Any]]:
    infer, reader = case.dataset["infer_cfg"], case.dataset["reader_cfg"]
    expand: list[str] = []
    slots: list[str] = []
    for msg in _messages(infer):
        if isinstance(msg, dict) and "expand_column" in msg:
            expand.append(msg["expand_column"])
        elif isinstance(msg, dict) and isinstance(msg.get("content"), str):
            slots.extend(s for s in SLOT.findall(msg["content"]) if s)
    columns = list(reader.get("input_columns") or [])
    out_col = reader.get("output_column")
    columns += [c for c in [out_col, *slots, *expand] if c]
    columns = list(dict.fromkeys(columns))
    rows = []
    for r in range(offset, offset + n):
        row: dict[str, Any] = {}
        for k, col in enumerate(columns):
            if col in expand:
                row[col] = MESSAGE_LISTS[(r + k) % len(MESSAGE_LISTS)]
            else:
                row[col] = f"{STRINGS[(r + k) % len(STRINGS)]} r{r}"
        rows.append(row)
    return rows


# ============================================================================ the two pipelines


def _family(exc: BaseException) -> type[BaseException]:
    """The first builtin exception class of ``exc``'s type (its 'builtin family'); promptweave's
    errors also derive from the reference's builtin where it differs from their own family."""
    for cls in type(exc).__mro__:
        if getattr(builtins, cls.__name__, None) is cls and cls is not Exception:
            return cls
    return Exception


def _raw(m: Any, cfg: dict[str, Any] | None) -> Any:
    if cfg is None:
        return None
    kw = {k: cfg[k] for k in ("format_variables", "ice_token") if k in cfg}
    return m.RawPromptTemplate(cfg["messages"], **kw)


def _reference(m: Any, case: Case, test: list[dict], train: list[dict], meta: Any) -> list[Any]:
    import refload  # the `reference` fixture put it on sys.path

    infer, reader = case.dataset["infer_cfg"], case.dataset["reader_cfg"]
    ds = refload.make_dataset(
        m, train, test, list(reader["input_columns"]), reader.get("output_column")
    )
    pt = _raw(m, infer["prompt_template"])
    it = _raw(m, infer.get("ice_template"))
    if case.retriever == "FixKRetriever":
        ret = m.FixKRetriever(ds, fix_id_list=infer["retriever"]["fix_id_list"])
    else:
        ret = m.ZeroRetriever(ds)
    # the rows the templates see are the rows handed to promptweave
    assert [dict(r) for r in ds.test] == test
    parser = m.APITemplateParser(meta)
    out = []
    for i, idx in enumerate(ret.retrieve()):
        ice = ret.generate_ice(idx, ice_template=it)
        prompt = ret.generate_prompt_for_generate_task(i, ice, ice_template=it, prompt_template=pt)
        out.append(parser.parse_template(prompt, mode="gen"))
    return out


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:  # compared by builtin family
        return "raise", exc


# ============================================================================ the test


def _compare(m: Any, case: Case, test: list[dict], train: list[dict], where: str) -> list[str]:
    """Failures of one comparison for each meta template, and the outcomes tallied."""
    failures: list[str] = []
    for meta_name, meta in METAS.items():
        renderer = promptweave.DatasetRenderer(
            case.dataset["infer_cfg"], case.dataset["reader_cfg"], meta, api=True
        )
        ours = _outcome(lambda r=renderer: r.render(test, train).prompts)
        ref = _outcome(lambda meta=meta: _reference(m, case, test, train, meta))
        at = f"{case.rel} {where} meta={meta_name}"
        if ref[0] == "raise":
            if ours[0] != "raise" or not isinstance(ours[1], _family(ref[1])):
                failures.append(f"{at}: reference raised {ref[1]!r}, ours gave {ours[1]!r}")
            OUTCOMES["reference raised"] += 1
            continue
        if ours[0] == "raise":
            failures.append(f"{at}: ours raised {ours[1]!r}")
            continue
        assert len(ours[1]) == len(ref[1]) == len(test), at
        for i, (a, b) in enumerate(zip(ours[1], ref[1], strict=True)):
            if repr(a) != repr(b):
                failures.append(f"{at} row {i}: ours {a!r} != reference {b!r}")
        OUTCOMES[f"equal ({case.retriever}, meta={meta_name})"] += 1
        if meta is not None and all("META" in repr(p) for p in ref[1]):
            OUTCOMES["meta merged"] += 1
        if any(
            isinstance(msg, dict) and "expand_column" in msg
            for msg in case.dataset["infer_cfg"]["prompt_template"]["messages"]
        ):
            OUTCOMES["expand_column (per meta)"] += 1
    return failures


OUTCOMES: collections.Counter[str] = collections.Counter()


def test_raw_prompt_configs_match_reference(reference: dict[str, Any]) -> None:
    m = reference["oc"]
    corpus = _corpus()
    available = len(corpus.cases)
    OUTCOMES.clear()
    failures: list[str] = []
    for case in corpus.cases:
        fix = case.dataset["infer_cfg"]["retriever"].get("fix_id_list") or []
        test = _rows(case, N_TEST, 0)
        train = _rows(case, max(fix, default=-1) + 2, 100)
        failures += _compare(m, case, test, train, "rows")
        if fix:
            # too few train rows for the fixed ids: both must fail alike
            failures += _compare(m, case, test, train[: max(fix)], "short-train")
    assert not failures, "\n".join(failures[:20])
    tested = sum(v for k, v in OUTCOMES.items() if k.startswith("equal") and "meta=none" in k)
    print(f"\n{available} datasets from {corpus.files} files; {dict(OUTCOMES)}")
    print(f"skipped: {dict(corpus.skipped)}")
    # every selected dataset compared equal; at least MIN_DATASETS of them (all there are)
    assert tested == available >= MIN_DATASETS, (tested, available, dict(corpus.skipped))
    assert OUTCOMES["equal (FixKRetriever, meta=none)"] > 0
    assert OUTCOMES["expand_column (per meta)"] > 0
    assert OUTCOMES["meta merged"] == available
    assert OUTCOMES["reference raised"] > 0
