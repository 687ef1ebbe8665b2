"""Tests of :mod:`promptweave.config` (loading OpenCompass / AISBench Python config files).

The corpus tests load real config files shipped in the reference wheels (OpenCompass 0.5.4,
AISBench 3.1) and compare the result DIFFERENTIALLY with what the reference loader,
``mmengine.Config.fromfile`` (mmengine-lite, installed next to them), gives for the same file.

mmengine is run with one environment normalisation: it decides which imports to turn into
``LazyObject``s with ``_is_builtin_module``, which only recognises the standard library when it
lives under the interpreter prefix. In a virtualenv on a pyenv/docker Python it does not, so
``import os`` becomes a ``LazyObject`` and every config calling ``os.path.join(...)`` fails under
mmengine. The reference is therefore run with the standard library (``sys.stdlib_module_names``)
recognised as builtin -- what mmengine does on a system Python.

When the wheels are not installed the corpus tests are skipped, or fail when
``PROMPTWEAVE_REQUIRE_REFERENCE=1``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _wheels import REQUIRE_REFERENCE, configs_root

from promptweave.config import (
    CallRef,
    Config,
    TypeRef,
    as_dumped,
    load_config,
    meta_template_of,
)
from promptweave.errors import ConfigError, PromptRenderError

PYTHON_DIR = Path(__file__).resolve().parent.parent / "python"

# Sampling of the corpus: sorted candidate files, every k-th (stable across runs).
OC_DATASET_STEP = 6  # ~1480 candidates -> ~246 files
AIS_DATASET_STEP = 4  # ~260 candidates -> ~65 files
MIN_OC_DATASET_FILES = 200
MIN_AIS_DATASET_FILES = 50
# Files excluded from the comparison (each with a counted reason) must stay rare.
MAX_EXCLUDED = 8


def _config_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


_DATASET_HINT = re.compile(r"infer_cfg|import[^\n]*_datasets")


def _dataset_candidates(root: Path) -> list[Path]:
    return [p for p in _config_files(root) if _DATASET_HINT.search(p.read_text("utf-8"))]


# --------------------------------------------------------------------------------------------
# The reference loader (mmengine) and normalisation of both sides
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _mmengine() -> Iterator[Callable[[Path], dict[str, Any]]]:
    try:
        from mmengine.config import Config as MMConfig  # type: ignore[import-untyped]
        from mmengine.config import config as mm_config
        from mmengine.config import utils as mm_utils
    except ImportError as exc:
        reason = f"mmengine (the reference config loader) is not importable: {exc}"
        if REQUIRE_REFERENCE:
            pytest.fail(reason)
        pytest.skip(reason)
    original = mm_utils._is_builtin_module

    def is_builtin(name: str) -> bool:
        return bool(original(name)) or name.split(".")[0] in sys.stdlib_module_names

    def load(path: Path) -> dict[str, Any]:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            cfg = MMConfig.fromfile(str(path), format_python_code=False)
            data: dict[str, Any] = cfg._to_lazy_dict(keep_imported=True)
            return data

    mm_utils._is_builtin_module = is_builtin
    mm_config._is_builtin_module = is_builtin
    try:
        yield load
    finally:
        mm_utils._is_builtin_module = original
        mm_config._is_builtin_module = original


def _is_lazy(value: object) -> bool:
    return type(value).__name__ in ("LazyObject", "LazyAttr")


def _norm(value: Any) -> Any:
    """Comparable form of a config value from either loader."""
    if _is_lazy(value):  # mmengine's to_dict() string form of an imported object
        return f"{value.module}.{value}"
    if isinstance(value, TypeRef):
        return str(value)
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in dict.items(value)}
    if type(value) in (list, tuple):
        return type(value)(_norm(v) for v in value)
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if callable(value):  # functions/classes the config defines: different objects per loader
        return ("callable", getattr(value, "__qualname__", type(value).__name__))
    return ("object", type(value).__name__)  # e.g. a file object left at top level


_DROPPED = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)


def _public(mm: dict[str, Any]) -> dict[str, Any]:
    """The part of an mmengine config promptweave returns: data, not imports."""
    return {
        k: v
        for k, v in mm.items()
        if not k.startswith("_") and not isinstance(v, _DROPPED) and not _is_lazy(v)
    }


def _datasets_under(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        found: list[dict[str, Any]] = [value]
        return found if "infer_cfg" in value and "reader_cfg" in value else []
    if isinstance(value, (list, tuple)):
        return [d for item in value for d in _datasets_under(item)]
    return []


_TEMPLATE_KEYS = ("type", "template", "ice_token", "sep_token")


def _prompt_parts(ds: dict[str, Any]) -> dict[str, Any]:
    """The prompt-relevant parts of a dataset config."""
    infer = ds["infer_cfg"]
    parts: dict[str, Any] = {"reader_cfg": ds["reader_cfg"]}
    for name in ("ice_template", "prompt_template"):
        if name in infer:
            tpl = infer[name]
            parts[name] = {k: tpl.get(k) for k in _TEMPLATE_KEYS}
    parts["retriever"] = infer.get("retriever")
    inferencer = infer.get("inferencer")
    parts["inferencer"] = inferencer.get("type") if isinstance(inferencer, dict) else inferencer
    normalized: dict[str, Any] = _norm(parts)
    return normalized


# --------------------------------------------------------------------------------------------
# Corpus run (once per framework)
# --------------------------------------------------------------------------------------------


@dataclass
class CorpusRun:
    files: list[Path]
    loaded: dict[Path, Config] = field(default_factory=dict)
    failures: dict[Path, str] = field(default_factory=dict)  # promptweave failed
    excluded: dict[Path, str] = field(default_factory=dict)  # not compared, with the reason
    full_equal: list[Path] = field(default_factory=list)
    full_diff: dict[Path, list[str]] = field(default_factory=dict)
    prompt_diff: dict[Path, list[str]] = field(default_factory=dict)
    selection_diff: dict[Path, str] = field(default_factory=dict)
    datasets_compared: int = 0

    def summary(self) -> str:
        reasons = Counter(r.split(":")[0] for r in self.excluded.values())
        return (
            f"{len(self.files)} files, {len(self.loaded)} loaded, "
            f"{len(self.full_equal)} identical to mmengine, {self.datasets_compared} datasets "
            f"compared, excluded {dict(reasons)}"
        )


def _run_corpus(files: list[Path]) -> CorpusRun:
    run = CorpusRun(files)
    with _mmengine() as mm_load:
        for path in files:
            try:
                mm: dict[str, Any] | None = mm_load(path)
                mm_error = ""
            except Exception as exc:
                mm, mm_error = None, f"{type(exc).__name__}: {str(exc)[:200]}"
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    ours = load_config(path)
            except ConfigError as exc:
                if mm is None and ": ImportError: " in str(exc):
                    # a config of the wheel that imports a base file/name that does not exist
                    run.excluded[path] = f"broken in the wheel: {exc} (mmengine: {mm_error})"
                else:
                    run.failures[path] = str(exc)
                continue
            run.loaded[path] = ours
            if mm is None:
                run.excluded[path] = f"fails under mmengine only ({mm_error})"
                continue
            mine_sel = [_norm(d) for d in ours.run_datasets()]
            theirs_sel = [_norm(d) for d in _reference_selection(mm)]
            if mine_sel != theirs_sel:
                run.selection_diff[path] = (
                    f"{[d.get('abbr') for d in mine_sel]} vs {[d.get('abbr') for d in theirs_sel]}"
                )
            mm_public = _public(mm)
            if set(mm_public) != set(ours):
                run.full_diff[path] = sorted(set(mm_public) ^ set(ours))
                continue
            bad = [k for k in ours if _norm(ours[k]) != _norm(mm_public[k])]
            if bad:
                run.full_diff[path] = bad
            else:
                run.full_equal.append(path)
            prompt_bad = []
            for key in ours:
                mine, theirs = _datasets_under(ours[key]), _datasets_under(mm_public[key])
                if len(mine) != len(theirs):
                    prompt_bad.append(f"{key}: {len(mine)} vs {len(theirs)} datasets")
                    continue
                for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
                    run.datasets_compared += 1
                    if _prompt_parts(a) != _prompt_parts(b):
                        prompt_bad.append(f"{key}[{i}]")
            if prompt_bad:
                run.prompt_diff[path] = prompt_bad
    return run


def _reference_selection(mm: dict[str, Any]) -> list[Any]:
    """The datasets OpenCompass/AISBench run from a config mmengine loaded: an evaluation
    config's ``cfg['datasets']``; for ``--datasets NAME``, ``for k in cfg.keys(): if
    k.endswith('_datasets'): datasets += cfg[k]`` (``opencompass/utils/run.py``,
    ``ais_bench/benchmark/cli/config_manager.py``) -- dataset configs only."""
    value = mm.get("datasets")
    if isinstance(value, (list, tuple)):
        picked = list(value)
    else:
        picked = [d for k in mm if k.endswith("_datasets") for d in mm[k]]
    return [d for d in picked if isinstance(d, dict) and "infer_cfg" in d and "reader_cfg" in d]


@functools.cache
def _oc_dataset_run() -> CorpusRun:
    root = configs_root("oc")
    files = _dataset_candidates(root / "datasets")[::OC_DATASET_STEP]
    # a collection made of absolute `from opencompass.configs... import` base imports
    files.append(root / "dataset_collections" / "chat_OC15.py")
    # every CLP (conditional log-probability) config: rare, so not left to the sampling
    files += [p for p in _config_files(root / "datasets") if "_clp" in p.name and p not in files]
    return _run_corpus(files)


@functools.cache
def _ais_dataset_run() -> CorpusRun:
    root = configs_root("ais")
    return _run_corpus(_dataset_candidates(root / "datasets")[::AIS_DATASET_STEP])


def _corpus(framework: str) -> CorpusRun:
    return _oc_dataset_run() if framework == "oc" else _ais_dataset_run()


FRAMEWORKS = ["oc", "ais"]
MIN_FILES = {"oc": MIN_OC_DATASET_FILES, "ais": MIN_AIS_DATASET_FILES}


def _listing(items: dict[Path, Any]) -> str:
    return "\n".join(f"  {p}: {v}" for p, v in list(items.items())[:20])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_corpus_loads(framework: str) -> None:
    run = _corpus(framework)
    assert not run.failures, f"load_config failed ({run.summary()}):\n{_listing(run.failures)}"
    assert len(run.loaded) >= MIN_FILES[framework], run.summary()
    no_datasets = {
        p: "no dataset with infer_cfg"
        for p, cfg in run.loaded.items()
        if not any("infer_cfg" in ds for ds in cfg.datasets())
    }
    assert not no_datasets, _listing(no_datasets)
    expected_flavor = "opencompass" if framework == "oc" else "aisbench"
    flavors = {p: cfg.flavor for p, cfg in run.loaded.items() if cfg.flavor != expected_flavor}
    assert not flavors, _listing(flavors)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_corpus_covers_template_kinds(framework: str) -> None:
    run = _corpus(framework)
    kinds: Counter[str] = Counter()
    for cfg in run.loaded.values():
        for ds in cfg.datasets():
            infer = ds["infer_cfg"]
            inferencer = str(infer.get("inferencer", {}).get("type", ""))
            kinds[inferencer.rpartition(".")[2]] += 1
            tpl = infer.get("prompt_template") or infer.get("ice_template") or {}
            template = tpl.get("template")
            if isinstance(template, dict) and "round" in template:
                kinds["chat-style (round)"] += 1
            elif isinstance(template, dict):
                kinds["label dict"] += 1
            elif isinstance(template, str):
                kinds["string"] += 1
            if "ice_template" in infer:
                kinds["ice_template"] += 1
    expected = ["GenInferencer", "chat-style (round)", "string"]
    if framework == "oc":
        expected += ["PPLInferencer", "CLPInferencer", "label dict", "ice_template"]
    missing = [k for k in expected if not kinds[k]]
    assert not missing, f"corpus sample lacks {missing}: {dict(kinds)}"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_corpus_matches_mmengine(framework: str) -> None:
    run = _corpus(framework)
    print(f"\n[{framework}] {run.summary()}")
    assert not run.prompt_diff, f"prompt parts differ from mmengine:\n{_listing(run.prompt_diff)}"
    assert not run.selection_diff, (
        f"the datasets the reference runs differ:\n{_listing(run.selection_diff)}"
    )
    assert not run.full_diff, f"configs differ from mmengine:\n{_listing(run.full_diff)}"
    assert run.datasets_compared >= len(run.full_equal)
    assert len(run.excluded) <= MAX_EXCLUDED, f"too many exclusions:\n{_listing(run.excluded)}"


def test_corpus_absolute_base_imports() -> None:
    """``chat_OC15`` pulls its datasets through ``from opencompass.configs... import``."""
    run = _oc_dataset_run()
    path = configs_root("oc") / "dataset_collections" / "chat_OC15.py"
    cfg = run.loaded[path]
    assert path in run.full_equal
    assert len(cfg["datasets"]) > 100
    assert cfg.datasets() == cfg["datasets"]  # the *_datasets lists hold the same dicts


# --------------------------------------------------------------------------------------------
# Model configs
# --------------------------------------------------------------------------------------------


def _model_files() -> list[Path]:
    models = configs_root("oc") / "models"
    files = _config_files(models)
    with_template = [p for p in files if "meta_template" in p.read_text("utf-8")]
    chat_engines = [p for p in files if re.match(r"(lmdeploy|vllm)_.*chat", p.name)]
    return with_template[::8] + chat_engines[::15]


def test_model_meta_templates_match_mmengine() -> None:
    files = _model_files()
    compared = with_template = 0
    with _mmengine() as mm_load:
        for path in files:
            ours = load_config(path)
            theirs = [m for m in mm_load(path).get("models", []) if isinstance(m, dict)]
            mine = ours.models()
            assert len(mine) == len(theirs), path
            for a, b in zip(mine, theirs, strict=True):
                assert _norm(meta_template_of(a)) == _norm(b.get("meta_template")), path
                assert _norm(a) == _norm(b), path
                compared += 1
                with_template += meta_template_of(a) is not None
    assert compared >= 10
    assert with_template >= 3


def test_model_config_stand_ins() -> None:
    path = configs_root("oc") / "models" / "aquila" / "hf_aquilachat2_7b.py"
    cfg = load_config(path)
    assert "_meta_template" not in cfg  # private names are not part of the config
    (model,) = cfg.models()
    assert model["type"] == TypeRef("opencompass.models", "HuggingFaceCausalLM")
    assert meta_template_of(model)["round"][1] == {
        "role": "BOT",
        "begin": "<|endofpiece|>",
        "end": "</s>",
        "generate": True,
    }
    assert meta_template_of({"abbr": "x"}) is None


# --------------------------------------------------------------------------------------------
# Without the reference packages importable
# --------------------------------------------------------------------------------------------

_BLOCKING_LOADER = """
import importlib.abc, json, sys
BLOCKED = ("opencompass", "ais_bench", "mmengine")

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"blocked: {name}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
for name in [m for m in sys.modules if m.split(".")[0] in BLOCKED]:
    del sys.modules[name]
