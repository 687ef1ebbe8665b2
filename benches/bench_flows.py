"""Whole-dataset rendering of the row-by-row flows: ``DatasetRenderer.render`` vs the reference.

``bench_dataset.py`` times the templates the Rust job renders in one call; this file times the two
flows ``DatasetRenderer`` renders with their own batch paths, against the reference frameworks
driven row by row exactly as their ``GenInferencer`` drives them:

* **MM** -- AISBench 3.1 ``MMPromptTemplate``, the template of
  ``ais_bench/benchmark/configs/datasets/videomme/videomme_gen.py`` verbatim (``prompt_mm`` with a
  ``text`` part and a ``video_url`` part whose ``url`` is ``file://{video}``), ``ZeroRetriever``,
  for an API model (``APITemplateParser`` with an ``api_role`` meta template, as AISBench's VL API
  models). Rows are built as ``VideoMMEDataset.load`` builds them: a tagged ``content`` string of
  **3 parts** (the video path, the fixed frames instruction, ``Question: ...\\nAnswer: ``) and the
  ``answer`` dict. The model input per row is a ``PromptList`` with one ``HUMAN`` message whose
  ``prompt`` is the list of 3 content-part dicts. Reference per row: the retriever's
  ``generate_ice([])``, ``MMPromptTemplate.generate_item`` (what
  ``generate_prompt_for_generate_task`` calls), ``parse_template(prompt, 'gen')``.
* **RAW** -- OpenCompass 0.5.4 ``RawPromptTemplate`` 5-shot: the templates of
  ``opencompass/configs/datasets/BuySideFinBench/BuySideFinBench_gen_ca1704.py`` verbatim
  (subset ``financial_ratios_en``: an ``ice_template`` of a user and an assistant message, a
  ``prompt_template`` ``['</E>', user message]``), ``FixKRetriever`` ``[0..4]``, for an API model
  (``APITemplateParser`` with an API meta template; raw messages pass through it as deep
  copies). The model input per row is a list of 11 ``{'role', 'content'}`` dicts. Reference per
  row: ``BaseRetriever.generate_ice``'s raw-messages branch (``generate_ice_item`` per fixed id),
  ``RawPromptTemplate.generate_item``, ``parse_template(prompt, 'gen')``.

The reference loops read the rows from the same Python lists ours gets (the inferencer reads them
from a HuggingFace dataset, which costs the reference more: not counted);
``test_*_loop_is_the_reference_pipeline`` check that each loop gives exactly what the reference's
own retriever over a real ``DatasetReader`` + ``GenInferencer``'s calls give. Every timed test
checks, outside the timed region, that ours equals the reference row for row (structure, types
and message key order included). Row counts shrink to a quick size under ``--benchmark-disable``
(CI) or ``PROMPTWEAVE_BENCH_QUICK=1``; ``PROMPTWEAVE_BENCH_ROUNDS_SCALE`` scales the rounds.

``python benches/bench_flows.py [--json bench.json]`` prints the speed-ups (runs the benchmarks
with the CPU-time timer when no JSON is given).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import string
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench_render as B  # noqa: E402  (text generator, _quick, _rounds)

Row = dict[str, Any]
PATH = "flows"  # extra_info["path"] of these benchmarks
TARGET = 50.0  # issue 4: each flow >= 50x faster than the reference in the same run


# --------------------------------------------------------------------------- configurations

TS, VS, CT = "<AIS_TEXT_START>", "<AIS_VIDEO_START>", "<AIS_CONTENT_TAG>"

# ais_bench/benchmark/configs/datasets/videomme/videomme_gen.py, verbatim
MM_READER = {"input_columns": ["question", "video"], "output_column": "answer"}
MM_TEMPLATE = {
    "round": [
        {
            "role": "HUMAN",
            "prompt_mm": {
                "text": {"type": "text", "text": "{question}"},
                "video": {"type": "video_url", "video_url": {"url": "file://{video}"}},
            },
        }
    ]
}
MM_INFER = {
    "prompt_template": {"type": "MMPromptTemplate", "template": MM_TEMPLATE},
    "retriever": {"type": "ZeroRetriever"},
    "inferencer": {"type": "GenInferencer"},
}
# ais_bench/benchmark/datasets/videomme.py
FRAMES_TMPL_NOSUB = """
These are the frames of a video. \
Select the best answer to the following multiple-choice question based on the video. \
Respond with only the letter (A, B, C, or D) of the correct option.
"""
VIDEO_DIR = "/home/user/ais_bench/datasets/Video-MME/video"

# an API model's meta template (configs/models/openai/gpt_4.py's, plus a reserved SYSTEM role)
API_META = {
    "round": [
        {"role": "HUMAN", "api_role": "HUMAN"},
        {"role": "BOT", "api_role": "BOT", "generate": True},
    ],
    "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
}

# opencompass/configs/datasets/BuySideFinBench/BuySideFinBench_gen_ca1704.py, financial_ratios_en
_EN_NAME = "Financial Ratios"
_RAW_PROMPT = (
    f"The following is a multiple-choice question about {_EN_NAME}. "
    f"Please provide the correct answer option directly.\n"
    f"Question: {{question}}\nA. {{A}}\nB. {{B}}\n"
    f"C. {{C}}\nD. {{D}}"
)
_RAW_ANSWER = "The answer is: {answer}"
RAW_READER = {"input_columns": ["question", "A", "B", "C", "D"], "output_column": "answer"}
RAW_INFER = {
    "ice_template": {
        "type": "RawPromptTemplate",
        "messages": [
            {"role": "user", "content": _RAW_PROMPT},
            {"role": "assistant", "content": _RAW_ANSWER},
        ],
    },
    "prompt_template": {
        "type": "RawPromptTemplate",
        "messages": ["</E>", {"role": "user", "content": _RAW_PROMPT}],
    },
    "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1, 2, 3, 4]},
    "inferencer": {"type": "GenInferencer"},
}


# --------------------------------------------------------------------------- rows

_DOMAINS = ["Knowledge", "Film & Television", "Sports Competition", "Artistic Performance"]
_TASKS = ["Counting Problem", "Object Recognition", "Temporal Reasoning", "Action Reasoning"]
_ID_CHARS = string.ascii_letters + string.digits + "-_"


@cache
def mm_rows(n: int) -> list[Row]:
    """VideoMME-like rows as ``VideoMMEDataset.load`` builds them: 3 tagged parts per row."""
    rng = random.Random(41)
    rows = []
    for _ in range(n):
        video_id = "".join(rng.choice(_ID_CHARS) for _ in range(11))
        options = [f"{x}. {B._text(rng, 8, 60)}" for x in "ABCD"]
        question = B._text(rng, 40, 160) + "\n" + "\n".join(options)
        prompt = f"Question: {question}\nAnswer: "
        content = f"{VS}{VIDEO_DIR}/{video_id}.mp4{CT}{TS}{FRAMES_TMPL_NOSUB}{CT}{TS}{prompt}{CT}"
        answer = {
            "duration": rng.choice(["short", "medium", "long"]),
            "domain": rng.choice(_DOMAINS),
            "sub_category": rng.choice(_DOMAINS),
            "task_type": rng.choice(_TASKS),
            "answer": rng.choice("ABCD"),
        }
        rows.append({"content": content, "answer": answer})
    return rows


def _raw_row(rng: random.Random) -> Row:
    # BuySideFinBench's layout: question, A-D, answer
    return {
        "question": B._text(rng, 150, 350),
        "A": B._text(rng, 8, 60),
        "B": B._text(rng, 8, 60),
        "C": B._text(rng, 8, 60),
        "D": B._text(rng, 8, 60),
        "answer": rng.choice("ABCD"),
    }


@cache
def raw_train() -> list[Row]:
    rng = random.Random(42)
    return [_raw_row(rng) for _ in range(5)]


@cache
def raw_rows(n: int) -> list[Row]:
    rng = random.Random(43)
    return [_raw_row(rng) for _ in range(n)]


# --------------------------------------------------------------------------- reference loops


def _generation_prompts(
    rows: Sequence[Row],
    ice_of: Callable[[], Any],
    *,
    template: Any,
    parser: Any,
    output_column: str,
) -> list[Any]:
    """``GenInferencer``'s per-row steps: the retriever's in-context examples (``ice_of()``),
    ``generate_item`` as ``generate_prompt_for_generate_task`` calls it, and
    ``parse_template(prompt, 'gen')``."""
    out = []
    for row in rows:
        prompt = template.generate_item(
            row,
            output_field=output_column,
            output_field_replace_token="",
            ice_field_replace_token=ice_of(),
        )
        out.append(parser.parse_template(prompt, mode="gen"))
    return out


def render_mm_rows(
    rows: Sequence[Row], *, retriever: Any, parser: Any, output_column: str
) -> list[Any]:
    """AISBench ``GenInferencer.get_data_list`` for ``ZeroRetriever`` rows (the retriever's
    ``generate_ice([])`` per row)."""
    return _generation_prompts(
        rows,
        lambda: retriever.generate_ice([]),
        template=retriever.prompt_template,
        parser=parser,
        output_column=output_column,
    )


def render_raw_rows(
    rows: Sequence[Row],
    train: Sequence[Row],
    *,
    parser: Any,
    ice_template: Any,
    prompt_template: Any,
    fix_id_list: Sequence[int],
    output_column: str,
) -> list[Any]:
    """OpenCompass ``GenInferencer`` + ``FixKRetriever`` with ``RawPromptTemplate``s: per row
    ``BaseRetriever.generate_ice``'s raw-messages branch (one ``generate_ice_item`` per fixed
    id, extended into one list)."""

    def ice() -> list[Any]:
        out: list[Any] = []
        for idx in fix_id_list:
            out.extend(ice_template.generate_ice_item(train[idx], train[idx][output_column]))
        return out

    return _generation_prompts(
        rows, ice, template=prompt_template, parser=parser, output_column=output_column
    )


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class FlowWorkload:
    name: str
    group: str
    flavor: str  # 'aisbench' | 'opencompass'
    rows: Callable[[int], list[Row]]
    train: Callable[[], list[Row]]
    infer_cfg: dict[str, Any]
    reader_cfg: dict[str, Any]
    meta: Any
    subset: int  # reference and ours
    full: int  # ours only (== subset: no -full group)
    quick: int
    ref_rounds: int = 3
    ours_rounds: int = 15
    full_rounds: int = 7

    def renderer(self) -> Any:
        from promptweave.dataset import DatasetRenderer

        return DatasetRenderer(
            copy.deepcopy(self.infer_cfg),
            copy.deepcopy(self.reader_cfg),
            copy.deepcopy(self.meta),
            api=True,
            flavor=self.flavor,
        )

    def reference_loop(self, refs: dict[str, Any]) -> Callable[[Sequence[Row]], list[Any]]:
        """``rows -> model inputs`` through the reference classes (built here, untimed)."""
        out_col = self.reader_cfg["output_column"]
        if self.name == "MM":
            M = refs["ais"]
            dataset = refs["refload"].make_dataset(
                M, self.rows(2), self.rows(2), list(self.reader_cfg["input_columns"]), out_col
            )
            pt = {"type": M.MMPromptTemplate, "template": copy.deepcopy(MM_TEMPLATE)}
            retriever = M.ZeroRetriever(dataset, prompt_template=pt)
            parser = M.APITemplateParser(copy.deepcopy(self.meta))

            def run_mm(rows: Sequence[Row]) -> list[Any]:
                return render_mm_rows(
                    rows, retriever=retriever, parser=parser, output_column=out_col
                )

            return run_mm
        M = refs["oc"]
        cfg = self.infer_cfg
        kw = {
            "parser": M.APITemplateParser(copy.deepcopy(self.meta)),
            "ice_template": M.RawPromptTemplate(copy.deepcopy(cfg["ice_template"]["messages"])),
            "prompt_template": M.RawPromptTemplate(
                copy.deepcopy(cfg["prompt_template"]["messages"])
            ),
            "fix_id_list": list(cfg["retriever"]["fix_id_list"]),
            "output_column": out_col,
        }
        train = self.train()

        def run_raw(rows: Sequence[Row]) -> list[Any]:
            return render_raw_rows(rows, train, **kw)

        return run_raw


MM = FlowWorkload(
    name="MM",
    group="flows-MM-videomme-3part-api",
    flavor="aisbench",
    rows=mm_rows,
    train=lambda: [],
    infer_cfg=MM_INFER,
    reader_cfg=MM_READER,
    meta=API_META,
    subset=10_000,
    full=10_000,
    quick=200,
)
RAW = FlowWorkload(
    name="RAW",
    group="flows-RAW-buysidefin-5shot-api",
    flavor="opencompass",
    rows=raw_rows,
    train=raw_train,
    infer_cfg=RAW_INFER,
    reader_cfg=RAW_READER,
    meta=API_META,
    subset=2_000,
    full=10_000,
    quick=100,
)
WORKLOADS = [MM, RAW]


# --------------------------------------------------------------------------- fixtures / checks


@pytest.fixture(scope="session")
def refs(refload: Any) -> dict[str, Any]:
    """Both reference namespaces (AISBench for MM, OpenCompass for RAW) and ``refload``."""
    return {"oc": refload.opencompass(), "ais": refload.aisbench(), "refload": refload}


_EXPECTED: dict[tuple[str, int], list[Any]] = {}


def expected(refs: dict[str, Any], wl: FlowWorkload, n: int) -> list[Any]:
    key = (wl.name, n)
    if key not in _EXPECTED:
        _EXPECTED[key] = wl.reference_loop(refs)(wl.rows(n))
    return _EXPECTED[key]


def _same(g: Any, w: Any) -> bool:
    """Equal with the same structure: containers of the same class name (``PromptList`` classes
    differ between the frameworks), dicts with the same key order, leaves equal."""
    if isinstance(w, dict):
        return type(g) is dict and list(g) == list(w) and all(_same(g[k], v) for k, v in w.items())
    if isinstance(w, list):
        return (
            type(g).__name__ == type(w).__name__
            and len(g) == len(w)
            and all(_same(a, b) for a, b in zip(g, w, strict=True))
        )
    return type(g) is type(w) and bool(g == w)


def _no_shared_dicts(outputs: Sequence[Any]) -> bool:
    """The reference builds fresh message / part dicts for every row: so must ours (a caller
    mutating one row's messages must not change another row's)."""
    seen: set[int] = set()
    stack: list[Any] = list(outputs)
    while stack:
        x = stack.pop()
        if isinstance(x, (dict, list)):
            if id(x) in seen:
                return False
            seen.add(id(x))
            stack.extend(x.values() if isinstance(x, dict) else x)
    return True


def check(got: Sequence[Any], want: Sequence[Any], what: str) -> None:
    B.check_outputs(got, want, what, _same)


def _n(benchmark: Any, wl: FlowWorkload, size: str) -> int:
    return B._size(benchmark, wl, size)


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("wl", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_reference(benchmark: Any, wl: FlowWorkload, refs: dict[str, Any]) -> None:
    """The reference row by row (the denominator of the speed-up)."""
    n = _n(benchmark, wl, "subset")
    rows = wl.rows(n)
    loop = wl.reference_loop(refs)
    benchmark.group = wl.group
    benchmark.extra_info.update(workload=wl.name, impl="reference", rows=n, path=PATH)
    got = benchmark.pedantic(
        loop, args=(rows,), rounds=B._rounds(wl.ref_rounds), warmup_rounds=0, iterations=1
    )
    _EXPECTED.setdefault((wl.name, n), got)


def pipeline_loop(refs: dict[str, Any], wl: FlowWorkload, n: int) -> Callable[[], list[Any]]:
    """The reference's own ``GenInferencer`` loop over its retriever and a real HuggingFace
    ``DatasetReader`` of the same rows (built here, untimed): rows are read back from the
    dataset (``test_ds[idx]``, ``index_ds[idx]``) as in a real run."""
    rl, reader = refs["refload"], wl.reader_cfg
    rows, train = wl.rows(n), wl.train()
    if wl.name == "MM":
        M = refs["ais"]
        ds = rl.make_dataset(M, rows, rows, list(reader["input_columns"]), reader["output_column"])
        pt = {"type": M.MMPromptTemplate, "template": copy.deepcopy(MM_TEMPLATE)}
        ret = M.ZeroRetriever(ds, prompt_template=pt)
        parser = M.APITemplateParser(copy.deepcopy(wl.meta))

        def run_mm() -> list[Any]:
            out = []
            for i, idx in enumerate(ret.retrieve()):  # GenInferencer.get_data_list
                ice = ret.generate_ice(idx)
                prompt = ret.generate_prompt_for_generate_task(i, ice, gen_field_replace_token="")
                out.append(parser.parse_template(prompt, mode="gen"))
            return out

        return run_mm
    M = refs["oc"]
    ds = rl.make_dataset(M, train, rows, list(reader["input_columns"]), reader["output_column"])
    ret = M.FixKRetriever(ds, fix_id_list=list(RAW_INFER["retriever"]["fix_id_list"]))
    it = M.RawPromptTemplate(copy.deepcopy(RAW_INFER["ice_template"]["messages"]))
    pt = M.RawPromptTemplate(copy.deepcopy(RAW_INFER["prompt_template"]["messages"]))
    parser = M.APITemplateParser(copy.deepcopy(wl.meta))

    def run_raw() -> list[Any]:
        prompts = M.GenInferencer.get_generation_prompt_list_from_retriever_indices(
            None, ret.retrieve(), ret, "", max_seq_len=None, ice_template=it, prompt_template=pt
        )
        return [parser.parse_template(p, mode="gen") for p in prompts]

    return run_raw


@pytest.mark.parametrize("wl", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_reference_pipeline(benchmark: Any, wl: FlowWorkload, refs: dict[str, Any]) -> None:
    """The reference's full ``GenInferencer`` loop, rows read from its ``DatasetReader``."""
    n = _n(benchmark, wl, "subset")
    loop = pipeline_loop(refs, wl, n)
    benchmark.group = wl.group
    benchmark.extra_info.update(workload=wl.name, impl="reference-pipeline", rows=n, path=PATH)
    got = benchmark.pedantic(loop, rounds=B._rounds(wl.ref_rounds), warmup_rounds=0, iterations=1)
    check(got, expected(refs, wl, n), f"{wl.name} reference pipeline ({n} rows)")


