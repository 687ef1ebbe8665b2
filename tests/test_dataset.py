"""The whole-dataset job on inputs that stress its fast paths.

Each case renders the same rows through the Rust job and row by row through the mirrored
classes (``FORCE_PYTHON``, which the golden and parity tests hold to the reference) and
requires identical results. The cases target the per-group output programs (values with braces,
non-str values, lone surrogates, CJK, marker-like text in templates) and the grouping of ICE
index lists.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from _metas import CHATML

import promptweave as pw
from promptweave import _backend

Q = "{input}\nA. {A}\nB. {B}\nAnswer: "
API = {
    "round": [
        {"role": "HUMAN", "api_role": "HUMAN"},
        {"role": "BOT", "api_role": "BOT", "generate": True},
    ],
}


def infer_cfg(retriever: dict[str, Any], prompt: Any = None) -> dict[str, Any]:
    return {
        "ice_template": {
            "template": {
                "round": [
                    {"role": "HUMAN", "prompt": Q},
                    {"role": "BOT", "prompt": "{target}\n"},
                ]
            }
        },
        "prompt_template": {
            "template": prompt
            or {
                "begin": [{"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": "{sys}"}, "</E>"],
                "round": [{"role": "HUMAN", "prompt": Q}, {"role": "BOT", "prompt": "{target}"}],
            },
            "ice_token": "</E>",
        },
        "retriever": retriever,
        "inferencer": {"type": "GenInferencer"},
    }


READER = {"input_columns": ["input", "A", "B", "sys"], "output_column": "target"}
VALUES = [
    "plain",
    "有 {A} 的中文",
    "{target}",
    "a}b",
    "\ud800 lone",
    "emoji 😀 and \u0301",
    "",
    "\U0010fffd0\U0010fffc marker-like",
]


def rows(n: int, offset: int = 0) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        v = VALUES[(i + offset) % len(VALUES)]
        out.append(
            {
                "input": f"q{i} {v}",
                "A": i if i % 3 == 0 else f"a{i}",
                "B": None if i % 4 == 0 else f"b {v}",
                "sys": "system {input}" if i % 5 == 0 else "sys",
                "target": "AB"[i % 2],
            }
        )
    return out


def both(renderer: pw.DatasetRenderer, *args: Any, **kw: Any) -> tuple[Any, Any, int]:
    fast = renderer.render(*args, **kw)
    _backend.FORCE_PYTHON = True
    try:
        slow = renderer.render(*args, **kw)
    finally:
        _backend.FORCE_PYTHON = False
    return fast.prompts, slow.prompts, fast.rust_rows


@pytest.mark.parametrize(
    "retriever",
    [
        {"type": "FixKRetriever", "fix_id_list": [0, 1, 2]},
        {"type": "ZeroRetriever"},
        {"type": "RandomRetriever", "ice_num": 2, "seed": 7},
    ],
)
@pytest.mark.parametrize(("meta", "api"), [(None, False), (CHATML, False), (API, True)])
def test_rust_job_equals_row_by_row(retriever: dict[str, Any], meta: Any, api: bool) -> None:
    renderer = pw.DatasetRenderer(infer_cfg(retriever), READER, meta, api=api)
    fast, slow, _ = both(renderer, rows(40), rows(9, offset=3))
    assert fast == slow
    assert [type(x) for x in fast] == [type(x) for x in slow]


@pytest.mark.parametrize("flavor", ["opencompass", "aisbench"])
@pytest.mark.parametrize(("meta", "api"), [(None, False), (CHATML, False), (API, True)])
def test_renderer_copies_and_pickles(flavor: str, meta: Any, api: bool) -> None:
    """A renderer is plain data: a deep copy (configs are deep-copied) or a pickled copy (sent
    to a worker process) renders what the original renders."""
    import copy
    import pickle

    renderer = pw.DatasetRenderer(
        infer_cfg({"type": "FixKRetriever", "fix_id_list": [0, 2]}),
        READER,
        meta,
        api=api,
        flavor=flavor,
    )
    test, train = rows(12), rows(5, offset=3)
    want = renderer.render(test, train).prompts
    for other in (
        copy.copy(renderer),
        copy.deepcopy(renderer),
        pickle.loads(pickle.dumps(renderer)),
    ):
        assert other.render(test, train).prompts == want


def test_string_template_program_rows() -> None:
    """Zero-shot string template: every row sharing the empty ICE goes through one program."""
    cfg = {
        "prompt_template": {"template": "{input}|{A}|{B}|{missing}|{target}"},
        "retriever": {"type": "ZeroRetriever"},
    }
    renderer = pw.DatasetRenderer(cfg, READER)
    fast, slow, rust_rows = both(renderer, rows(50))
    assert fast == slow
    assert rust_rows == 50
    # the reference's sequential substitution: `input` is filled before `A`, so the `{A}` its
    # value brings in is filled too; `B` comes after `A`, so its `{A}` stays
    assert fast[1] == "q1 有 a1 的中文|a1|b 有 {A} 的中文|{missing}|"


def test_ppl_label_dict() -> None:
    cfg = {
        "prompt_template": {
            "template": {
                "A": "</E>{input}\nAnswer: A",
                "B": {
                    "round": [
                        {"role": "HUMAN", "prompt": "</E>{input}"},
                        {"role": "BOT", "prompt": "B"},
                    ]
                },
            },
            "ice_token": "</E>",
        },
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "PPLInferencer"},
    }
    renderer = pw.DatasetRenderer(cfg, READER, CHATML, labels=["A", "B"])
    fast, slow, _ = both(renderer, rows(20))
    assert fast == slow
    assert set(fast[0]) == {"A", "B"}


def test_explicit_ice_indices_shared_and_distinct() -> None:
    renderer = pw.DatasetRenderer(infer_cfg({"type": "ZeroRetriever"}), READER, CHATML)
    shared = [0, 2]
    indices = [shared, shared, [1], [2, 0], shared, [], [1]]
    fast, slow, _ = both(renderer, rows(7), rows(4), ice_indices=indices)
    assert fast == slow
    result = renderer.render(rows(7), rows(4), ice_indices=indices)
    assert result.ice_indices[0] == [0, 2]


def test_rows_with_different_columns_fall_back_exactly() -> None:
    test = rows(6)
    test[3] = {"target": "A", **{k: v for k, v in test[3].items() if k != "target"}}
    renderer = pw.DatasetRenderer(infer_cfg({"type": "FixKRetriever", "fix_id_list": [0]}), READER)
    fast, slow, rust_rows = both(renderer, test)
    assert fast == slow
    assert rust_rows == 0


RAW_MSGS = [
    {"role": "system", "content": "You are {who}."},
    "</E>",
    {"role": "user", "content": "Q: {question}"},
    {"role": "assistant", "content": ""},
]
RAW_ICE = [
    {"role": "user", "content": "Q: {question}"},
    {"role": "assistant", "content": "{answer}"},
]


@pytest.mark.parametrize("retriever", [[0, 2], []])
def test_raw_prompt_template_matches_reference(
    reference: dict[str, Any], retriever: list[int]
) -> None:
    """OpenAI-style message templates go through the renderer (row by row) exactly as
    OpenCompass's retriever + GenInferencer + API parser build them."""
    import refload  # the `reference` fixture put it on sys.path

    m = reference["oc"]
    ice = {"type": "RawPromptTemplate", "messages": RAW_ICE} if retriever else None
    infer = {
        "ice_template": ice,
        "prompt_template": {"type": "RawPromptTemplate", "messages": RAW_MSGS},
        "retriever": {"type": "FixKRetriever", "fix_id_list": retriever}
        if retriever
        else {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    data = [{"who": f"bot{i}", "question": f"q{i} {{who}}", "answer": f"a{i}"} for i in range(5)]
    reader = {"input_columns": ["question"], "output_column": "answer"}
    ours = pw.DatasetRenderer(infer, reader, None, api=True).render(data, data).prompts

    ds = refload.make_dataset(m, data, data, ["question"], "answer")
    pt = m.RawPromptTemplate(RAW_MSGS)
    ice_t = m.RawPromptTemplate(RAW_ICE) if retriever else None
    ret = m.FixKRetriever(ds, fix_id_list=retriever) if retriever else m.ZeroRetriever(ds)
    parser = m.APITemplateParser(None)
    expected = []
    for i, idx in enumerate(ret.retrieve()):
        ice_value = ret.generate_ice(idx, ice_template=ice_t)
        prompt = ret.generate_prompt_for_generate_task(
            i, ice_value, ice_template=ice_t, prompt_template=pt
        )
        expected.append(parser.parse_template(prompt, mode="gen"))
    assert ours == expected


@pytest.mark.parametrize(
    "retriever",
    [
        {"type": "FixKRetriever", "fix_id_list": [0, 2]},
        {"type": "RandomRetriever", "ice_num": 2, "seed": 3},
        {"type": "ZeroRetriever"},
    ],
)
@pytest.mark.parametrize(
    "meta",
    [None, [{"role": "system", "content": "SYS "}, {"role": "user", "content": "U: "}]],
    ids=["no-meta", "prefix-meta"],
)
def test_raw_batch_equals_row_by_row(
    retriever: dict[str, Any], meta: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The raw-messages batch (messages copied and formatted in Rust, one shape per distinct
    index list) gives the row-by-row result: empty rows, non-str values, braces in values."""
    from promptweave import _core

    batches: list[int] = []
    completes: list[bool] = []
    real = _core.render_raw_rows

    def counting(rows: Any, indices: Any, shape_of: Any, required: Any = None) -> Any:
        out = real(rows, indices, shape_of, required)
        batches.append(len(out[0]) if out is not None else -1)
        if out is not None:
            completes.append(out[1])
        return out

    monkeypatch.setattr(_core, "render_raw_rows", counting)
    infer = {
        "ice_template": {"type": "RawPromptTemplate", "messages": RAW_ICE},
        "prompt_template": {"type": "RawPromptTemplate", "messages": RAW_MSGS},
        "retriever": retriever,
        "inferencer": {"type": "GenInferencer"},
    }
    reader = {"input_columns": ["question"], "output_column": "answer"}
    data: list[dict[str, Any]] = [
        {"who": f"bot{i}", "question": f"q{i} {{who}}", "answer": f"a{i}"} for i in range(6)
    ]
    test = [*data, {}, {"question": 7, "answer": None}, {"question": "é😀 {answer}", "x": 1}]
    # a row the one-scan fill leaves to the full substitution: a key with a brace
    test += [{"question": "q {who}", "{who}": "W"}]
    renderer = pw.DatasetRenderer(infer, reader, meta, api=True)
    fast, slow, _ = both(renderer, test, data)
    assert fast == slow
    explicit = [[0], [0], [1, 2], [], [0], [5], [1, 2], [], [3], [1]]
    fast, slow, _ = both(renderer, test, data, ice_indices=explicit)
    assert fast == slow
    assert batches == [len(test), len(test)]  # both fast renders were one batch each
    # the columns the rows lack are counted as on the row-by-row path: the batch saw that the
    # empty row lacks one, and the caller counted
    assert completes == [False, False]
    got = renderer.render(test, data).missing_columns
    _backend.FORCE_PYTHON = True
    try:
        want = renderer.render(test, data).missing_columns
    finally:
        _backend.FORCE_PYTHON = False
    assert got == want == {"question": 1, "who": 4}
    # a lone surrogate in a row: the batch leaves every row to the mirrored classes
    odd = [*data, {"question": "\udcff", "who": "w"}]
    fast, slow, _ = both(renderer, odd, data)
    assert fast == slow
    assert renderer.render(data, data).missing_columns == {}
    assert completes[-1] is True  # every row has the column: nothing left to check


def test_raw_batch_input_str_row_raises_as_row_by_row() -> None:
    """A row with an `input_str` column is refused by RawPromptTemplate (TypeError in the
    reference): the batch leaves it to the mirrored classes, which raise the same."""
    infer = {
        "prompt_template": {"type": "RawPromptTemplate", "messages": RAW_MSGS},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    reader = {"input_columns": ["question"], "output_column": "answer"}
    test = [{"question": "q", "answer": "a"}, {"question": "q", "input_str": "x", "answer": "a"}]
    renderer = pw.DatasetRenderer(infer, reader, None, api=True)
    with pytest.raises(TypeError, match="input_str"):
        renderer.render(test)
    _backend.FORCE_PYTHON = True
    try:
        with pytest.raises(TypeError, match="input_str"):
            renderer.render(test)
    finally:
        _backend.FORCE_PYTHON = False


# --------------------------------------------------------------------------- label-dict ICE


def _label_ice_renderer(labels: Any, fix: list[int]) -> pw.DatasetRenderer:
    a, b = labels
    infer = {
        "ice_template": {"template": {a: "{q} -> A", b: "{q} -> B"}},
        "prompt_template": {
            "template": {a: "</E>{q} -> A", b: "</E>{q} -> B"},
            "ice_token": "</E>",
        },
        "retriever": {"type": "FixKRetriever", "fix_id_list": fix},
        "inferencer": {"type": "PPLInferencer"},
    }
    return pw.DatasetRenderer(infer, {"input_columns": ["q"], "output_column": "a"})


@pytest.mark.parametrize(
    ("labels", "answers"),
    [
        (("A", "B"), ["C", "A"]),  # an answer that is no label
        ((0, 1), ["1", "0"]),  # int label keys, answers read as str (a CSV file)
        (("A", "B"), [["A"], "A"]),  # an unhashable answer
    ],
)
def test_label_ice_example_with_unknown_label_raises_as_reference(
    reference: dict[str, Any], labels: Any, answers: list[Any]
) -> None:
    """The reference's ``generate_ice_item`` looks the example's answer up in the label dict:
    an answer that is no label raises (KeyError/TypeError). The Rust job must not render it with
    some other label's body."""
    rows = [{"q": f"q{i}", "a": a} for i, a in enumerate(answers)]
    R = reference["oc"]
    a, b = labels
    ice_t = R.PromptTemplate({a: "{q} -> A", b: "{q} -> B"})
    with pytest.raises((KeyError, TypeError)) as want:
        ice_t.generate_ice_item(rows[0], rows[0]["a"])
    renderer = _label_ice_renderer(labels, [0, 1])
    for force in (False, True):
        _backend.FORCE_PYTHON = force
        try:
            with pytest.raises(want.type) as got:
                renderer.render(rows)
        finally:
            _backend.FORCE_PYTHON = False
        if hasattr(got.value, "add_note"):  # Python 3.11+
            assert "train row 0" in "\n".join(getattr(got.value, "__notes__", []))


def test_label_ice_examples_with_known_labels_stay_in_rust() -> None:
    rows = [{"q": "x", "a": 1}, {"q": "y", "a": 0}, {"q": "z", "a": 1}]
    fast, slow, rust_rows = both(_label_ice_renderer((0, 1), [0, 1]), rows)
    assert fast == slow
    assert rust_rows == len(rows)
    assert fast[2] == {0: "x -> B\ny -> A\nz -> A", 1: "x -> B\ny -> A\nz -> B"}


@pytest.mark.parametrize("key", ["ice_separator", "ice_eos_token"])
def test_lone_surrogate_separator_renders_as_row_by_row(key: str) -> None:
    """A retriever separator the core cannot take as UTF-8 sends the job to the Python path,
    which renders what the reference renders (the surrogate kept)."""
    infer = {
        "ice_template": {"template": "{q} {a}"},
        "prompt_template": {"template": "</E>{q}", "ice_token": "</E>"},
        "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1], key: "\ud800"},
        "inferencer": {"type": "GenInferencer"},
    }
    rows = [{"q": "q0", "a": "A"}, {"q": "q1", "a": "B"}]
    renderer = pw.DatasetRenderer(infer, {"input_columns": ["q"], "output_column": "a"})
    fast, slow, _ = both(renderer, rows)
    want = {
        "ice_separator": ["q0 A\ud800q1 B\nq0", "q0 A\ud800q1 B\nq1"],
        "ice_eos_token": ["q0 A\nq1 B\ud800q0", "q0 A\nq1 B\ud800q1"],
    }[key]
    assert fast == slow == want


def test_value_whose_str_fails_renders_as_row_by_row() -> None:
    """An int past Python's digit limit: unused by the template, the reference's safe_format
    still str()s it (ValueError); as the masked answer of a test row it is never str()ed (the
    prompt renders)."""
    infer = {
        "prompt_template": {"template": "Q: {q}\nA: {a}"},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    renderer = pw.DatasetRenderer(infer, {"input_columns": ["q"], "output_column": "a"})
    huge = 10**5000
    with pytest.raises(ValueError, match="digits"):
        renderer.render([{"q": "x", "a": "A", "big": huge}])
    fast, slow, _ = both(renderer, [{"q": "x", "a": huge}, {"q": "y", "a": "B"}])
    assert fast == slow == ["Q: x\nA: ", "Q: y\nA: "]


# --------------------------------------------------------------------------- PPL inferencers

SEP_LABELS = {"A": "{question}<SEP> ->A", "B": "{question}<SEP> ->B"}


def _ppl(template: Any, flavor: str = "opencompass", **kw: Any) -> pw.DatasetRenderer:
    infer = {
        "prompt_template": {"template": template, **kw},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "PPLInferencer"},
    }
    return pw.DatasetRenderer(
        infer,
        {"input_columns": ["question"], "output_column": "answer"},
        flavor=flavor,
        normalizing_str="NORM:",
    )


def test_normalizing_str_splits_each_label_prompt_at_the_sep_token() -> None:
    """OpenCompass's PPLInferencer with normalizing_str scores ``context + answer`` (the
    sep_token removed; its loss skips the context) and ``normalizing_str + answer``: the
    reference's get_ppl_from_template inputs are ``['QQ ->A']`` with mask 2 and ``['NORM: ->A']``
    with mask 5 (len of 'QQ' and 'NORM:')."""
    rows = [{"question": "QQ", "answer": "A"}]
    result = _ppl(SEP_LABELS, sep_token="<SEP>").render(rows)
    assert result.prompts == [{"A": "QQ ->A", "B": "QQ ->B"}]
    assert result.normalizing == [
        {
            "A": {"context": "QQ", "normalizing_prompt": "NORM: ->A"},
            "B": {"context": "QQ", "normalizing_prompt": "NORM: ->B"},
        }
    ]
    # AISBench's PPLInferencer takes normalizing_str and ignores it: the sep token is removed
    ais = _ppl(SEP_LABELS, "aisbench", sep_token="<SEP>").render(rows)
    assert ais.prompts == [{"A": "QQ ->A", "B": "QQ ->B"}]
    assert ais.normalizing is None


def test_normalizing_str_errors_as_reference() -> None:
    rows = [{"question": "QQ", "answer": "A"}]
    # a dialogue label prompt: the reference asserts the prompt is a str
    dialogue = {
        label: {"round": [{"role": "HUMAN", "prompt": f"{{question}}<SEP>\n{label}"}]}
        for label in "AB"
    }
    with pytest.raises(AssertionError, match="must be a string"):
        _ppl(dialogue, sep_token="<SEP>").render(rows)
    # no sep_token: the reference's prompt.find(None) raises TypeError
    with pytest.raises(TypeError, match="sep_token=None"):
        _ppl(SEP_LABELS).render(rows)


def test_ppl_only_inferencer_trims_by_the_gen_parse() -> None:
    """PPLOnlyInferencer counts the 'gen' parse when dropping examples and scores the 'ppl'
    parse (the reference keeps example 0 here: its gen parse is 30 characters, the ppl parse
    34)."""
    meta = {
        "round": [
            {"role": "HUMAN", "begin": "<H>", "end": "</H>"},
            {"role": "BOT", "begin": "<B>", "end": "</B>", "generate": True},
        ]
    }
    h = {"role": "HUMAN", "prompt": "{question}"}
    b = {"role": "BOT", "prompt": "{answer}"}
    infer = {
        "ice_template": {"template": {"round": [h, b]}},
        "prompt_template": {"template": {"begin": "</E>", "round": [h, b]}, "ice_token": "</E>"},
        "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1, 2]},
        "inferencer": {"type": "PPLOnlyInferencer"},
    }
    reader = {"input_columns": ["question"], "output_column": "answer"}
    train = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(3)]
    test = [{"question": "QQ", "answer": "AA"}]
    renderer = pw.DatasetRenderer(infer, reader, meta, max_seq_len=30, token_counter=len)
    result = renderer.render(test, train)
    assert result.prompts == ["<H>q0</H><B>a0</B><H>QQ</H><B></B>"]
    assert result.ice_indices == [[0]]


def test_ppl_raw_messages_cannot_trim_by_max_seq_len() -> None:
    """OpenCompass's PPLInferencer compares a message list's token counts (a list) with
    max_seq_len: TypeError before any model call."""
    infer = {
        "ice_template": {
            "type": "RawPromptTemplate",
            "messages": [
                {"role": "user", "content": "{question}"},
                {"role": "assistant", "content": "{answer}"},
            ],
        },
        "prompt_template": {
            "type": "RawPromptTemplate",
            "messages": [
                {"role": "system", "content": "sys"},
                "</E>",
                {"role": "user", "content": "{question}"},
            ],
            "ice_token": "</E>",
        },
        "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1]},
        "inferencer": {"type": "PPLInferencer"},
    }
    reader = {"input_columns": ["question"], "output_column": "answer"}
    train = [{"question": f"q{i}", "answer": "A"} for i in range(3)]
    renderer = pw.DatasetRenderer(
        infer, reader, api=True, max_seq_len=1000, token_counter=len, labels=["A", "B"]
    )
    with pytest.raises(TypeError, match="max_seq_len"):
        renderer.render([{"question": "QQ", "answer": "A"}], train)


@pytest.mark.parametrize(
    ("prompt", "tokens"),
    [
        ("</E>\ud800Q: {q}", {"ice_token": "</E>\ud800"}),
        ("</E>Q: {q}\ud800", {"ice_token": "</E>", "sep_token": "\ud800"}),
    ],
    ids=["ice_token", "sep_token"],
)
def test_lone_surrogate_tokens_render_as_the_reference(
    reference: dict[str, Any], prompt: str, tokens: dict[str, str]
) -> None:
    """An ``ice_token``/``sep_token`` with a lone surrogate has no UTF-8 form: the template is
    not compiled, and the Python path renders what the reference renders (it used to raise
    ``UnicodeEncodeError`` when the template was built)."""
    R = reference["oc"]
    rows = [{"q": "q0", "a": "A"}, {"q": "q1", "a": "B"}]

    def per_row(M: Any) -> list[Any]:
        t = M.PromptTemplate(prompt, **tokens)
        return [t.generate_item(r, output_field="a", ice_field_replace_token="ICE") for r in rows]

    assert per_row(pw) == per_row(R)
    infer = {
        "ice_template": {"template": "{q} {a}"},
        "prompt_template": {"template": prompt, **tokens},
        "retriever": {"type": "FixKRetriever", "fix_id_list": [1]},
        "inferencer": {"type": "GenInferencer"},
    }
    renderer = pw.DatasetRenderer(infer, {"input_columns": ["q"], "output_column": "a"})
    ice = R.PromptTemplate("{q} {a}").generate_ice_item(rows[1], "B") + "\n"
    pt = R.PromptTemplate(prompt, **tokens)
    want = [pt.generate_item(r, output_field="a", ice_field_replace_token=ice) for r in rows]
    assert renderer.render(rows, rows).prompts == want


class _Counted:
    """A value whose ``str()`` runs code: counts its calls in ``calls`` (shared with its deep
    copies, which the reference makes to mask the answer), raises on the ``fail``-th."""

    def __init__(self, fail: int | None = None) -> None:
        self.calls = [0]
        self.fail = fail

    def __deepcopy__(self, memo: dict[int, Any]) -> _Counted:
        twin = _Counted(self.fail)
        twin.calls = self.calls
        return twin

    def __str__(self) -> str:
        self.calls[0] += 1
        if self.calls[0] == self.fail:
            raise RuntimeError("str() failed")
        return f"v{self.calls[0]}"


def _zero_shot(template: Any) -> pw.DatasetRenderer:
    infer = {
        "prompt_template": {"template": template},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    return pw.DatasetRenderer(infer, {"input_columns": ["q"], "output_column": "a"})


@pytest.mark.parametrize(
    "template", ["Q: {q}", {"round": [{"role": "HUMAN", "prompt": "Q: {q}"}]}], ids=["str", "dlg"]
)
@pytest.mark.parametrize("column", ["q", "unused"])
def test_value_whose_str_runs_code_is_called_as_the_reference_calls_it(
    reference: dict[str, Any], template: Any, column: str
) -> None:
    """The Rust job runs no Python code: a row value with its own ``__str__`` is ``str()``ed
    where and as often as the reference does, and when it raises, the error names the row."""
    R = reference["oc"]

    def rows(value: Any) -> list[dict[str, Any]]:
        return [
            {"q": "a", "a": "x", "unused": 1},
            {"q": "b", "a": "y", "unused": 1},
            {"q": "c", "a": "z", "unused": 1, column: value},
        ]

    ours, ref = _Counted(), _Counted()
    got = _zero_shot(template).render(rows(ours)).prompts
    t, parser = R.PromptTemplate(template), R.LMTemplateParser(None)
    want = [parser.parse_template(t.generate_item(r, output_field="a"), "gen") for r in rows(ref)]
    assert got == want
    assert ours.calls == ref.calls
    assert ref.calls[0] > 0
    with pytest.raises(RuntimeError, match="str\\(\\) failed") as info:
        _zero_shot(template).render(rows(_Counted(fail=1)))
    assert "while rendering test row 2" in getattr(info.value, "__notes__", [])


def test_generator_value_fails_as_the_reference() -> None:
    """The reference deep-copies the row to mask the answer: a generator cannot be copied."""

    def gen() -> Iterator[int]:
        yield 1

    with pytest.raises(TypeError, match="pickle") as info:
        _zero_shot("Q: {q}").render([{"q": "a", "a": "x"}, {"q": gen(), "a": "y"}])
    assert "while rendering test row 1" in getattr(info.value, "__notes__", [])


def test_in_context_example_error_names_the_train_row() -> None:
    infer = {
        "ice_template": {"template": "{q} {a}"},
        "prompt_template": {"template": "</E>{q}", "ice_token": "</E>"},
        "retriever": {"type": "FixKRetriever", "fix_id_list": [2]},
        "inferencer": {"type": "GenInferencer"},
    }
    renderer = pw.DatasetRenderer(infer, {"input_columns": ["q"], "output_column": "a"})
    train = [{"q": "t0", "a": "A"}, {"q": "t1", "a": "B"}, {"q": _Counted(fail=1), "a": "C"}]
    with pytest.raises(RuntimeError) as info:
        renderer.render([{"q": "x", "a": "A"}], train)
    notes = getattr(info.value, "__notes__", [])
    assert "while rendering the in-context example of train row 2" in notes


@pytest.mark.parametrize(
    ("threads", "error"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("x", TypeError), (False, TypeError)],
)
def test_threads_checked(threads: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="DatasetRenderer: threads must be"):
        pw.DatasetRenderer(
            {"prompt_template": {"template": "{q}"}, "retriever": {"type": "ZeroRetriever"}},
            {"input_columns": ["q"], "output_column": "a"},
            threads=threads,
        )


def test_chat_inferencer_splits_str_input_columns() -> None:
    """``input_columns='q c'`` is two columns (the reference's ``DatasetReader`` splits a str on
    whitespace), in the ChatInferencer flow too."""
    dialogue = {"round": [{"role": "HUMAN", "prompt": "Q: {q}"}, {"role": "BOT", "prompt": "{a}"}]}
    rows = [{"q": "what is 2+2", "c": "ctx", "a": "4"}]
    cfg: dict[str, Any] = {
        "prompt_template": {"template": dialogue},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "ChatInferencer", "infer_mode": "last"},
    }
    as_str = pw.DatasetRenderer(cfg, {"input_columns": "q c", "output_column": "a"})
    as_list = pw.DatasetRenderer(cfg, {"input_columns": ["q", "c"], "output_column": "a"})
    assert as_str.render(rows).prompts == as_list.render(rows).prompts == [["Q: what is 2+2"]]


@pytest.mark.parametrize("inferencer", ["ChatMLInferencer", "ParallelChatMLInferencer"])
def test_chatml_inferencer_is_refused(inferencer: str) -> None:
    """ChatMLInferencer builds each row's prompt from the row's ``chatml_question`` messages:
    rendering the config's prompt template instead would be the wrong prompt."""
    cfg = {
        "prompt_template": {"template": "Q: {q}"},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": inferencer},
    }
    with pytest.raises(pw.errors.TemplateError, match="chatml_question"):
        pw.DatasetRenderer(cfg, {"input_columns": ["q"], "output_column": "a"})


def test_parallel_chat_inferencer_is_the_chat_flow() -> None:
    dialogue = {"round": [{"role": "HUMAN", "prompt": "Q: {q}"}, {"role": "BOT", "prompt": "{a}"}]}
    rows = [{"q": "x", "a": "y"}]

    def render(name: str) -> Any:
        cfg = {
            "prompt_template": {"template": dialogue},
            "retriever": {"type": "ZeroRetriever"},
            "inferencer": {"type": name, "infer_mode": "last"},
        }
        return pw.DatasetRenderer(cfg, {"input_columns": ["q"], "output_column": "a"}).render(rows)

    assert render("ParallelChatInferencer").prompts == render("ChatInferencer").prompts


def _clp_renderer(template: Any, ice: Any, meta: Any = None) -> pw.DatasetRenderer:
    cfg = {
        "ice_template": {"template": ice},
        "prompt_template": {"template": template, "ice_token": "</E>"},
        "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1]},
        "inferencer": {"type": "CLPInferencer"},
    }
    reader = {"input_columns": ["q"], "output_column": "a"}
    return pw.DatasetRenderer(cfg, reader, meta, max_seq_len=15, token_counter=len)


def test_clp_inferencer_keeps_one_token_spare() -> None:
    """CLPInferencer trims while ``count + 1 > max_seq_len`` (GenInferencer: ``count >
    max_seq_len``): a 15-character prompt does not fit 15 there."""
    train = [{"q": "q0", "a": "a0"}, {"q": "q1", "a": "a1"}]
    test = [{"q": "QQ", "a": "AA"}]
    result = _clp_renderer("</E>{q}:", "{q}:{a}").render(test, train)
    assert result.prompts == ["q0:a0\nQQ:"]
    assert result.ice_indices == [[0]]


def test_clp_inferencer_dialogue_trimming_is_refused() -> None:
    """Its trimming loop hands the model the unparsed prompt list of a dialogue template."""
    dialogue = {"round": [{"role": "HUMAN", "prompt": "{q}"}, {"role": "BOT", "prompt": "{a}"}]}
    meta = {"round": [{"role": "HUMAN", "begin": "<H>"}, {"role": "BOT", "generate": True}]}
    train = [{"q": "q0", "a": "a0"}, {"q": "q1", "a": "a1"}]
    renderer = _clp_renderer({"begin": "</E>", **dialogue}, dialogue, meta)
    with pytest.raises(ValueError, match="CLPInferencer"):
        renderer.render([{"q": "QQ", "a": "AA"}], train)


@pytest.mark.parametrize(
    ("model_cfg", "says"),
    [
        ({"type": "TurboMindModelwithChatTemplate", "drop_middle": True}, "first message"),
        ({"type": "HuggingFaceBaseModel", "drop_middle": True}, "drop_middle"),
        ({"type": "HuggingFacewithChatTemplate", "mode": "mid"}, "mode='mid'"),
    ],
)
def test_token_level_truncation_options_are_said(model_cfg: dict[str, Any], says: str) -> None:
    """Options that cut prompts by tokens after rendering (so the rendered long prompt is not
    what the model receives) are said with a warning."""
    dataset_cfg = {
        "infer_cfg": {
            "prompt_template": {"template": "Q: {q}"},
            "retriever": {"type": "ZeroRetriever"},
        },
        "reader_cfg": {"input_columns": ["q"], "output_column": "a"},
    }
    with pytest.warns(pw.errors.UnmodelledTruncationWarning, match=re.escape(says)):
        pw.DatasetRenderer.from_config(dataset_cfg, model_cfg)
