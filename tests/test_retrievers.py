"""Retrievers and the dataset holder (``promptweave.retrievers``, spec 04 §1-4).

* the spec's golden cases RET-* and DS-05 (code from ``cases_flows.py``, outcomes from
  ``golden.json`` in the spec's golden directory), run through promptweave's API for both
  flavours with the same helpers as the spec's ``run_cases.py`` (``DS``, ``FIXK``, ``ZERO``,
  ``RANDOM``, ``*_T()``);
* the numpy-compatible RNG against numpy itself;
* hypothesis properties comparing promptweave's retrievers with the reference retrievers (the
  ``reference`` fixture) on random datasets, ids, seeds and templates;
* promptweave-only behaviour (``Dataset`` inputs, ``IndexListRetriever``, error details).
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import importlib
import io
import json
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import _golden_ns  # noqa: E402

import promptweave  # noqa: E402
from promptweave import aisbench, opencompass, retrievers  # noqa: E402
from promptweave._flavor import AISBENCH, OPENCOMPASS  # noqa: E402
from promptweave.errors import (  # noqa: E402
    PromptRenderError,
    PromptTypeError,
    RetrieverError,
    SameSplitWarning,
)
from promptweave.retrievers import Dataset, random_indices  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")
AIS_CODE = re.compile(r"^\[([A-Z0-9]+(?:-[A-Z0-9]+)+)\]")
FLAVORS = {"oc": opencompass, "ais": aisbench}

H, B, S = _golden_ns.H, _golden_ns.B, _golden_ns.S

# ============================================================================ golden cases

#: the spec's cases this file ports (RET-16 is numpy itself; it runs as our RNG instead)
GOLDEN_IDS = [f"RET-{i:02d}" for i in range(1, 28)]
GOLDEN_IDS += ["DS-01", "DS-02", "DS-03", "DS-04", "DS-05", "E2E-01"]
#: case id -> code replacing the spec's (same expected outcome)
CODE_OVERRIDES = {
    "RET-16": "result = random_indices(43, 6, 3, 2, backend='python')",
}


def _load_golden() -> tuple[dict[str, tuple[str, str]], dict[str, Any]] | None:
    gdir = _golden_ns.golden_dir()
    if not (gdir / "golden.json").is_file() or not (gdir / "cases_flows.py").is_file():
        return None
    spec = importlib.util.spec_from_file_location("_pw_cases_flows", gdir / "cases_flows.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases = {cid: (impl, code) for cid, impl, code in module.CASES if cid in GOLDEN_IDS}
    with (gdir / "golden.json").open(encoding="utf-8") as f:
        outcomes = json.load(f)
    return cases, {cid: outcomes[cid] for cid in cases}


GOLDEN = _load_golden()


def _golden_params() -> list[Any]:
    if GOLDEN is None:
        return [pytest.param(None, None, id="golden-dir-missing")]
    _, outcomes = GOLDEN
    return [pytest.param(cid, fw, id=f"{cid}:{fw}") for cid in GOLDEN_IDS for fw in outcomes[cid]]


def build_ns(fw: str) -> dict[str, Any]:
    """The golden-case namespace of ``run_cases.build_ns`` for promptweave's flavour ``fw``."""
    api = _golden_ns.framework_api(fw)
    ns = _golden_ns.build_ns(api)
    ice_specs, pt_specs = ns["ICE_SPECS"], ns["PT_SPECS"]

    def tmpl(spec: tuple[Any, Any]) -> Any:
        t, tok = spec
        return api.PromptTemplate(copy.deepcopy(t), ice_token=tok)

    def cfg(spec: tuple[Any, Any]) -> dict[str, Any]:
        t, tok = spec
        return {"type": api.PromptTemplate, "template": copy.deepcopy(t), "ice_token": tok}

    def ds(
        train: Any, test: Any = None, input_columns: Any = None, output_column: Any = None
    ) -> Any:
        return api.Dataset(train if test is None else test, train, input_columns, output_column)

    def fixk(
        ids: Any,
        ice: str | None = "meta",
        pt: str | None = None,
        ice_separator: str = "\n",
        ice_eos_token: str = "\n",
        rows: Any = None,
        test: Any = None,
    ) -> Any:
        if ice == "label" and rows is None:
            rows, test = ns["LABEL_ROWS"], ns["LABEL_ROWS"][:1]
        dataset = ds(rows or ns["ROWS6"], test or ns["TEST2"], ["question"], "answer")
        kw: dict[str, Any] = {
            "fix_id_list": ids,
            "ice_separator": ice_separator,
            "ice_eos_token": ice_eos_token,
        }
        if api.name == "ais":
            kw["ice_template"] = cfg(ice_specs[ice]) if ice else None
            kw["prompt_template"] = cfg(pt_specs[pt]) if pt else None
        return api.FixKRetriever(dataset, **kw)

    def zero(ice: str | None = None) -> Any:
        dataset = ds(ns["ROWS6"], ns["TEST2"], ["question"], "answer")
        if api.name == "ais":
            return api.ZeroRetriever(dataset, ice_template=cfg(ice_specs[ice]) if ice else None)
        return api.ZeroRetriever(dataset)

    def random_(ice_num: int = 1, seed: int = 43) -> Any:
        dataset = ds(ns["ROWS6"], ns["TEST2"], ["question"], "answer")
        return api.RandomRetriever(dataset, ice_num=ice_num, seed=seed)

    def baseds(
        data: Any,
        n: int = 1,
        abbr: str = "myds",
        input_columns: Any = ("q",),
        output_column: str = "ans",
    ) -> tuple[list[Any], list[Any]]:
        """The spec's ``BASEDS``: a dataset's loaded rows prepared as ``BaseDataset`` does, by
        ``Dataset.from_loaded`` -- fed the rows HuggingFace-typed, as the loader gives them
        (spec 04 §1: Arrow typing is the loader's, not the library's)."""
        splits = data if isinstance(data, dict) else {None: data}
        typed = {k: hf_typed(v) for k, v in splits.items()}
        test, train = (typed[None], None) if None in typed else (typed["test"], typed["train"])
        d = api.Dataset.from_loaded(test, train, list(input_columns), output_column, abbr=abbr, n=n)
        return list(d.test), list(d.train)

    ns.update(
        DS=ds,
        FIXK=fixk,
        ZERO=zero,
        RANDOM=random_,
        BASEDS=baseds,
        random_indices=random_indices,
        META_ICE_T=lambda: tmpl(ice_specs["meta"]),
        STR_ICE_T=lambda: tmpl(ice_specs["str"]),
        LABEL_META_ICE_T=lambda: tmpl(ice_specs["label"]),
        OMIT_T=lambda: tmpl(ice_specs["omitted"]),
        STR_PT=lambda: tmpl(pt_specs["str_ice"]),
        SEED000_PT=lambda: tmpl(pt_specs["seed000"]),
    )
    return ns


