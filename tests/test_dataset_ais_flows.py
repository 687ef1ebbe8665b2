"""AISBench multimodal and multi-turn dataset configs through :class:`DatasetRenderer`.

Every dataset config of the AISBench 3.1 wheel (``ais_bench/benchmark/configs/datasets/**``) whose
prompt template is an ``MMPromptTemplate`` or a ``MultiTurnPromptTemplate`` is loaded with
:func:`~promptweave.config.load_config` and rendered over generated rows (multimodal: a tagged
``content`` string with the part kinds the template has -- file paths, URLs, base64 strings,
CJK, emoji, braces -- plus the reader columns; multi-turn: ``question``/``answer`` lists), and
compared row by row with the REFERENCE classes driven as AISBench's inferencers drive them:

* ``GenInferencer.get_data_list``: the reference ``ZeroRetriever`` over the reference
  ``DatasetReader`` (``refload.make_dataset``), ``generate_ice`` +
  ``generate_prompt_for_generate_task``, then the model's ``parse_template(prompt, 'gen')``;
* ``MultiTurnGenInferencer``: the same prompt, then the reference ``do_request`` with
  ``infer_mode='every_with_gt'`` (the model inputs it sends); ``'last'`` (which the reference
  crashes on, spec 06 B#10) against its documented request built from the reference's pieces.

Each is checked with API and LM parsers, with and without a meta template. A CLI subprocess
test renders / shows one config of each kind.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import random
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import _flows_ns  # noqa: E402
import _golden_ns  # noqa: E402
from _wheels import package_dir  # noqa: E402

from promptweave import _backend  # noqa: E402
from promptweave import aisbench as ais  # noqa: E402
from promptweave.config import load_config  # noqa: E402
from promptweave.dataset import DatasetRenderer, _type_name  # noqa: E402
from promptweave.errors import ArgumentError, PromptRenderError, TemplateError  # noqa: E402

TS, IS, VS, AS, CT = (
    ais.AIS_TEXT_START,
    ais.AIS_IMAGE_START,
    ais.AIS_VIDEO_START,
    ais.AIS_AUDIO_START,
    ais.AIS_CONTENT_TAG,
)
_START = {"text": TS, "image": IS, "video": VS, "audio": AS}
_FLOW_TYPES = ("MMPromptTemplate", "MultiTurnPromptTemplate")
#: how many dataset configs of the AISBench 3.1 wheel use these templates (files / datasets)
N_FILES, N_DATASETS = 33, 46


def _configs_dir() -> Path | None:
    pkg = package_dir("ais_bench")
    path = pkg / "benchmark" / "configs" / "datasets" if pkg is not None else None
    return path if path is not None and path.is_dir() else None


def _config_files() -> list[Path]:
    root = _configs_dir()
    if root is None:
        return []
    pattern = re.compile(r"\b(MMPromptTemplate|MultiTurnPromptTemplate)\b")
    return sorted(
        p for p in root.rglob("*.py") if pattern.search(p.read_text("utf-8", errors="replace"))
    )


@functools.cache
def _load(path: Path) -> Any:
    return load_config(path)


def _datasets() -> list[tuple[str, Path, str, int]]:
    """``(id, file, variable, index)`` of every flow dataset of the wheel's configs."""
    root = _configs_dir()
    out = []
    for path in _config_files():
        cfg = _load(path)
        for var in sorted(k for k in cfg if k.endswith("_datasets")):
            for i, ds in enumerate(cfg[var]):
                pt = ds["infer_cfg"].get("prompt_template") or {}
                if _type_name(pt.get("type")) in _FLOW_TYPES:
                    rel = path.relative_to(root) if root else path
                    out.append((f"{rel.with_suffix('')}:{ds.get('abbr', i)}", path, var, i))
    return out


DATASETS = _datasets()
REQUIRE = os.environ.get("PROMPTWEAVE_REQUIRE_REFERENCE") == "1"


def _dataset(path: Path, var: str, i: int) -> dict[str, Any]:
    return copy.deepcopy(dict(_load(path)[var][i]))


def _flow(ds: dict[str, Any]) -> str:
    return _type_name(ds["infer_cfg"]["prompt_template"]["type"])


# ================================================================================ rows

_PATHS = ["/data/img 0.jpg", "中文/图片😀.png", "s3://bucket/{image}.webp", "a.jpg", ""]
_B64 = ["iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB", "UklGRiQAAABXQVZF+/==", "AAAA"]
_TEXTS = [
    "What is shown?",
    "图中有几个人?",
    "Pick {answer} or {question} 😀",
    "",
    "line1\nline2 \t",
    "A. cat\nB. dog",
]


