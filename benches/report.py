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
        if "memory" in impls:  # not a timing: summarised in the whole-dataset section
            continue
        if any(b.get("extra_info", {}).get("path") == "chat" for b in impls.values()):
            continue  # summarised in the chat-template section (CPU and wall clock)
        lines.append("")
        lines.append(f"[{group}]")
        lines.append(
            f"  {'impl':<11}{'rows':>8}{'rounds':>8}{'median':>13}{'IQR':>13}{'per row':>13}"
        )
        for impl in sorted(
            impls, key=lambda k: (k != "reference", k != "format_map", k != "floor", k)
        ):
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
        r = _ratio(ours, impls.get("floor"))
        if r is not None:
            msg = f"{group}: ours takes {r:.2f}x the time of decoding the same strings from UTF-8"
            lines.append(f"  => {msg}")
            headline.append(msg)
    if headline:
        lines.append("")
        lines.append("Headline (ratios of medians, same rows, same process):")
        lines.extend(f"  {h}" for h in headline)
    dataset = summarize_dataset(data)
    if dataset:
        lines.append("")
        lines.append(dataset)
    chat = summarize_chat(data)
    if chat:
        lines.append("")
        lines.append(chat)
    if any((b.get("extra_info") or {}).get("path") == "flows" for b in data.get("benchmarks", [])):
        if str(BENCH_DIR) not in sys.path:
            sys.path.insert(0, str(BENCH_DIR))
        import bench_flows

        lines.append("")
        lines.append(bench_flows.summarize(data))
    return "\n".join(lines)


# --------------------------------------------------------------------------- whole-dataset path

#: targets of the whole-dataset path (bench_dataset.py), reported as PASS/MISS, never asserted:
#: workload -> [(measure, comparison, bound)]; measures: "ref/ours" (median/median on the same
#: subset), "ours/floor" (full size), "ours/format_map" (full size), "peak/output" (memory)
DATASET_TARGETS: dict[str, list[tuple[str, str, float]]] = {
    "W1": [("ours/format_map", "<", 1.0)],
    "W2": [("ref/ours", ">=", 300.0), ("ours/floor", "<=", 2.5)],
    "W2-zh": [("ref/ours", ">=", 100.0)],
    "W3": [("ref/ours", ">=", 100.0)],
    "W4": [("ref/ours", ">=", 300.0), ("ours/floor", "<=", 2.5)],
    "memory": [("peak/output", "<=", 2.0)],
}
DATASET_ORDER = ["W1", "W2", "W2-zh", "W3", "W4", "W4-str"]


def _verdict(value: float | None, op: str, bound: float) -> str:
    if value is None:
        return "n/a"
    ok = {"<": value < bound, "<=": value <= bound, ">=": value >= bound}[op]
    return "PASS" if ok else "MISS"