from promptweave.config import load_config
out = {}
for path in sys.argv[1:]:
    cfg = load_config(path)
    ds = cfg.datasets()
    out[path] = [len(ds), str(ds[0]["infer_cfg"]["retriever"]["type"]), cfg.flavor]
leaked = [m for m in sys.modules if m.split(".")[0] in BLOCKED]
print(json.dumps({"out": out, "leaked": leaked}))
"""


def test_loads_without_reference_packages_importable() -> None:
    oc, ais = configs_root("oc"), configs_root("ais")
    files = [
        oc / "datasets" / "mmlu" / "mmlu_gen.py",
        oc / "dataset_collections" / "chat_OC15.py",  # absolute config imports
        ais / "datasets" / "gsm8k" / "gsm8k_gen.py",
    ]
    files = [f for f in files if f.is_file()]
    assert len(files) == 3
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKING_LOADER, *map(str, files)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["leaked"] == []
    for path in files:
        count, retriever, flavor = result["out"][str(path)]
        assert count >= 1
        assert retriever.endswith("Retriever")
        assert flavor == ("aisbench" if path.is_relative_to(ais) else "opencompass")


# --------------------------------------------------------------------------------------------
# Behaviour on small synthetic configs
# --------------------------------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


DATASET_PY = """
from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_retriever import FixKRetriever
from opencompass.openicl.icl_inferencer import GenInferencer
from opencompass.datasets import DemoDataset
from opencompass.utils.text_postprocessors import first_option_postprocess

