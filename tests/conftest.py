"""Shared pytest configuration: hypothesis profiles and the ``reference`` fixture.

* ``HYPOTHESIS_PROFILE=fast|slow`` (default ``fast``) selects the hypothesis profile.
* ``reference`` is ``{'oc': ..., 'ais': ...}``, the reference framework namespaces loaded by the
  spec's ``refload.py`` (``<repo>/../shared/spec/golden`` or ``$PROMPTWEAVE_GOLDEN_DIR``).  When
  the reference wheels are not installed, tests using it are skipped -- or fail, when
  ``PROMPTWEAVE_REQUIRE_REFERENCE=1`` (CI).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:  # helper modules (no tests/__init__.py, importlib mode)
    sys.path.insert(0, str(TESTS_DIR))

import _golden_ns  # noqa: E402

REQUIRE_REFERENCE_ENV = "PROMPTWEAVE_REQUIRE_REFERENCE"

try:
    from hypothesis import settings
except ImportError:  # hypothesis-based tests will fail on their own import
    pass
else:
    settings.register_profile("fast", max_examples=50, deadline=None)
    settings.register_profile("slow", max_examples=1000, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(scope="session")
def reference() -> dict[str, Any]:
    """The reference implementations, ``{'oc': OpenCompass 0.5.4, 'ais': AISBench 3.1}``."""
    try:
        refload = _golden_ns.import_refload()
        impls = {"oc": refload.opencompass(), "ais": refload.aisbench()}
    except (ImportError, AttributeError, OSError) as exc:
        reason = (
            f"reference implementations not importable (golden dir {_golden_ns.golden_dir()}): "
            f"{type(exc).__name__}: {exc}"
        )
        if os.environ.get(REQUIRE_REFERENCE_ENV) == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return impls


@pytest.fixture
def quiet_reference_logs() -> Iterator[None]:
    """The reference retrievers log every construction at INFO level: silenced."""
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


@pytest.fixture(scope="session")
def ref_tok() -> Any:
    """transformers' tokenizer for reference chat-template renders (see tests/chat_corpus.py)."""
    import chat_corpus

    return chat_corpus.reference_tokenizer_or_skip()