def _mm_kinds(template: Any) -> list[str]:
    kinds: list[str] = []
    for item in template.get("round", []):
        for k in item.get("prompt_mm", {}):
            if k in _START and k not in kinds:
                kinds.append(k)
    return kinds


def _mm_rows(ds: dict[str, Any], rng: random.Random, n: int = 6) -> list[dict[str, Any]]:
    kinds = _mm_kinds(ds["infer_cfg"]["prompt_template"]["template"])
    reader = ds.get("reader_cfg") or {}
    columns = [*(reader.get("input_columns") or []), reader.get("output_column")]
    rows = []
    for r in range(n):
        segments = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(kinds)
            payload = rng.choice(_TEXTS if kind == "text" else _PATHS + _B64)
            segments.append(_START[kind] + payload + CT)
        if r == 1 and "text" in kinds:  # text first, several media after it
            segments.insert(0, TS + "Question first" + CT)
        row: dict[str, Any] = {c: f"{c}-{r} {{x}}" for c in columns if c}
        row["content"] = "".join(segments)
        rows.append(row)
    return rows


def _mt_rows(rng: random.Random, n: int = 6) -> list[dict[str, Any]]:
    rows = []
    for r in range(n):
        turns = rng.randint(1, 4)
        rows.append(
            {
                "question": [rng.choice(_TEXTS) + f" q{r}.{t}" for t in range(turns)],
                "answer": [rng.choice(_TEXTS) + f" a{r}.{t}" for t in range(turns)],
            }
        )
    return rows


# ========================================================================= the reference

PARSERS: dict[str, tuple[bool, Any]] = {
    "api-meta": (True, _golden_ns.API_HBS),
    "api-nometa": (True, None),
    "lm-meta": (False, _golden_ns.META_HBS),
    "lm-nometa": (False, None),
}


def _ref_parser(ref: Any, parser: str) -> Any:
    api, meta = PARSERS[parser]
    cls = ref.APITemplateParser if api else ref.LMTemplateParser
    return cls(copy.deepcopy(meta))


def _refload() -> Any:
    return _golden_ns.import_refload()