def _x(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _glibc_note(data: dict[str, Any]) -> str:
    """How the benchmark process's allocator was set (benches/README, whole-dataset section)."""
    fixed = {
        info["glibc_fixed"]
        for info in (b.get("extra_info") or {} for b in data.get("benchmarks", []))
        if info.get("path") == "dataset" and "glibc_fixed" in info
    }
    if fixed == {True}:
        return "glibc: trim/mmap thresholds fixed, freed memory reused by every implementation"
    if fixed == {False}:
        return "glibc: adaptive defaults (full-size floors depend on the heap's layout)"
    return "glibc: thresholds not recorded"


def summarize_dataset(data: dict[str, Any]) -> str:
    """The whole-dataset section: per workload, speed-ups, floors, memory and the targets."""
    by: dict[str, dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
    memory: dict[str, Any] | None = None
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        if info.get("path") != "dataset":
            continue
        if info.get("impl") == "memory":
            memory = info
            continue
        size = "full" if str(b.get("group", "")).endswith("-full") else "subset"
        by[info.get("workload", "?")][(info.get("impl", "?"), size)] = b
    if not by and memory is None:
        return ""

    def med(b: dict[str, Any] | None) -> float | None:
        return float(b["stats"]["median"]) if b else None

    def per_row(b: dict[str, Any] | None) -> float | None:
        rows = int(b.get("extra_info", {}).get("rows") or 0) if b else 0
        return float(b["stats"]["median"]) / rows if b and rows else None

    def div(a: float | None, c: float | None) -> float | None:
        return a / c if a is not None and c else None

    lines = [
        "Whole-dataset path: DatasetRenderer.render (ours) vs OpenCompass row by row (reference)",
        "  ref/ours: medians on the same subset; ref/ours-full: reference per row (subset) /",
        "  ours per row (full size); floor: [b.decode() for b in utf8] of the same strings;",
        "  format_map: W1's str.format_map loop. Targets are reported, not asserted.",
        "  " + _glibc_note(data),
        "",
        f"  {'workload':<9}{'rows':>13}{'ref/row':>11}{'ours/row':>11}{'full/row':>11}"
        f"{'ref/ours':>10}{'ref/full':>10}{'/floor':>8}{'/floor-f':>9}{'/fmap-f':>9}",
    ]
    verdicts: list[str] = []
    names = [w for w in DATASET_ORDER if w in by] + sorted(set(by) - set(DATASET_ORDER))
    for w in names:
        g = by[w]
        ref, ours, full = (
            g.get(("reference", "subset")),
            g.get(("ours", "subset")),
            g.get(("ours", "full")),
        )
        rows_s = int(ours["extra_info"]["rows"]) if ours else 0
        rows_f = int(full["extra_info"]["rows"]) if full else 0
        m = {
            "ref/ours": div(med(ref), med(ours)),
            "ref/ours-full": div(per_row(ref), per_row(full)),
            "ours/floor-subset": div(med(ours), med(g.get(("floor", "subset")))),
            "ours/floor": div(med(full), med(g.get(("floor", "full")))),
            "ours/format_map": div(med(full), med(g.get(("format_map", "full")))),
        }
        pr = [per_row(ref), per_row(ours), per_row(full)]
        lines.append(
            f"  {w:<9}{f'{rows_s}/{rows_f}':>13}"
            + "".join(f"{_fmt_time(x) if x else '-':>11}" for x in pr)
            + f"{_x(m['ref/ours']):>10}{_x(m['ref/ours-full']):>10}"
            f"{_x(m['ours/floor-subset'], 2):>8}{_x(m['ours/floor'], 2):>9}"
            f"{_x(m['ours/format_map'], 2):>9}"
        )
        for measure, op, bound in DATASET_TARGETS.get(w, []):
            v = m[measure]
            verdicts.append(
                f"  {w:<7}{measure:<16}{_x(v, 2):>10}  target {op} {bound:g}x  "
                f"{_verdict(v, op, bound)}"
            )
    if memory is not None:
        ratio = float(memory["ratio"])
        lines.append("")
        mib = 2.0**20
        lines += [
            "",
            f"  memory (W2, {memory['rows']} rows, {memory.get('threads', '?')} threads, fresh "
            f"subprocess, {memory['method']}):",
            f"    peak additional RSS {memory['peak_add_bytes'] / mib:.1f} MiB vs output strings "
            f"{memory['output_bytes'] / mib:.1f} MiB (sys.getsizeof; UTF-8 "
            f"{memory['output_utf8_bytes'] / mib:.1f} MiB) = {ratio:.2f}x",
            f"    retained after render {memory['retained_add_kib'] / 1024:.1f} MiB; sampled "
            f"VmRSS peak {memory['sampled_peak_add_kib'] / 1024:.1f} MiB",
        ]
        for measure, op, bound in DATASET_TARGETS["memory"]:
            verdicts.append(
                f"  {'memory':<7}{measure:<16}{_x(ratio, 2):>10}  target {op} {bound:g}x  "
                f"{_verdict(ratio, op, bound)}"
            )
    if verdicts:
        lines.append("")
        lines.append("  Targets:")
        lines.extend(verdicts)
    return "\n".join(lines)


# --------------------------------------------------------------------------- chat templates

#: targets of the chat-template benchmarks (bench_chat.py), reported as PASS/MISS, never
#: asserted: (engine, bound) -- engine's median / ours-batch's median >= bound, per template
CHAT_TARGETS: list[tuple[str, float]] = [("transformers", 20.0), ("minijinja-py", 3.0)]
CHAT_BASE = "ours-batch"
CHAT_2T = "ours-batch-2t"
CHAT_ORDER = [
    "ours-batch",
    "ours-batch-2t",
    "ours-loop",
    "transformers",
    "transformers-batch",
    "jinja2",
    "minijinja-py",
    "floor",
]


def summarize_chat(data: dict[str, Any]) -> str:
    """The chat-template section: per template and engine, CPU-time and wall-clock medians per
    conversation, each engine's ratio to ``ours-batch`` on both clocks, and the targets."""
    by: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        if info.get("path") == "chat":
            by[info.get("workload", "?")][info.get("impl", "?")] = b
    if not by:
        return ""

    def clock(b: dict[str, Any] | None, which: str) -> float | None:
        # recorded by the test itself whatever pytest-benchmark's timer was
        v = b.get("extra_info", {}).get(f"{which}_median") if b else None
        return float(v) if v is not None else None

    def div(a: float | None, c: float | None) -> float | None:
        return a / c if a is not None and c else None

    lines = [
        "Chat templates: ChatTemplate (ours) vs transformers' apply_chat_template, jinja2 and",
        "  minijinja-py on the same conversations, add_generation_prompt=True. Medians per",
        "  conversation: cpu = process CPU time (all threads), wall = wall clock; ratio = the",
        f"  engine's median / {CHAT_BASE}'s median (> 1: ours is faster). The batch paths render",
        "  on `threads` threads with the interpreter released; CPU time adds up those threads.",
    ]
    verdicts: list[str] = []
    floors: list[str] = []
    for w in sorted(by):
        g = by[w]
        base = g.get(CHAT_BASE)
        lines += [
            "",
            f"  [{w}]",
            f"  {'impl':<20}{'convs':>7}{'rounds':>7}{'threads':>8}{'cpu/conv':>12}"
            f"{'IQR/conv':>12}{'wall/conv':>12}{'cpu ratio':>11}{'wall ratio':>11}",
        ]
        names = [i for i in CHAT_ORDER if i in g] + sorted(set(g) - set(CHAT_ORDER))
        for impl in names:
            b = g[impl]
            info = b.get("extra_info", {})
            n = int(info.get("rows") or 0) or 1
            cpu, wall = clock(b, "cpu"), clock(b, "wall")
            iqr = float(b["stats"]["iqr"])
            lines.append(
                f"  {impl:<20}{n:>7}{b['stats']['rounds']:>7}{info.get('threads', '?'):>8}"
                f"{_fmt_time(cpu / n) if cpu else '-':>12}{_fmt_time(iqr / n):>12}"
                f"{_fmt_time(wall / n) if wall else '-':>12}"
                f"{_x(div(cpu, clock(base, 'cpu'))):>11}{_x(div(wall, clock(base, 'wall'))):>11}"
            )
        for engine, bound in CHAT_TARGETS:
            # the one-thread batch on both clocks; the pipelined batch on the wall clock (its
            # CPU time adds up two threads: what it buys is time to the result)
            for ours, which in ((CHAT_BASE, "cpu"), (CHAT_BASE, "wall"), (CHAT_2T, "wall")):
                if ours not in g:
                    continue
                v = div(clock(g.get(engine), which), clock(g.get(ours), which))
                label = f"{engine}/{ours} ({which})"
                verdicts.append(
                    f"  {w:<7}{label:<36}{_x(v, 2):>9}"
                    f"  target >= {bound:g}x  {_verdict(v, '>=', bound)}"
                )
        for engine in (CHAT_BASE, "transformers", "minijinja-py"):
            v = div(clock(g.get(engine), "cpu"), clock(g.get("floor"), "cpu"))
            if v is not None:
                floors.append(f"  {w:<7}{engine + '/floor (cpu)':<36}{_x(v, 2):>9}")
    lines.append("")
    lines.append(
        "  Targets (one thread on both clocks; the pipelined 2-thread batch on the wall clock,"
    )
    lines.append("  which needs the second core free):")
    lines.extend(verdicts)
    if floors:
        lines.append("")
        lines.append(
            "  Against the floor (the same str objects built from ready UTF-8): an engine's"
        )
        lines.append(
            "  median / the floor's; transformers/floor is the most any engine could reach"
        )
        lines.append("  against transformers here.")
        lines.extend(floors)
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