demo_reader_cfg = dict(input_columns=['q'], output_column='a', train_split='dev')
demo_infer_cfg = dict(
    ice_template=dict(type=PromptTemplate, template='Q: {q}\\nA: {a}\\n'),
    prompt_template=dict(type=PromptTemplate, template='</E>Q: {q}\\nA:', ice_token='</E>'),
    retriever=dict(type=FixKRetriever, fix_id_list=[0, 1]),
    inferencer=dict(type=GenInferencer, max_out_len=16),
)
demo_datasets = [
    dict(
        abbr=f'demo_{i}',
        type=DemoDataset,
        reader_cfg=demo_reader_cfg,
        infer_cfg=demo_infer_cfg,
        eval_cfg=dict(pred_postprocessor=dict(type=first_option_postprocess, options='AB')),
    )
    for i in range(2)
]
"""


def test_relative_base_import_and_helpers(tmp_path: Path) -> None:
    _write(tmp_path / "configs" / "datasets" / "demo" / "demo_gen_abc.py", DATASET_PY)
    main = _write(
        tmp_path / "configs" / "eval_demo.py",
        """
        from mmengine.config import read_base
        with read_base():
            from .datasets.demo.demo_gen_abc import demo_datasets
        from opencompass.models import HuggingFaceCausalLM
        _tpl = dict(round=[dict(role='HUMAN', begin='<u>'), dict(role='BOT', generate=True)])
        datasets = [*demo_datasets]
        models = [dict(type=HuggingFaceCausalLM, abbr='m', meta_template=_tpl)]
        def helper():
            return 1
        class Local:
            pass
        """,
    )
    cfg = load_config(main)
    assert cfg.path == main
    assert cfg.flavor == "opencompass"
    assert set(cfg) == {"demo_datasets", "datasets", "models"}
    datasets = cfg.datasets()
    assert [d["abbr"] for d in datasets] == ["demo_0", "demo_1"]  # listed once each
    infer = datasets[0]["infer_cfg"]
    assert infer["retriever"] == {
        "type": TypeRef("opencompass.openicl.icl_retriever", "FixKRetriever"),
        "fix_id_list": [0, 1],
    }
    assert infer["prompt_template"]["ice_token"] == "</E>"
    assert type(infer) is dict
    assert type(cfg["datasets"]) is list
    post = datasets[0]["eval_cfg"]["pred_postprocessor"]["type"]
    assert str(post) == "opencompass.utils.text_postprocessors.first_option_postprocess"
    assert (post.module, post.name, post.qualname) == (
        "opencompass.utils.text_postprocessors",
        "first_option_postprocess",
        "first_option_postprocess",
    )
    (model,) = cfg.models()
    assert meta_template_of(model) == {
        "round": [{"role": "HUMAN", "begin": "<u>"}, {"role": "BOT", "generate": True}]
    }


def test_stand_ins_tolerate_config_time_usage(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "cfg.py",
        """
        import functools
        import opencompass.datasets as ds
        from opencompass.utils import first_option_postprocess, Registry
        from opencompass.openicl import BaseEvaluator
        from mmengine import read_base as rb

        label = f'{first_option_postprocess}|{Registry.build.__name__}'
        post = functools.partial(first_option_postprocess, options='ABCD')
        called = first_option_postprocess('A', options='AB')
        nested = dict(type=ds.sub.MMLUDataset, path=ds.MMLUDataset)
        class MyEvaluator(BaseEvaluator):
            pass
        evaluator = dict(type=MyEvaluator)
        same = first_option_postprocess == first_option_postprocess
        with rb():
            pass
        """,
    )
    cfg = load_config(path)
    assert cfg["label"] == "opencompass.utils.first_option_postprocess|build"
    target = TypeRef("opencompass.utils", "first_option_postprocess")
    assert cfg["post"] == CallRef(target, (), {"options": "ABCD"}, partial=True)
    assert cfg["called"] == CallRef(target, ("A",), {"options": "AB"})
    assert str(cfg["nested"]["type"]) == "opencompass.datasets.sub.MMLUDataset"
    assert cfg["nested"]["path"] == TypeRef("opencompass.datasets", "MMLUDataset")
    assert cfg["evaluator"]["type"].__name__ == "MyEvaluator"  # config-defined class kept
    assert cfg["same"] is True
    assert "MyEvaluator" not in cfg
    assert "functools" not in cfg
    assert "ds" not in cfg


def test_standard_and_third_party_imports_are_real(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    path = _write(
        tmp_path / "cfg.py",
        """
        import os
        import copy
        import itertools
        import numpy as np
        from os.path import join
        base = dict(a=[1, 2])
        clone = copy.deepcopy(base)
        clone['a'].append(3)
        pairs = list(itertools.product('ab', repeat=2))
        total = int(np.arange(4).sum())
        where = join(os.path.dirname(__file__), 'x')
        """,
    )
    cfg = load_config(path)
    assert cfg["base"] == {"a": [1, 2]}
    assert cfg["clone"] == {"a": [1, 2, 3]}
    assert cfg["pairs"][0] == ("a", "a")
    assert cfg["total"] == 6
    assert cfg["where"] == str(tmp_path / "x")


def test_no_module_or_finder_left_behind(tmp_path: Path) -> None:
    _write(tmp_path / "base.py", DATASET_PY)
    main = _write(
        tmp_path / "main.py",
        """
        from mmengine.config import read_base
        with read_base():
            from .base import demo_datasets
        import torch
        from ais_bench.benchmark.models import VLLMCustomAPIChat
        from some_package_that_does_not_exist.sub import thing
        models = [dict(type=VLLMCustomAPIChat, dtype=torch.bfloat16, extra=thing)]
        """,
    )
    before_modules, before_path = set(sys.modules), list(sys.meta_path)
    cfg = load_config(main)
    assert set(sys.modules) - before_modules == set()
    assert sys.meta_path == before_path
    assert cfg.flavor == "aisbench"
    (model,) = cfg["models"]
    assert str(model["dtype"]) == "torch.bfloat16"
    assert model["extra"] == TypeRef("some_package_that_does_not_exist.sub", "thing")


def test_base_values_are_copied_per_importer(tmp_path: Path) -> None:
    """As in mmengine, each importing file gets its own copy of a base config's values."""
    _write(tmp_path / "base.py", "shared = dict(n=1, inner=dict(k=[1]))\n")
    _write(
        tmp_path / "a.py",
        """
        from mmengine.config import read_base
        with read_base():
            from .base import shared
        shared.inner.k.append(2)      # attribute access, as on mmengine's ConfigDict
        shared.update(dict(inner=dict(extra=True)))   # ConfigDict.update merges recursively
        a_value = shared.deepcopy()
        """,
    )
    main = _write(
        tmp_path / "main.py",
        """
        from mmengine.config import read_base
        with read_base():
            from .a import a_value
            from .base import shared
        """,
    )
    cfg = load_config(main)
    assert cfg["a_value"] == {"n": 1, "inner": {"k": [1, 2], "extra": True}}
    assert cfg["shared"] == {"n": 1, "inner": {"k": [1]}}


