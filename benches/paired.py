"""Paired speed-ups: promptweave and the reference timed in alternation, in one process.

Usage::

    python benches/paired.py                      # every workload, 9 rounds
    python benches/paired.py W2-row RAW --rounds 15
    python benches/paired.py --json paired.json   # also save the per-round figures

The pytest-benchmark groups (``report.py``) time each implementation in its own block of
rounds, one after the other: on a shared machine whose speed drifts by tens of percent within a
minute, the two medians can come from different conditions, and the ratio moves with them (the
same code gave W2 row by row 14.5x in one whole run and 20x in another).  Here every round runs
``ours, reference, ours`` back to back on the same rows, and the round's ratio is the
reference's time over the mean of the two ``ours`` times around it (a linear drift cancels).
Each side of a round times ``ours`` several times (about 50 ms in all, at least 3) after an
untimed call and takes the median: warm, as in the benchmark groups' back-to-back rounds, not
in the caches and heap the reference's round just left (which made ours up to a third slower),
and not decided by one scheduling hiccup in a millisecond-long call.
The result is the median of the round ratios, with their spread; the medians of each side are
printed too.  CPU time (``time.process_time``); each call's result is freed after its timer
stops (as pytest-benchmark does); the cyclic collector runs as usual.

Before timing, each workload checks that ours equals the reference on its rows, and that ours
never left the Rust core.  The workloads and their targets are those of the benchmark groups:

* ``W1-row`` / ``W2-row`` -- ``bench_render.render_rows`` (the GenInferencer loop through the
  mirrored classes) on 10,000 / 1,000 rows; targets 8x / 20x (issue 2);
* ``W2-row-configdict`` -- W2 row by row with every template dict a ``ConfigDict``, as a config
  loaded by ``mmengine.Config`` inside an OpenCompass run holds them (the items keep that class);
  the target shown is W2's;
* ``W2-dataset`` -- ``DatasetRenderer.render`` against the same reference loop (1,000 rows);
  target 300x (issue 2);
* ``MM`` / ``RAW`` -- ``bench_flows``: AISBench ``MMPromptTemplate`` (10,000 rows) and OpenCompass
  ``RawPromptTemplate`` 5-shot (2,000 rows) through ``DatasetRenderer`` against the reference
  classes row by row; target 50x (issue 4);
* ``chat-chatml`` / ``chat-llama3`` -- ``ChatTemplate.render_many`` (one thread) against
  transformers' ``apply_chat_template`` per conversation (2,000 conversations); target 20x, and
  against the ``minijinja`` package (``chat-*-minijinja``), target 3x (issue 5);
* ``MM-floor`` / ``RAW-floor`` -- no renderer: the flow's output unmarshalled from bytes, the
  ceiling of any implementation's ratio on this machine (``_floor_pair``).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import conftest  # noqa: E402  (glibc thresholds fixed as in the benchmark runs)

Call = Callable[[], Any]


@dataclass
class Pair:
    """A workload: ``ours`` and ``ref`` render the same ``rows`` rows; ``check`` compares."""

    name: str
    rows: int
    target: float
    ours: Call
    ref: Call
    check: Callable[[Any, Any], None]
    #: ``ours`` is no renderer but the cheapest way to make the output: the ratio is a ceiling
    floor: bool = False


def _render_pairs(which: str) -> Pair:
    import bench_dataset as D
    import bench_render as B

    import promptweave

    R = conftest._import_refload().opencompass()
    wl = B.W1 if which == "W1-row" else B.W2
    n = wl.subset
    rows, train = wl.rows(n), wl.train()
    kw_ours, kw_ref = wl.setup(promptweave), wl.setup(R)
    if which == "W2-row-configdict":
        kw_ours, kw_ref = _configdict_setup(promptweave), _configdict_setup(R)

    def check(got: Any, want: Any) -> None:
        B.check_outputs(got, want, which, lambda g, w: bool(g == w))

    if which == "W2-dataset":
        dwl = D.W2
        rows, train = dwl.rows(dwl.subset), dwl.train()
        renderer = dwl.renderer()
        renderer.render(rows[:1], train)  # the renderer's first-use analysis is not a row
        return Pair(
            which,
            n,
            300.0,
            # (the whole RenderResult is returned: freed after the timer, as pytest-benchmark
            # frees it)
            lambda: renderer.render(rows, train),
            lambda: dwl.reference(R, rows),
            lambda g, w: D.check(g.prompts, w, which),
        )
    return Pair(
        which,
        n,
        8.0 if which == "W1-row" else 20.0,
        lambda: B.render_rows(promptweave, rows, train, **kw_ours),
        lambda: B.render_rows(R, rows, train, **kw_ref),
        check,
    )


def _configdict_setup(M: Any) -> dict[str, Any]:
    """W2's templates and meta template as a config loaded with ``mmengine.Config`` holds them:
    every dict a ``ConfigDict`` (what a template gets inside an OpenCompass run)."""
    import bench_render as B
    from mmengine.config import ConfigDict

    def cfg(x: Any) -> Any:
        if isinstance(x, dict):
            return ConfigDict({k: cfg(v) for k, v in x.items()})
        if isinstance(x, list):
            return [cfg(v) for v in x]
        return x

    return B._w2_setup(M, dicts=cfg)


def _flow_pair(which: str) -> Pair:
    import bench_flows as F

    refload = conftest._import_refload()
    refs = {"oc": refload.opencompass(), "ais": refload.aisbench(), "refload": refload}
    wl = F.MM if which == "MM" else F.RAW
    n = wl.subset
    rows, train = wl.rows(n), wl.train()
    renderer = wl.renderer()
    renderer.render(rows[:1], train)
    loop = wl.reference_loop(refs)
    return Pair(
        which,
        n,
        F.TARGET,
        lambda: renderer.render(rows, train),
        lambda: loop(rows),
        lambda g, w: F.check(g.prompts, w, which),
    )


def _floor_pair(which: str) -> Pair:
    """``MM-floor`` / ``RAW-floor``: the flow's output objects unmarshalled from bytes, against
    the reference. ``marshal.loads`` is CPython's cheapest way to make a given tree of lists,
    dicts and strs (a C loop, strings copied without decoding, a string shared in the tree made
    once), so its ratio is the ceiling for any implementation that returns these objects, on
    this machine: the memory they take is new to the process each round (its page faults
    included), as for a renderer, and the cyclic collector is paused as the renderer pauses it."""
    import marshal

    import bench_render as B

    from promptweave.dataset import _collector_paused

    flow = _flow_pair(which.removesuffix("-floor"))
    want = flow.ref()
    # plain lists and dicts (marshal takes no subclass), equal to the rendered prompts
    blob = marshal.dumps(
        [[dict(m) for m in p] if isinstance(p, list) else p for p in flow.ours().prompts]
    )

    def check(got: Any, want: Any) -> None:
        # equal values (the containers are plain lists and dicts)
        B.check_outputs(got, want, which, lambda g, w: bool(g == w))

    def floor() -> Any:
        # with the cyclic collector handled as the renderer handles it during a batch
        with _collector_paused(flow.rows):
            return marshal.loads(blob)

    check(floor(), want)
    return Pair(which, flow.rows, flow.target, floor, flow.ref, check, floor=True)


def _chat_pair(which: str) -> Pair:
    import bench_chat as C

    parts = which.split("-")  # chat-<template>[-minijinja]
    wl = C.CHATML if parts[1] == "chatml" else C.LLAMA3
    n = 2_000
    convs = C.conversations(n)
    ours = C.ours_batch(wl)
    other = C.minijinja_loop(wl) if len(parts) > 2 else C.transformers_loop(wl)
    return Pair(
        which,
        n,
        3.0 if len(parts) > 2 else 20.0,
        lambda: ours(convs),
        lambda: other(convs),
        lambda g, w: C.check(g, w, which),
    )


FACTORIES: dict[str, Callable[[str], Pair]] = {
    "W1-row": _render_pairs,
    "W2-row": _render_pairs,
    "W2-row-configdict": _render_pairs,
    "W2-dataset": _render_pairs,
    "MM": _flow_pair,
    "RAW": _flow_pair,
    "MM-floor": _floor_pair,
    "RAW-floor": _floor_pair,
    "chat-chatml": _chat_pair,
    "chat-llama3": _chat_pair,
    "chat-chatml-minijinja": _chat_pair,
    "chat-llama3-minijinja": _chat_pair,
}


def _timed(fn: Call) -> float:
    t0 = time.process_time()
    out = fn()
    t = time.process_time() - t0
    del out  # freed after the timer stops
    return t


def measure(pair: Pair, rounds: int) -> dict[str, Any]:
    """Check, warm up, then ``rounds`` rounds of ``ours, ref, ours``."""
    from promptweave import _backend

    pair.check(pair.ours(), pair.ref())
    fallbacks = _backend.fallbacks
    # ours is tens to hundreds of times faster: each side of a round times it `reps` times
    # (about 50 ms in all, at least 3) and takes the median, so that one scheduling hiccup in a
    # millisecond-long call does not decide the round
    estimate = min(_timed(pair.ours) for _ in range(3))
    reps = max(3, min(25, int(0.05 / max(estimate, 1e-6))))

    def ours_side() -> float:
        # an untimed call first: measured warm, as pytest-benchmark's back-to-back rounds
        # measure it, not in the caches and heap the reference just left
        pair.ours()
        return statistics.median(_timed(pair.ours) for _ in range(reps))

    ours_t: list[float] = []
    ref_t: list[float] = []
    ratios: list[float] = []
    for _ in range(rounds):
        a = ours_side()
        r = _timed(pair.ref)
        b = ours_side()
        ours_t += [a, b]
        ref_t.append(r)
        ratios.append(r / ((a + b) / 2))
    assert _backend.fallbacks == fallbacks, f"{pair.name}: ours left the Rust core"
    gc.collect()
    return {
        "workload": pair.name,
        "rows": pair.rows,
        "target": pair.target,
        "ours_us_per_row": [t / pair.rows * 1e6 for t in ours_t],
        "ref_us_per_row": [t / pair.rows * 1e6 for t in ref_t],
        "ratios": ratios,
        "floor": pair.floor,
    }


def summary_line(res: dict[str, Any]) -> str:
    ratios = sorted(res["ratios"])
    med = statistics.median(ratios)
    if res.get("floor"):
        reach = "reachable" if med >= res["target"] else "UNREACHABLE here"
        verdict = f"ceiling: {reach}"
    else:
        verdict = "PASS" if med >= res["target"] else "MISS"
    return (
        f"{res['workload']:<22}{res['rows']:>7}"
        f"{statistics.median(res['ref_us_per_row']):>11.2f}"
        f"{statistics.median(res['ours_us_per_row']):>10.3f}"
        f"{med:>9.1f}x   {ratios[0]:.1f}-{ratios[-1]:.1f}x"
        f"   >= {res['target']:g}x {verdict}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD", help=", ".join(FACTORIES))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json", type=Path, help="save every round's figures here")
    args = ap.parse_args(argv)
    names = args.workloads or list(FACTORIES)
    unknown = [n for n in names if n not in FACTORIES]
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(FACTORIES)}")
    print(f"paired rounds (ours, reference, ours) x {args.rounds}; CPU us per row, medians")
    print(f"{'workload':<22}{'rows':>7}{'reference':>11}{'ours':>10}{'ratio':>10}   range")
    results = []
    for name in names:
        res = measure(FACTORIES[name](name), args.rounds)
        results.append(res)
        print(summary_line(res), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