def _ref_prompts(ref: Any, ds: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    """``(reference test rows, un-parsed prompts)``: the reference retriever's
    ``generate_ice`` + ``generate_prompt_for_generate_task`` for every test row."""
    reader = ds.get("reader_cfg") or {}
    pt = ds["infer_cfg"]["prompt_template"]
    cls = getattr(ref, _type_name(pt["type"]))
    with contextlib.redirect_stderr(io.StringIO()):
        dataset = _refload().make_dataset(
            ref,
            rows,
            rows,
            copy.deepcopy(reader.get("input_columns")),
            reader.get("output_column"),
        )
        cfg = {"type": cls, **{k: copy.deepcopy(v) for k, v in pt.items() if k != "type"}}
        retriever = ref.ZeroRetriever(dataset, prompt_template=cfg)
        prompts = []
        for i, idx in enumerate(retriever.retrieve()):
            ice = retriever.generate_ice(idx)
            prompts.append(
                retriever.generate_prompt_for_generate_task(i, ice, gen_field_replace_token="")
            )
    return list(dataset.test), prompts


def _ref_every_with_gt(ref: Any, prompt: Any, parser: Any) -> list[Any]:
    """The model inputs the reference ``MultiTurnGenInferencer('every_with_gt')`` sends."""
    run = _flows_ns.mt_run(ref, prompt, "every_with_gt", parser, max_out_len=16)
    return [call["model_input"] for call in run["calls"]]


def _ref_last(ref: Any, prompt: Any, parser: Any) -> list[Any]:
    """The reference's ``infer_last`` request without its ``list + PromptList`` recursion."""
    left, right = ref.get_round_index(prompt)
    head, chat, tail = list(prompt[:left]), list(prompt[left:right]), list(prompt[right:])
    slots = [i for i, item in enumerate(chat) if item["role"] == "BOT"]
    return [parser.parse_template(ref.PromptList(head + chat[: slots[-1]] + tail), mode="gen")]


# ============================================================================= the tests


def test_every_flow_config_found() -> None:
    if _configs_dir() is None:
        if REQUIRE:
            pytest.fail("ais_bench is not installed")
        pytest.skip("ais_bench is not installed")
    assert len(_config_files()) == N_FILES
    assert len(DATASETS) == N_DATASETS
    kinds = {_flow(_dataset(p, v, i)) for _, p, v, i in DATASETS}
    assert kinds == set(_FLOW_TYPES)


@pytest.mark.parametrize("parser", sorted(PARSERS))
@pytest.mark.parametrize(("cid", "path", "var", "index"), DATASETS, ids=[d[0] for d in DATASETS])
def test_config_matches_reference(
    reference: dict[str, Any], cid: str, path: Path, var: str, index: int, parser: str
) -> None:
    ref = reference["ais"]
    ds = _dataset(path, var, index)
    rng = random.Random(zlib.crc32(cid.encode()))
    multiturn = _flow(ds) == "MultiTurnPromptTemplate"
    rows = _mt_rows(rng) if multiturn else _mm_rows(ds, rng)
    ref_rows, ref_prompts = _ref_prompts(ref, ds, rows)
    # the rows the reference templates see are the rows promptweave renders
    assert [{k: r[k] for k in rows[0]} for r in ref_rows] == rows
    api, meta = PARSERS[parser]
    modes = ["every_with_gt", "last"] if multiturn else [None]
    for mode in modes:
        renderer = DatasetRenderer.from_config(
            ds, meta_template=copy.deepcopy(meta), api=api, flavor="aisbench", infer_mode=mode
        )
        assert renderer.flow == ("multiturn" if multiturn else "multimodal")
        for i, row in enumerate(ref_rows):
            want = _flows_ns.outcome(
                functools.partial(_ref_requests, ref, ref_prompts[i], parser, mode)
            )
            got = _flows_ns.outcome(functools.partial(_ours, renderer, row, mode))
            assert got == want, f"{cid} row {i} ({mode})"
        # and the whole dataset at once, when every row renders
        if all(
            _flows_ns.outcome(functools.partial(_ours, renderer, r, mode))[0] == "value"
            for r in rows
        ):
            result = renderer.render(ref_rows)
            assert len(result.prompts) == len(rows)
            assert result.ice_indices == [[]] * len(rows)
            # the columns the rows lack, counted as on the row-by-row path
            _backend.FORCE_PYTHON = True
            try:
                slow = renderer.render(ref_rows)
            finally:
                _backend.FORCE_PYTHON = False
            assert result.missing_columns == slow.missing_columns


def _ref_requests(ref: Any, prompt: Any, parser: str, mode: str | None) -> Any:
    """What the reference inferencer sends for one row's prompt."""
    ref_parser = _ref_parser(ref, parser)
    if mode == "every_with_gt":
        return _ref_every_with_gt(ref, prompt, ref_parser)
    if mode == "last":
        return _ref_last(ref, prompt, ref_parser)
    return ref_parser.parse_template(prompt, mode="gen")


def _ours(renderer: DatasetRenderer, row: dict[str, Any], mode: str | None) -> Any:
    result = renderer.render([row])
    assert result.rust_rows == 0
    assert result.infer_mode == mode
    return result.prompts[0]


def _mm_dataset() -> dict[str, Any]:
    for cid, path, var, i in DATASETS:
        if cid.startswith("textvqa/textvqa_gen:"):
            return _dataset(path, var, i)
    pytest.skip("textvqa_gen not found")


def _mt_dataset() -> dict[str, Any]:
    for cid, path, var, i in DATASETS:
        if cid.startswith("mtbench/mtbench_gen:"):
            return _dataset(path, var, i)
    pytest.skip("mtbench_gen not found")


def test_every_mode_is_refused() -> None:
    ds = _mt_dataset()
    assert ds["infer_cfg"]["inferencer"]["infer_mode"] == "every"
    with pytest.raises(ArgumentError, match="multiturn_requests") as info:
        DatasetRenderer.from_config(ds, flavor="aisbench", api=True)
    assert "set by the inferencer config" in str(info.value)
    del ds["infer_cfg"]["inferencer"]["infer_mode"]
    with pytest.raises(ArgumentError, match="MultiTurnGenInferencer's default"):
        DatasetRenderer.from_config(ds, flavor="aisbench", api=True)
    with pytest.raises(ArgumentError, match="given"):
        DatasetRenderer.from_config(ds, flavor="aisbench", infer_mode="every")
    with pytest.raises(ArgumentError) as bogus:
        DatasetRenderer.from_config(ds, flavor="aisbench", infer_mode="bogus")
    assert bogus.value.error_code == "ICLI-PARAM-002"
    # the inferencer config's mode is used when it is renderable
    ds["infer_cfg"]["inferencer"]["infer_mode"] = "last"
    r = DatasetRenderer.from_config(ds, flavor="aisbench", api=True)
    assert r.infer_mode == "last"
    out = r.render([{"question": ["a", "b"], "answer": ["1", "2"]}])
    assert out.prompts == [["a\n1\nb"]]


def test_template_forms_and_errors() -> None:
    ds = _mm_dataset()
    row = {"content": IS + "x.png" + CT + TS + "Q" + CT, "question": "q", "image": "x.png"}
    pt = ds["infer_cfg"]["prompt_template"]
    want = DatasetRenderer.from_config(ds, flavor="aisbench", api=True).render([row]).prompts
    for kind in (ais.MMPromptTemplate, "MMPromptTemplate"):
        infer = {**ds["infer_cfg"], "prompt_template": {**pt, "type": kind}}
        got = DatasetRenderer(infer, ds["reader_cfg"], api=True, flavor="aisbench").render([row])
        assert got.prompts == want
    obj = ais.MMPromptTemplate(copy.deepcopy(pt["template"]))
    infer = {**ds["infer_cfg"], "prompt_template": obj}
    got = DatasetRenderer(infer, ds["reader_cfg"], api=True, flavor="aisbench").render([row])
    assert got.prompts == want
    with pytest.raises(TemplateError, match="flavor='aisbench'"):
        DatasetRenderer.from_config(ds, flavor="opencompass", api=True)
    with pytest.raises(TemplateError, match="ppl"):
        DatasetRenderer.from_config(ds, flavor="aisbench", mode="ppl")
    # a row without the content field: the reference's KeyError; strict names the column
    r = DatasetRenderer.from_config(ds, flavor="aisbench", api=True)
    with pytest.raises(KeyError) as info:
        r.render([{"question": "q"}])
    assert isinstance(info.value, PromptRenderError)
    with pytest.raises(TemplateError, match="'content'"):
        r.render([{"question": "q"}], strict=True)


# ================================================================================== CLI


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "promptweave", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
        check=False,
    )