def test_absolute_config_imports_resolve_without_install(tmp_path: Path) -> None:
    # a checkout-like tree: <root>/ais_bench/benchmark/configs/{datasets,...}
    configs = tmp_path / "ais_bench" / "benchmark" / "configs"
    _write(configs / "datasets" / "pw_demo" / "pw_demo_gen.py", DATASET_PY)
    main = _write(
        configs / "eval" / "eval_demo.py",
        """
        from mmengine.config import read_base
        with read_base():
            from ais_bench.benchmark.configs.datasets.pw_demo.pw_demo_gen import demo_datasets
        """,
    )
    assert len(load_config(main).datasets()) == 2
    # a user config outside any configs tree: resolved through search_path
    user = _write(
        tmp_path / "work" / "my_eval.py",
        """
        from mmengine.config import read_base
        with read_base():
            from ais_bench.benchmark.configs.datasets.pw_demo.pw_demo_gen import demo_datasets
        datasets = demo_datasets
        """,
    )
    with pytest.raises(ConfigError, match=r"my_eval\.py:3: ImportError: cannot find"):
        load_config(user, search_path=[tmp_path / "nowhere"])
    assert len(load_config(user, search_path=[tmp_path]).datasets()) == 2
    assert len(load_config(user, search_path=[configs]).datasets()) == 2