def hf_typed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` as a HuggingFace ``datasets.Dataset`` gives them back (column types unified)."""
    from datasets import Dataset as HFDataset

    return [dict(r) for r in HFDataset.from_list([dict(r) for r in rows])]


def run_code(code: str, ns: dict[str, Any]) -> tuple[Any, BaseException | None]:
    ns = dict(ns)
    try:
        try:
            compiled = compile(code, "<case>", "eval")
        except SyntaxError:
            exec(code, ns)  # case code from the spec's golden files
            return ns["result"], None
        return eval(compiled, ns), None
    except Exception as exc:  # checked by the caller
        return None, exc


def check_outcome(value: Any, error: BaseException | None, expected: dict[str, Any]) -> None:
    """Same policy as tests/test_golden.py."""
    if "raises" not in expected:
        assert error is None, f"expected {expected['repr']}, raised {error!r}"
        assert repr(value) == expected["repr"]
        assert type(value).__name__ == expected["type"]
        return
    name, message = expected["raises"], ANSI.sub("", expected["message"])
    assert error is not None, f"expected {name}, returned {value!r}"
    assert isinstance(error, PromptRenderError), f"not a PromptRenderError: {error!r}"
    if name.startswith("AISBench"):
        match = AIS_CODE.match(message)
        assert match, message
        assert error.error_code == match.group(1)
        assert f"[{match.group(1)}]" in str(error)
    else:
        assert isinstance(error, getattr(builtins, name)), f"expected a {name}: {error!r}"


@pytest.mark.parametrize(("cid", "fw"), _golden_params())
def test_golden(cid: str | None, fw: str | None) -> None:
    if GOLDEN is None:
        reason = f"spec golden directory not found: {_golden_ns.golden_dir()}"
        if os.environ.get("PROMPTWEAVE_REQUIRE_REFERENCE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    assert cid is not None
    assert fw is not None
    cases, outcomes = GOLDEN
    code = CODE_OVERRIDES.get(cid, cases[cid][1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, error = run_code(code, build_ns(fw))
    check_outcome(value, error, outcomes[cid][fw])


def test_golden_errors_keep_reference_messages() -> None:
    """OpenCompass messages are kept as the start of ours (06 §C: 'same text')."""
    oc = build_ns("oc")
    _, err = run_code("FIXK([0, 1], ice=None).generate_ice([0], ice_template=None)", oc)
    assert str(err).startswith("You have not specified ice_template while retrieving")
    _, err = run_code("FIXK([10]).retrieve()", oc)
    assert str(err) == "Index 10 is out of range of 6"
    _, err = run_code("FIXK([-1]).retrieve()", build_ns("ais"))
    assert str(err) == "[ICLR-PARAM-004] Fix-K retriever index -1 is out of range of [0, 6)"
    _, err = run_code("RANDOM(ice_num=7).retrieve()", oc)
    assert isinstance(err, RetrieverError)
    assert "ice_num=7" in str(err)
    assert "6 train rows" in str(err)
    _, err = run_code(
        "ZERO(ice='str').generate_prompt_for_generate_task(0, '', ice_template=STR_ICE_T())", oc
    )
    assert str(err).startswith("ice_token of ice_template is not provided")


# ============================================================================ RNG


@pytest.mark.parametrize(
    ("seed", "n", "k", "rows"),
    [
        (43, 6, 3, 2),
        (0, 6, 3, 2),
        (2**32 - 1, 100, 7, 5),
        (12345, 1, 1, 3),
        (7, 2, 2, 9),
        (7, 0, 0, 3),
        (99, 700, 700, 2),  # > 624 draws per row: the state is twisted mid-row
        (5, 1000, 0, 4),  # k = 0 still consumes the permutation's draws
        (3, 2**16 + 3, 4, 2),  # masks of 17 bits
        (True, 5, 2, 2),
        ([1, 2, 3], 10, 3, 3),  # init_by_array
        ((2**32 - 1,), 10, 3, 3),
        (list(range(700)), 10, 3, 3),  # key longer than the state
    ],
)
def test_random_indices_match_numpy(seed: Any, n: int, k: int, rows: int) -> None:
    np = pytest.importorskip("numpy")
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        expected = [np.random.choice(n, k, replace=False).tolist() for _ in range(rows)]
    finally:
        np.random.set_state(state)
    assert random_indices(seed, n, k, rows, backend="python") == expected
    assert random_indices(seed, n, k, rows, backend="numpy") == expected


@settings(max_examples=200)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 80),
    data=st.data(),
    rows=st.integers(0, 4),
)
def test_random_indices_property(seed: int, n: int, data: st.DataObject, rows: int) -> None:
    np = pytest.importorskip("numpy")
    k = data.draw(st.integers(0, n))
    rs = np.random.RandomState(seed)
    expected = [rs.choice(n, k, replace=False).tolist() for _ in range(rows)]
    assert random_indices(seed, n, k, rows, backend="python") == expected


def test_random_does_not_touch_numpy_global_state() -> None:
    np = pytest.importorskip("numpy")
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    ds = Dataset([{"q": str(i)} for i in range(50)])
    for backend in ("python", "numpy"):
        random_indices(1, 50, 3, 50, backend=backend)
    promptweave.RandomRetriever(ds, ice_num=5).retrieve()
    aisbench.RandomRetriever(ds, ice_num=5).retrieve()
    assert (np.random.get_state()[1] == before).all()


def test_random_auto_backend_uses_numpy_for_large_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numpy")
    monkeypatch.setattr(retrievers, "NUMPY_DRAWS_THRESHOLD", 10)
    big = random_indices(43, 20, 4, 3)
    monkeypatch.setattr(retrievers, "NUMPY_DRAWS_THRESHOLD", 10**9)
    assert random_indices(43, 20, 4, 3) == big == random_indices(43, 20, 4, 3, backend="python")


@pytest.mark.parametrize(
    ("seed", "family", "builtin"),
    [
        (-1, RetrieverError, ValueError),
        (2**32, RetrieverError, ValueError),
        ([], RetrieverError, ValueError),
        ([[1]], RetrieverError, ValueError),
        ([1, -1], RetrieverError, ValueError),
        (1.0, PromptTypeError, TypeError),
        ("3", PromptTypeError, TypeError),
    ],
)
def test_random_seed_errors_like_numpy(seed: Any, family: type, builtin: type) -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(builtin):
        np.random.RandomState(seed)
    with pytest.raises(family) as info:
        random_indices(seed, 5, 1, 1)
    assert isinstance(info.value, builtin)


@pytest.mark.parametrize(
    ("n", "k", "builtin"),
    [
        (0, 1, ValueError),
        (3, 4, ValueError),
        (3, -1, ValueError),
        (3, 2.0, TypeError),
        (3, 10**30, OverflowError),
        (3, -(10**30), OverflowError),
        (3, 2**64 - 1, ValueError),
    ],
)
def test_random_sample_size_errors(n: int, k: Any, builtin: type) -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(builtin):
        np.random.RandomState(0).choice(n, k, replace=False)
    with pytest.raises(builtin) as info:
        random_indices(0, n, k, 1)
    assert isinstance(info.value, PromptRenderError)
    assert random_indices(0, n, k, 0) == []  # the reference only checks inside the row loop


def test_random_seed_none_is_entropy() -> None:
    ours = random_indices(None, 1000, 5, 2)
    assert all(len(set(r)) == 5 and all(0 <= i < 1000 for i in r) for r in ours)


# ============================================================================ reference parity


def ref_dataset(
    refload: Any,
    m: Any,
    train: list[dict[str, Any]],
    test: list[dict[str, Any]],
    output_column: str | None = "answer",
) -> Any:
    return refload.make_dataset(m, train, test, ["question"], output_column)


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """('value', type name, repr) or ('error', exception)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = fn()
    except Exception as exc:
        return "error", exc
    return "value", (type(value).__name__, repr(value))


def assert_same(fw: str, ours: Callable[[], Any], ref: Callable[[], Any]) -> tuple[str, Any]:
    kind_o, out_o = outcome(ours)
    kind_r, out_r = outcome(ref)
    event(f"{fw}: reference {'returned' if kind_r == 'value' else type(out_r).__name__}")
    if kind_r == "value":
        assert kind_o == "value", f"reference returned {out_r}, promptweave raised {out_o!r}"
        assert out_o == out_r
        return kind_o, out_o
    assert kind_o == "error", f"reference raised {out_r!r}, promptweave returned {out_o}"
    assert isinstance(out_o, PromptRenderError), f"not a PromptRenderError: {out_o!r}"
    name = type(out_r).__name__
    if fw == "ais" and (name.startswith("AISBench") or name == "ParameterValueError"):
        match = AIS_CODE.match(ANSI.sub("", str(out_r)))
        assert match, str(out_r)
        assert out_o.error_code == match.group(1), (out_o, out_r)
    else:
        assert isinstance(out_o, type(out_r)), f"expected a {name}: {out_o!r} vs {out_r!r}"
    return kind_o, out_o


@pytest.fixture(scope="module")
def refload(reference: dict[str, Any]) -> Any:
    return _golden_ns.import_refload()


SETTINGS = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)

TEXT = st.text(alphabet="ab{}\n Q:?é中", max_size=6)


@st.composite
def rows(
    draw: st.DrawFn, min_size: int = 0, max_size: int = 8, answers: st.SearchStrategy[str] = TEXT
) -> list[dict[str, Any]]:
    n = draw(st.integers(min_size, max_size))
    return [
        {"question": draw(TEXT), "answer": draw(answers), "extra": draw(TEXT)} for _ in range(n)
    ]


@pytest.mark.parametrize("fw", ["oc", "ais"])
@SETTINGS
@given(
    train=rows(),
    n_test=st.integers(0, 4),
    ids=st.lists(st.integers(-10, 10), max_size=5),
)
def test_fixk_retrieve_matches_reference(
    reference: dict[str, Any], refload: Any, fw: str, train: Any, n_test: int, ids: list[int]
) -> None:
    m = reference[fw]
    test = [{"question": "t", "answer": "a", "extra": ""}] * n_test
    if not train:
        train = [{"question": "x", "answer": "y", "extra": ""}]
    ours = FLAVORS[fw].FixKRetriever(Dataset(test, train, ["question"], "answer"), list(ids))
    ref = m.FixKRetriever(ref_dataset(refload, m, train, test), fix_id_list=list(ids))
    assert_same(fw, ours.retrieve, ref.retrieve)


@pytest.mark.parametrize("fw", ["oc", "ais"])
@SETTINGS
@given(
    n_train=st.integers(1, 40),
    n_test=st.integers(0, 5),
    ice_num=st.integers(-1, 42),
    seed=st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 43])),
)
def test_random_retrieve_matches_reference(
    reference: dict[str, Any],
    refload: Any,
    fw: str,
    n_train: int,
    n_test: int,
    ice_num: int,
    seed: int,
) -> None:
    m = reference[fw]
    train = [{"question": str(i), "answer": "a"} for i in range(n_train)]
    test = [{"question": "t", "answer": "a"}] * n_test
    ours = FLAVORS[fw].RandomRetriever(Dataset(test, train), ice_num=ice_num, seed=seed)
    ref = m.RandomRetriever(
        refload.make_dataset(m, train, test, ["question"], "answer"), ice_num=ice_num, seed=seed
    )
    assert_same(fw, ours.retrieve, ref.retrieve)


RANGES = st.one_of(
    st.none(),
    st.integers(-3, 14),
    st.floats(0.01, 0.99),
    st.builds(
        lambda a, b, c: (
            f"[{'' if a is None else a}:{'' if b is None else b}"
            + ("" if c is None else f":{c}")
            + "]"
        ),
        st.none() | st.integers(-8, 8),
        st.none() | st.integers(-8, 8),
        st.none() | st.sampled_from([1, 2, 3, -1, -2]),
    ),
)


@pytest.mark.parametrize("fw", ["oc", "ais"])
@SETTINGS
@given(
    n_test=st.integers(0, 9),
    n_train=st.none() | st.integers(0, 9),
    n=st.integers(1, 3),
    train_range=RANGES,
    test_range=RANGES,
    # ('dev', 'train'), ('train', 'train'): the reader reads the test split from its 'train'
    # split after replacing that by the kept train rows
    names=st.sampled_from(
        [("train", "test"), ("dev", "validation"), ("dev", "train"), ("train", "train")]
    ),
)
def test_from_loaded_matches_base_dataset(
    reference: dict[str, Any],
    refload: Any,
    fw: str,
    n_test: int,
    n_train: int | None,
    n: int,
    train_range: Any,
    test_range: Any,
    names: tuple[str, str],
) -> None:
    """``Dataset.from_loaded`` keeps, repeats and numbers the rows as the real ``BaseDataset``
    (its ``DatasetReader`` included) does: one split or two, ranges, ``n``, split names."""
    m = reference[fw]
    test = [{"q": f"q{i}", "a": "x"} for i in range(n_test)]
    train = None if n_train is None else [{"q": f"t{i}", "a": "y"} for i in range(n_train)]
    if train is None:
        # one loaded split: the reader names its two copies 'train' and 'test'
        names = ("train", names[1] if names[1] == "train" else "test")
    if not test or (train is not None and not train):
        return  # HF cannot type an empty split without columns
    reader = {"input_columns": ["q"], "output_column": "a"}
    reader.update(train_range=train_range, test_range=test_range)
    reader.update(train_split=names[0], test_split=names[1])
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ref = _golden_ns.reference_base_dataset(m, test, train, reader, abbr="ds", n=n)
        want: Any = (repr([dict(r) for r in ref.test]), repr([dict(r) for r in ref.train]))
    except TypeError:
        want = TypeError  # a float range that is not a fraction: the reference cannot slice
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SameSplitWarning)  # ('train', 'train')
            ours = FLAVORS[fw].Dataset.from_loaded(
                test,
                train,
                abbr="ds",
                n=n,
                train_range=train_range,
                test_range=test_range,
                train_split=names[0],
                test_split=names[1],
            )
    except TypeError:
        assert want is TypeError
        return
    assert (repr(ours.test), repr(ours.train)) == want
    # positions in the rows the test rows were read from: the train rows when the test split
    # is the reader's replaced 'train' split (and the loaded data has two splits)
    aliased = names[1] == "train" and train is not None and names[0] != names[1]
    source = train if aliased else test
    assert source is not None
    assert [source[i]["q"] for i in ours.test_indices] == [r["q"] for r in ours.test]
    assert len(ours.test) == promptweave.retrievers.prepared_test_size(
        len(test),
        n=n,
        test_range=test_range,
        flavor=OPENCOMPASS if fw == "oc" else AISBENCH,
        test_split=names[1],
        train_total=None if train is None or names[0] == names[1] else len(train),
        train_range=train_range,
    )


@SETTINGS
@given(n_train=st.integers(1, 12), n_test=st.integers(0, 12), k=st.integers(-2, 14))
def test_sliding_window_matches_reference(
    reference: dict[str, Any], refload: Any, n_train: int, n_test: int, k: int
) -> None:
    m = reference["oc"]
    train = [{"question": str(i), "answer": "a"} for i in range(n_train)]
    test = [{"question": str(i), "answer": "a"} for i in range(n_test)]
    ours = promptweave.SlidingWindowRetriever(Dataset(test, train), k)
    ref = m.SlidingWindowRetriever(refload.make_dataset(m, train, test, ["question"], "answer"), k)
    assert_same("oc", ours.retrieve, ref.retrieve)


#: (ice template, ice_token) -- string, dialogue, label dicts (str and dialogue), omitted form
ICE_TEMPLATES: list[tuple[Any, str | None]] = [
    ("{question}\n{answer}", None),
    ("Q: {question} A: {answer}{extra}", None),
    ("</E>Q: {question}\nA: {answer}", "</E>"),
    ({"round": [H("{question}"), B("{answer}")]}, None),
    ({"begin": [S("sys {extra}")], "round": [H("{question}"), B("{answer}")]}, None),
    ({"A": "{question} -> A", "B": "{question} -> B"}, None),
    ({"A": "</E>{question} -> A", "B": "</E>{question} -> B"}, "</E>"),
    ({"A": {"round": [H("{question}"), B("A")]}, "B": {"round": [H("{question}"), B("B")]}}, None),
    (
        {
            "A": {"begin": ["</E>"], "round": [H("{question}"), B("A")]},
            "B": {"begin": ["</E>"], "round": [H("{question}"), B("B")]},
        },
        "</E>",
    ),
    None,  # no ice template
]
#: prompt templates (template, ice_token)
PROMPT_TEMPLATES: list[tuple[Any, str | None] | None] = [
    None,
    ("Solve.\n</E>{question}\n{answer}", "</E>"),
    ("Q: {question}", None),
    ({"begin": [S("Solve."), "</E>"], "round": [H("{question}"), B("{answer}")]}, "</E>"),
    ({"round": [H("</E>{question}"), B("{answer}")]}, "</E>"),
    ({"A": "</E>{question} => A", "B": "</E>{question} => B"}, "</E>"),
    (
        {
            "A": {"begin": ["</E>"], "round": [H("{question}"), B("A")]},
            "B": {"begin": ["</E>"], "round": [H("{question}"), B("B")]},
        },
        "</E>",
    ),
]
SEPARATORS = st.sampled_from(["\n", "", "###", " "])


def make_pair(
    fw: str,
    m: Any,
    refload: Any,
    train: list[dict[str, Any]],
    test: list[dict[str, Any]],
    ids: list[int],
    ice: tuple[Any, str | None] | None,
    pt: tuple[Any, str | None] | None,
    sep: str,
    eos: str,
) -> tuple[Any, Any, Callable[[Any, Any], Any], Callable[[Any, Any], Any]]:
    """(ours, reference) FixK retrievers and template factories for flavour ``fw``."""
    api = FLAVORS[fw]

    def t_ours(spec: Any) -> Any:
        return None if spec is None else api.PromptTemplate(copy.deepcopy(spec[0]), spec[1])

    def t_ref(spec: Any) -> Any:
        return None if spec is None else m.PromptTemplate(copy.deepcopy(spec[0]), ice_token=spec[1])

    ds_ours = Dataset(test, train, ["question"], "answer")
    ds_ref = ref_dataset(refload, m, train, test)
    kw = {"ice_separator": sep, "ice_eos_token": eos}
    if fw == "ais":

        def cfg(spec: Any, kind: Any) -> Any:
            if spec is None:
                return None
            return {"type": kind, "template": copy.deepcopy(spec[0]), "ice_token": spec[1]}

        ours = api.FixKRetriever(
            ds_ours, ids, cfg(ice, api.PromptTemplate), cfg(pt, api.PromptTemplate), **kw
        )
        ref = m.FixKRetriever(
            ds_ref, ids, cfg(ice, m.PromptTemplate), cfg(pt, m.PromptTemplate), **kw
        )
    else:
        ours = api.FixKRetriever(ds_ours, ids, **kw)
        ref = m.FixKRetriever(ds_ref, fix_id_list=ids, **kw)
    return ours, ref, t_ours, t_ref


@pytest.mark.parametrize("fw", ["oc", "ais"])
@SETTINGS
@given(
    data=st.data(),
    ice=st.sampled_from(ICE_TEMPLATES),
    sep=SEPARATORS,
    eos=SEPARATORS,
)
def test_generate_ice_matches_reference(
    reference: dict[str, Any],
    refload: Any,
    fw: str,
    data: st.DataObject,
    ice: Any,
    sep: str,
    eos: str,
) -> None:
    m = reference[fw]
    answers = st.sampled_from(["A", "B", "C"]) if ice and isinstance(ice[0], dict) else TEXT
    train = data.draw(rows(1, 6, answers))
    idx = data.draw(st.lists(st.integers(-len(train), len(train)), max_size=5))
    ours, ref, t_ours, t_ref = make_pair(fw, m, refload, train, train[:1], [0], ice, None, sep, eos)
    if fw == "ais":
        assert_same(fw, lambda: ours.generate_ice(idx), lambda: ref.generate_ice(idx))
    else:
        assert_same(
            fw,
            lambda: ours.generate_ice(idx, ice_template=t_ours(ice)),
            lambda: ref.generate_ice(idx, ice_template=t_ref(ice)),
        )


@pytest.mark.parametrize("fw", ["oc", "ais"])
@SETTINGS
@given(
    data=st.data(),
    ice=st.sampled_from(ICE_TEMPLATES),
    pt=st.sampled_from(PROMPT_TEMPLATES),
    sep=SEPARATORS,
    eos=SEPARATORS,
    token=st.sampled_from(["", "<MASK>"]),
)
def test_prompt_assembly_matches_reference(
    reference: dict[str, Any],
    refload: Any,
    fw: str,
    data: st.DataObject,
    ice: Any,
    pt: Any,
    sep: str,
    eos: str,
    token: str,
) -> None:
    """generate_ice -> generate_prompt_for_generate_task / get_labels / generate_label_prompt."""
    m = reference[fw]
    labelled = any(spec and isinstance(spec[0], dict) and "A" in spec[0] for spec in (ice, pt))
    answers = st.sampled_from(["A", "B"]) if labelled else TEXT
    train = data.draw(rows(1, 5, answers))
    test = data.draw(rows(1, 3, answers))
    ids = data.draw(st.lists(st.integers(0, len(train) - 1), max_size=3))
    ours, ref, t_ours, t_ref = make_pair(fw, m, refload, train, test, ids, ice, pt, sep, eos)
    row = data.draw(st.integers(0, len(test) - 1))
    ais = fw == "ais"

    assert_same(
        fw,
        lambda: ours.retrieve()[row],
        lambda: ref.retrieve()[row],
    )
    if ais:
        assert_same(fw, lambda: ours.generate_ice(ids), lambda: ref.generate_ice(ids))
        ice_ours = ours.generate_ice(ids) if ice or not ids else ""
        ice_ref = ref.generate_ice(ids) if ice or not ids else ""
        assert_same(
            fw,
            lambda: ours.generate_prompt_for_generate_task(row, ice_ours, token),
            lambda: ref.generate_prompt_for_generate_task(row, ice_ref, token),
        )
        kind, _ = assert_same(fw, ours.get_labels, ref.get_labels)
        if kind == "value":
            for label in ours.get_labels():
                assert_same(
                    fw,
                    lambda label=label: ours.generate_label_prompt(row, ice_ours, label),
                    lambda label=label: ref.generate_label_prompt(row, ice_ref, label),
                )
        return
    it_o, pt_o, it_r, pt_r = t_ours(ice), t_ours(pt), t_ref(ice), t_ref(pt)
    assert_same(fw, lambda: ours.generate_ice(ids, it_o), lambda: ref.generate_ice(ids, it_r))
    ice_ours = ours.generate_ice(ids, it_o) if ice or not ids else ""
    ice_ref = ref.generate_ice(ids, it_r) if ice or not ids else ""
    assert_same(
        fw,
        lambda: ours.generate_prompt_for_generate_task(row, ice_ours, token, it_o, pt_o),
        lambda: ref.generate_prompt_for_generate_task(row, ice_ref, token, it_r, pt_r),
    )
    kind, _ = assert_same(
        fw, lambda: ours.get_labels(it_o, pt_o), lambda: ref.get_labels(it_r, pt_r)
    )
    if kind == "value":
        for label in ours.get_labels(it_o, pt_o):
            for remain_sep in (False, True):
                assert_same(
                    fw,
                    lambda label=label, rs=remain_sep: ours.generate_label_prompt(
                        row, ice_ours, label, it_o, pt_o, rs
                    ),
                    lambda label=label, rs=remain_sep: ref.generate_label_prompt(
                        row, ice_ref, label, it_r, pt_r, rs
                    ),
                )


def test_get_labels_set_order_matches_reference(reference: dict[str, Any], refload: Any) -> None:
    """Same process, same hash seed: the same list(set(...)) order as the reference."""
    labels = [f"label-{i}-{c}" for i in range(40) for c in "xyz"]
    test = [{"question": "q", "answer": lab} for lab in labels]
    for fw in ("oc", "ais"):
        m = reference[fw]
        ours = FLAVORS[fw].ZeroRetriever(Dataset(test, None, ["question"], "answer"))
        ref = m.ZeroRetriever(refload.make_dataset(m, test, test, ["question"], "answer"))
        assert ours.get_labels() == ref.get_labels()
        assert ours.get_labels(ordered=True) == list(dict.fromkeys(labels))


# ============================================================================ promptweave only


ROWS = [{"question": f"{i}+{i}=?", "answer": str(2 * i)} for i in range(4)]


def test_dataset_inputs() -> None:
    columns = {"question": ["a", "b"], "answer": ["x", "y"]}
    expected = [{"question": "a", "answer": "x"}, {"question": "b", "answer": "y"}]
    assert Dataset(columns).test == expected
    assert Dataset(iter(expected)).train == expected
    pandas = pytest.importorskip("pandas")
    assert Dataset(pandas.DataFrame(columns)).test == expected
    pyarrow = pytest.importorskip("pyarrow")
    assert Dataset(pyarrow.table(columns)).test == expected
    datasets = pytest.importorskip("datasets")
    assert Dataset(datasets.Dataset.from_dict(columns)).test == expected
    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(expected), "dev": datasets.Dataset.from_dict(columns)}
    )
    d = Dataset.from_splits(dd, "question", "answer", test_split="dev")
    assert d.train == d.test == expected
    assert d.input_columns == ["question"]


def test_dataset_defaults_and_checks() -> None:
    d = Dataset(ROWS, output_column="answer")
    assert d.train == d.test == ROWS
    assert d.train is not d.test
    assert d.input_columns == ["question"]
    assert Dataset(ROWS, output_column="").output_column is None
    assert d.reader is d
    assert d.generate_input_field_corpus() == [r["question"] for r in ROWS]
    assert d.generate_output_field_corpus("test") == [r["answer"] for r in ROWS]
    with pytest.raises(PromptTypeError):
        Dataset([1, 2])
    with pytest.raises(PromptTypeError):
        Dataset(ROWS, input_columns=5)  # type: ignore[arg-type]
    with pytest.raises(PromptTypeError) as info:
        aisbench.Dataset(ROWS, output_column=3)  # type: ignore[arg-type]
    assert info.value.error_code == "UTILS-TYPE-004"
    with pytest.raises(RetrieverError):
        Dataset({"a": [1, 2], "b": [1]})
    with pytest.raises(PromptTypeError):
        promptweave.FixKRetriever(ROWS, [0])


def test_dataset_coerces_reference_like_objects(reference: dict[str, Any], refload: Any) -> None:
    m = reference["oc"]
    ref_ds = refload.make_dataset(m, ROWS, ROWS[:2], "question", "answer")
    r = promptweave.FixKRetriever(ref_ds, [0, 1])
    assert r.test_ds == ROWS[:2]
    assert r.index_ds == ROWS
    assert r.dataset_reader.output_column == "answer"


def test_index_list_retriever() -> None:
    ds = Dataset(ROWS[:2], ROWS, ["question"], "answer")
    r = promptweave.IndexListRetriever(ds, [[3, 0], []])
    assert r.retrieve() == [[3, 0], []]
    assert r.ice_num == 2
    t = promptweave.PromptTemplate("{question}={answer}")
    assert r.generate_ice(r.retrieve()[0], t) == "3+3=?=6\n0+0=?=0\n"
    for bad, family in [
        ([[0]], RetrieverError),  # one list for two test rows
        ([[0], [4]], RetrieverError),
        ([[0], [-1]], RetrieverError),
        ([[0], [1.0]], PromptTypeError),
        ([[0], [True]], PromptTypeError),
        ([[0], "12"], PromptTypeError),
        ("ab", PromptTypeError),
    ]:
        with pytest.raises(family):
            promptweave.IndexListRetriever(ds, bad)
    np = pytest.importorskip("numpy")
    assert promptweave.IndexListRetriever(ds, np.array([[1, 2], [3, 0]])).retrieve() == [
        [1, 2],
        [3, 0],
    ]
    a = aisbench.IndexListRetriever(
        ds, [[1], [2]], ice_template={"type": "PromptTemplate", "template": "{question}"}
    )
    assert a.generate_ice([1, 2]) == "1+1=?\n2+2=?\n"
    assert type(a.ice_template) is aisbench.PromptTemplate


def test_ais_template_configs(reference: dict[str, Any]) -> None:
    ds = Dataset(ROWS[:1], ROWS, ["question"], "answer")
    ref_pt = reference["ais"].PromptTemplate
    dotted = "ais_bench.benchmark.openicl.icl_prompt_template.PromptTemplate"
    for kind in (None, "PromptTemplate", dotted, aisbench.PromptTemplate, ref_pt):
        cfg: dict[str, Any] = {"template": "</E>{question}", "ice_token": "</E>"}
        if kind is not None:
            cfg["type"] = kind
        r = aisbench.ZeroRetriever(ds, prompt_template=cfg)
        assert type(r.prompt_template) is aisbench.PromptTemplate
        assert r.generate_prompt_for_generate_task(0, "") == "0+0=?"
    built = aisbench.PromptTemplate("{question}")
    assert aisbench.ZeroRetriever(ds, prompt_template=built).prompt_template is built
    with pytest.raises(PromptTypeError):
        aisbench.ZeroRetriever(ds, prompt_template={"type": "Nope", "template": "x"})
    assert aisbench.FixKRetriever(ds, [0]).get_gold_ans() == ["0"]
    assert aisbench.FixKRetriever(Dataset(ROWS), [0]).get_gold_ans() is None


def test_zero_retriever_id_list_warns() -> None:
    z = promptweave.ZeroRetriever(Dataset(ROWS))
    with pytest.warns(UserWarning, match="will be ignored"):
        assert z.retrieve([1, 2]) == [[]] * 4


def test_fixk_returns_the_same_list_object() -> None:
    ids = [0, 2]
    out = promptweave.FixKRetriever(Dataset(ROWS), ids).retrieve()
    assert all(x is ids for x in out)


def test_generate_ice_index_errors() -> None:
    r = promptweave.FixKRetriever(Dataset(ROWS, None, ["question"], "answer"), [0])
    t = promptweave.PromptTemplate("{question}")
    assert r.generate_ice([-1], t) == "3+3=?\n"  # Python indexing, as HF datasets
    with pytest.raises(IndexError) as info:
        r.generate_ice([9], t)
    assert isinstance(info.value, RetrieverError)
    no_answer = promptweave.FixKRetriever(Dataset(ROWS), [0])
    with pytest.raises(KeyError) as kinfo:
        no_answer.generate_ice([0], t)
    assert isinstance(kinfo.value, RetrieverError)
    with pytest.raises(RetrieverError):
        no_answer.get_labels()


def test_oc_extra_prompt_methods(reference: dict[str, Any], refload: Any) -> None:
    m = reference["oc"]
    test = [{"question": "Q", "answer": "A", "label": 1}]
    ours = promptweave.ZeroRetriever(Dataset(test, ROWS, ["question"], "answer"))
    ref = m.ZeroRetriever(refload.make_dataset(m, ROWS, test, ["question"], "answer"))
    pt_o = promptweave.PromptTemplate("{question}|{answer}|{more}")
    pt_r = m.PromptTemplate("{question}|{answer}|{more}")
    assert ours.generate_prompt_and_label_for_generate_task(
        0, "", "X", prompt_template=pt_o
    ) == ref.generate_prompt_and_label_for_generate_task(0, "", "X", prompt_template=pt_r)
    assert ours.generate_prompt_for_adv_generate_task(
        0, "", {"more": "M"}, prompt_template=pt_o
    ) == ref.generate_prompt_for_adv_generate_task(0, "", {"more": "M"}, prompt_template=pt_r)


def test_exports() -> None:
    names = ["BaseRetriever", "Dataset", "FixKRetriever", "IndexListRetriever", "RandomRetriever"]
    names += ["SlidingWindowRetriever", "ZeroRetriever"]
    for name in names:
        assert getattr(promptweave, name) is getattr(opencompass, name) is getattr(retrievers, name)
        assert name in promptweave.__all__
        assert name in opencompass.__all__
        if name != "SlidingWindowRetriever":
            assert name in aisbench.__all__
            assert issubclass(getattr(aisbench, name), getattr(retrievers, name)) == (
                name == "Dataset"
            )
    assert "RetrieverError" in promptweave.__all__
    assert promptweave.__all__ == sorted(promptweave.__all__)
    assert not hasattr(aisbench, "SlidingWindowRetriever")
    assert aisbench.FixKRetriever._flavor == "aisbench"


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_bool_row_indices_fail_as_the_reference(fw: str, reference: dict[str, Any]) -> None:
    """A bool is no row index for the reference's (HuggingFace) dataset: ``fix_id_list=[True]``
    and ``generate_prompt_for_generate_task(True, ...)`` raise ``TypeError``, on every path."""
    rows = [{"q": "x", "a": "y"}, {"q": "z", "a": "w"}]
    cfg = {
        "ice_template": {"template": "{q} {a}"},
        "prompt_template": {"template": "</E>{q}", "ice_token": "</E>"},
        "retriever": {"type": "FixKRetriever", "fix_id_list": [True, 0]},
        "inferencer": {"type": "GenInferencer"},
    }
    flavor = {"oc": "opencompass", "ais": "aisbench"}[fw]
    reader = {"input_columns": ["q"], "output_column": "a"}
    renderer = promptweave.DatasetRenderer(cfg, reader, flavor=flavor)
    with pytest.raises(TypeError, match="index"):
        renderer.render(rows, rows)
    if fw == "oc":
        retriever = opencompass.ZeroRetriever(opencompass.Dataset(rows, rows, ["q"], "a"))
        template = {"prompt_template": opencompass.PromptTemplate("{q}")}
    else:  # AISBench's retrievers hold their template
        template = {}
        retriever = aisbench.ZeroRetriever(
            aisbench.Dataset(rows, rows, ["q"], "a"), prompt_template=aisbench.PromptTemplate("{q}")
        )
    with pytest.raises(TypeError, match="index"):
        retriever.generate_prompt_for_generate_task(True, "", **template)
