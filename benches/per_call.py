"""Per-call speed of the mirrored classes' public operations, ours against the reference.

Usage::

    python benches/per_call.py                 # both frameworks
    python benches/per_call.py --flavor ais    # AISBench 3.1 only

``bench_render.py`` times whole per-row pipelines; this script times each public operation a
config or a user's own loop calls on its own (``generate_item`` of each template kind,
``generate_ice_item``, ``generate_label_prompt_item``, both parsers' ``parse_template``,
``safe_format``, ``PromptList.format`` and ``str(PromptList)``) over the same 2,000 MMLU-shaped
rows (8 columns, one of them an ``int``), and prints microseconds per row (CPU time, best of
``--repeat``) and the ratio. Each operation's outputs are checked equal to the reference's first.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import conftest  # noqa: E402
from bench_render import CHATML_META as CHATML  # noqa: E402

API_META = {
    "round": [
        {"role": "HUMAN", "api_role": "HUMAN"},
        {"role": "BOT", "api_role": "BOT", "generate": True},
    ]
}
ICE = "Q: 1+1?\nAnswer: A\nQ: 2+2?\nAnswer: B\n"


def rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "question": f"Which of these is the sum of {i} and {i + 1}? " * 3,
            "A": str(2 * i + 1),
            "B": str(2 * i),
            "C": "neither",
            "D": "both",
            "answer": "A",
            "id": i,
            "subject": "arithmetic",
        }
        for i in range(n)
    ]


def operations(M: Any, data: list[dict[str, Any]]) -> dict[str, Callable[[], list[Any]]]:
    """``name -> a call over every row`` through implementation ``M``'s classes."""
    with_ice = M.PromptTemplate(
        "</E>{question}\nA. {A}\nB. {B}\nAnswer: {answer}", ice_token="</E>"
    )
    plain = M.PromptTemplate("{question}\nA. {A}\nB. {B}\nAnswer: {answer}\n")
    labels = M.PromptTemplate(
        {label: f"</E>{{question}}\nAnswer: {label}" for label in "ABCD"}, ice_token="</E>"
    )
    dialogue_labels = M.PromptTemplate(
        {
            label: {
                "begin": "</E>",
                "round": [
                    {"role": "HUMAN", "prompt": "{question}"},
                    {"role": "BOT", "prompt": f"Answer: {label}"},
                ],
            }
            for label in "AB"
        },
        ice_token="</E>",
    )
    dialogue = M.PromptTemplate(
        {
            "round": [
                {"role": "HUMAN", "prompt": "{question}\nA. {A}\nB. {B}"},
                {"role": "BOT", "prompt": "Answer: {answer}"},
            ]
        }
    )
    lm, api = M.LMTemplateParser(CHATML), M.APITemplateParser(API_META)
    prompts = [dialogue.generate_item(r, output_field="answer") for r in data]
    return {
        "string + ICE generate_item": lambda: [
            with_ice.generate_item(r, output_field="answer", ice_field_replace_token=ICE)
            for r in data
        ],
        "string generate_ice_item": lambda: [plain.generate_ice_item(r, r["answer"]) for r in data],
        "string labels x4 (PPL)": lambda: [
            labels.generate_label_prompt_item(r, ICE, label) for r in data for label in "ABCD"
        ],
        "dialogue labels x2 (PPL)": lambda: [
            dialogue_labels.generate_label_prompt_item(r, "", label) for r in data for label in "AB"
        ],
        "dialogue generate_item": lambda: [
            dialogue.generate_item(r, output_field="answer") for r in data
        ],
        "LM parse_template gen": lambda: [lm.parse_template(p, mode="gen") for p in prompts],
        "LM parse_template ppl": lambda: [lm.parse_template(p, mode="ppl") for p in prompts],
        "API parse_template gen": lambda: [api.parse_template(p, mode="gen") for p in prompts],
        "safe_format (8 kwargs)": lambda: [M.safe_format("{question} {A} {B}", **r) for r in data],
        "PromptList.format": lambda: [p.format(question="x") for p in prompts],
        "str(PromptList)": lambda: [str(p) for p in prompts],
    }


def best(fn: Callable[[], Any], repeat: int) -> float:
    return min(timeit.Timer(fn, timer=time.process_time).repeat(number=1, repeat=repeat))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flavor", choices=["oc", "ais", "both"], default="both")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)

    import promptweave.aisbench
    import promptweave.opencompass

    refload = conftest._import_refload()
    flavors = ["oc", "ais"] if args.flavor == "both" else [args.flavor]
    data = rows(args.rows)
    for flavor in flavors:
        ref_ns = refload.opencompass() if flavor == "oc" else refload.aisbench()
        ours_ns = promptweave.opencompass if flavor == "oc" else promptweave.aisbench
        ref_ops, our_ops = operations(ref_ns, data), operations(ours_ns, data)
        name = "OpenCompass 0.5.4" if flavor == "oc" else "AISBench 3.1"
        print(f"\n{name}: {args.rows} rows, CPU us per row (best of {args.repeat})")
        print(f"  {'operation':<28}{'reference':>11}{'ours':>10}{'ratio':>8}")
        for op, ref_fn in ref_ops.items():
            if repr(ref_fn()) != repr(our_ops[op]()):
                raise SystemExit(f"{name} {op}: ours differs from the reference")
            ref_t = best(ref_fn, max(2, args.repeat // 2)) / args.rows * 1e6
            our_t = best(our_ops[op], args.repeat) / args.rows * 1e6
            print(f"  {op:<28}{ref_t:>11.2f}{our_t:>10.2f}{ref_t / our_t:>7.1f}x")


if __name__ == "__main__":
    main()