def test_flavor_defaults_to_opencompass(tmp_path: Path) -> None:
    assert load_config(_write(tmp_path / "plain.py", "x = 1\n")).flavor == "opencompass"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def test_error_syntax(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.py", "a = 1\nb = (\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert str(err).startswith(f"{path}:2: SyntaxError")
    assert (err.filename, err.lineno, err.path) == (str(path), 2, f"{path}:2")
    assert isinstance(err, PromptRenderError)
    assert isinstance(err, ValueError)
    assert isinstance(err.__cause__, SyntaxError)


def test_error_syntax_in_base(tmp_path: Path) -> None:
    base = _write(tmp_path / "base.py", "x = 1\ny = 2 +\n")
    main = _write(
        tmp_path / "main.py",
        "from mmengine.config import read_base\nwith read_base():\n    from .base import x\n",
    )
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(base))}:2: SyntaxError"):
        load_config(main)


def test_error_missing_relative_import(tmp_path: Path) -> None:
    main = _write(
        tmp_path / "main.py",
        """
        from mmengine.config import read_base

        with read_base():
            from .missing_base import x
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(main)
    message = str(info.value)
    assert message.startswith(f"{main}:4: ImportError")
    assert ".missing_base" in message
    assert str(tmp_path / "missing_base.py") in message
    assert info.value.lineno == 4


def test_error_missing_name_in_base(tmp_path: Path) -> None:
    _write(tmp_path / "base.py", "x = 1\n")
    main = _write(
        tmp_path / "main.py",
        "from mmengine.config import read_base\nwith read_base():\n    from .base import y\n",
    )
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(main))}:3: ImportError: .*'y'"):
        load_config(main)


def test_error_raised_inside_config(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "boom.py",
        """
        x = 1
        def f():
            raise RuntimeError('boom')
        y = f()
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    # the innermost line of the config: inside f()
    assert str(info.value) == f"{path}:3: RuntimeError: boom"
    assert isinstance(info.value.__cause__, RuntimeError)


def test_error_raised_inside_base_names_the_base(tmp_path: Path) -> None:
    base = _write(tmp_path / "base.py", "x = {}['missing']\n")
    main = _write(
        tmp_path / "main.py",
        "from mmengine.config import read_base\nwith read_base():\n    from .base import x\n",
    )
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(base))}:1: KeyError: 'missing'"):
        load_config(main)


