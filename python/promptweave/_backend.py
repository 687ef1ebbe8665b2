"""Which path renders: the Rust core (default) or the pure-Python reference algorithm.

``FORCE_PYTHON`` makes every wrapper skip the Rust core (tests run the golden cases through both
paths). ``fallbacks`` counts the calls the Rust core handed to the Python path, so tests can
assert that well-typed inputs never leave Rust.
"""

import os

FORCE_PYTHON: bool = os.environ.get("PROMPTWEAVE_FORCE_PYTHON", "") == "1"
fallbacks: int = 0


def note_fallback() -> None:
    """Record one call rendered by the pure-Python path."""
    global fallbacks
    fallbacks += 1
