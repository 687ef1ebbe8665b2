"""Which path renders: the Rust core (default) or the pure-Python reference algorithm.

``FORCE_PYTHON`` makes every wrapper skip the Rust core (tests run the golden cases through both
paths; set it as a module attribute, e.g. with ``monkeypatch.setattr``: the Rust methods
installed on Python objects read the core's copy, which every assignment updates).
``fallbacks`` counts the calls the Rust core handed to the Python path, so tests can assert that
well-typed inputs never leave Rust.
"""

import os
import sys
import types

from promptweave import _core


class _BackendModule(types.ModuleType):
    """This module's class: an assignment to ``FORCE_PYTHON`` also reaches the Rust core."""

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name == "FORCE_PYTHON":
            _core._set_force_python(bool(value))


FORCE_PYTHON: bool = os.environ.get("PROMPTWEAVE_FORCE_PYTHON", "") == "1"
fallbacks: int = 0

sys.modules[__name__].__class__ = _BackendModule
_core._set_force_python(FORCE_PYTHON)


def note_fallback() -> None:
    """Record one call rendered by the pure-Python path."""
    global fallbacks
    fallbacks += 1