def test_error_unreadable_and_circular(tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"
    with pytest.raises(ConfigError, match=re.escape(str(missing))):
        load_config(missing)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path)  # a directory
    _write(tmp_path / "a.py", "from .b import x\ny = 1\n")
    b = _write(tmp_path / "b.py", "from .a import y\nx = 1\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(b))}:1: ImportError: circular"):
        load_config(tmp_path / "a.py")


def test_installed_package_before_a_users_configs_copy(tmp_path: Path) -> None:
    """``from opencompass.configs.datasets... import`` is what the reference imports: the
    installed package, not an edited copy in an enclosing ``configs`` directory (which is used
    when the package is not installed, or when the directory is a copy of the package tree)."""
    stock = configs_root("oc") / "datasets" / "gsm8k" / "gsm8k_gen_1d7fe4.py"
    mine = tmp_path / "configs" / "datasets" / "gsm8k" / "gsm8k_gen_1d7fe4.py"
    mine.parent.mkdir(parents=True)
    mine.write_text(stock.read_text("utf-8").replace("Question:", "EDITED:"), "utf-8")
    (tmp_path / "configs" / "eval.py").write_text(
        "from mmengine.config import read_base\n"
        "with read_base():\n"
        "    from opencompass.configs.datasets.gsm8k.gsm8k_gen_1d7fe4 import gsm8k_datasets\n",
        "utf-8",
    )
    with _mmengine() as mm_load:
        want = _norm(mm_load(tmp_path / "configs" / "eval.py")["gsm8k_datasets"])
    got = load_config(tmp_path / "configs" / "eval.py")["gsm8k_datasets"]
    assert _norm(got) == want
    assert "EDITED:" not in repr(got)
    # the copy is what a search_path names explicitly
    edited = load_config(tmp_path / "configs" / "eval.py", search_path=[tmp_path / "configs"])
    assert "EDITED:" in repr(edited["gsm8k_datasets"])


