"""End-to-end tests of the ``promptweave`` command line (``python -m promptweave``)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from _metas import CHATML
from click.testing import CliRunner

from promptweave import cli
from promptweave.config import load_config

# ---------------------------------------------------------------------------- fixtures

ROWS = [
    {"question": "What is 2 + 2?", "A": "3", "B": "4", "answer": "B"},
    {"question": "Which planet is red?", "A": "Mars", "B": "Venus", "answer": "A"},
    {"question": "水的化学式是什么\uff1f", "A": "H2O", "B": "CO2", "answer": "A"},
    {"question": "Is 7 prime?", "A": "yes", "B": "no", "answer": "A"},
]
TRAIN = [
    {"question": "1 + 1 = ?", "A": "2", "B": "3", "answer": "A"},
    {"question": "Capital of France?", "A": "Rome", "B": "Paris", "answer": "B"},
    {"question": "3 * 3 = ?", "A": "6", "B": "9", "answer": "B"},
]
QUESTION = "{question}\nA. {A}\nB. {B}\nAnswer: "

IMPORTS = """\
from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_retriever import FixKRetriever, ZeroRetriever
from opencompass.openicl.icl_inferencer import GenInferencer, PPLInferencer
"""
READER = "reader_cfg = dict(input_columns=['question', 'A', 'B'], output_column='answer')\n"

STRING_CFG = (
    IMPORTS
    + READER
    + """\
infer_cfg = dict(
    prompt_template=dict(type=PromptTemplate, template='Q: {question}\\nA: {answer}'),
    retriever=dict(type=ZeroRetriever),
    inferencer=dict(type=GenInferencer),
)
string_datasets = [dict(abbr='string', reader_cfg=reader_cfg, infer_cfg=infer_cfg)]
"""
)

ICE_TEMPLATE = {
    "round": [
        {"role": "HUMAN", "prompt": QUESTION},
        {"role": "BOT", "prompt": "{answer}\n"},
    ]
}
PROMPT_TEMPLATE = {
    "begin": [
        {"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": "Answer the questions."},
        "</E>",
    ],
    "round": [{"role": "HUMAN", "prompt": QUESTION}],
}
DIALOGUE_CFG = (
    IMPORTS
    + READER
    + f"""\
infer_cfg = dict(
    ice_template=dict(type=PromptTemplate, template={ICE_TEMPLATE!r}),
    prompt_template=dict(type=PromptTemplate, template={PROMPT_TEMPLATE!r}, ice_token='</E>'),
    retriever=dict(type=FixKRetriever, fix_id_list=[0, 2]),
    inferencer=dict(type=GenInferencer),
)
dialogue_datasets = [dict(abbr='dialogue', reader_cfg=reader_cfg, infer_cfg=infer_cfg)]
"""
)

PPL_TEMPLATE = {
    label: {"round": [{"role": "HUMAN", "prompt": QUESTION}, {"role": "BOT", "prompt": label}]}
    for label in ("A", "B")
}
PPL_CFG = (
    IMPORTS
    + READER
    + f"""\
infer_cfg = dict(
    prompt_template=dict(type=PromptTemplate, template={PPL_TEMPLATE!r}),
    retriever=dict(type=ZeroRetriever),
    inferencer=dict(type=PPLInferencer),
)
ppl_datasets = [dict(abbr='ppl', reader_cfg=reader_cfg, infer_cfg=infer_cfg)]
"""
)

API_META = {
    "round": [
        {"role": "HUMAN", "api_role": "HUMAN"},
        {"role": "BOT", "api_role": "BOT", "generate": True},
    ],
    "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
}
MODEL_CFG = f"""\
from opencompass.models import HuggingFaceCausalLM
models = [dict(type=HuggingFaceCausalLM, abbr='chatml', meta_template={CHATML!r})]
"""
API_MODEL_CFG = f"""\
from opencompass.models import OpenAISDK
models = [dict(type=OpenAISDK, abbr='api', meta_template={API_META!r})]
"""


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A directory with the configs, a model config and test/train rows."""
    (tmp_path / "string_cfg.py").write_text(STRING_CFG, "utf-8")
    (tmp_path / "dialogue_cfg.py").write_text(DIALOGUE_CFG, "utf-8")
    (tmp_path / "ppl_cfg.py").write_text(PPL_CFG, "utf-8")
    (tmp_path / "model.py").write_text(MODEL_CFG, "utf-8")
    (tmp_path / "api_model.py").write_text(API_MODEL_CFG, "utf-8")
    write_jsonl(tmp_path / "test.jsonl", ROWS)
    write_jsonl(tmp_path / "train.jsonl", TRAIN)
    return tmp_path


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    env.pop(cli.TRACEBACK_ENV, None)
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


def ok(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run(cwd, *args)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def fails(cwd: Path, *args: str, code: int = 2) -> str:
    """Run a command that must fail with ``code`` and a one-line ``error:``; return stderr."""
    proc = run(cwd, *args)
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert proc.stdout == ""
    return errors[0]


def records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chatml_expected(row: dict[str, Any], shots: list[dict[str, Any]]) -> str:
    def q(r: dict[str, Any]) -> str:
        return QUESTION.format(**r)

    out = "<|im_start|>system\nAnswer the questions.<|im_end|>\n"
    for r in shots:
        out += f"<|im_start|>user\n{q(r)}<|im_end|>\n"
        out += f"<|im_start|>assistant\n{r['answer']}\n<|im_end|>\n"
    return out + f"<|im_start|>user\n{q(row)}<|im_end|>\n<|im_start|>assistant\n"


def listing(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


# ---------------------------------------------------------------------------- render


def test_help_lists_the_commands(work: Path) -> None:
    out = ok(work, "--help").stdout
    for command in ("render", "show", "demo"):
        assert command in out
    assert "--strict" in ok(work, "render", "--help").stdout


def test_render_string_template_to_stdout(work: Path) -> None:
    recs = records(ok(work, "render", "string_cfg.py", "--data", "test.jsonl").stdout)
    assert [r["index"] for r in recs] == [0, 1, 2, 3]
    for rec, row in zip(recs, ROWS, strict=True):
        # gen mode masks the output column with ''
        assert rec["prompt"] == f"Q: {row['question']}\nA: "
        assert rec["ice_indices"] == []
        assert rec["sha256"] == sha(rec["prompt"])
        assert set(rec) == {"index", "prompt", "ice_indices", "sha256"}


def test_render_dialogue_fixk_to_file(work: Path) -> None:
    args = ["dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    proc = ok(work, "render", *args, "--model", "model.py", "--out", "out.jsonl")
    assert proc.stdout == ""
    assert "wrote 4 prompts" in proc.stderr
    text = (work / "out.jsonl").read_text("utf-8")
    assert ROWS[2]["question"] in text  # UTF-8, not \u escapes
    recs = records(text)
    for rec, row in zip(recs, ROWS, strict=True):
        assert rec["ice_indices"] == [0, 2]
        assert rec["prompt"] == chatml_expected(row, [TRAIN[0], TRAIN[2]])
        assert rec["sha256"] == sha(rec["prompt"])
    # the same bytes as on stdout
    assert ok(work, "render", *args, "--model", "model.py").stdout == text
    # no temporary file left behind
    assert not [n for n in listing(work) if n.endswith(".tmp")]


def test_output_file_permissions_are_the_usual_ones(work: Path) -> None:
    ok(work, "render", "string_cfg.py", "--data", "test.jsonl", "--out", "out.jsonl")
    umask = os.umask(0)
    os.umask(umask)
    assert (work / "out.jsonl").stat().st_mode & 0o777 == 0o666 & ~umask


def test_out_through_a_symlink_replaces_its_target_and_keeps_the_link(work: Path) -> None:
    (work / "real").mkdir()
    target = work / "real" / "prompts.jsonl"
    target.write_text("old\n", "utf-8")
    (work / "link.jsonl").symlink_to(Path("real") / "prompts.jsonl")
    ok(work, "render", "string_cfg.py", "--data", "test.jsonl", "--out", "link.jsonl")
    assert (work / "link.jsonl").is_symlink()
    want = ok(work, "render", "string_cfg.py", "--data", "test.jsonl").stdout
    assert target.read_text("utf-8") == want
    assert not [n for n in listing(work / "real") if n.endswith(".tmp")]
    # a dangling link: the file it names is created
    target.unlink()
    ok(work, "render", "string_cfg.py", "--data", "test.jsonl", "--out", "link.jsonl")
    assert (work / "link.jsonl").is_symlink()
    assert target.read_text("utf-8") == want


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this platform")
def test_out_to_a_named_pipe_writes_into_it(work: Path) -> None:
    """A FIFO (or a device, or ``-o >(gzip > x.gz)``) is written to, as ``> PATH`` would, not
    replaced by a regular file."""
    import threading

    fifo = work / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    ok(work, "render", "string_cfg.py", "--data", "test.jsonl", "--out", "pipe")
    reader.join(timeout=60)
    assert fifo.is_fifo()
    want = ok(work, "render", "string_cfg.py", "--data", "test.jsonl").stdout
    assert got == [want.encode("utf-8")]


def test_render_without_train_draws_examples_from_the_test_rows(work: Path) -> None:
    proc = ok(work, "render", "dialogue_cfg.py", "--data", "test.jsonl", "--model", "model.py")
    recs = records(proc.stdout)
    assert recs[1]["prompt"] == chatml_expected(ROWS[1], [ROWS[0], ROWS[2]])
    # --limit shortens the test rows, not the pool of examples (row 2 is still example 2)
    limited = ok(
        work,
        "render",
        "dialogue_cfg.py",
        "--data",
        "test.jsonl",
        "--model",
        "model.py",
        "--limit",
        "1",
    )
    assert records(limited.stdout) == recs[:1]


def test_render_same_split_config_ignores_train_with_a_warning(work: Path) -> None:
    """A reader config with train_split == test_split (SciEval's: 'test') reads the examples
    from the test rows, as the reference's DatasetReader does; a --train file is then unused,
    and the CLI says so."""
    cfg = DIALOGUE_CFG.replace(
        "output_column='answer')", "output_column='answer', train_split='test')"
    )
    assert cfg != DIALOGUE_CFG
    (work / "same_cfg.py").write_text(cfg, "utf-8")
    args = ["render", "same_cfg.py", "--data", "test.jsonl", "--model", "model.py"]
    alone = ok(work, *args)
    assert "warning" not in alone.stderr
    given = ok(work, *args, "--train", "train.jsonl")
    assert given.stdout == alone.stdout
    assert records(given.stdout)[1]["prompt"] == chatml_expected(ROWS[1], [ROWS[0], ROWS[2]])
    notes = [line for line in given.stderr.splitlines() if line.startswith("warning: ")]
    assert len(notes) == 1, given.stderr
    assert "both 'test'" in notes[0]
    assert f"the {len(TRAIN)} train rows given are not used" in notes[0]
    shown = ok(work, "show", "same_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl")
    assert "train rows: the test rows (train_split == test_split == 'test')" in shown.stdout
    assert f"{len(TRAIN)} train rows" not in shown.stdout


def test_render_with_ice_indices_computed_elsewhere(work: Path) -> None:
    """--ice-indices replaces the config's retriever: a retriever promptweave does not have
    (TopkRetriever, BM25Retriever) renders from indices computed elsewhere, and a FixK config
    renders the given indices instead of its own."""
    topk = DIALOGUE_CFG.replace(
        "retriever=dict(type=FixKRetriever, fix_id_list=[0, 2])",
        "retriever=dict(type=TopkRetriever, ice_num=2)",
    ).replace("FixKRetriever, ZeroRetriever", "TopkRetriever")
    assert "TopkRetriever, ice_num=2" in topk
    (work / "topk_cfg.py").write_text(topk, "utf-8")
    args = ["--data", "test.jsonl", "--train", "train.jsonl", "--model", "model.py"]
    error = fails(work, "render", "topk_cfg.py", *args)
    assert "'TopkRetriever' is not available" in error
    assert "--ice-indices" in error
    # JSONL: an array per line, or an object with "ice_indices" (a line of render's output)
    shots = [[2, 0], [1], [], [0, 1, 2]]
    lines = [json.dumps(shots[0]), json.dumps({"ice_indices": shots[1], "x": 1}), "[]", ""]
    lines.append(json.dumps(shots[3]))
    (work / "idx.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    (work / "idx.json").write_text(json.dumps(shots), "utf-8")
    for name in ("idx.jsonl", "idx.json"):
        for cfg in ("topk_cfg.py", "dialogue_cfg.py"):
            recs = records(ok(work, "render", cfg, *args, "--ice-indices", name).stdout)
            assert [r["ice_indices"] for r in recs] == shots
            for rec, row, ids in zip(recs, ROWS, shots, strict=True):
                assert rec["prompt"] == chatml_expected(row, [TRAIN[i] for i in ids])
    # render's own output round-trips: the same prompts from its ice_indices
    out = ok(work, "render", "dialogue_cfg.py", *args, "--out", "first.jsonl")
    assert out.returncode == 0
    again = ok(work, "render", "topk_cfg.py", *args, "--ice-indices", "first.jsonl").stdout
    assert again == (work / "first.jsonl").read_text("utf-8")
    # --limit takes the first lists; show marks the examples
    limited = ok(work, "render", "topk_cfg.py", *args, "--ice-indices", "idx.json", "--limit", "1")
    assert [r["ice_indices"] for r in records(limited.stdout)] == shots[:1]
    shown = ok(work, "show", "topk_cfg.py", *args, "--ice-indices", "idx.json", "-n", "1").stdout
    assert "TopkRetriever" in shown
    assert "2 in-context examples [2, 0]" in shown


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("few.json", "[[0], [1]]", "few.json: 2 index lists, but the dataset has 4 test rows"),
        ("bool.json", "[[0], [true], [], []]", "bool.json: item 1: train-row indices are"),
        ("neg.jsonl", "[0]\n[1]\n[-1]\n[]\n", "neg.jsonl:3: train-row indices are integers"),
        ("str.jsonl", '[0]\n"0"\n', "str.jsonl:2: expected an array of train-row indices"),
        ("bad.jsonl", "[0]\n[1,\n", "bad.jsonl:2: invalid JSON"),
        ("obj.json", "{}", "obj.json: expected an array of index arrays, got an object"),
        ("idx.csv", "0\n", "idx.csv: index lists must be a .json or .jsonl file"),
        ("big.json", "[[0], [3], [], []]", "train index 3 is out of range of the 3 train rows"),
    ],
)
def test_ice_indices_errors_name_the_file_and_line(
    work: Path, name: str, text: str, message: str
) -> None:
    (work / name).write_text(text, "utf-8")
    args = ["--data", "test.jsonl", "--train", "train.jsonl", "--ice-indices", name]
    assert message in fails(work, "render", "dialogue_cfg.py", *args, "--out", "out.jsonl")
    assert "out.jsonl" not in listing(work)
    missing = fails(work, "render", "dialogue_cfg.py", *args[:4], "--ice-indices", "nope.json")
    assert "nope.json: no such file" in missing


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_ice_indices_jsonl_lines_as_data_lines(tmp_path: Path, eol: bytes) -> None:
    """A JSONL file of index lists is split into lines as a JSONL data file is (universal
    newlines); a line of JSON's white space is skipped, one of other white space is invalid."""
    path = tmp_path / "idx.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf" + eol.join([b"[0, 2]", b" \t", b'{"ice_indices": [1]}', b"[]"])
    )
    assert cli.read_ice_indices(str(path)) == [[0, 2], [1], []]
    path.write_bytes(eol.join([b"[0]", b"\xc2\xa0", b"[1]"]) + eol)
    with pytest.raises(cli.CliError, match=r"idx\.jsonl:2: invalid JSON"):
        cli.read_ice_indices(str(path))


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["plain", "bom"])
@pytest.mark.parametrize("suffix", ["json", "jsonl"])
def test_ice_indices_not_utf8_names_line_and_byte(tmp_path: Path, bom: bytes, suffix: str) -> None:
    """An index file with a byte that is not UTF-8 is reported with its line and the byte's
    offset in the file, for a .json array as for a .jsonl file."""
    path = tmp_path / f"idx.{suffix}"
    lines = (
        [b"[0]", b"[1]", b"[2] \xff"] if suffix == "jsonl" else [b"[[0],", b"[1],", b"[2]] \xff"]
    )
    raw = bom + b"\n".join(lines) + b"\n"
    path.write_bytes(raw)
    where = f"idx.{suffix}:3: not UTF-8 text (invalid start byte at byte {raw.index(0xFF)})"
    with pytest.raises(cli.CliError, match=re.escape(where)):
        cli.read_ice_indices(str(path))


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_jsonl_not_utf8_names_line_and_file_byte(tmp_path: Path, eol: bytes) -> None:
    """A JSONL data file's bad byte is reported with its line and its offset in the file (as
    a .json or CSV file's is), whatever the line endings."""
    raw = b"\xef\xbb\xbf" + eol.join([b'{"a": 1}', b"", b'{"a": "\xff"}', b'{"a": 2}']) + eol
    path = tmp_path / "data.jsonl"
    path.write_bytes(raw)
    where = f"data.jsonl:3: not UTF-8 text (invalid start byte at byte {raw.index(0xFF)})"
    with pytest.raises(cli.CliError, match=re.escape(where)):
        cli.read_rows(str(path))


