"""Where the reference wheels' config trees are (OpenCompass 0.5.4, AISBench 3.1).

Tests that need a wheel's configs call :func:`configs_root`: it skips the test when the wheel
is not installed -- or fails it, when ``PROMPTWEAVE_REQUIRE_REFERENCE=1`` (CI).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REQUIRE_REFERENCE = os.environ.get("PROMPTWEAVE_REQUIRE_REFERENCE") == "1"


def package_dir(name: str) -> Path | None:
    """The directory of the installed package ``name`` (``None`` when it is not installed)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def configs_root(fw: str) -> Path:
    """The config tree of the OpenCompass (``'oc'``) or AISBench (``'ais'``) wheel."""
    if fw == "oc":
        pkg, sub, what = package_dir("opencompass"), ("configs",), "opencompass 0.5.4"
    else:
        pkg, sub, what = package_dir("ais_bench"), ("benchmark", "configs"), "ais_bench 3.1"
    path = pkg.joinpath(*sub) if pkg is not None else None
    if path is None or not path.is_dir():
        reason = f"{what} is not installed (reference wheel needed)"
        if REQUIRE_REFERENCE:
            pytest.fail(reason)
        pytest.skip(reason)
    return path
