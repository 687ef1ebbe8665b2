"""Property test of the whole-dataset job against the reference pipeline on generated configs.

``test_dataset_configs.py`` renders the real configs of both wheels over synthetic rows; this
test generates the configs too, and leans on the corners real configs rarely reach at once:

* templates: strings and dialogues (``begin`` lists and strings with SYSTEM items and
  ``fallback_role``, one to three rounds, an ``end`` section, an unknown role now and then),
  label dicts of either for perplexity, an ice template that is itself a label dict, a prompt
  template given as the ice template (``ice_token`` on the ice template, no prompt template),
  ``ice_token`` ``'</E>'`` or another marker, present, missing or repeated, ``sep_token``;
* text with placeholders of input columns, of the output column and of no column, stray braces,
  ``{{``, CJK, the ice token and the separator inside values;
* rows whose values name other columns (order-dependent substitution), ``None``, ints, floats
  and bools, in a shuffled column order; ``test_range`` / ``train_range``;
* Zero, FixK, Random and (OpenCompass) SlidingWindow retrievers; gen and ppl modes, with
  labels given;
* no meta template, an API meta template, and generated LM meta templates (per-role
  ``begin``/``end``, a reserved SYSTEM role, a SYSTEM round, meta ``begin``/``end``, a role's
  default ``prompt``, ``generate`` on the first role).

With ``max_seq_len`` (OpenCompass), the fast paths with the too-long rows re-rendered must equal
trimming every row on the row-by-row path.

Each example runs both flavours' reference classes (``RefPipeline``: the reference retriever
over its own ``DatasetReader``, ``generate_ice``, ``generate_prompt_for_generate_task`` or
``generate_label_prompt``, then ``parse_template``) and ``DatasetRenderer.render`` twice -- the
Rust job and ``FORCE_PYTHON`` -- and requires the same prompts, or an error of the family the
reference raises (``compare``).
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import test_dataset_configs as T  # noqa: E402  (the reference pipeline and the comparison)

from promptweave import _backend  # noqa: E402

#: several times the profile's example count: each example is a whole config, and cheap
SETTINGS = settings(
    max_examples=8 * settings.default.max_examples,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

COLUMNS = ["q", "a1", "a2", "ctx"]
OUT = "ans"
TEXT_BITS = ["Q: ", "Answer: ", " ", "x", "{{q}}", "</", "E>", "\n", "中文", "{", "}", "{nope}"]
STR_VALUES = [
    "plain",
    "see {q}",
    "{ans}",
    "{a1}{a2}",
    "a}b{",
    "</E>",
    "<ICE>",
    "</SEP>",
    "",
    "{nope}",
    "A",
    "😀",
    "{",
    "x\ny",
    "中文 {ctx}",
    None,
]


class Gen:
    """Draws from hypothesis (so that failures shrink) with the vocabulary of these configs."""

    def __init__(self, data: st.DataObject, ice_token: str) -> None:
        self.data, self.ice = data, ice_token

    def chance(self, p: float) -> bool:
        return bool(self.data.draw(st.integers(0, 999)) < p * 1000)

    def pick(self, items: list[Any]) -> Any:
        return self.data.draw(st.sampled_from(items))

    def count(self, lo: int, hi: int) -> int:
        return int(self.data.draw(st.integers(lo, hi)))

    def text(self, cols: list[str], ice: bool = True) -> str:
        parts = []
        for _ in range(self.count(0, 4)):
            kind = self.pick(["col", "col", "bit", "ice", "sep"])
            if kind == "col":
                parts.append("{" + self.pick([*cols, OUT]) + "}")
            elif kind == "ice" and ice:
                parts.append(self.ice)
            elif kind == "sep":
                parts.append("</SEP>")
            else:
                parts.append(self.pick(TEXT_BITS))
        return "".join(parts)

    def item(self, cols: list[str], ice: bool) -> dict[str, Any]:
        roles = ["HUMAN", "BOT", "SYSTEM", "HUMAN", "BOT"]
        role = "ASSISTANT" if self.chance(0.04) else self.pick(roles)
        item: dict[str, Any] = {"role": role, "prompt": self.text(cols, ice)}
        if role == "SYSTEM" and self.chance(0.7):
            item["fallback_role"] = "HUMAN"
        return item

    def template(self, cols: list[str], with_ice: bool, kind: str) -> Any:
        if kind == "str":
            s = self.text(cols)
            if with_ice and self.ice not in s and self.chance(0.8):
                s = self.ice + s
            return s
        t: dict[str, Any] = {}
        if self.chance(0.5):
            begin: list[Any] = [
                self.item(cols, False) if self.chance(0.6) else self.text(cols, False)
                for _ in range(self.count(0, 2))
            ]
            if with_ice and self.chance(0.8):
                begin.insert(self.count(0, len(begin)), self.ice)
            t["begin"] = begin[0] if len(begin) == 1 and self.chance(0.5) else begin
        t["round"] = [self.item(cols, with_ice) for _ in range(self.count(1, 3))]
        if self.chance(0.25):
            t["end"] = [self.item(cols, False)]
        return t

    def meta(self) -> T.Meta:
        kind = self.pick(["none", "api", "lm", "lm", "lm"])
        if kind == "none":
            return T.Meta("none", None, False)
        if kind == "api":
            return T.Meta(
                "api",
                {
                    "round": [
                        {"role": "HUMAN", "api_role": "HUMAN"},
                        {"role": "BOT", "api_role": "BOT", "generate": True},
                    ],
                    "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
                },
                True,
            )
        human = {
            "role": "HUMAN",
            "begin": self.pick(["<u>", "", "U{q}:"]),
            "end": self.pick(["</u>\n", "\n", ""]),
        }
        bot = {
            "role": "BOT",
            "begin": self.pick(["<b>", "A:", ""]),
            "end": self.pick(["</b>\n", "", "\n"]),
            "generate": True,
        }
        meta: dict[str, Any] = {"round": [human, bot]}
        if self.chance(0.2):
            human["prompt"] = "default"
        if self.chance(0.15):
            meta["round"].insert(0, {"role": "SYSTEM", "begin": "[S]", "end": "[/S]"})
        elif self.chance(0.6):
            meta["reserved_roles"] = [{"role": "SYSTEM", "begin": "<s>", "end": "</s>"}]
        if self.chance(0.1):
            meta["round"][0]["generate"] = True
        if self.chance(0.3):
            meta["begin"] = self.pick(["BEGIN", "<bos>"])
        if self.chance(0.3):
            meta["end"] = self.pick(["END", "<eos>"])
        return T.Meta("lm", meta, False)


def _case(data: st.DataObject, fw: str) -> tuple[Any, ...]:
    g = Gen(data, data.draw(st.sampled_from(["</E>", "</E>", "<ICE>"])))
    cols = data.draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=4, unique=True))
    mode = g.pick(["gen", "gen", "ppl"])
    kind = g.pick(["str", "dialogue"])
    retrievers = ["ZeroRetriever", "FixKRetriever", "FixKRetriever", "RandomRetriever"]
    if fw == "oc":
        retrievers.append("SlidingWindowRetriever")
    retriever = g.pick(retrievers)
    with_ice = retriever != "ZeroRetriever"
    ice_tok = with_ice or g.chance(0.2)
    labels = None
    if mode == "ppl" and g.chance(0.8):
        labels = g.pick([["A", "B"], [0, 1], ["yes", "no", "maybe"]])
        prompt: Any = {label: g.template(cols, ice_tok, kind) for label in labels}
    else:
        prompt = g.template(cols, ice_tok, kind)
    infer: dict[str, Any] = {}
    combined = with_ice and g.chance(0.15)
    if with_ice:
        ice_kind = g.pick(["str", "dialogue"])
        if labels is not None and not combined and g.chance(0.3):
            ice: Any = {label: g.template(cols, False, ice_kind) for label in labels}
        else:
            ice = g.template(cols, False, ice_kind)
        infer["ice_template"] = (
            {"template": prompt, "ice_token": g.ice} if combined else {"template": ice}
        )
    if not combined:
        infer["prompt_template"] = {"template": prompt}
        if ice_tok:
            infer["prompt_template"]["ice_token"] = g.ice
        if g.chance(0.2):
            infer["prompt_template"]["sep_token"] = "</SEP>"
    n_train, n_test = g.count(1, 6), g.count(1, 4)
    rcfg: dict[str, Any] = {"type": retriever}
    if retriever == "FixKRetriever":
        rcfg["fix_id_list"] = data.draw(
            st.lists(st.integers(0, n_train - 1), min_size=1, max_size=n_train, unique=True)
        )
    elif retriever == "RandomRetriever":
        rcfg.update(ice_num=g.count(1, n_train), seed=g.count(0, 5))
    elif retriever == "SlidingWindowRetriever":
        rcfg["k"] = g.count(1, 4)
    infer["retriever"] = rcfg
    infer["inferencer"] = {"type": "GenInferencer" if mode == "gen" else "PPLInferencer"}
    # the reference reads rows through HuggingFace datasets: one type per column
    order = data.draw(st.permutations([*cols, OUT]))
    kinds = {c: g.pick(["str"] * 6 + ["int", "float", "bool"]) for c in order}
    scalars = {
        "int": [0, 7, -3, 10**12],
        "float": [0.5, -2.5, 1e20, 1e-7],
        "bool": [True, False],
        "str": STR_VALUES,
    }

    def row() -> dict[str, Any]:
        r = {c: g.pick(scalars[kinds[c]]) for c in order}
        if labels is not None:
            r[OUT] = g.pick(labels)
        return r

    rows = T.Rows([row() for _ in range(n_train)], [row() for _ in range(n_test)], order)
    reader: dict[str, Any] = {"input_columns": cols, "output_column": OUT}
    if g.chance(0.15):
        reader["test_range"] = g.pick(["[1:]", "[:2]", "[::2]"])
    if g.chance(0.1):
        reader["train_range"] = g.pick(["[1:]", "[:3]"])
    return infer, reader, rows, mode, labels, g.meta()


@pytest.fixture
def quiet() -> Iterator[None]:
    logging.disable(logging.WARNING)  # AISBench logs unknown roles as warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


@pytest.mark.parametrize("fw", ["oc", "ais"])
@SETTINGS
@given(data=st.data())
def test_generated_configs_match_reference(
    fw: str, reference: dict[str, Any], quiet: None, data: st.DataObject
) -> None:
    infer, reader, rows, mode, labels, meta = _case(data, fw)
    try:
        ref = T.RefPipeline(reference[fw], fw, infer, reader, rows)
        expected = ref.parse(ref.build(mode, labels=labels), meta, mode)
    except Exception as exc:  # the reference's template constructors raise early
        expected = T.Outcome(None, None, None, [exc])
    for force_python in (False, True):
        _backend.FORCE_PYTHON = force_python
        try:
            renderer = T.renderer_for(
                infer, reader, meta, flavor=T.FLAVOR[fw], mode=mode, labels=labels
            )
            ours: Any = renderer.render(rows.test, rows.train)
        except Exception as exc:
            ours = exc
        finally:
            _backend.FORCE_PYTHON = False
        diff = T.compare(ours, expected, len(rows.test))
        assert diff is None, f"FORCE_PYTHON={force_python} {infer} {reader} {meta}\n{diff}"
    if fw == "oc" and not isinstance(ours, BaseException) and data.draw(st.booleans()):
        # max_seq_len: the fast paths plus re-rendering the rows that are too long equal
        # trimming every row (the row-by-row path, held to the reference's inferencers by
        # test_dataset_configs.py), at a length that keeps some examples and drops others
        texts = [str(v) for p in ours.prompts for v in (p.values() if labels else [p])]
        limit = data.draw(st.integers(0, max((len(t) for t in texts), default=0) + 1))
        fitted = []
        for force_python in (False, True):
            _backend.FORCE_PYTHON = force_python
            try:
                renderer = T.renderer_for(
                    infer,
                    reader,
                    meta,
                    flavor="opencompass",
                    mode=mode,
                    labels=labels,
                    max_seq_len=limit,
                    token_counter=len,
                )
                got = renderer.render(rows.test, rows.train)
                fitted.append(repr((got.prompts, got.ice_indices)))
            except Exception as exc:
                fitted.append(type(exc).__name__)
            finally:
                _backend.FORCE_PYTHON = False
        assert fitted[0] == fitted[1], (limit, infer, meta)
