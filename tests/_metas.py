"""Model meta templates shared by several test modules.

``CHATML`` (Qwen-style: user / assistant rounds, a reserved system role, in the shape of the
OpenCompass model configs' ChatML meta template) is the one the benchmarks render with
(``benches/bench_render.py``), taken from there so that it is written once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_BENCHES = Path(__file__).resolve().parent.parent / "benches"
if str(_BENCHES) not in sys.path:
    sys.path.insert(0, str(_BENCHES))

import bench_render  # noqa: E402

CHATML: dict[str, Any] = bench_render.CHATML_META
