"""Where the per-row time goes: each stage of ``render_rows`` timed alone, per implementation.

Usage::

    python benches/breakdown.py            # W1 and W2 stage table (CPU time, us per row)
    python benches/breakdown.py --cprofile w2

Stages (each timed alone over the same rows as the benchmarks, best of ``--repeat``):

* ``ice items``      -- the ``generate_ice_item`` calls of the FixK ids (W2: 5 per row)
* ``ice join``       -- the retriever's join of those items (``ice += item + sep``, ``append``)
* ``generate_item``  -- the prompt template with the ICE spliced in
* ``parse_template`` -- the meta template walk (``mode='gen'``)
* ``render_rows``    -- the whole loop, per-row glue included

For promptweave, ``raw core`` times the Rust ``_core`` calls without the Python wrappers.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
import timeit
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_render as B  # noqa: E402
import conftest  # noqa: E402


def _per_row(fn: Any, rows: int, repeat: int) -> float:
    timer = timeit.Timer(fn, timer=time.process_time)
    return min(timer.repeat(number=1, repeat=repeat)) / rows * 1e6


def _join(items: list[Any], sep: str, eos: str) -> Any:
    ice: Any = []
    for item in items:
        ice += item + sep
    ice.append(eos)
    return ice


def stages(M: Any, wl: B.Workload, n: int, repeat: int) -> dict[str, float]:
    rows, train, kw = wl.rows(n), wl.train(), wl.setup(M)
    it, pt, parser = kw.get("ice_template"), kw["prompt_template"], kw["parser"]
    ids, out_col = kw.get("fix_id_list", ()), kw["output_column"]
    sep = eos = ""
    if it is not None and it.prompt_type != "meta":
        sep, eos = kw.get("ice_separator", "\n"), kw.get("ice_eos_token", "\n")
    items = [it.generate_ice_item(train[i], train[i][out_col]) for i in ids] if ids else []
    ice = _join(items, sep, eos) if items and isinstance(items[0], list) else ""
    prompts = [pt.generate_item(r, output_field=out_col, ice_field_replace_token=ice) for r in rows]
    res = {
        "render_rows": _per_row(lambda: B.render_rows(M, rows, train, **kw), n, repeat),
        "generate_item": _per_row(
            lambda: [
                pt.generate_item(r, output_field=out_col, ice_field_replace_token=ice) for r in rows
            ],
            n,
            repeat,
        ),
        "parse_template": _per_row(
            lambda: [parser.parse_template(p, mode="gen") for p in prompts], n, repeat
        ),
    }
    if ids:
        gen_ice = it.generate_ice_item
        res["ice items"] = _per_row(
            lambda: [[gen_ice(train[i], train[i][out_col]) for i in ids] for _ in rows], n, repeat
        )
        res["ice join"] = _per_row(lambda: [_join(items, sep, eos) for _ in rows], n, repeat)
    if getattr(M, "__name__", "") == "promptweave":
        raw = 0.0
        if ids and it._compiled is not None:
            f = it._compiled.ice_item
            raw += _per_row(
                lambda: [[f(train[i], train[i][out_col]) for i in ids] for _ in rows], n, repeat
            )
        if pt._compiled is not None:
            g = pt._compiled.item
            raw += _per_row(lambda: [g(r, out_col, "", ice) for r in rows], n, repeat)
        if parser._compiled is not None:
            h = parser._compiled.render_lm
            raw += _per_row(lambda: [h(p, True) for p in prompts], n, repeat)
        res["raw core"] = raw
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cprofile", choices=["w1", "w2"], help="cProfile ours on this workload")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)

    import promptweave

    if args.cprofile:
        wl = B.W1 if args.cprofile == "w1" else B.W2
        rows, train, kw = wl.rows(wl.subset), wl.train(), wl.setup(promptweave)
        B.render_rows(promptweave, rows, train, **kw)
        prof = cProfile.Profile()
        prof.runcall(B.render_rows, promptweave, rows, train, **kw)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        return 0

    reference = conftest._import_refload().opencompass()
    order = ["ice items", "ice join", "generate_item", "parse_template", "raw core", "render_rows"]
    for wl in (B.W1, B.W2):
        n = wl.subset
        ours = stages(promptweave, wl, n, args.repeat)
        ref = stages(reference, wl, n, args.repeat)
        print(f"\n{wl.name}: {n} rows, CPU us per row (best of {args.repeat})")
        print(f"  {'stage':<16}{'reference':>11}{'ours':>10}{'ratio':>8}")
        for stage in order:
            if stage not in ours:
                continue
            r = ref.get(stage)
            ratio = f"{r / ours[stage]:7.1f}x" if r else ""
            rtxt = f"{r:11.2f}" if r else f"{'':11}"
            print(f"  {stage:<16}{rtxt}{ours[stage]:10.2f}{ratio:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
