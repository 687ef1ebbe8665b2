"""Run the rendering benchmarks (or read a pytest-benchmark JSON) and print speed-up ratios.

Usage::

    python benches/report.py                   # runs pytest benches --benchmark-only
    python benches/report.py --json out.json   # reads an existing --benchmark-json file
    python benches/report.py -- -k w2          # extra arguments after -- go to pytest

The headline numbers are ratios of medians measured on the same rows in the same process
(reference / ours, ours / format_map), not absolute times: the machine is shared and noisy.
By default the benchmarks are timed with ``time.process_time`` (this process's CPU time, which
other jobs on the machine do not inflate); ``--wall`` uses pytest-benchmark's wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent


def run_benchmarks(json_path: Path, pytest_args: list[str], wall: bool) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(BENCH_DIR),
        "--benchmark-only",
        f"--benchmark-json={json_path}",
        "-q",
    ]
    if not wall:
        # CPU time of this process: other jobs on a shared machine do not inflate it
        cmd.append("--benchmark-timer=time.process_time")
    cmd += pytest_args
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=REPO_ROOT, check=False).returncode
    if rc != 0:
        raise SystemExit(f"pytest failed (exit status {rc})")


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:8.3f} {unit}"
    return f"{seconds / 1e-9:8.1f} ns"


def _ratio(num: dict[str, Any] | None, den: dict[str, Any] | None) -> float | None:
    if not num or not den:
        return None
    return float(num["stats"]["median"]) / float(den["stats"]["median"])


def summarize(data: dict[str, Any]) -> str:
    groups: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for b in data.get("benchmarks", []):
        impl = b.get("extra_info", {}).get("impl", b["name"])
        groups[b.get("group") or "(no group)"][impl] = b

    lines: list[str] = []
    machine = data.get("machine_info", {})
    cpu = machine.get("cpu", {}).get("brand_raw", "?")
    timer = data.get("benchmarks", [{}])[0].get("options", {}).get("timer", "?")
    lines.append(
        f"python {machine.get('python_version', '?')}  cpu {cpu}  "
        f"({machine.get('cpu', {}).get('count', '?')} logical cores)  timer {timer}"
    )
    headline: list[str] = []
    for group in sorted(groups):
        impls = groups[group]
        lines.append("")
        lines.append(f"[{group}]")
        lines.append(
            f"  {'impl':<11}{'rows':>8}{'rounds':>8}{'median':>13}{'IQR':>13}{'per row':>13}"
        )
        for impl in sorted(impls, key=lambda k: (k != "reference", k != "format_map", k)):
            b = impls[impl]
            st = b["stats"]
            rows = int(b.get("extra_info", {}).get("rows") or 0)
            per_row = _fmt_time(st["median"] / rows) if rows else "-"
            lines.append(
                f"  {impl:<11}{rows:>8}{st['rounds']:>8}{_fmt_time(st['median']):>13}"
                f"{_fmt_time(st['iqr']):>13}{per_row:>13}"
            )
        ours = impls.get("ours")
        r = _ratio(impls.get("reference"), ours)
        if r is not None:
            msg = f"{group}: ours is {r:.1f}x faster than the reference (median/median)"
            lines.append(f"  => {msg}")
            headline.append(msg)
        r = _ratio(ours, impls.get("format_map"))
        if r is not None:
            msg = f"{group}: ours takes {r:.2f}x the time of a plain str.format_map loop"
            lines.append(f"  => {msg}")
            headline.append(msg)
    if headline:
        lines.append("")
        lines.append("Headline (ratios of medians, same rows, same process):")
        lines.extend(f"  {h}" for h in headline)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="read this --benchmark-json file instead of running")
    ap.add_argument("--save", type=Path, help="keep the JSON of the run at this path")
    ap.add_argument(
        "--wall",
        action="store_true",
        help="time with the wall clock (time.perf_counter) instead of process CPU time",
    )
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)

    if args.json is not None:
        data = json.loads(args.json.read_text())
    else:
        if os.environ.get("PROMPTWEAVE_BENCH_QUICK", "") not in ("", "0"):
            print("note: PROMPTWEAVE_BENCH_QUICK is set -- quick row counts, not the real sizes")
        with tempfile.TemporaryDirectory() as tmp:
            path = args.save or Path(tmp) / "bench.json"
            run_benchmarks(path, args.pytest_args, args.wall)
            data = json.loads(path.read_text())
    print()
    print(summarize(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