SIZES = ["subset", "full"]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("wl", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_ours(benchmark: Any, wl: FlowWorkload, size: str, refs: dict[str, Any]) -> None:
    """``DatasetRenderer(..., api=True, flavor=...).render(test, train)``."""
    from promptweave import _backend

    if size == "full" and wl.full == wl.subset:
        pytest.skip("the subset is the full size")
    n = _n(benchmark, wl, size)
    rows, train = wl.rows(n), wl.train()
    renderer = wl.renderer()
    # the renderer analyses its template on first use (MM: the parser's output around an empty
    # part list, computed once through the mirrored parser): not a row rendering
    renderer.render(rows[:1], train)
    benchmark.group = wl.group + ("-full" if size == "full" else "")
    benchmark.extra_info.update(workload=wl.name, impl="ours", rows=n, path=PATH)
    fallbacks = _backend.fallbacks
    result = B.time_render(benchmark, wl, renderer, rows, train, size)
    check(result.prompts, expected(refs, wl, n), f"{wl.name} ours ({n} rows)")
    assert _no_shared_dicts(result.prompts), f"{wl.name}: rows share message dicts"
    if not _backend.FORCE_PYTHON:
        assert _backend.fallbacks == fallbacks, f"{wl.name}: ours left the Rust core"


def test_mm_rows_have_3_parts(refs: dict[str, Any]) -> None:
    """Every MM row is 3 content parts (video, text, text), in the model input too."""
    from promptweave.markers import parse_content

    rows = mm_rows(50)
    assert all(
        [k for k, _ in parse_content(r["content"])] == ["video", "text", "text"] for r in rows
    )
    for out in expected(refs, MM, 50):
        assert len(out) == 1
        assert [p["type"] for p in out[0]["prompt"]] == ["video_url", "text", "text"]


def test_mm_loop_is_the_reference_pipeline(refs: dict[str, Any]) -> None:
    """``render_mm_rows`` == AISBench's ``ZeroRetriever`` over a real ``DatasetReader`` +
    ``GenInferencer.get_data_list``'s calls (``generate_ice``,
    ``generate_prompt_for_generate_task``, ``parse_template``)."""
    M, n = refs["ais"], 30
    rows = mm_rows(n)
    dataset = refs["refload"].make_dataset(
        M, rows, rows, list(MM_READER["input_columns"]), MM_READER["output_column"]
    )
    pt = {"type": M.MMPromptTemplate, "template": copy.deepcopy(MM_TEMPLATE)}
    ret = M.ZeroRetriever(dataset, prompt_template=pt)
    parser = M.APITemplateParser(copy.deepcopy(API_META))
    want = [
        parser.parse_template(
            ret.generate_prompt_for_generate_task(i, ret.generate_ice(ice), ""), mode="gen"
        )
        for i, ice in enumerate(ret.retrieve())
    ]
    check(MM.reference_loop(refs)(rows), want, "MM reference loop")
    check(MM.renderer().render(rows).prompts, want, "MM ours")


def test_raw_loop_is_the_reference_pipeline(refs: dict[str, Any]) -> None:
    """``render_raw_rows`` == OpenCompass's ``FixKRetriever`` over a real ``DatasetReader`` +
    ``GenInferencer.get_generation_prompt_list_from_retriever_indices`` + ``parse_template``."""
    M, n = refs["oc"], 30
    rows, train = raw_rows(n), raw_train()
    dataset = refs["refload"].make_dataset(
        M, train, rows, list(RAW_READER["input_columns"]), RAW_READER["output_column"]
    )
    ret = M.FixKRetriever(dataset, fix_id_list=list(RAW_INFER["retriever"]["fix_id_list"]))
    it = M.RawPromptTemplate(copy.deepcopy(RAW_INFER["ice_template"]["messages"]))
    pt = M.RawPromptTemplate(copy.deepcopy(RAW_INFER["prompt_template"]["messages"]))
    prompts = M.GenInferencer.get_generation_prompt_list_from_retriever_indices(
        None, ret.retrieve(), ret, "", max_seq_len=None, ice_template=it, prompt_template=pt
    )
    parser = M.APITemplateParser(copy.deepcopy(API_META))
    want = [parser.parse_template(p, mode="gen") for p in prompts]
    assert all(len(w) == 11 for w in want)
    check(RAW.reference_loop(refs)(rows), want, "RAW reference loop")
    check(RAW.renderer().render(rows, train).prompts, want, "RAW ours")


# --------------------------------------------------------------------------- summary


def summarize(data: dict[str, Any]) -> str:
    """The flows' speed-ups (reference / ours, medians on the same rows) against the target."""
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        if info.get("path") != PATH:
            continue
        key = "full" if str(b.get("group", "")).endswith("-full") else info.get("impl", "?")
        by.setdefault(info.get("workload", "?"), {})[key] = b
    lines = [
        "Row-by-row flows: DatasetRenderer.render (ours) vs the reference row by row",
        f"  {'workload':<9}{'rows':>8}{'ref/row':>12}{'ours/row':>12}{'full/row':>12}"
        f"{'ref/ours':>10}  target >= {TARGET:.0f}x",
    ]
    for wl in WORKLOADS:
        g = by.get(wl.name, {})
        ref, ours, full = g.get("reference"), g.get("ours"), g.get("full")
        pipe = g.get("reference-pipeline")

        def per_row(b: dict[str, Any] | None) -> float | None:
            rows = int(b["extra_info"].get("rows") or 0) if b else 0
            return float(b["stats"]["median"]) / rows if b and rows else None

        def us(x: float | None) -> str:
            return "-" if x is None else f"{x * 1e6:.2f} us"

        ratio = (
            float(ref["stats"]["median"]) / float(ours["stats"]["median"]) if ref and ours else None
        )
        pratio = (
            float(pipe["stats"]["median"]) / float(ours["stats"]["median"])
            if pipe and ours
            else None
        )
        rows = int(ours["extra_info"]["rows"]) if ours else 0

        def verdict(r: float | None) -> str:
            return "n/a" if r is None else ("PASS" if r >= TARGET else "MISS")

        lines.append(
            f"  {wl.name:<9}{rows:>8}{us(per_row(ref)):>12}{us(per_row(ours)):>12}"
            f"{us(per_row(full)):>12}{'-' if ratio is None else f'{ratio:.1f}x':>10}  "
            f"{verdict(ratio)}"
        )
        lines.append(
            f"  {'':<9}{'':>8}{us(per_row(pipe)):>12}{'':>12}{'':>12}"
            f"{'-' if pratio is None else f'{pratio:.1f}x':>10}  {verdict(pratio)}"
            "  (reference-pipeline: rows read from its DatasetReader)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--json", type=Path, help="read this pytest-benchmark JSON instead of running")
    ap.add_argument("--wall", action="store_true", help="time the wall clock, not CPU time")
    args = ap.parse_args(argv)
    path = args.json
    if path is None:
        path = Path(tempfile.mkdtemp()) / "flows.json"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            str(Path(__file__).resolve()),
            "--benchmark-only",
            f"--benchmark-json={path}",
            "-q",
        ]
        if not args.wall:
            cmd.append("--benchmark-timer=time.process_time")
        print("$", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd, cwd=BENCH_DIR.parent, check=False).returncode
        if rc != 0:
            raise SystemExit(f"pytest failed (exit status {rc})")
    print(summarize(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
