"""pytest configuration for the benchmarks: the ``reference`` and ``ours`` fixtures.

* ``reference`` is the OpenCompass 0.5.4 namespace loaded by the spec's ``refload.py``
  (``<repo>/../shared/spec/golden`` or ``$PROMPTWEAVE_GOLDEN_DIR``).  Every benchmark compares
  against it, so when the reference wheels are not installed the benchmarks are skipped -- or
  fail, when ``PROMPTWEAVE_REQUIRE_REFERENCE=1`` (CI).
* ``refload`` is that module itself (``refload.make_dataset`` builds a real DatasetReader).
* ``ours`` is the ``promptweave`` package (OpenCompass flavour), seen through the same names.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REQUIRE_REFERENCE_ENV = "PROMPTWEAVE_REQUIRE_REFERENCE"
GOLDEN_DIR_ENV = "PROMPTWEAVE_GOLDEN_DIR"
GLIBC_DEFAULTS_ENV = "PROMPTWEAVE_BENCH_GLIBC_DEFAULTS"
REPO_ROOT = Path(__file__).resolve().parent.parent


def _keep_freed_memory() -> bool:
    """Fix glibc's thresholds for this process (``mallopt``): freed memory stays in the process
    and large blocks come from the heap, so that a round reuses what the previous one freed,
    whichever implementation runs it. With glibc's adaptive defaults, whether the top of the
    heap goes back to the system when a result is freed depends on where earlier allocations
    happen to sit: a round then faults its whole output in again (about 2 us per 4 KiB page
    here), which decided full-size medians by luck (ours and the floor build the same strings;
    the floor's input, made just before its rounds, sat above the hole its output reuses).
    ``PROMPTWEAVE_BENCH_GLIBC_DEFAULTS=1`` keeps the defaults. Returns whether it was done."""
    if os.environ.get(GLIBC_DEFAULTS_ENV, "") not in ("", "0"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    trim = mallopt(m_trim_threshold, 2**31 - 1)
    mmap = mallopt(m_mmap_threshold, 32 * 1024 * 1024)  # glibc's largest on 64-bit
    return bool(trim and mmap)


GLIBC_THRESHOLDS_FIXED = _keep_freed_memory()


def golden_dir() -> Path:
    """``$PROMPTWEAVE_GOLDEN_DIR`` or ``<repo>/../shared/spec/golden``."""
    env = os.environ.get(GOLDEN_DIR_ENV)
    return Path(env).resolve() if env else REPO_ROOT.parent / "shared" / "spec" / "golden"


def _import_refload() -> ModuleType:
    path = str(golden_dir())
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("refload")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect ``benches/bench_*.py`` (the project's ``python_files`` only matches ``test_*``).

    Paths named on the command line are collected by pytest itself, so they are left alone here.
    """
    if (
        file_path.suffix == ".py"
        and file_path.name.startswith("bench_")
        and not parent.session.isinitpath(file_path)
    ):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def refload() -> ModuleType:
    """The spec's ``refload`` module, with the OpenCompass namespace loaded."""
    try:
        module = _import_refload()
        module.opencompass()
        return module
    except (ImportError, AttributeError, OSError) as exc:
        reason = (
            f"reference implementation not importable (golden dir {golden_dir()}): "
            f"{type(exc).__name__}: {exc}"
        )
        if os.environ.get(REQUIRE_REFERENCE_ENV) == "1":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def reference(refload: ModuleType) -> Any:
    """OpenCompass 0.5.4's prompt-building classes (``M.PromptTemplate`` ...)."""
    return refload.opencompass()


@pytest.fixture(scope="session")
def ours() -> Any:
    """promptweave's OpenCompass flavour (same class names as the reference)."""
    import promptweave

    return promptweave
