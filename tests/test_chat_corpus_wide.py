"""Every template of the corpus (``tests/chat_corpus.py``: 786 real model chat templates)
against transformers' ``apply_chat_template(..., tokenize=False)``, on the conformance cases
(``chat_corpus.CASES``) and on the conversations of ``chat_corpus.EXTRA_CASES``: content given
as parts, reasoning fields, thinking off, documents, tool calls with JSON-string arguments,
delicate ``tojson`` output, non-ASCII text, empty, ``None`` and non-string content.

``test_chat_template.py`` checks a named selection of model families case by case; this test
checks the whole corpus in one pass and lists every disagreement (an equal string, the same
``raise_exception`` message, or an error of the matching kind counts as agreement).
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chat_corpus


@pytest.fixture(scope="module")
def corpus() -> dict[str, str]:
    return chat_corpus.corpus_or_skip()


@pytest.fixture(scope="module")
def ref_tok() -> Any:
    return chat_corpus.reference_tokenizer_or_skip()


def _disagreements(
    corpus: dict[str, str], ref_tok: Any, cases: dict[str, dict[str, Any]]
) -> tuple[dict[str, int], list[str]]:
    counts = {"ok": 0, "error": 0}
    bad: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' own deprecation noise is not ours
        for name in sorted(corpus):
            for case_name, case in cases.items():
                # each engine gets its own copy: neither may see what the other did to the input
                ref = chat_corpus.reference_outcome(ref_tok, corpus[name], copy.deepcopy(case))
                ours = chat_corpus.ours_outcome(corpus[name], copy.deepcopy(case))
                if chat_corpus.outcomes_agree(ref, ours):
                    counts["ok" if ref[0] == "ok" else "error"] += 1
                else:
                    bad.append(
                        f"{name} [{case_name}]: transformers {ref!r:.200} / ours {ours!r:.200}"
                    )
    return counts, bad


@pytest.mark.parametrize(
    ("cases", "rendered"),
    # most renders succeed; the rest are templates that refuse a conversation (no system
    # role, no tools, content parts, ...), which both engines must refuse alike
    [("CASES", 0.9), ("EXTRA_CASES", 0.7)],
)
def test_every_corpus_template_agrees_with_transformers(
    corpus: dict[str, str], ref_tok: Any, cases: str, rendered: float
) -> None:
    chosen: dict[str, dict[str, Any]] = getattr(chat_corpus, cases)
    counts, bad = _disagreements(corpus, ref_tok, chosen)
    assert not bad, f"{len(bad)} disagreements:\n" + "\n".join(bad[:20])
    assert counts["ok"] > rendered * len(corpus) * len(chosen), counts