def test_or_merges_base_dicts_as_configdict(tmp_path: Path) -> None:
    """``|`` and ``|=`` on a dict from a base config merge nested dicts (mmengine's
    ``ConfigDict`` is an addict ``Dict``), where a plain dict's ``|`` would replace them."""
    (tmp_path / "base.py").write_text(
        "base_datasets = [dict(abbr='b', reader_cfg=dict(input_columns=['q']),\n"
        "    infer_cfg=dict(prompt_template=dict(template='Q: {q}'), retriever=dict(k=1),\n"
        "                   inferencer=dict(max_out_len=5)))]\n",
        "utf-8",
    )
    (tmp_path / "main.py").write_text(
        "from mmengine.config import read_base\n"
        "with read_base():\n"
        "    from .base import base_datasets\n"
        "left = base_datasets[0] | dict(abbr='m', infer_cfg=dict(inferencer=dict(max_out_len=7)))\n"
        "right = dict(abbr='r', infer_cfg=dict(extra=1)) | base_datasets[0]\n"
        "untouched = base_datasets[0]['infer_cfg']['inferencer']['max_out_len']\n"
        "cd = base_datasets[0]\n"
        "cd |= dict(infer_cfg=dict(inferencer=dict(max_out_len=9)))\n"
        "after = base_datasets[0]\n",
        "utf-8",
    )
    with _mmengine() as mm_load:
        want = _public(mm_load(tmp_path / "main.py"))
    got = load_config(tmp_path / "main.py")
    for key in ("left", "right", "untouched", "after"):
        assert _norm(got[key]) == _norm(want[key]), key
    assert got["left"]["infer_cfg"]["prompt_template"] == {"template": "Q: {q}"}
    assert got["untouched"] == 5