def _config_path(prefix: str) -> Path:
    for cid, path, _, _ in DATASETS:
        if cid.startswith(prefix):
            return path
    pytest.skip(f"{prefix} not found")


def test_cli_multimodal(reference: dict[str, Any], tmp_path: Path) -> None:
    import hashlib

    ref = reference["ais"]
    path = _config_path("textvqa/textvqa_gen:")
    ds = _dataset(path, "textvqa_datasets", 0)
    rows = _mm_rows(ds, random.Random(7), n=4)
    data = tmp_path / "mm.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    out = tmp_path / "out.jsonl"
    proc = _cli(tmp_path, "render", str(path), "--data", str(data), "--api", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    _, ref_prompts = _ref_prompts(ref, ds, rows)
    parser = ref.APITemplateParser(None)
    for i, record in enumerate(records):
        want = parser.parse_template(ref_prompts[i], mode="gen")
        assert record["prompt"] == json.loads(json.dumps(want))
        assert record["index"] == i
        assert record["ice_indices"] == []
        text = json.dumps(record["prompt"], ensure_ascii=False)
        assert record["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert len(records) == len(rows)
    show = _cli(tmp_path, "show", str(path), "--data", str(data), "--api", "-n", "1")
    assert show.returncode == 0, show.stderr
    assert "row 0" in show.stdout
    assert "⟨generate⟩" in show.stdout
    # each part of the row's message is listed, tagged with its type
    first = records[0]["prompt"]
    assert all(f"[{part['type']}]" in show.stdout for part in first)


def test_cli_multiturn(reference: dict[str, Any], tmp_path: Path) -> None:
    import hashlib

    ref = reference["ais"]
    path = _config_path("mtbench/mtbench_gen:")
    ds = _dataset(path, "mtbench_datasets", 0)
    rows = _mt_rows(random.Random(3), n=4)
    data = tmp_path / "mt.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps(_golden_ns.META_HBS), "utf-8")
    base = ["render", str(path), "--data", str(data), "--meta-template", str(meta)]
    refused = _cli(tmp_path, *base)
    assert refused.returncode != 0
    assert "--infer-mode" in refused.stderr
    assert "Traceback" not in refused.stderr
    proc = _cli(tmp_path, *base, "--infer-mode", "every_with_gt")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(records) == len(rows)
    _, ref_prompts = _ref_prompts(ref, ds, rows)
    for i, record in enumerate(records):
        want = _ref_every_with_gt(ref, ref_prompts[i], ref.LMTemplateParser(_golden_ns.META_HBS))
        assert record["infer_mode"] == "every_with_gt"
        assert record["prompts"] == want
        assert len(want) == len(rows[i]["question"])
        assert record["sha256"] == [hashlib.sha256(p.encode()).hexdigest() for p in want]
    show = _cli(
        tmp_path,
        "show",
        str(path),
        "--data",
        str(data),
        "--meta-template",
        str(meta),
        "--infer-mode",
        "last",
        "-n",
        "2",
    )
    assert show.returncode == 0, show.stderr
    assert "row 1" in show.stdout
    assert "request 0" in show.stdout
    assert "(last)" in show.stdout