def test_render_ppl_label_dict(work: Path) -> None:
    recs = records(
        ok(work, "render", "ppl_cfg.py", "--data", "test.jsonl", "--model", "model.py").stdout
    )
    assert len(recs) == 4
    for rec, row in zip(recs, ROWS, strict=True):
        assert set(rec) == {"index", "prompts", "ice_indices", "sha256"}
        assert list(rec["prompts"]) == ["A", "B"]
        for label, prompt in rec["prompts"].items():
            q = QUESTION.format(**row)
            assert prompt == (
                f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{label}<|im_end|>\n"
            )
            assert rec["sha256"][label] == sha(prompt)


def test_render_api_messages(work: Path) -> None:
    proc = ok(
        work,
        "render",
        "dialogue_cfg.py",
        "--data",
        "test.jsonl",
        "--train",
        "train.jsonl",
        "--model",
        "api_model.py",
        "--api",
    )
    rec = records(proc.stdout)[0]
    q = QUESTION.format
    assert rec["prompt"] == [
        {"role": "SYSTEM", "prompt": "Answer the questions."},
        {"role": "HUMAN", "prompt": q(**TRAIN[0])},
        {"role": "BOT", "prompt": "A\n"},
        {"role": "HUMAN", "prompt": q(**TRAIN[2])},
        {"role": "BOT", "prompt": "B\n"},
        {"role": "HUMAN", "prompt": q(**ROWS[0])},
    ]
    assert rec["sha256"] == sha(json.dumps(rec["prompt"], ensure_ascii=False))


