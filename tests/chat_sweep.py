"""Render every corpus chat template (tests/chat_corpus.py) x the conversations of
``chat_corpus.CASES`` with transformers and with promptweave, and report the agreement.

Usage: ``python tests/chat_sweep.py [-v] [-k SUBSTRING] [--case NAME] [--extra]``.
Not a pytest module.
"""

from __future__ import annotations

import argparse
import collections
import difflib
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chat_corpus


def first_difference(a: str, b: str, context: int = 2) -> str:
    lines = list(
        difflib.unified_diff(
            a.splitlines(keepends=True),
            b.splitlines(keepends=True),
            "transformers",
            "promptweave",
            n=context,
        )
    )
    return "".join(lines[:16])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="show every mismatch")
    parser.add_argument("-k", default="", help="only templates whose name contains this")
    parser.add_argument("--case", action="append", help="only these cases")
    parser.add_argument(
        "--extra", action="store_true", help="also the conversations of chat_corpus.EXTRA_CASES"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    corpus = chat_corpus.load_corpus()
    tok = chat_corpus.reference_tokenizer()
    every_case = {**chat_corpus.CASES, **(chat_corpus.EXTRA_CASES if args.extra else {})}
    cases = {k: v for k, v in every_case.items() if not args.case or k in args.case}
    counts: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    bad_templates: dict[str, list[str]] = {}
    for name in sorted(corpus):
        if args.k not in name:
            continue
        source = corpus[name]
        for case_name, case in cases.items():
            ref = chat_corpus.reference_outcome(tok, source, case)
            ours = chat_corpus.ours_outcome(source, case)
            if chat_corpus.outcomes_agree(ref, ours):
                counts["match" if ref[0] == "ok" else "both-error"] += 1
                continue
            counts["mismatch"] += 1
            kinds[f"{ref[0]}->{ours[0]}"] += 1
            if name in bad_templates and not args.verbose:
                bad_templates[name].append(case_name)
                continue
            bad_templates.setdefault(name, []).append(case_name)
            print(f"=== {name} [{case_name}]: transformers {ref[0]}, promptweave {ours[0]}")
            if ref[0] == ours[0] == "ok":
                print(first_difference(ref[1], ours[1]))
            else:
                print(f"  transformers: {ref[1][:300]!r}")
                print(f"  promptweave:  {ours[1][:300]!r}")
    total = sum(counts.values())
    print()
    print(f"templates: {len([n for n in corpus if args.k in n])}, renders: {total}")
    print(
        f"match: {counts['match']}, both-error: {counts['both-error']}, "
        f"mismatch: {counts['mismatch']} in {len(bad_templates)} templates"
    )
    for kind, n in kinds.most_common():
        print(f"  {kind}: {n}")
    return 0 if not counts["mismatch"] else 1


if __name__ == "__main__":
    sys.exit(main())
