"""Where ``DatasetRenderer.render`` spends its time, per workload of ``bench_dataset.py``.

Usage::

    python benches/breakdown_dataset.py                 # every workload, full size
    python benches/breakdown_dataset.py -w W2 -w W1     # some workloads
    python benches/breakdown_dataset.py --rows 1000     # another size
    python benches/breakdown_dataset.py --cprofile W1   # cProfile of render() (Python side)

Columns (CPU time of the process -- both rendering threads count -- per row, median of
``--repeat`` runs, us; ``wall`` is the wall clock of ``render``):

* ``render``     -- ``renderer.render(test, train)``, the whole call, as the benchmark times it
* ``no-gc``      -- the same with the cyclic garbage collector disabled
* ``wrapper``    -- ``render`` minus the ``_core.render_dataset`` call: row normalisation,
  ``Dataset``, retrieval, column checks, label lookup, post-processing (``PromptList``, dicts)
* ``core``       -- the ``_core.render_dataset`` call alone (same arguments), default threads
* ``core-1t``    -- the same with one thread
* ``extract``    -- ``_core.render_dataset`` of a constant one-character template over the same
  test rows: reading the rows into Rust (``str()`` of every cell) plus the per-row minimum
* ``str``        -- creating the output ``str`` objects from their UTF-8 bytes (the floor,
  ``[b.decode() for b in utf8]``), fresh allocations each run, as ``render`` has
* ``rust``       -- ``core-1t - extract - str``: the rendering proper, single-threaded
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_dataset as D  # noqa: E402


class _CoreSpy:
    """Stands in for ``promptweave._core`` inside ``promptweave.dataset``: records the
    arguments of ``render_dataset`` and the CPU time spent in it."""

    def __init__(self, core: Any) -> None:
        self._core = core
        self.args: tuple[Any, ...] = ()
        self.cpu = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)

    def render_dataset(self, *args: Any) -> Any:
        self.args = args
        t = time.process_time()
        try:
            return self._core.render_dataset(*args)
        finally:
            self.cpu += time.process_time() - t


def _median_cpu(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
        del out
    return statistics.median(times)


def _median_wall(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        del out
    return statistics.median(times)


def breakdown(wl: D.DatasetWorkload, n: int, repeat: int) -> dict[str, float]:
    from promptweave import _core, dataset

    rows, train = wl.rows(n), wl.train()
    renderer = wl.renderer()
    render = lambda: renderer.render(rows, train)  # noqa: E731
    render()  # warm-up (also fills the UTF-8 caches of non-ASCII cells, as in the benchmark)
    res: dict[str, float] = {}
    res["render"] = _median_cpu(render, repeat)
    res["wall"] = _median_wall(render, repeat)
    gc.disable()
    try:
        res["no-gc"] = _median_cpu(render, repeat)
    finally:
        gc.enable()

    spy = _CoreSpy(_core)
    dataset._core = spy  # type: ignore[attr-defined]
    try:
        walls = []
        for _ in range(repeat):
            spy.cpu = 0.0
            t = time.process_time()
            out = render()
            walls.append((time.process_time() - t) - spy.cpu)
            del out
        res["wrapper"] = statistics.median(walls)
    finally:
        dataset._core = _core  # type: ignore[attr-defined]
    args = list(spy.args)
    core = _core.render_dataset
    res["core"] = _median_cpu(lambda: core(*args), repeat)
    args1 = [*args[:-1], 1]
    res["core-1t"] = _median_cpu(lambda: core(*args1), repeat)

    # a constant template over the same test rows: row extraction + per-row minimum
    from promptweave import PromptTemplate

    const = PromptTemplate("x")._compiled
    assert const is not None
    n_rows = len(rows)
    extract_args = [const, None, [], "", "", None, "", None, False, False, rows, [], None, None]
    # ppl_label_objects, remain_sep, prompt_list, threads
    extract_args += [None, False, None, 1]
    empty: list[list[int]] = [[] for _ in range(n_rows)]
    extract_args[12] = empty
    res["extract"] = _median_cpu(lambda: core(*extract_args), repeat)

    result = renderer.render(rows, train).prompts
    utf8 = [s.encode() for s in D.flat_strings(result) if isinstance(s, str)]
    if wl.api:  # messages: the prompt strings of every message
        utf8 = [m["prompt"].encode() for pl in result for m in pl if isinstance(m, dict)]
    del result
    res["str"] = _median_cpu(lambda: D.decode_all(utf8), repeat)
    res["rust"] = res["core-1t"] - res["extract"] - res["str"]
    return {k: v / n * 1e6 for k, v in res.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [w.name for w in D.WORKLOADS]
    ap.add_argument("-w", "--workload", action="append", choices=names)
    ap.add_argument("--rows", type=int, help="rows per workload (default: its full size)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--cprofile", choices=names, help="cProfile render() on this workload")
    args = ap.parse_args(argv)
    by_name = {w.name: w for w in D.WORKLOADS}

    if args.cprofile:
        wl = by_name[args.cprofile]
        n = args.rows or wl.full
        rows, train, renderer = wl.rows(n), wl.train(), wl.renderer()
        renderer.render(rows, train)
        prof = cProfile.Profile()
        prof.runcall(renderer.render, rows, train)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        return 0

    cols = ["render", "wall", "no-gc", "wrapper", "core", "core-1t", "extract", "str", "rust"]
    print(f"CPU us per row, median of {args.repeat} (wall: wall clock of render)")
    print(f"  {'workload':<9}{'rows':>8}" + "".join(f"{c:>9}" for c in cols))
    for name in args.workload or names:
        wl = by_name[name]
        n = args.rows or wl.full
        r = breakdown(wl, n, args.repeat)
        print(f"  {name:<9}{n:>8}" + "".join(f"{r[c]:9.2f}" for c in cols), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