def test_nul_byte_error_has_no_line_of_none(tmp_path: Path) -> None:
    (tmp_path / "nul.py").write_bytes(b"x = 1\n\x00y = 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nul.py")
    assert str(info.value).startswith(f"{tmp_path / 'nul.py'}: ")
    assert "None" not in str(info.value)


def _key_orders(value: Any) -> Any:
    """The value with every dict replaced by its list of (key, ...) pairs: compares orders."""
    if isinstance(value, dict):
        return [(k, _key_orders(v)) for k, v in dict.items(value)]
    if type(value) in (list, tuple):
        return [_key_orders(v) for v in value]
    return value


def test_as_dumped_is_the_order_after_the_runs_dump_and_reload(tmp_path: Path) -> None:
    """OpenCompass and AISBench dump the config and load it back before running it: every
    dict's keys come back sorted by ``str(key)``. ``as_dumped`` gives that order."""
    (tmp_path / "cfg.py").write_text(
        "labels = {'C': 'c {q}', 'A': 'a {q}', 'B': {'round': [dict(role='HUMAN', prompt='b')]}}\n"
        "nums = {2: 'two', 10: 'ten', 1: 'one'}\n"
        "messages = [dict(role='system', name='n', content='Be brief.'), ('x', dict(z=1, y=2))]\n"
        "meta = dict(round=[dict(role='HUMAN', begin='<u>', end='</u>')], begin='B')\n",
        "utf-8",
    )
    with _mmengine() as mm_load:
        from mmengine.config import Config as MMConfig

        MMConfig.fromfile(str(tmp_path / "cfg.py")).dump(str(tmp_path / "dumped.py"))
        reloaded = _public(mm_load(tmp_path / "dumped.py"))
    ours = load_config(tmp_path / "cfg.py")
    for key in ("labels", "nums", "messages", "meta"):
        assert _key_orders(as_dumped(ours[key])) == _key_orders(reloaded[key]), key
    assert list(as_dumped(ours["labels"])) == ["A", "B", "C"]
    assert list(ours["labels"]) == ["C", "A", "B"]  # the loaded config keeps the file's order