def test_model_class_decides_the_parser(work: Path) -> None:
    """--model parses as the model's class does: an API model (OpenAISDK) gives message lists
    without --api; AISBench's VLLMCustomAPIChat with no meta template uses its default chat meta
    template; a chat-template model (HuggingFacewithChatTemplate) gives the messages its chat
    template would render, with a note; HuggingFaceBaseModel ignores a meta template."""
    args = ["render", "dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    with_flag = ok(work, *args, "--model", "api_model.py", "--api")
    implied = ok(work, *args, "--model", "api_model.py")
    assert implied.stdout == with_flag.stdout
    assert "API model (OpenAISDK): prompts are parsed with APITemplateParser" in implied.stderr
    ais_chat = "from ais_bench.benchmark.models import VLLMCustomAPIChat\n"
    ais_chat += "models = [dict(type=VLLMCustomAPIChat, abbr='vllm-chat', path='', model='')]\n"
    (work / "ais_chat.py").write_text(ais_chat, "utf-8")
    proc = ok(work, *args, "--model", "ais_chat.py")
    assert proc.stdout == with_flag.stdout  # the default meta template is the API one above
    assert "VLLMCustomAPIChat uses its default meta template" in proc.stderr
    hf_chat = "from opencompass.models import HuggingFacewithChatTemplate\n"
    hf_chat += "models = [dict(type=HuggingFacewithChatTemplate, abbr='chat', path='x')]\n"
    (work / "hf_chat.py").write_text(hf_chat, "utf-8")
    proc = ok(work, *args, "--model", "hf_chat.py")
    first = records(proc.stdout)[0]["prompt"]
    # OpenCompass's default chat meta template speaks SYSTEM as a HUMAN turn (merged with the
    # HUMAN turn after it)
    assert [m["role"] for m in first] == ["HUMAN", "BOT", "HUMAN", "BOT", "HUMAN"]
    assert first[0]["prompt"].startswith("Answer the questions.\n")
    assert "--chat-template" in proc.stderr
    base = "from opencompass.models import HuggingFaceBaseModel\nmodels = [dict(type="
    base += f"HuggingFaceBaseModel, abbr='base', path='x', meta_template={CHATML!r})]\n"
    (work / "base_model.py").write_text(base, "utf-8")
    proc = ok(work, *args, "--model", "base_model.py")
    assert "<|im_start|>" not in proc.stdout
    assert records(proc.stdout)[0]["prompt"].startswith("Answer the questions.\n")
    assert "HuggingFaceBaseModel ignores the config's meta template" in proc.stderr
    unknown = f"models = [dict(type='MyModel', abbr='mine', meta_template={CHATML!r})]\n"
    (work / "mine.py").write_text(unknown, "utf-8")
    proc = ok(work, *args, "--model", "mine.py")
    assert records(proc.stdout)[0]["prompt"] == chatml_expected(ROWS[0], [TRAIN[0], TRAIN[2]])
    assert "model class MyModel of mine" in proc.stderr


def test_chat_model_renders_with_its_local_tokenizer(work: Path) -> None:
    """A chat-template model whose tokenizer (``path``) is a directory on this machine renders
    the final text with that directory's chat template, and what its class adds (vLLM's
    chat_template_kwargs); a ``fastchat_template`` model renders with FastChat's template;
    a hub name not in the local cache leaves the messages, with a note."""
    model_dir = work / "tok"
    model_dir.mkdir()
    template = (
        CHAT_JINJA + "{% if enable_thinking is defined %}[think={{ enable_thinking }}]{% endif %}"
    )
    config = {"chat_template": template, "bos_token": "<s>", "eos_token": "</s>"}
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    cfg = "from opencompass.models import VLLMwithChatTemplate\n"
    cfg += f"models = [dict(type=VLLMwithChatTemplate, abbr='v', path={str(model_dir)!r}, "
    cfg += "chat_template_kwargs=dict(enable_thinking=False))]\n"
    (work / "vllm_chat.py").write_text(cfg, "utf-8")
    args = ["render", "dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    proc = ok(work, *args, "--model", "vllm_chat.py")
    prompt = records(proc.stdout)[0]["prompt"]
    assert prompt.startswith("<s>[user]Answer the questions.\n")
    assert prompt.endswith("[assistant][think=False]")
    assert f"using the chat template of VLLMwithChatTemplate's tokenizer ({model_dir})" in (
        proc.stderr
    )
    # the same as giving the directory by hand
    given = ok(work, *args, "--model", "vllm_chat.py", "--chat-template", str(model_dir))
    assert given.stdout == proc.stdout
    fc = "from opencompass.models import HuggingFacewithChatTemplate\n"
    fc += "models = [dict(type=HuggingFacewithChatTemplate, abbr='f', path='lmsys/vicuna-7b-v1.5',"
    fc += " fastchat_template='vicuna')]\n"
    (work / "fc.py").write_text(fc, "utf-8")
    prompt = records(ok(work, *args, "--model", "fc.py").stdout)[0]["prompt"]
    assert prompt.startswith("A chat between a curious user and an artificial intelligence")
    assert prompt.endswith(" ASSISTANT:")
    assert "FastChat template" in fails(work, *args, "--model", "fc.py", "--chat-template", "x")
    hub = "from opencompass.models import HuggingFacewithChatTemplate\n"
    hub += "models = [dict(type=HuggingFacewithChatTemplate, abbr='h', path='no-org/no-model')]\n"
    (work / "hub.py").write_text(hub, "utf-8")
    proc = ok(work, *args, "--model", "hub.py")
    assert isinstance(records(proc.stdout)[0]["prompt"], list)
    assert "'no-org/no-model' is not on this machine" in proc.stderr


MMLU_ROWS = {
    "dev": [
        ["What is 1 + 1?", "1", "2", "3", "4", "B"],
        ['A "quoted", comma', "x, y", "z", "w", "v", "A"],
        *[[f"dev {i}", "a", "b", "c", "d", "ABCD"[i % 4]] for i in range(3)],
    ],
    "test": [
        ["Multi-line\nquestion?", "一", "二", "三", "四", "C"],
        ["Last one", "a", "b", "c", "d", "D"],
    ],
}


def _reference_mmlu_load(refload: Any, path: Path, name: str) -> Any:
    """The reference's ``MMLUDataset.load`` (its data-path lookup and registry stubbed)."""
    import importlib
    import types

    M = refload.opencompass()
    refload.base_dataset_class(M)
    utils = sys.modules.get("opencompass.utils")
    if utils is None or not hasattr(utils, "get_data_path"):
        stub = types.ModuleType("opencompass.utils")
        stub.get_data_path = lambda p, **_: p  # type: ignore[attr-defined]
        sys.modules["opencompass.utils"] = stub
    registry = types.ModuleType("opencompass.registry")
    registry.LOAD_DATASET = types.SimpleNamespace(register_module=lambda: lambda c: c)  # type: ignore[attr-defined]
    saved = sys.modules.get("opencompass.registry")
    sys.modules["opencompass.registry"] = registry
    try:
        sys.modules.pop("opencompass.datasets.mmlu", None)
        mmlu = importlib.import_module("opencompass.datasets.mmlu")
    finally:
        if saved is not None:
            sys.modules["opencompass.registry"] = saved
    return mmlu.MMLUDataset.load(str(path), name)


def test_headerless_csv_columns_read_like_the_mmlu_loader(work: Path) -> None:
    """--columns names the columns of header-less CSV files: MMLU's files read as the
    reference's MMLUDataset.load reads them, and the real MMLU config renders from them."""
    import _golden_ns

    name = "college_biology"
    for split, rows in MMLU_ROWS.items():
        (work / "mmlu" / split).mkdir(parents=True, exist_ok=True)
        with (work / "mmlu" / split / f"{name}_{split}.csv").open("w", newline="") as f:
            csv.writer(f).writerows(rows)
    loaded = _reference_mmlu_load(_golden_ns.import_refload(), work / "mmlu", name)
    columns = ["input", "A", "B", "C", "D", "target"]
    for split in ("dev", "test"):
        path = str(work / "mmlu" / split / f"{name}_{split}.csv")
        assert cli.read_rows(path, columns=columns) == list(loaded[split])
    from _wheels import configs_root

    config = str(configs_root("oc") / "datasets" / "mmlu" / "mmlu_gen_4d595a.py")
    args = ["render", config, "--dataset", f"lukaemon_mmlu_{name}"]
    args += ["--data", f"mmlu/test/{name}_test.csv", "--train", f"mmlu/dev/{name}_dev.csv"]
    recs = records(ok(work, *args, "--columns", ",".join(columns)).stdout)
    assert len(recs) == 2
    assert recs[0]["ice_indices"] == [0, 1, 2, 3, 4]  # FixK
    assert 'A "quoted", comma' in recs[0]["prompt"]
    assert "Multi-line\nquestion?" in recs[0]["prompt"]
    # without --columns the first row is taken for a header: one dev row short for FixK
    assert "Index 4 is out of range of 4" in fails(work, *args)
    assert "--columns names the columns of .csv/.tsv files; none is given" in fails(
        work, "render", "string_cfg.py", "--data", "test.jsonl", "--columns", "a,b"
    )
    assert "--columns names a column more than once: 'A'" in fails(
        work, *args, "--columns", "input,A,A,C,D,target"
    )
    short = fails(work, *args, "--columns", "input,A,B")
    assert f"mmlu/test/{name}_test.csv:2: 6 fields, --columns names 3" in short


def test_model_max_seq_len_drops_examples_as_opencompass(work: Path) -> None:
    """--model's max_seq_len is applied as OpenCompass applies it: an API model estimates
    tokens itself (no tokenizer needed); a local model counts with --tokenizer or with the
    tokenizer.json of its path; without a way to count, a note says the limit is not applied."""
    tokenizers = pytest.importorskip("tokenizers")
    args = ["render", "dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    full = records(ok(work, *args, "--model", "api_model.py").stdout)
    assert [r["ice_indices"] for r in full] == [[0, 2]] * 4
    gemini = API_MODEL_CFG.replace("type=OpenAISDK", "type=Gemini, max_seq_len=25")
    gemini = gemini.replace("import OpenAISDK", "import Gemini")
    (work / "gemini.py").write_text(gemini, "utf-8")
    proc = ok(work, *args, "--model", "gemini.py")
    trimmed = records(proc.stdout)
    assert "max_seq_len (25), as OpenCompass does (tokens estimated" in proc.stderr
    assert [r["ice_indices"] for r in trimmed] != [[0, 2]] * 4
    assert all(r["ice_indices"] in ([], [0], [0, 2]) for r in trimmed)
    # the rows that were not trimmed are the untrimmed prompts
    for a, b in zip(trimmed, full, strict=True):
        if a["ice_indices"] == [0, 2]:
            assert a == b
    # --max-seq-len overrides the model's
    wide = ok(work, *args, "--model", "gemini.py", "--max-seq-len", "100000")
    assert records(wide.stdout) == full
    # a local model: its tokenizer.json counts, else the limit is not applied
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    (work / "lm").mkdir()
    tk.save(str(work / "lm" / "tokenizer.json"))
    lm = MODEL_CFG.replace("abbr='chatml',", "abbr='chatml', path='lm', max_seq_len=40,")
    (work / "lm_model.py").write_text(lm, "utf-8")
    proc = ok(work, *args, "--model", "lm_model.py")
    assert "tokens counted by the model's tokenizer (lm)" in proc.stderr
    lens = [len(r["ice_indices"]) for r in records(proc.stdout)]
    assert min(lens) < 2
    far = MODEL_CFG.replace("abbr='chatml',", "abbr='chatml', path='nowhere', max_seq_len=40,")
    (work / "far_model.py").write_text(far, "utf-8")
    proc = ok(work, *args, "--model", "far_model.py")
    assert "the model's max_seq_len (40) is not applied" in proc.stderr
    assert "and 4 prompts may be longer" in proc.stderr
    # prompts too short to have that many tokens need no note
    roomy = far.replace("max_seq_len=40", "max_seq_len=100000")
    (work / "roomy_model.py").write_text(roomy, "utf-8")
    assert "max_seq_len" not in ok(work, *args, "--model", "roomy_model.py").stderr
    assert [len(r["ice_indices"]) for r in records(proc.stdout)] == [2] * 4
    with_tok = ok(work, *args, "--model", "far_model.py", "--tokenizer", "lm/tokenizer.json")
    assert [len(r["ice_indices"]) for r in records(with_tok.stdout)] == lens
    assert "needs a tokenizer" in fails(work, *args, "--max-seq-len", "10")


def test_chat_inferencer_config_renders_its_requests(work: Path) -> None:
    """An OpenCompass ChatInferencer config (a multi-round chat per row) renders the requests
    of its infer_mode; 'every' needs the model's replies and is refused."""
    cfg = (
        "from opencompass.openicl.icl_prompt_template import PromptTemplate\n"
        "from opencompass.openicl.icl_retriever import ZeroRetriever\n"
        "from opencompass.openicl.icl_inferencer import ChatInferencer\n"
        "reader_cfg = dict(input_columns=['dialogue'], output_column='judge')\n"
        "infer_cfg = dict(prompt_template=dict(type=PromptTemplate, template='{dialogue}'),\n"
        "    retriever=dict(type=ZeroRetriever),\n"
        "    inferencer=dict(type=ChatInferencer, infer_mode='every'))\n"
        "mt_datasets = [dict(abbr='mt', reader_cfg=reader_cfg, infer_cfg=infer_cfg)]\n"
    )
    (work / "mt_cfg.py").write_text(cfg, "utf-8")
    dialogue = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": ""},
    ]
    write_jsonl(work / "mt.jsonl", [{"dialogue": dialogue, "judge": "j"}])
    args = ["render", "mt_cfg.py", "--data", "mt.jsonl", "--model", "api_model.py"]
    assert "infer_mode 'every' (set by the inferencer config)" in fails(work, *args)
    (rec,) = records(ok(work, *args, "--infer-mode", "every_with_gt").stdout)
    assert rec["infer_mode"] == "every_with_gt"
    assert rec["prompts"] == [
        [{"role": "HUMAN", "prompt": "Hi"}],
        [
            {"role": "HUMAN", "prompt": "Hi"},
            {"role": "BOT", "prompt": "Hello"},
            {"role": "HUMAN", "prompt": "Bye"},
        ],
    ]
    assert rec["sha256"] == [sha(json.dumps(p, ensure_ascii=False)) for p in rec["prompts"]]
    (last,) = records(ok(work, *args, "--infer-mode", "last").stdout)
    assert last["prompts"] == rec["prompts"][1:]
    shown = ok(work, "show", *args[1:], "--infer-mode", "last").stdout
    assert "ChatInferencer (last)" in shown
    assert "1 request (last)" in shown


def test_chat_model_from_the_huggingface_cache(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat model named by its hub id renders with the chat template and tokenizer already in
    the local HuggingFace cache (nothing is downloaded): the final text, and its max_seq_len
    counted through the chat template as OpenCompass's chat models count."""
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("huggingface_hub")
    cache = work / "hf-cache"
    repo = cache / "models--some-org--some-chat"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40, "utf-8")
    config = {"chat_template": CHAT_JINJA, "bos_token": "<s>", "eos_token": "</s>"}
    (snapshot / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tk.save(str(snapshot / "tokenizer.json"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = "from opencompass.models import HuggingFacewithChatTemplate\n"
    cfg += "models = [dict(type=HuggingFacewithChatTemplate, abbr='c', path='some-org/some-chat'"
    (work / "cached.py").write_text(cfg + ")]\n", "utf-8")
    (work / "cached_short.py").write_text(cfg + ", max_seq_len=45)]\n", "utf-8")
    args = ["render", "dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    proc = ok(work, *args, "--model", "cached.py")
    assert "using the chat template of HuggingFacewithChatTemplate's tokenizer" in proc.stderr
    full = records(proc.stdout)
    # OpenCompass's default chat meta template: SYSTEM is spoken as a user turn
    assert full[0]["prompt"].startswith("<s>[user]Answer the questions.\n")
    assert full[0]["prompt"].endswith("[assistant]")
    short = ok(work, *args, "--model", "cached_short.py")
    assert "tokens of the chat template's text, by the model's tokenizer" in short.stderr
    lens = [len(r["ice_indices"]) for r in records(short.stdout)]
    assert min(lens) < 2
    assert max(lens) <= 2


CHAT_JINJA = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
)


def test_render_through_a_chat_template(work: Path) -> None:
    """--chat-template: API parse (the model's meta template), chat messages, the template."""
    (work / "chat.jinja").write_text(CHAT_JINJA, encoding="utf-8")
    config = {"chat_template": CHAT_JINJA, "bos_token": "<s>", "eos_token": {"content": "</s>"}}
    (work / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    args = ["dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    args += ["--model", "api_model.py"]
    q = QUESTION.format
    shots = "".join(
        f"[user]{q(**r)}</s>[assistant]{r['answer']}\n</s>" for r in (TRAIN[0], TRAIN[2])
    )
    want = f"<s>[system]Answer the questions.</s>{shots}[user]{q(**ROWS[0])}</s>[assistant]"
    rec = records(ok(work, "render", *args, "--chat-template", "tokenizer_config.json").stdout)[0]
    assert rec["prompt"] == want
    assert rec["sha256"] == sha(want)
    # a bare .jinja file has no special tokens: they render as nothing
    rec = records(ok(work, "render", *args, "--chat-template", "chat.jinja").stdout)[0]
    assert rec["prompt"] == want.replace("<s>", "").replace("</s>", "")
    shown = ok(work, "show", *args, "--chat-template", "chat.jinja", "-n", "1").stdout
    assert "chat template chat.jinja" in shown
    # a model directory: its chat_template.jinja wins over the config's, as in transformers
    (work / "model").mkdir()
    (work / "model" / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": "{{ 'not this one' }}"}), encoding="utf-8"
    )
    (work / "model" / "chat_template.jinja").write_text(CHAT_JINJA, encoding="utf-8")
    rec = records(ok(work, "render", *args, "--chat-template", "model").stdout)[0]
    assert rec["prompt"] == want


def test_chat_template_errors(work: Path) -> None:
    (work / "bad.jinja").write_text("{% for m in messages %}", encoding="utf-8")
    args = ["dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    err = fails(work, "render", *args, "--chat-template", "bad.jinja")
    assert "bad.jinja" in err
    assert "syntax" in err
    err = fails(work, "render", *args, "--chat-template", "missing.json")
    assert "missing.json" in err
    (work / "empty_model").mkdir()
    err = fails(work, "render", *args, "--chat-template", "empty_model")
    assert "empty_model" in err
    assert "chat_template" in err
    (work / "raises.jinja").write_text("{{ raise_exception('no system role here') }}", "utf-8")
    err = fails(work, "render", *args, "--chat-template", "raises.jinja", "--out", "o.jsonl")
    assert "no system role here" in err
    assert not (work / "o.jsonl").exists()


def test_render_limit(work: Path) -> None:
    recs = records(
        ok(work, "render", "string_cfg.py", "--data", "test.jsonl", "--limit", "2").stdout
    )
    assert [r["index"] for r in recs] == [0, 1]
    assert ok(work, "render", "string_cfg.py", "--data", "test.jsonl", "--limit", "0").stdout == ""


def test_render_prepares_loaded_rows(work: Path) -> None:
    """The data files are the dataset's loaded data: the config's test_range / train_range
    select rows and its n repeats them, as the reference's BaseDataset and reader do; "index"
    is the row's line in --data; --rows-as-given renders the rows as they are."""
    cfg = DIALOGUE_CFG.replace(
        "output_column='answer')", "output_column='answer', test_range='[1:3]', train_range=2)"
    )
    assert cfg != DIALOGUE_CFG
    (work / "ranged_cfg.py").write_text(cfg, "utf-8")
    args = ("render", "ranged_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl")
    # train_range=2 keeps two train rows: FixK id 2 is out of range, as in the reference
    assert "Index 2 is out of range of 2" in fails(work, *args)
    assert len(records(ok(work, *args, "--rows-as-given").stdout)) == len(ROWS)
    (work / "ranged_cfg.py").write_text(cfg.replace("fix_id_list=[0, 2]", "fix_id_list=[1, 0]"))
    recs = records(ok(work, *args).stdout)
    assert [r["index"] for r in recs] == [1, 2]
    # the two train rows: the first two of random.Random(2)'s shuffle of [0, 1, 2]
    order = list(range(len(TRAIN)))
    random.Random(2).shuffle(order)
    kept = [TRAIN[i] for i in order[:2]]
    for rec, row in zip(recs, ROWS[1:3], strict=True):
        shots = [kept[1], kept[0]]  # fix_id_list [1, 0] in that order
        at = [rec["prompt"].index(shot["question"]) for shot in shots]
        assert at == sorted(at), rec["prompt"]
        assert TRAIN[order[2]]["question"] not in rec["prompt"]
        assert row["question"] in rec["prompt"]
    limited = records(ok(work, *args, "--limit", "1").stdout)
    assert [r["index"] for r in limited] == [1]
    out = ok(work, "show", "ranged_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl")
    assert "test_range '[1:3]'" in out.stdout
    assert "row 1 " in out.stdout
    assert "row 0 " not in out.stdout
    (work / "bad_cfg.py").write_text(cfg.replace("'[1:3]'", "'rows 1 to 3'"), "utf-8")
    assert "test_range='rows 1 to 3'" in fails(work, "render", "bad_cfg.py", "--data", "test.jsonl")


def test_render_repeats_rows_n_times_with_their_columns(work: Path) -> None:
    """A dataset config's n repeats the rows (OpenCompass: the whole split, a b a b); the
    BaseDataset's subdivision / idx columns are there for templates that use them."""
    cfg = STRING_CFG.replace(
        "template='Q: {question}\\nA: {answer}'", "template='{subdivision}#{idx}: {question}'"
    ).replace("abbr='string',", "abbr='string', n=2,")
    assert "n=2" in cfg
    assert "{subdivision}" in cfg
    (work / "n_cfg.py").write_text(cfg, "utf-8")
    recs = records(ok(work, "render", "n_cfg.py", "--data", "test.jsonl").stdout)
    assert [r["index"] for r in recs] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [r["prompt"] for r in recs] == [
        f"string#{i}: {ROWS[i]['question']}" for i in [0, 1, 2, 3, 0, 1, 2, 3]
    ]
    given = records(
        ok(work, "render", "n_cfg.py", "--data", "test.jsonl", "--rows-as-given").stdout
    )
    assert [r["prompt"] for r in given] == [
        "{subdivision}#{idx}: " + row["question"] for row in ROWS
    ]


def test_meta_template_file_json_and_py(work: Path) -> None:
    (work / "meta.json").write_text(json.dumps(CHATML), "utf-8")
    (work / "meta.py").write_text(f"meta_template = {CHATML!r}\n", "utf-8")
    args = ["render", "dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    expected = ok(work, *args, "--model", "model.py").stdout
    assert ok(work, *args, "--meta-template", "meta.json").stdout == expected
    assert ok(work, *args, "--meta-template", "meta.py").stdout == expected
    # a model config: its model's meta template (as OpenCompass's model configs hold it)
    assert ok(work, *args, "--meta-template", "model.py").stdout == expected


def test_model_in_the_dataset_config_is_used(work: Path) -> None:
    (work / "eval.py").write_text(DIALOGUE_CFG + MODEL_CFG, "utf-8")
    args = ["--data", "test.jsonl", "--train", "train.jsonl"]
    proc = ok(work, "render", "eval.py", *args)
    assert "chatml" in proc.stderr  # says which meta template it took
    assert proc.stdout == ok(work, "render", "dialogue_cfg.py", *args, "--model", "model.py").stdout


# ---------------------------------------------------------------------------- input formats


def _expected_plain(work: Path) -> str:
    return ok(
        work, "render", "dialogue_cfg.py", "--data", "test.jsonl", "--model", "model.py"
    ).stdout


def _render_data(work: Path, name: str) -> str:
    return ok(work, "render", "dialogue_cfg.py", "--data", name, "--model", "model.py").stdout


def test_json_list_of_rows(work: Path) -> None:
    (work / "test.json").write_text(json.dumps(ROWS, ensure_ascii=False, indent=1), "utf-8")
    assert _render_data(work, "test.json") == _expected_plain(work)


def test_json_object_of_columns(work: Path) -> None:
    columns = {c: [r[c] for r in ROWS] for c in ROWS[0]}
    (work / "test.json").write_text(json.dumps(columns), "utf-8")
    assert _render_data(work, "test.json") == _expected_plain(work)


def test_loaded_rows_are_a_table_as_the_json_loader_makes_one(work: Path) -> None:
    """A JSONL row lacking a column other rows have: HuggingFace's JSON loader (which the
    reference's dataset loads with) gives it None there, and orders every row's columns by
    first appearance; --rows-as-given keeps the rows as they are."""
    (work / "cfg.py").write_text(
        STRING_CFG.replace("'Q: {question}\\nA: {answer}'", "'Q: {question} C: {c}'"),
        "utf-8",
    )
    rows = [
        {"question": "one", "c": "C1", "answer": "A"},
        {"answer": "B", "question": "two"},
        {"answer": "C", "question": "{c}", "c": "3"},
    ]
    write_jsonl(work / "t.jsonl", rows)
    proc = ok(work, "render", "cfg.py", "--data", "t.jsonl")
    assert [r["prompt"] for r in records(proc.stdout)] == [
        "Q: one C: C1",
        "Q: two C: None",
        "Q: 3 C: 3",  # question before c: the order-dependent substitution of the table's order
    ]
    assert "missing" not in proc.stderr
    given = ok(work, "render", "cfg.py", "--data", "t.jsonl", "--rows-as-given")
    assert [r["prompt"] for r in records(given.stdout)][1] == "Q: two C: {c}"
    assert "column 'c' missing in 1 row" in given.stderr


def test_csv_and_tsv(work: Path) -> None:
    for name, delimiter in (("test.csv", ","), ("test.tsv", "\t")):
        with (work / name).open("w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(ROWS[0]), delimiter=delimiter)
            writer.writeheader()
            writer.writerows(ROWS)
        assert _render_data(work, name) == _expected_plain(work)


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["plain", "bom"])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_csv_read_as_the_frameworks_loaders_read_it(tmp_path: Path, bom: bytes, eol: bytes) -> None:
    """A CSV file is read as OpenCompass's CSV loaders read theirs: opened in text mode (the
    universal newlines make a line break in a quoted field ``\\n`` whatever the file's line
    endings), a file with a header row as ``CustomDataset`` (``utf-8-sig``), a header-less one
    (``--columns``) as ``MMLUDataset`` (``utf-8``, a BOM stays in the first cell)."""
    body = eol.join([b"question,answer", b'"two' + eol + b'lines",A', b"plain,B"]) + eol
    path = tmp_path / "data.csv"
    path.write_bytes(bom + body)
    with open(path, encoding="utf-8-sig") as f:  # CustomDataset.load
        reader = csv.reader(f)
        header = next(reader)
        want = [dict(zip(header, row, strict=True)) for row in reader]
    assert cli.read_rows(str(path)) == want
    assert want[0]["question"] == "two\nlines"
    with open(path, encoding="utf-8") as f:  # MMLUDataset.load
        want = [{"question": row[0], "answer": row[1]} for row in csv.reader(f)]
    assert cli.read_rows(str(path), columns=["question", "answer"]) == want
    assert want[0]["question"] == bom.decode("utf-8") + "question"


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_jsonl_lines_as_the_frameworks_loaders_split_them(tmp_path: Path, eol: bytes) -> None:
    """JSONL lines are split as ``CustomDataset`` splits them (``for line in open(path)``:
    universal newlines, so a file with ``\\r`` line endings has its rows too)."""
    lines = [b'{"question": "q1", "n": 1}', b'{"question": "q2 \xc3\xa9", "n": 2.5}']
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + eol.join(lines) + eol)
    with open(path, encoding="utf-8-sig") as f:  # CustomDataset.load
        want = [json.loads(line) for line in f]
    assert cli.read_rows(str(path)) == want


def test_jsonl_line_of_other_white_space_is_invalid(tmp_path: Path) -> None:
    """Lines of JSON's white space are skipped; a line of other white space (U+00A0) is not
    JSON, as ``json.loads`` says."""
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"a": 1}\n \t\n\xc2\xa0\n{"a": 2}\n')
    with pytest.raises(cli.CliError, match=r"data\.jsonl:3: invalid JSON"):
        cli.read_rows(str(path))


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["plain", "bom"])
def test_json_not_utf8_names_line_and_byte(tmp_path: Path, bom: bytes) -> None:
    raw = bom + b'[\n{"a": "x"},\n{"a": "\xff"}\n]\n'
    path = tmp_path / "data.json"
    path.write_bytes(raw)
    with pytest.raises(cli.CliError) as info:
        cli.read_rows(str(path))
    assert str(info.value) == (
        f"{path}:3: not UTF-8 text (invalid start byte at byte {raw.index(0xFF)})"
    )


def test_csv_quote_left_open_is_pointed_at(tmp_path: Path) -> None:
    """A quote left open swallows the rest of the file into one field (as the csv module reads
    it): the error names the line the row starts at."""
    path = tmp_path / "data.csv"
    path.write_text('question,answer\nq1,A\n"q2,B\nq3,C\nq4,D\n')
    with pytest.raises(cli.CliError) as info:
        cli.read_rows(str(path))
    assert str(info.value) == (
        f"{path}:5: 1 fields, the header has 2 (the row starts at line 3: a quoted field runs "
        "over 3 lines; is a quote left open?)"
    )


def test_json_lines_in_a_json_file_get_a_hint(work: Path) -> None:
    """A ``.json`` file that holds JSON Lines is refused at its second line, with the fix."""
    (work / "lines.json").write_text('{"question": "q1"}\n{"question": "q2"}\n')
    err = fails(work, "render", "string_cfg.py", "--data", "lines.json", "-o", "out.jsonl")
    assert "lines.json:2: invalid JSON: Extra data" in err
    assert "one JSON object per line: name it .jsonl" in err
    assert not (work / "out.jsonl").exists()


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["plain", "bom"])
@pytest.mark.parametrize("suffix", ["csv", "tsv"])
def test_csv_not_utf8_names_line_and_byte(work: Path, bom: bytes, suffix: str) -> None:
    """A CSV/TSV file is decoded in chunks: its error says on which line and at which byte of
    the file the first bad byte is, as a JSONL file's does."""
    sep = b"," if suffix == "csv" else b"\t"
    raw = bom + sep.join([b"question", b"A", b"B", b"answer"]) + b"\n"
    raw += sep.join([b"q1", b"1", b"2", b"A"]) + b"\n" + sep.join([b"q\xff", b"1", b"2", b"B"])
    (work / f"bad.{suffix}").write_bytes(raw + b"\n")
    err = fails(work, "render", "string_cfg.py", "--data", f"bad.{suffix}", "-o", "out.jsonl")
    assert f"bad.{suffix}:3: not UTF-8 text (invalid start byte at byte {raw.index(0xFF)})" in err
    assert not (work / "out.jsonl").exists()


def test_out_with_a_trailing_slash_is_refused(work: Path) -> None:
    """``-o newdir/`` must not write a file named ``newdir`` (``Path`` drops the slash)."""
    err = fails(work, "render", "string_cfg.py", "--data", "test.jsonl", "-o", "newdir/")
    assert "--out newdir/: ends with a slash (a directory); give a file name" in err
    assert not (work / "newdir").exists()


def test_eval_config_renders_what_the_reference_runs(work: Path) -> None:
    """An evaluation config imports stock lists but runs ``datasets`` x ``models``: those are
    the ones rendered (not the first dataset or model the file mentions)."""
    (work / "eval_cfg.py").write_text(
        STRING_CFG
        + "import copy\n"
        + "zero = copy.deepcopy(string_datasets)\n"
        + "zero[0]['abbr'] = 'changed'\n"
        + "zero[0]['infer_cfg']['prompt_template']['template'] = "
        + "dict(round=[dict(role='HUMAN', prompt='Changed: {question}')])\n"
        + "other_models = [dict(abbr='other', meta_template=dict(round=[dict(role='HUMAN')]))]\n"
        + "datasets = zero\n"
        + MODEL_CFG.replace("models = ", "chosen = ")
        + "models = chosen\n",
        "utf-8",
    )
    cfg = load_config(work / "eval_cfg.py")
    assert [d["abbr"] for d in cfg.run_datasets()] == ["changed"]
    assert [m["abbr"] for m in cfg.run_models()] == ["chatml"]
    result = ok(work, "render", "eval_cfg.py", "--data", "test.jsonl")
    rec = records(result.stdout)[0]
    assert rec["prompt"].startswith("<|im_start|>user\nChanged: ")
    assert "using the first" not in result.stderr  # one dataset, one model: no choice made


def test_dataset_config_lists_keep_the_reference_order(work: Path) -> None:
    """``--datasets NAME`` reads every ``*_datasets`` list in the file's order, repeats kept."""
    (work / "multi_cfg.py").write_text(
        STRING_CFG
        + "import copy\n"
        + "b = copy.deepcopy(string_datasets[0]); b['abbr'] = 'b'\n"
        + "b_datasets = [b]\n"
        + "both_datasets = b_datasets + string_datasets\n",
        "utf-8",
    )
    cfg = load_config(work / "multi_cfg.py")
    assert [d["abbr"] for d in cfg.run_datasets()] == ["string", "b", "b", "string"]
    assert [d["abbr"] for d in cfg.datasets()] == ["string", "b"]
    rec = records(
        ok(work, "render", "multi_cfg.py", "--data", "test.jsonl", "--dataset", "2").stdout
    )
    assert rec[0]["prompt"] == "Q: " + ROWS[0]["question"] + "\nA: "


def test_jsonl_numbers_are_typed_as_the_json_loader_types_them(work: Path) -> None:
    """A JSONL column of ints and floats loads as one float column (HuggingFace's JSON loader,
    Arrow), and so do lists of numbers: the prompt shows ``10.0`` and ``[7.0]``."""
    datasets = pytest.importorskip("datasets", reason="datasets (the reference loader) missing")
    rows = [
        {"question": 10, "A": [7], "B": "x", "answer": "A"},
        {"question": 1.5, "A": [2.5, 1], "B": "y", "answer": "B"},
        {"question": 7, "A": None, "B": "z", "answer": "A"},
    ]
    write_jsonl(work / "nums.jsonl", rows)
    loaded = datasets.load_dataset("json", data_files=str(work / "nums.jsonl"), split="train")
    want = [f"Q: {r['question']}\nA: " for r in loaded.to_list()]
    assert want[0] == "Q: 10.0\nA: "
    got = [
        r["prompt"]
        for r in records(ok(work, "render", "string_cfg.py", "--data", "nums.jsonl").stdout)
    ]
    assert got == want
    assert cli.uniform_columns(rows)[1]["A"] == loaded.to_list()[1]["A"] == [2.5, 1.0]
    # an int past 64 bits is no Arrow number: the column is left as it is (no OverflowError)
    assert cli.uniform_columns([{"a": 10**400}, {"a": 1.5}]) == [{"a": 10**400}, {"a": 1.5}]


def test_dict_order_is_the_runs_unless_source_order(work: Path) -> None:
    """The framework's run dumps the config and reads it back, which sorts every dict's keys:
    the ppl labels come in that order (and the reference picks the first label on a tie);
    ``--source-order`` keeps the file's order."""
    template = "{'C': 'Q: {question} C', 'A': 'Q: {question} A', 'B': 'Q: {question} B'}"
    (work / "labels_cfg.py").write_text(
        PPL_CFG.replace(f"template={PPL_TEMPLATE!r}", f"template={template}"), "utf-8"
    )
    run_order = records(ok(work, "render", "labels_cfg.py", "--data", "test.jsonl").stdout)
    assert list(run_order[0]["prompts"]) == ["A", "B", "C"]
    assert run_order[0]["prompts"]["C"] == "Q: " + ROWS[0]["question"] + " C"
    args = ("render", "labels_cfg.py", "--data", "test.jsonl", "--source-order")
    assert list(records(ok(work, *args).stdout)[0]["prompts"]) == ["C", "A", "B"]


ARROW_CASES = {
    "dict-keys": [{"m": {"a": 1}}, {"m": {"b": 2}}],
    "dict-numbers-and-none": [{"m": {"x": 1, "b": 1}}, {"m": {"a": 2, "x": 1.5}}, {"m": None}],
    "empty-dict": [{"m": {}}, {"m": {"b": 2}}],
    "list-of-dicts": [{"m": [{"a": 1}]}, {"m": [{"b": 2.5}, {"a": 3}]}],
    "nested": [{"m": {"n": {"a": 1}}}, {"m": {"n": {"b": [1, 2.5]}}}],
    "lists": [{"m": [1, 2]}, {"m": []}, {"m": None}],
    "numbers": [{"num": 10, "lst": [7]}, {"num": 1.5, "lst": [2.5]}],
    "strings": [{"s": "a", "t": None}, {"s": "b", "t": True}],
}


@pytest.mark.parametrize("case", list(ARROW_CASES))
def test_loaded_rows_are_typed_as_a_huggingface_dataset(case: str) -> None:
    """The frameworks' dataset classes hold their rows in a HuggingFace ``Dataset``
    (``Dataset.from_list``): a column of dicts is one struct of every key (missing ones
    ``None``, in the order the keys first appear), numbers of a column one type. The real
    OpenCompass and AISBench runs printed these values so."""
    datasets = pytest.importorskip("datasets", reason="datasets (the reference loader) missing")
    rows = ARROW_CASES[case]
    want = datasets.Dataset.from_list([dict(r) for r in rows]).to_list()
    got = cli.uniform_columns([dict(r) for r in rows])
    assert got == want
    assert repr(got) == repr(want)  # key order too


def test_loaded_rows_arrow_cannot_type_are_left_as_they_are() -> None:
    rows = [{"m": {"a": 1}}, {"m": {"a": "x"}}]
    assert cli.uniform_columns(rows) == rows


def test_csv_values_are_strings(work: Path) -> None:
    (work / "n.csv").write_text("question,A,B,answer\n1,2,3,A\n", "utf-8")
    csv_rec = records(ok(work, "render", "string_cfg.py", "--data", "n.csv").stdout)[0]
    assert csv_rec["prompt"] == "Q: 1\nA: "


def test_parquet(work: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed")
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed")
    pq.write_table(pa.Table.from_pylist(ROWS), work / "test.parquet")
    assert _render_data(work, "test.parquet") == _expected_plain(work)


def test_parquet_without_pyarrow(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (work / "test.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails
    with pytest.raises(cli.CliError, match="reading Parquet needs pyarrow"):
        cli.read_rows(str(work / "test.parquet"))


def test_invalid_parquet(work: Path) -> None:
    pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed")
    (work / "bad.parquet").write_bytes(b"not parquet at all")
    assert "bad.parquet: invalid Parquet file" in fails(
        work, "render", "string_cfg.py", "--data", "bad.parquet"
    )


# ---------------------------------------------------------------------------- errors


def test_malformed_json_line(work: Path) -> None:
    lines = [json.dumps(r) for r in ROWS]
    lines[2] = '{"question": "oops", '
    (work / "bad.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    err = fails(work, "render", "string_cfg.py", "--data", "bad.jsonl")
    assert err.startswith("error: bad.jsonl:3: invalid JSON: ")


def test_jsonl_line_that_is_not_an_object(work: Path) -> None:
    (work / "bad.jsonl").write_text('{"question": "a"}\n\n[1, 2]\n', "utf-8")
    err = fails(work, "render", "string_cfg.py", "--data", "bad.jsonl")
    assert err == "error: bad.jsonl:3: expected a JSON object per line, got an array"


def test_malformed_json_file(work: Path) -> None:
    (work / "bad.json").write_text('[\n{"question": "a"},\n{"question": }\n]', "utf-8")
    assert fails(work, "render", "string_cfg.py", "--data", "bad.json").startswith(
        "error: bad.json:3: invalid JSON: "
    )
    (work / "cols.json").write_text('{"question": ["a", "b"], "A": ["x"]}', "utf-8")
    assert "different lengths" in fails(work, "render", "string_cfg.py", "--data", "cols.json")
    (work / "num.json").write_text("3", "utf-8")
    assert "expected a list of rows" in fails(work, "render", "string_cfg.py", "--data", "num.json")


def test_json_beyond_python_limits_is_a_one_line_error(work: Path) -> None:
    """An integer literal past Python's int-string digit limit, or a meta template nested too
    deeply: the file (and line) named, no traceback."""
    big = "9" * 5000
    good = json.dumps(ROWS[0])
    (work / "big.jsonl").write_text(f'{good}\n{{"question": {big}}}\n', "utf-8")
    err = fails(work, "render", "string_cfg.py", "--data", "big.jsonl")
    assert err.startswith("error: big.jsonl:2: cannot read the JSON: ")
    (work / "big.json").write_text(f'[{{"question": {big}}}]', "utf-8")
    assert fails(work, "render", "string_cfg.py", "--data", "big.json").startswith(
        "error: big.json: cannot read the JSON: "
    )
    (work / "idx.json").write_text(f"[[0], [{big}]]", "utf-8")
    args = ["render", "dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    assert fails(work, *args, "--ice-indices", "idx.json").startswith(
        "error: idx.json: cannot read the JSON: "
    )
    (work / "big_meta.json").write_text(f'{{"round": [{{"role": "HUMAN", "begin": {big}}}]}}')
    assert fails(work, *args, "--meta-template", "big_meta.json").startswith(
        "error: big_meta.json: cannot read the JSON: "
    )
    (work / "deep.json").write_text("[" * 100_000 + "]" * 100_000, "utf-8")
    assert fails(work, *args, "--meta-template", "deep.json") == (
        "error: deep.json: invalid JSON: nested too deeply"
    )


def test_csv_fields_longer_than_the_csv_module_default(work: Path) -> None:
    """Python's csv module refuses fields over 131,072 characters by default; pandas and
    HuggingFace datasets read them."""
    long = "x" * 200_000
    (work / "long.csv").write_text(f"question,A,B,answer\n{long},1,2,A\n", "utf-8")
    rec = records(ok(work, "render", "string_cfg.py", "--data", "long.csv").stdout)[0]
    assert rec["prompt"] == f"Q: {long}\nA: "


def test_csv_row_with_wrong_field_count(work: Path) -> None:
    (work / "bad.csv").write_text("question,A,B,answer\nq,1,2,A\nq,1\n", "utf-8")
    err = fails(work, "render", "string_cfg.py", "--data", "bad.csv")
    assert err == "error: bad.csv:3: 2 fields, the header has 4"


def test_csv_header_naming_a_column_twice(work: Path) -> None:
    """csv.DictReader would keep the last of two same-named columns without a word."""
    (work / "dup.csv").write_text("question,A,A,B,answer\nq,1,2,3,A\n", "utf-8")
    err = fails(work, "render", "string_cfg.py", "--data", "dup.csv")
    assert err == "error: dup.csv:1: the header names a column more than once: 'A'"


def test_unknown_data_format(work: Path) -> None:
    (work / "test.txt").write_text("hello", "utf-8")
    assert "unknown data format '.txt'" in fails(
        work, "render", "string_cfg.py", "--data", "test.txt"
    )


def test_files_not_found(work: Path) -> None:
    assert fails(work, "render", "string_cfg.py", "--data", "nope.jsonl") == (
        "error: nope.jsonl: no such file"
    )
    assert (
        fails(work, "render", "nope.py", "--data", "test.jsonl") == "error: nope.py: no such file"
    )
    err = fails(work, "render", "string_cfg.py", "--data", "test.jsonl", "--model", "nope.py")
    assert err == "error: nope.py: no such file"
    err = fails(work, "render", "string_cfg.py", "--data", "test.jsonl", "--train", "nope.jsonl")
    assert err == "error: nope.jsonl: no such file"


def test_missing_column_warns_and_keeps_the_placeholder(work: Path) -> None:
    rows = [dict(r) for r in ROWS]
    del rows[1]["question"], rows[3]["question"]
    write_jsonl(work / "holes.jsonl", rows)
    args = ["render", "string_cfg.py", "--data", "holes.jsonl"]
    proc = ok(work, *args, "--rows-as-given")
    assert "warning: column 'question' missing in 2 rows (left as '{question}')" in proc.stderr
    recs = records(proc.stdout)
    assert recs[1]["prompt"] == "Q: {question}\nA: "
    assert recs[0]["prompt"] == f"Q: {ROWS[0]['question']}\nA: "
    # as loaded data (the default) the file is a table: the column is None in those rows
    loaded = ok(work, *args)
    assert "missing" not in loaded.stderr
    assert records(loaded.stdout)[1]["prompt"] == "Q: None\nA: "
    # a column no row has stays missing
    for r in rows:
        r.pop("question", None)
    write_jsonl(work / "holes.jsonl", rows)
    proc = ok(work, *args)
    assert "warning: column 'question' missing in 4 rows (left as '{question}')" in proc.stderr


def test_missing_column_strict_is_an_error_and_writes_nothing(work: Path) -> None:
    rows = [dict(r) for r in ROWS]
    del rows[2]["A"]  # a bad row in the middle
    write_jsonl(work / "holes.jsonl", rows)
    before = listing(work)
    args = ["render", "dialogue_cfg.py", "--data", "holes.jsonl", "--model", "model.py"]
    args.append("--rows-as-given")  # (as loaded data, the column would be None in that row)
    err = fails(work, *args, "--strict", "--out", "out.jsonl")
    assert "row 2" in err
    assert "'A'" in err
    assert listing(work) == before  # no output, no temporary file
    # an existing output file is left untouched
    (work / "out.jsonl").write_text("previous results\n", "utf-8")
    fails(work, *args, "--strict", "--out", "out.jsonl")
    assert (work / "out.jsonl").read_text("utf-8") == "previous results\n"
    assert listing(work) == before | {"out.jsonl"}


def test_unknown_role(work: Path) -> None:
    cfg = DIALOGUE_CFG.replace("'role': 'HUMAN'", "'role': 'USER'")
    (work / "roles.py").write_text(cfg, "utf-8")
    err = fails(work, "render", "roles.py", "--data", "test.jsonl", "--model", "model.py")
    assert "'USER'" in err
    assert "role" in err


def test_invalid_config(work: Path) -> None:
    (work / "broken.py").write_text("x = 1\ninfer_cfg = dict(\n", "utf-8")
    err = fails(work, "render", "broken.py", "--data", "test.jsonl")
    assert "broken.py" in err
    assert "SyntaxError" in err
    (work / "raises.py").write_text("x = 1\ny = 1 / 0\n", "utf-8")
    err = fails(work, "render", "raises.py", "--data", "test.jsonl")
    assert "raises.py:2: ZeroDivisionError" in err
    (work / "empty.py").write_text("x = 1\n", "utf-8")
    assert "no dataset config" in fails(work, "render", "empty.py", "--data", "test.jsonl")


def test_invalid_model_and_meta_template(work: Path) -> None:
    args = ["render", "string_cfg.py", "--data", "test.jsonl"]
    assert "either --model or --meta-template" in fails(
        work, *args, "--model", "model.py", "--meta-template", "model.py"
    )
    assert "no model config" in fails(work, *args, "--model", "string_cfg.py")
    (work / "bad.json").write_text("{", "utf-8")
    assert "bad.json:1: invalid JSON" in fails(work, *args, "--meta-template", "bad.json")
    (work / "list.json").write_text("[]", "utf-8")
    assert "must be a JSON object" in fails(work, *args, "--meta-template", "list.json")


def test_usage_errors(work: Path) -> None:
    proc = run(work, "render", "string_cfg.py")  # --data missing
    assert proc.returncode == 2
    assert "--data" in proc.stderr
    err = fails(work, "render", "string_cfg.py", "--data", "test.jsonl", "--max-seq-len", "10")
    assert "--tokenizer" in err
    err = fails(
        work, "render", "string_cfg.py", "--data", "test.jsonl", "--out", "no/such/out.jsonl"
    )
    assert "does not exist" in err


def test_dataset_selection(work: Path) -> None:
    both = STRING_CFG + PPL_CFG.replace(IMPORTS + READER, "")
    (work / "both.py").write_text(both, "utf-8")
    proc = ok(work, "render", "both.py", "--data", "test.jsonl")
    assert "has 2 datasets (string, ppl); using the first, string" in proc.stderr
    assert "prompt" in records(proc.stdout)[0]
    ppl = ok(work, "render", "both.py", "--data", "test.jsonl", "--dataset", "ppl")
    assert ppl.stderr == ""
    assert "prompts" in records(ppl.stdout)[0]
    assert ok(work, "render", "both.py", "--data", "test.jsonl", "--dataset", "1").stdout == (
        ppl.stdout
    )
    err = fails(work, "render", "both.py", "--data", "test.jsonl", "--dataset", "mmlu")
    assert "no such dataset" in err
    assert "[1] ppl" in err


def test_flavor_detection_and_override(work: Path) -> None:
    ais = DIALOGUE_CFG.replace("from opencompass.openicl", "from ais_bench.benchmark.openicl")
    (work / "ais.py").write_text(ais, "utf-8")
    args = ["--data", "test.jsonl", "--model", "model.py", "-n", "1"]
    assert "aisbench · gen mode" in ok(work, "show", "ais.py", *args).stdout
    assert "opencompass · gen mode" in ok(work, "show", "dialogue_cfg.py", *args).stdout
    out = ok(work, "show", "dialogue_cfg.py", *args, "--flavor", "aisbench").stdout
    assert "aisbench · gen mode" in out


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (OSError(28, "No space left on device"), "error: out.jsonl: cannot write: No space left"),
        (KeyboardInterrupt(), "Aborted"),
    ],
)
def test_atomic_output_on_failure_while_writing(
    work: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException, message: str
) -> None:
    """A failure (or Ctrl-C) after some lines were written leaves no partial output."""
    out = work / "out.jsonl"
    out.write_text("previous results\n", "utf-8")
    before = listing(work)
    real = cli._json_line
    written: list[bytes] = []

    def flaky(record: Any) -> bytes:
        if len(written) == 2:
            raise exc
        written.append(real(record))
        return written[-1]

    monkeypatch.setattr(cli, "_json_line", flaky)
    monkeypatch.chdir(work)
    result = CliRunner().invoke(
        cli.cli, ["render", "string_cfg.py", "--data", "test.jsonl", "--out", "out.jsonl"]
    )
    assert result.exit_code == 1
    assert message in result.output
    assert len(written) == 2
    assert out.read_text("utf-8") == "previous results\n"
    assert listing(work) == before


def _write_then_fail(target: Path) -> None:
    with cli.atomic_output(target) as f:
        f.write(b"b\n")
        raise RuntimeError("boom")


def test_atomic_output_context_manager(tmp_path: Path) -> None:
    target = tmp_path / "x.jsonl"
    with cli.atomic_output(target) as f:
        f.write(b"a\n")
        assert not target.exists()  # nothing visible before the end
    assert target.read_bytes() == b"a\n"
    with pytest.raises(RuntimeError, match="boom"):
        _write_then_fail(target)
    assert target.read_bytes() == b"a\n"
    assert listing(tmp_path) == {"x.jsonl"}


def test_sha256_of_a_lone_surrogate(work: Path) -> None:
    (work / "s.jsonl").write_text('{"question": "x\\ud800y", "answer": "A"}\n', "utf-8")
    rec = records(ok(work, "render", "string_cfg.py", "--data", "s.jsonl").stdout)[0]
    assert rec["prompt"] == "Q: x\ud800y\nA: "
    assert (
        rec["sha256"] == hashlib.sha256(rec["prompt"].encode("utf-8", "surrogatepass")).hexdigest()
    )


# ---------------------------------------------------------------------------- show, demo


def test_show_string_model(work: Path) -> None:
    proc = ok(
        work,
        "show",
        "dialogue_cfg.py",
        "--data",
        "test.jsonl",
        "--train",
        "train.jsonl",
        "--model",
        "model.py",
        "-n",
        "2",
    )
    out = proc.stdout
    assert "\x1b[" not in out  # no colour when stdout is not a terminal
    assert out.count("━━ row ") == 2
    assert "── in-context examples (k=2: [0, 2]) ──" in out
    assert "── end of examples ──" in out
    assert "<|im_start|>assistant⏎\n⟨generate⟩" in out
    # the examples block is exactly the two examples, starting on a line boundary
    start = out.index("── in-context examples")
    end = out.index("── end of examples ──")
    block = out[start:end].split("\n", 1)[1]
    assert block.startswith("<|im_start|>user\n1 + 1 = ?")
    assert block.endswith("<|im_start|>assistant\nB\n<|im_end|>\n")
    assert "Answer: <|im_end|>" in out


def test_show_api_messages_and_whitespace(work: Path) -> None:
    out = ok(
        work,
        "show",
        "dialogue_cfg.py",
        "--data",
        "test.jsonl",
        "--train",
        "train.jsonl",
        "--model",
        "api_model.py",
        "--api",
        "-n",
        "1",
    ).stdout
    assert "[SYSTEM] Answer the questions." in out
    assert "[HUMAN] 1 + 1 = ?" in out
    assert "[BOT] A⏎" in out
    assert "Answer:·" in out  # trailing space made visible
    assert out.index("── in-context examples") < out.index("[HUMAN] 1 + 1")
    assert out.index("── end of examples ──") < out.index("[HUMAN] What is 2 + 2?")
    assert out.rstrip().endswith("⟨generate⟩")


def test_show_ppl(work: Path) -> None:
    out = ok(
        work, "show", "ppl_cfg.py", "--data", "test.jsonl", "--model", "model.py", "-n", "1"
    ).stdout
    assert "── label 'A'" in out
    assert "── label 'B'" in out
    assert "⟨generate⟩" not in out


def test_show_token_counts(work: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "a": 1}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(work / "tokenizer.json"))
    out = ok(
        work,
        "show",
        "dialogue_cfg.py",
        "--data",
        "test.jsonl",
        "--train",
        "train.jsonl",
        "--model",
        "model.py",
        "-n",
        "1",
        "--tokenizer",
        "tokenizer.json",
    ).stdout
    counter = tok.encode
    full = records(
        ok(
            work,
            "render",
            "dialogue_cfg.py",
            "--data",
            "test.jsonl",
            "--train",
            "train.jsonl",
            "--model",
            "model.py",
            "--limit",
            "1",
        ).stdout
    )[0]["prompt"]
    assert f" · {len(counter(full).ids):,} tokens (" in out
    err = fails(work, "show", "string_cfg.py", "--data", "test.jsonl", "--tokenizer", "nope.json")
    assert err == "error: --tokenizer nope.json: no such file 'nope.json'"


def test_max_seq_len_trims_examples(work: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(work / "tokenizer.json"))
    args = ["render", "dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    args += ["--model", "model.py", "--limit", "1", "--tokenizer", "tokenizer.json"]
    full = records(ok(work, *args).stdout)[0]
    n = len(tok.encode(full["prompt"]).ids)
    trimmed = records(ok(work, *args, "--max-seq-len", str(n - 1)).stdout)[0]
    assert full["ice_indices"] == [0, 2]
    assert trimmed["ice_indices"] == [0]


def test_demo(work: Path) -> None:
    out = ok(work, "demo").stdout
    assert "⟨generate⟩" in out
    assert "── in-context examples (k=2: [0, 1]) ──" in out
    assert "[HUMAN]" in out
    assert "── label 'A'" in out
    assert "水的化学式是什么" in out
    assert "chat template chat_tokenizer_config.json" in out
    assert "<|im_start|>assistant⏎" in out
    assert "summary" in out


def test_demo_files_render(tmp_path: Path) -> None:
    demo = Path(cli.__file__).parent / "demo"
    args = ["--data", str(demo / "test.jsonl"), "--train", str(demo / "train.jsonl")]
    gen = records(
        ok(
            tmp_path,
            "render",
            str(demo / "mmlu_demo_gen.py"),
            *args,
            "--model",
            str(demo / "chatml_model.py"),
        ).stdout
    )
    assert len(gen) == 8
    assert all(r["ice_indices"] == [0, 1] for r in gen)
    ppl = records(ok(tmp_path, "render", str(demo / "mmlu_demo_ppl.py"), *args).stdout)
    assert list(ppl[0]["prompts"]) == ["A", "B", "C", "D"]


# ---------------------------------------------------------------------------- the reference


def _reference_dataset(reference: dict[str, Any], test: list[Any], train: list[Any]) -> Any:
    import _golden_ns

    refload = _golden_ns.import_refload()
    return refload.make_dataset(reference["oc"], train, test, ["question", "A", "B"], "answer")


def test_dialogue_matches_the_reference(work: Path, reference: dict[str, Any]) -> None:
    M = reference["oc"]
    ds = _reference_dataset(reference, ROWS, TRAIN)
    retriever = M.FixKRetriever(ds, fix_id_list=[0, 2])
    it = M.PromptTemplate(ICE_TEMPLATE)
    pt = M.PromptTemplate(PROMPT_TEMPLATE, ice_token="</E>")
    args = ["render", "dialogue_cfg.py", "--data", "test.jsonl", "--train", "train.jsonl"]
    for model, parser in (
        ("model.py", M.LMTemplateParser(CHATML)),
        ("api_model.py", M.APITemplateParser(API_META)),
    ):
        extra = ["--api"] if model == "api_model.py" else []
        recs = records(ok(work, *args, "--model", model, *extra).stdout)
        for i, idx in enumerate(retriever.retrieve()):
            ice = retriever.generate_ice(idx, ice_template=it)
            prompt = retriever.generate_prompt_for_generate_task(
                i, ice, ice_template=it, prompt_template=pt
            )
            expected = parser.parse_template(prompt, mode="gen")
            assert recs[i]["ice_indices"] == list(idx)
            assert recs[i]["prompt"] == (expected if isinstance(expected, str) else list(expected))


def test_ppl_matches_the_reference(work: Path, reference: dict[str, Any]) -> None:
    M = reference["oc"]
    ds = _reference_dataset(reference, ROWS, ROWS)
    retriever = M.ZeroRetriever(ds)
    pt = M.PromptTemplate(PPL_TEMPLATE)
    parser = M.LMTemplateParser(CHATML)
    recs = records(
        ok(work, "render", "ppl_cfg.py", "--data", "test.jsonl", "--model", "model.py").stdout
    )
    labels = retriever.get_labels(ice_template=None, prompt_template=pt)
    for i, idx in enumerate(retriever.retrieve()):
        ice = retriever.generate_ice(idx, ice_template=None)
        for label in labels:
            prompt = retriever.generate_label_prompt(
                i, ice, label, ice_template=None, prompt_template=pt
            )
            assert recs[i]["prompts"][label] == parser.parse_template(prompt, mode="ppl")


# ---------------------------------------------------------------------------- terminal output


def test_show_colours_only_when_asked(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)
    args = ["show", "dialogue_cfg.py", "--data", "test.jsonl", "--model", "model.py", "-n", "1"]
    coloured = CliRunner().invoke(cli.cli, args, color=True)
    assert coloured.exit_code == 0, coloured.output
    assert "\x1b[" in coloured.output
    plain = CliRunner().invoke(cli.cli, args)
    assert "\x1b[" not in plain.output
    assert "⟨generate⟩" in plain.output


def test_progress_shows_after_the_delay_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import time

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    with cli._Progress(delay=0.05) as progress:
        update = progress.phase("rendering", 10)
        update(5)
        time.sleep(0.3)
    text = err.getvalue()
    assert "rendering: " in text
    assert "5/10 rows" in text
    assert text.endswith("\r\x1b[K")  # the line is cleared at the end

    quiet = Tty()
    monkeypatch.setattr(sys, "stderr", quiet)
    with cli._Progress(delay=5) as progress:
        progress.phase("rendering", 10)(10)
    assert quiet.getvalue() == ""  # a short job shows nothing


def test_visible_whitespace() -> None:
    def visible(text: str, *, final: bool) -> str:
        return click.unstyle(cli._visible(text, final=final))

    assert visible("a \nb\t\n\n", final=True) == "a·\nb→⏎\n⏎\n"
    assert visible("x  ", final=False) == "x  "
    assert visible("x  ", final=True) == "x··"
    assert visible("x\r\u200b", final=True) == "x␍⟨U+200B⟩"


@pytest.mark.parametrize(
    ("full", "zero", "span"),
    [
        ("S\nE1\nE2\nQ\n", "S\nQ\n", (2, 8)),
        ("Q: a\nQ: b\n", "Q: b\n", (0, 5)),  # prefers the line start over the first difference
        ("abc", "abc", None),  # no examples
        ("abXcd", "abYcd", None),  # not a single insertion
    ],
)
def test_ice_span(full: str, zero: str, span: tuple[int, int] | None) -> None:
    assert cli._ice_span(full, zero, text=True) == span


ZERO_SHOT_CFG = """\
from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_retriever import ZeroRetriever
from opencompass.openicl.icl_inferencer import GenInferencer
reader_cfg = dict(input_columns=['q'], output_column='a')
human = dict(round=[dict(role='HUMAN', prompt='{q}')])
infer_cfg = dict(
    prompt_template=dict(type=PromptTemplate, template=human),
    retriever=dict(type=ZeroRetriever), inferencer=dict(type=GenInferencer))
zs_datasets = [dict(abbr='zs', reader_cfg=reader_cfg, infer_cfg=infer_cfg)]
"""


def _model_dir(path: Path, max_positions: int) -> Any:
    """A local model directory: a word-level tokenizer whose post-processor adds a BOS token,
    a chat template, and a config.json with ``max_position_embeddings``; returns the
    transformers tokenizer the reference's HuggingFace classes would load from it."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    path.mkdir()
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0, "<s>": 1}, "<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tk.add_special_tokens(["<s>"])
    tk.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    tk.save(str(path / "tokenizer.json"))
    config = {"chat_template": CHAT_JINJA, "bos_token": "<s>", "eos_token": "</s>"}
    (path / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": max_positions}))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(path / "tokenizer.json"), truncation_side="left"
    )


def _cut_by_reference(tokenizer: Any, text: str, limit: int, special: bool) -> bool:
    """Whether the reference's ``generate`` cuts ``text``: its tokenizer call
    (``truncation=True, max_length=limit``, truncation side left) keeps fewer tokens than the
    text has."""
    whole = tokenizer([text], add_special_tokens=special)["input_ids"][0]
    kept = tokenizer([text], truncation=True, max_length=limit, add_special_tokens=special)
    return len(kept["input_ids"][0]) < len(whole)


def test_prompts_the_model_class_cuts_when_it_tokenizes_are_noted(work: Path) -> None:
    """HuggingFacewithChatTemplate / HuggingFaceBaseModel tokenize the final text with
    truncation to max_seq_len (the config's, else the model's config.json) from the left: the
    prompts that are cut are named in a note, counted as the class counts (the chat template's
    text without special tokens; a base model's text with them); the output is unchanged."""
    (work / "zs_cfg.py").write_text(ZERO_SHOT_CFG, "utf-8")
    limit = 20
    hf = _model_dir(work / "hf", limit)
    words = (2, 30, 8, 20)  # a base model's text of 20 words is 21 tokens with its BOS
    rows = [{"q": " ".join(["w"] * n), "a": "x"} for n in words]
    write_jsonl(work / "zs.jsonl", rows)
    args = ["render", "zs_cfg.py", "--data", "zs.jsonl"]
    cls = "from opencompass.models import {0}\nmodels = [dict(type={0}, abbr='m', path='hf'{1})]\n"
    (work / "chat_m.py").write_text(cls.format("HuggingFacewithChatTemplate", ""), "utf-8")
    base = cls.format("HuggingFaceBaseModel", f", max_seq_len={limit}")
    (work / "base_m.py").write_text(base, "utf-8")
    # AISBench's classes of these names cut their input as OpenCompass's do
    ais = base.replace("from opencompass.models", "from ais_bench.benchmark.models")
    (work / "ais_base_m.py").write_text(ais, "utf-8")
    cases = [("chat_m.py", False), ("base_m.py", True), ("ais_base_m.py", True)]
    for model, special in cases:
        flavor = ["--flavor", "aisbench"] if model.startswith("ais") else []
        proc = ok(work, *args, *flavor, "--model", model, "--tokenizer", "hf/tokenizer.json")
        prompts = [r["prompt"] for r in records(proc.stdout)]
        cut = [i for i, p in enumerate(prompts) if _cut_by_reference(hf, p, limit, special)]
        assert 0 not in cut, (model, prompts)
        assert 1 in cut, (model, prompts)
        if special:
            assert 3 in cut  # by its BOS token
        name = "HuggingFacewithChatTemplate" if not special else "HuggingFaceBaseModel"
        many = f"{len(cut)} prompts are" if len(cut) > 1 else "1 prompt is"
        assert (
            f"note: {many} longer than {name}'s max_seq_len ({limit} tokens, counted by "
            f"--tokenizer; first: test row {cut[0]})"
        ) in proc.stderr
        assert "from the left" in proc.stderr
        # the model's own tokenizer (its path) counts as well; the prompts are the same
        own = ok(work, *args, *flavor, "--model", model)
        assert records(own.stdout) == records(proc.stdout)
        assert f"counted by the model's tokenizer (hf); first: test row {cut[0]}" in own.stderr
    # a prompt the tokenizer cannot take (a lone surrogate) is not counted, and breaks nothing
    odd = [*rows, {"q": " ".join(["w"] * 30) + " \ud800", "a": "x"}]
    (work / "odd.jsonl").write_text("".join(json.dumps(r) + "\n" for r in odd), "utf-8")
    proc = ok(work, "render", "zs_cfg.py", "--data", "odd.jsonl", "--model", "base_m.py")
    assert len(records(proc.stdout)) == len(odd)
    assert "note: 2 prompts are longer than HuggingFaceBaseModel's" in proc.stderr
    # prompts that fit, or no way to count: no note
    roomy = base.replace(f"max_seq_len={limit}", "max_seq_len=1000")
    (work / "roomy_m.py").write_text(roomy, "utf-8")
    assert "cuts its input" not in ok(work, *args, "--model", "roomy_m.py").stderr
    far = base.replace("path='hf'", "path='nowhere'")
    (work / "far_m.py").write_text(far, "utf-8")
    assert "cuts its input" not in ok(work, *args, "--model", "far_m.py").stderr
    # --max-seq-len is the limit when given; a limit that is not positive is not applied
    given = ok(work, *args, "--model", "roomy_m.py", "--tokenizer", "hf/tokenizer.json")
    assert "cuts its input" not in given.stderr
    given = ok(
        work,
        *args,
        "--model",
        "roomy_m.py",
        "--tokenizer",
        "hf/tokenizer.json",
        "--max-seq-len",
        str(limit),
        "--flavor",
        "opencompass",
    )
    assert f"HuggingFaceBaseModel's max_seq_len ({limit} tokens" in given.stderr
    negative = base.replace(f"max_seq_len={limit}", "max_seq_len=-5")
    (work / "neg_m.py").write_text(negative, "utf-8")
    assert "cuts its input" not in ok(work, *args, "--model", "neg_m.py").stderr
    # a path no file system can have, a config.json nested too deep: not on this machine
    (work / "long_m.py").write_text(base.replace("path='hf'", "path='x' * 3000"), "utf-8")
    assert "cuts its input" not in ok(work, *args, "--model", "long_m.py").stderr
    (work / "deep").mkdir()
    (work / "deep" / "config.json").write_text("[" * 100_000 + "]" * 100_000, "utf-8")
    deep = cls.format("HuggingFacewithChatTemplate", "").replace("path='hf'", "path='deep'")
    (work / "deep_m.py").write_text(deep, "utf-8")
    proc = ok(
        work,
        *args,
        "--model",
        "deep_m.py",
        "--chat-template",
        "hf",
        "--tokenizer",
        "hf/tokenizer.json",
    )
    assert "cuts its input" not in proc.stderr


def test_no_double_bos_warning_for_the_chat_model_classes(work: Path) -> None:
    """A tokenizer that adds its BOS token (``add_bos_token``) and a chat template that writes
    it: OpenCompass's chat-template classes still give their model one BOS (HuggingFace and
    vLLM encode the text without special tokens, LMDeploy strips it first), so rendering for
    them warns of no second one; the chat template alone (no model class) still warns."""
    transformers = pytest.importorskip("transformers")
    _model_dir(work / "hf", 4096)
    config = json.loads((work / "hf" / "tokenizer_config.json").read_text("utf-8"))
    config["add_bos_token"] = True
    (work / "hf" / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(work / "hf" / "tokenizer.json"))
    (work / "zs_cfg.py").write_text(ZERO_SHOT_CFG, "utf-8")
    write_jsonl(work / "zs.jsonl", [{"q": "hello there", "a": "x"}])
    args = ["render", "zs_cfg.py", "--data", "zs.jsonl", "--chat-template", "hf"]
    alone = ok(work, *args)
    assert "two BOS tokens" in alone.stderr
    cls = "from opencompass.models import {0}\nmodels = [dict(type={0}, abbr='m', path='hf')]\n"
    for name in ("HuggingFacewithChatTemplate", "VLLMwithChatTemplate"):
        (work / "m.py").write_text(cls.format(name), "utf-8")
        proc = ok(work, *args, "--model", "m.py")
        assert "BOS" not in proc.stderr, name
        (prompt,) = [r["prompt"] for r in records(proc.stdout)]
        assert prompt.startswith("<s>")
        # what the class encodes: the text without special tokens, one BOS
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        assert ids.count(tok.convert_tokens_to_ids("<s>")) == 1
    (work / "m.py").write_text(cls.format("TurboMindModelwithChatTemplate"), "utf-8")
    proc = ok(work, *args, "--model", "m.py")
    assert "BOS" not in proc.stderr
    (prompt,) = [r["prompt"] for r in records(proc.stdout)]
    assert not prompt.startswith("<s>")  # stripped, as the class strips it


AIS_DIALOGUE_CFG = """\
from ais_bench.benchmark.openicl.icl_prompt_template import PromptTemplate
from ais_bench.benchmark.openicl.icl_retriever import ZeroRetriever
from ais_bench.benchmark.openicl.icl_inferencer import GenInferencer
reader_cfg = dict(input_columns=['q'], output_column='a')
template = dict(begin=[dict(role='SYSTEM', fallback_role='HUMAN', prompt='Be brief.')],
                round=[dict(role='HUMAN', prompt='Q: {q}'), dict(role='BOT', prompt='{a}')])
infer_cfg = dict(prompt_template=dict(type=PromptTemplate, template=template),
                 retriever=dict(type=ZeroRetriever), inferencer=dict(type=GenInferencer))
d_datasets = [dict(abbr='d', reader_cfg=reader_cfg, infer_cfg=infer_cfg)]
"""


def test_request_messages_of_aisbench_chat_service_models(work: Path) -> None:
    """--request-messages: the model inputs as the request messages AISBench's chat service
    models send (``promptweave.chat_models.ais_request_messages``, checked against the
    reference class in test_model_prompting), sha256 over them; refused for other models; an
    input the class cannot send is an error naming the test row."""
    (work / "ais_cfg.py").write_text(AIS_DIALOGUE_CFG, "utf-8")
    write_jsonl(work / "q.jsonl", [{"q": "one?", "a": "1"}, {"q": "两?", "a": "2"}])
    chat = "from ais_bench.benchmark.models import VLLMCustomAPIChat\n"
    chat += "models = [dict(type=VLLMCustomAPIChat, abbr='c', path='', model='m'{})]\n"
    (work / "chat.py").write_text(chat.format(""), "utf-8")
    args = ["render", "ais_cfg.py", "--data", "q.jsonl", "--model", "chat.py"]
    parsed = records(ok(work, *args).stdout)
    requests = records(ok(work, *args, "--request-messages").stdout)
    assert parsed[1]["prompt"] == [
        {"role": "SYSTEM", "prompt": "Be brief."},
        {"role": "HUMAN", "prompt": "Q: 两?"},
    ]
    assert requests[1]["prompt"] == [
        {"content": "Be brief.", "role": "system"},
        {"content": "Q: 两?", "role": "user"},
    ]
    assert list(requests[1]["prompt"][0]) == ["content", "role"]  # the request's key order
    for rec in requests:
        assert rec["sha256"] == sha(json.dumps(rec["prompt"], ensure_ascii=False))
    # only for those models
    for other in ("model.py", "api_model.py"):
        err = fails(
            work,
            "render",
            "ais_cfg.py",
            "--data",
            "q.jsonl",
            "--model",
            other,
            "--request-messages",
        )
        assert "--request-messages is for AISBench's chat service models" in err
    # a meta template with a begin string: the class cannot send it (nor can the reference)
    meta = ", meta_template=dict(begin='<s>', round=[dict(role='HUMAN', api_role='HUMAN'), "
    meta += "dict(role='BOT', api_role='BOT', generate=True)])"
    (work / "chat_begin.py").write_text(chat.format(meta), "utf-8")
    args[-1] = "chat_begin.py"
    noted = ok(work, *args)  # the parser's output, with a note
    assert "note: 2 model inputs hold an item that is not a message (first: test row 0" in (
        noted.stderr
    )
    assert "not a message" not in ok(work, *args[:-1], "chat.py").stderr
    err = fails(work, *args, "--request-messages")
    assert "item 0 of the model input is '<s>', not a message" in err
    assert "test row 0" in err
    # with --chat-template the prompts are a local model's text: the conflict is named
    (work / "t.jinja").write_text(CHAT_JINJA, "utf-8")
    args[-1] = "chat.py"
    err = fails(work, *args, "--request-messages", "--chat-template", "t.jinja")
    assert "with --chat-template the prompts are a local model's final text" in err


def test_notes_on_options_and_data_that_do_nothing(work: Path) -> None:
    """No test rows is said (exit 0, nothing written); --infer-mode on a single-turn config is
    said; --version names the program."""
    (work / "none.jsonl").write_text("", "utf-8")
    proc = ok(work, "render", "string_cfg.py", "--data", "none.jsonl")
    assert proc.stdout == ""
    assert "no test rows to render" in proc.stderr
    proc = ok(work, "render", "string_cfg.py", "--data", "test.jsonl", "--infer-mode", "last")
    assert "--infer-mode last is for multi-turn configs" in proc.stderr
    assert records(proc.stdout)
    assert ok(work, "--version").stdout.startswith("promptweave ")
