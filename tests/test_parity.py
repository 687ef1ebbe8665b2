"""Property tests: promptweave(x) == reference(x), for both flavours and both backends.

Every test draws inputs with hypothesis, runs the same operation through promptweave and through
the reference framework (the ``reference`` fixture of ``conftest.py``: OpenCompass 0.5.4 as
``'oc'``, AISBench 3.1 as ``'ais'``) and compares the outcomes like ``tests/test_golden.py``:

* the reference returns -> ours returns a value with the same ``repr`` and type name (and issues
  the same "Non-empty string" warnings);
* the reference raises a builtin ``E`` -> ours raises a :class:`PromptRenderError` that is an
  instance of ``E``;
* the reference raises an AISBench error ``[CODE]`` -> ours raises a :class:`PromptRenderError`
  with ``.error_code == CODE``;
* the reference prints (unknown role without fallback, spec 06 §C) -> ours raises
  :class:`UnknownRoleError`; ours never prints;
* the reference hits ``RecursionError`` (``non_empty_list + PromptList``, spec 06 B#10) -> the
  example is skipped (documented deviation, ``tests/test_golden.py`` ``DEVIATIONS``).

Each test runs on the Rust core (default) and on the pure-Python path (``FORCE_PYTHON``).
Run with ``HYPOTHESIS_PROFILE=slow`` for 1000 examples per test.
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, reject, settings
from hypothesis import strategies as st

import promptweave.aisbench
import promptweave.opencompass
from promptweave import _backend, _core
from promptweave.errors import PromptRenderError, UnknownRoleError

FRAMEWORKS = ["oc", "ais"]
OURS: dict[str, ModuleType] = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}

ICE = "</E>"
SEP = "<SEP>"
WARNING_MARK = "Non-empty string"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
AIS_CODE = re.compile(r"^\[([A-Z0-9]+(?:-[A-Z0-9]+)+)\]")

SETTINGS = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
    ],
)


# =============================================================================== outcomes


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    stdout: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        if self.error is not None:
            return f"raised {type(self.error).__name__}: {ANSI.sub('', str(self.error))[:300]}"
        return f"returned {type(self.value).__name__}: {self.value!r}"


def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Outcome:
    """Call ``fn``, capturing its value or exception, stdout and "Non-empty string" warnings."""
    out = Outcome()
    buf = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(buf):
        warnings.simplefilter("always")
        try:
            out.value = fn(*args, **kwargs)
        except Exception as exc:  # every exception is compared by the caller
            out.error = exc
    out.stdout = buf.getvalue()
    out.warnings = sorted(str(w.message) for w in caught if WARNING_MARK in str(w.message))
    return out


def ais_code(exc: BaseException) -> str | None:
    """The ``[CODE]`` of an AISBench reference exception, or ``None`` for other exceptions."""
    name = type(exc).__name__
    if not (name.startswith("AISBench") or name == "ParameterValueError"):
        return None
    match = AIS_CODE.match(ANSI.sub("", str(exc)))
    assert match, f"AISBench error without a [CODE]: {ANSI.sub('', str(exc))!r}"
    return match.group(1)


def check(ours: Outcome, ref: Outcome, what: str, *, compare_value: bool = True) -> bool:
    """Assert that ``ours`` matches the reference outcome ``ref``; True iff both returned."""
    note(f"{what}: reference {ref.describe()} | ours {ours.describe()}")
    event(f"{what.split('(')[0]}: reference {'value' if ref.ok else type(ref.error).__name__}")
    if ref.stdout:
        event(f"{what.split('(')[0]}: reference printed")
    assert ours.stdout == "", f"{what}: promptweave printed {ours.stdout!r}"
    if ours.error is not None:
        assert not isinstance(ours.error, RecursionError), f"{what}: ours {ours.describe()}"
    if ref.ok:
        assert ours.ok, f"{what}: reference {ref.describe()}, but ours {ours.describe()}"
        if compare_value:
            assert type(ours.value).__name__ == type(ref.value).__name__, (
                f"{what}: type {type(ours.value).__name__} != reference "
                f"{type(ref.value).__name__} (value {ours.value!r} vs {ref.value!r})"
            )
            assert repr(ours.value) == repr(ref.value), (
                f"{what}:\n  ours      {ours.value!r}\n  reference {ref.value!r}"
            )
        assert ours.warnings == ref.warnings, (
            f"{what}: warnings {ours.warnings} != reference {ref.warnings}"
        )
        return True
    if isinstance(ref.error, RecursionError):
        reject()  # documented deviation (spec 06 B#10): promptweave returns a value instead
    assert ours.error is not None, f"{what}: reference {ref.describe()}, but ours {ours.describe()}"
    if ref.stdout:  # the reference printed "... neither has an appropriate role ..."
        assert isinstance(ours.error, UnknownRoleError), (
            f"{what}: reference printed {ref.stdout!r} and {ref.describe()}; expected "
            f"UnknownRoleError, but ours {ours.describe()}"
        )
        return False
    assert isinstance(ours.error, PromptRenderError), (
        f"{what}: reference {ref.describe()}; ours is not a PromptRenderError: {ours.describe()}"
    )
    code = ais_code(ref.error) if ref.error is not None else None
    if code is not None:
        assert ours.error.error_code == code, (
            f"{what}: reference [{code}] ({ref.describe()}), but ours {ours.describe()} "
            f"(error_code={ours.error.error_code!r})"
        )
    else:
        cls = type(ref.error)
        assert cls.__module__ == "builtins", f"{what}: unexpected reference {ref.describe()}"
        assert isinstance(ours.error, cls), (
            f"{what}: reference {ref.describe()}, ours is not a {cls.__name__}: {ours.describe()}"
        )
    return False


def both(
    ours_fn: Callable[..., Any],
    ref_fn: Callable[..., Any],
    *args: Any,
    what: str,
    compare_value: bool = True,
    **kwargs: Any,
) -> tuple[Outcome, Outcome, bool]:
    """Run ``ours_fn`` and ``ref_fn`` on (separate deep copies of) the same arguments."""
    ref = run(ref_fn, *copy.deepcopy(args), **copy.deepcopy(kwargs))
    ours = run(ours_fn, *copy.deepcopy(args), **copy.deepcopy(kwargs))
    ok = check(ours, ref, what, compare_value=compare_value)
    return ours, ref, ok


# ============================================================================== fixtures


@pytest.fixture(params=["rust", "python"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The Rust core (default) or the pure-Python path (``FORCE_PYTHON``)."""
    monkeypatch.setattr(_backend, "FORCE_PYTHON", request.param == "python")
    return str(request.param)


class _Impls(dict):  # type: ignore[type-arg]
    """The reference namespaces, with a short repr for hypothesis' falsifying examples."""

    def __repr__(self) -> str:
        return "<reference>"


@pytest.fixture
def impls(reference: dict[str, Any]) -> dict[str, Any]:
    return _Impls(reference)


@pytest.fixture
def rust_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", False)


@pytest.fixture(autouse=True)
def _no_fd_output(capfd: pytest.CaptureFixture[str]) -> Any:
    """Nothing may be written below ``sys.stdout`` either (e.g. from Rust)."""
    capfd.readouterr()
    yield
    assert capfd.readouterr().out == "", "something wrote to file descriptor 1"


# ============================================================================= strategies

#: row keys: ordinary, odd (space, digit, unicode, empty) and a prefix for nested '{x{a}}'
KEYS = ["question", "answer", "a", "b", "xa", "x y", "1", "é", "中文", "", "k😀"]
MISSING = ["missing", "x", "ANSWER"]
SURROGATES = ["\ud800", "\udfff", "x\udc80y"]

_CHARS = [*"abqA: ?.\n\t", "中", "文", "😀", "é", "\u0301", "e", "ﬁ", "<", ">", "/", "E"]
_SAFE_CHARS = [*"abqA: ?.\n\t", "中", "文", "😀", "é", "\u0301", "ﬁ", "/", "E"]


def _text(chars: list[str], max_size: int = 5) -> st.SearchStrategy[str]:
    return st.text(alphabet=st.sampled_from(chars), max_size=max_size)


LITERAL = _text(_CHARS)
SAFE_LITERAL = _text(_SAFE_CHARS)  # no '<' '>': cannot form ice/sep tokens
PLACEHOLDER = st.sampled_from(KEYS + MISSING).map(lambda k: "{" + k + "}")
NESTED = st.builds(
    lambda pre, k: "{" + pre + "{" + k + "}}",
    st.sampled_from(["x", "", "a "]),
    st.sampled_from(KEYS),
)
STRAY = st.sampled_from(["{", "}", "{{", "}}", ICE, SEP, "</E", "SEP>"])


def template_texts(
    *,
    max_pieces: int = 6,
    stray: bool = True,
    surrogates: bool = False,
) -> st.SearchStrategy[str]:
    """Template text built from literals, placeholders, stray braces and ice/sep tokens."""
    pieces = [LITERAL, PLACEHOLDER, PLACEHOLDER]
    if stray:
        pieces += [STRAY, NESTED]
    if surrogates:
        pieces.append(st.sampled_from(SURROGATES))
    return st.lists(st.one_of(*pieces), max_size=max_pieces).map("".join)


def values(*, well_typed: bool = False) -> st.SearchStrategy[Any]:
    """Row values: text with braces/placeholders, empty strings and (unless ``well_typed``)
    ints, floats, None, bools, lists and lone surrogates."""
    text = template_texts(max_pieces=3)
    if well_typed:
        return st.one_of(text, st.just(""), LITERAL)
    return st.one_of(
        text,
        st.just(""),
        LITERAL,
        st.integers(min_value=-(10**20), max_value=10**20),
        st.floats(),
        st.none(),
        st.booleans(),
        st.lists(st.one_of(st.integers(-5, 5), LITERAL), max_size=3),
        st.builds(lambda a, s, b: a + s + b, LITERAL, st.sampled_from(SURROGATES), LITERAL),
    )


def rows(
    *, well_typed: bool = False, keys: list[str] | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """Data rows: str keys (incl. odd ones) in random order."""
    pool = keys or (KEYS if well_typed else [*KEYS, "\udc80k"])
    return st.lists(
        st.tuples(st.sampled_from(pool), values(well_typed=well_typed)),
        max_size=6,
        unique_by=lambda kv: kv[0],
    ).map(dict)


ROLES = ["HUMAN", "HUMAN", "BOT", "BOT", "SYSTEM", "THOUGHTS", "USER"]


@st.composite
def role_items(draw: Any, *, well_typed: bool = False, texts: Any = None) -> dict[str, Any]:
    """A dialogue role dict: HUMAN/BOT/SYSTEM(+fallback)/unknown, template prompt, extras."""
    texts = texts if texts is not None else template_texts(max_pieces=4)
    role = draw(st.sampled_from(ROLES))
    item: dict[str, Any] = {"role": role}
    if role == "SYSTEM" or draw(st.integers(0, 5)) == 0:
        choices = ["HUMAN", "HUMAN", "BOT", "NOPE"] + ([] if well_typed else [None, ""])
        item["fallback_role"] = draw(st.sampled_from(choices))
    kind = draw(st.integers(0, 11))
    if kind == 0 and not well_typed:
        pass  # no prompt
    elif kind == 1 and not well_typed:
        item["prompt"] = draw(st.integers(-3, 3))
    else:
        item["prompt"] = draw(texts)
    if draw(st.integers(0, 7)) == 0:
        item["extra"] = draw(texts)  # survives unformatted
    if draw(st.integers(0, 11)) == 0:  # dialogue keys override meta role keys
        key = draw(st.sampled_from(["begin", "end", "generate"]))
        item[key] = draw(st.booleans()) if key == "generate" else draw(SAFE_LITERAL)
    if not well_typed and draw(st.integers(0, 29)) == 0:  # no role / a non-str role
        if draw(st.booleans()):
            del item["role"]
        else:
            item["role"] = 1
    return item


@st.composite
def dialogues(draw: Any, *, well_typed: bool = False, texts: Any = None) -> dict[str, Any]:
    """A dialogue template: begin (list/str/dict), round (role dicts and strings), end."""
    texts = texts if texts is not None else template_texts(max_pieces=4)
    role = role_items(well_typed=well_typed, texts=texts)
    # string items, including ones that are just tokens (deleted to '' / split away)
    strings = st.one_of(texts, st.sampled_from([ICE, SEP, "", SEP + ICE, "x" + SEP]))
    tpl: dict[str, Any] = {}
    if draw(st.booleans()):
        begin_item = st.one_of(role, role, st.just(ICE), strings)
        tpl["begin"] = draw(
            st.one_of(st.lists(begin_item, max_size=3), texts, role)
            if not well_typed
            else st.lists(begin_item, max_size=3)
        )
    shape = draw(st.integers(0, 19))
    if shape == 0 and not well_typed:
        pass  # no 'round' -> KeyError('round')
    elif shape == 1 and not well_typed:
        tpl["round"] = draw(st.one_of(strings, role))  # str item / dict keys spliced
    else:
        tpl["round"] = draw(st.lists(st.one_of(role, role, role, strings), max_size=4))
    if draw(st.integers(0, 3)) == 0:
        tpl["end"] = draw(st.lists(st.one_of(role, strings), max_size=2))
    return tpl


LABELS = ["A", "B", "C", 0, 1]


@st.composite
def templates(draw: Any, ice_token: str | None, *, well_typed: bool = False) -> Any:
    """A str template, a dialogue template or a label dict (str / dialogue values)."""
    texts = template_texts(surrogates=not well_typed)

    def with_token(text: str) -> str:
        if ice_token and draw(st.integers(0, 4)) > 0:
            at = draw(st.integers(0, len(text)))
            text = text[:at] + ice_token + text[at:]
        return text

    kind = draw(st.sampled_from(["str", "dialogue", "dialogue", "label"]))
    if kind == "str":
        return with_token(draw(texts))
    if kind == "dialogue":
        return draw(dialogues(well_typed=well_typed))
    labels = draw(st.lists(st.sampled_from(LABELS), min_size=1, max_size=3, unique=True))
    out: dict[Any, Any] = {}
    for label in labels:
        if draw(st.booleans()):
            out[label] = with_token(draw(texts))
        else:
            out[label] = draw(dialogues(well_typed=well_typed))
    return out


@st.composite
def meta_templates(draw: Any, *, well_typed: bool = False) -> dict[str, Any] | None:
    """A model meta template (or None): 1-3 round roles, defaults, generate flags, api roles."""
    if draw(st.integers(0, 5)) == 0:
        return None
    text = SAFE_LITERAL if well_typed else st.one_of(SAFE_LITERAL, st.sampled_from(SURROGATES))
    names = draw(
        st.lists(st.sampled_from(["HUMAN", "BOT", "THOUGHTS"]), min_size=1, max_size=3, unique=True)
    )
    round_: list[Any] = []
    for name in names:
        role: dict[str, Any] = {"role": name}
        for key in ("begin", "end", "prompt"):
            if draw(st.integers(0, 2 if key != "prompt" else 4)) == 0:
                continue
            role[key] = draw(text)
        if draw(st.integers(0, 2)) == 0 or (name == "BOT" and draw(st.booleans())):
            role["generate"] = True
            if not well_typed and draw(st.integers(0, 5)) == 0:  # truthy / falsy non-bools
                role["generate"] = draw(st.sampled_from([1, 0, "yes", "", None, False]))
        if draw(st.integers(0, 9)) > 0:
            role["api_role"] = name
        if not well_typed and draw(st.integers(0, 19)) == 0:  # NotImplementedError / TypeError
            role[draw(st.sampled_from(["begin", "end", "prompt"]))] = draw(
                st.sampled_from([["<s>", 1], 5, None])
            )
        round_.append(role)
    if draw(st.integers(0, 5)) == 0:  # a string entry in the round
        at = draw(st.integers(0, len(round_)))
        round_.insert(at, draw(text))
    meta: dict[str, Any] = {"round": round_}
    if draw(st.booleans()):
        system: dict[str, Any] = {"role": "SYSTEM", "api_role": "SYSTEM"}
        if draw(st.booleans()):
            system.update(begin="<S>", end="</S>")
        meta["reserved_roles"] = [system]
        if not well_typed and draw(st.integers(0, 9)) == 0:  # duplicate role
            meta["reserved_roles"].append({"role": names[0], "api_role": names[0]})
    if draw(st.integers(0, 2)) == 0:
        meta["begin"] = draw(text)
    if draw(st.integers(0, 2)) == 0:
        meta["end"] = draw(text)
    if not well_typed and draw(st.integers(0, 29)) == 0:  # list begin/end: TypeError (LM-60)
        meta[draw(st.sampled_from(["begin", "end"]))] = ["<s>"]
    return meta


MARKERS = [
    {"section": s, "pos": p} for s in ("begin", "round", "end", "ice") for p in ("begin", "end")
]
#: markers the reference rejects (unknown section / pos) or treats specially (extra keys)
ODD_MARKERS = [
    {"section": "foo", "pos": "begin"},
    {"section": "round", "pos": "middle"},
    {"section": "round", "pos": "begin", "prompt": "M"},
    {"section": "round", "pos": "end", "role": "HUMAN", "prompt": "M"},
]


@st.composite
def prompt_lists(draw: Any, *, well_typed: bool = False) -> list[Any]:
    """Items for a PromptList: strings, role dicts, prompt-less dicts, section markers."""
    texts = template_texts(max_pieces=4, surrogates=not well_typed)
    role = role_items(well_typed=well_typed, texts=texts)
    item = st.one_of(
        texts,
        role,
        role,
        st.sampled_from(MARKERS),
        st.just({"role": "BOT"}),
        st.just("the role of content"),
        *([] if well_typed else [st.integers(-2, 2), st.sampled_from(ODD_MARKERS)]),
    )
    items: list[Any] = draw(st.lists(item, max_size=6))
    return items


@st.composite
def dialogue_prompt_lists(draw: Any, *, well_typed: bool = False) -> list[Any]:
    """PromptList items laid out like PromptTemplate encodes dialogues (begin/round/ice/end)."""
    texts = template_texts(max_pieces=3, surrogates=not well_typed)
    role = role_items(well_typed=well_typed, texts=texts)
    body = st.lists(st.one_of(role, role, role, texts), max_size=5)
    out: list[Any] = []
    for section in draw(
        st.lists(st.sampled_from(["begin", "ice", "round", "round", "end"]), max_size=4)
    ):
        items = draw(body)
        if section == "end":  # PromptTemplate's quirk: both end markers are pos='end'
            out += [{"section": "end", "pos": "end"}, *items, {"section": "end", "pos": "end"}]
        else:
            out += [
                {"section": section, "pos": "begin"},
                *items,
                {"section": section, "pos": "end"},
            ]
        if draw(st.integers(0, 3)) == 0:
            out.append(draw(texts))  # ICE separators between sections
    if not well_typed and draw(st.integers(0, 5)) == 0:  # break the structure
        if out and draw(st.booleans()):
            del out[draw(st.integers(0, len(out) - 1))]
        else:
            out.insert(draw(st.integers(0, len(out))), draw(st.sampled_from(MARKERS + ODD_MARKERS)))
    return out


# ================================================================================ helpers


def apis(reference: dict[str, Any], fw: str) -> tuple[Any, Any]:
    return OURS[fw], reference[fw]


def _ice_kind(template: Any, label: Any) -> str:
    """'str' if the in-context examples of ``label`` are strings, else 'list'."""
    if isinstance(template, str):
        return "str"
    if isinstance(template, dict) and all(k in ("begin", "round", "end") for k in template):
        return "list"
    try:
        return "str" if isinstance(template[label], str) else "list"
    except (KeyError, TypeError):
        return "str"


def build_ice(api: Any, items: list[Any], kind: str) -> Any:
    """Assemble in-context examples like a FixK retriever does."""
    if kind == "str" and all(isinstance(x, str) for x in items):
        return "".join(x + "\n" for x in items)
    ice = api.PromptList()
    for x in items:
        ice += x
    return ice


@dataclass
class Stage:
    what: str
    ours: Outcome
    ref: Outcome
    fallbacks: int  # calls of this stage that promptweave rendered on the Python path


def run_pipeline(reference: dict[str, Any], fw: str, data: Any, *, well_typed: bool) -> list[Stage]:
    """Draw one full pipeline and compare every stage (template -> ICE -> item -> parse)."""
    ours_api, ref_api = apis(reference, fw)
    ice_token = data.draw(st.sampled_from([None, ICE, ICE, ICE] + ([] if well_typed else [""])))
    sep_token = data.draw(
        st.sampled_from([None, None, SEP, SEP] + ([] if well_typed else ["", ICE]))
    )
    template = data.draw(templates(ice_token, well_typed=well_typed), label="template")
    train = data.draw(st.lists(rows(well_typed=well_typed), max_size=5), label="train rows")
    test_row = data.draw(rows(well_typed=well_typed), label="test row")
    if isinstance(template, dict) and not all(k in ("begin", "round", "end") for k in template):
        label = data.draw(st.sampled_from([*template, *(["C", ["A"]] if not well_typed else [])]))
    else:
        label = data.draw(st.sampled_from([None, "A"]))
    output_field = data.draw(
        st.sampled_from(
            [None, "answer", "answer", "question", "missing", *([] if well_typed else [0])]
        )
    )
    output_token = data.draw(
        st.sampled_from(["", "", "<ANS>", "{question}", *([] if well_typed else [None, 0])])
    )
    meta = data.draw(meta_templates(well_typed=well_typed), label="meta template")
    mode = data.draw(st.sampled_from(["gen", "ppl"]), label="mode")
    remain_sep = data.draw(st.booleans(), label="remain_sep")
    use_ice = data.draw(
        st.sampled_from(["built"] * 6 + ["none"] + ([] if well_typed else ["plain list"])),
        label="ICE",
    )
    if not well_typed and data.draw(st.integers(0, 9), label="OrderedDict rows") == 0:
        train = [OrderedDict(r) for r in train]
        test_row = OrderedDict(test_row)

    results: list[Stage] = []

    def step(what: str, ours_fn: Callable[[], Any], ref_fn: Callable[[], Any], **kw: Any) -> Any:
        r = run(ref_fn)
        before = _backend.fallbacks
        o = run(ours_fn)
        results.append(Stage(what, o, r, _backend.fallbacks - before))
        return (o.value, r.value) if check(o, r, what, **kw) else None

    args = (ice_token, sep_token)
    got = step(
        "PromptTemplate(...)",
        lambda: ours_api.PromptTemplate(copy.deepcopy(template), *args),
        lambda: ref_api.PromptTemplate(copy.deepcopy(template), *args),
    )
    if got is None:
        return results
    ours_t, ref_t = got

    ours_items: list[Any] = []
    ref_items: list[Any] = []
    for k, row in enumerate(train):
        got = step(
            f"generate_ice_item(train[{k}], {label!r})",
            lambda row=row: ours_t.generate_ice_item(copy.deepcopy(row), label),
            lambda row=row: ref_t.generate_ice_item(copy.deepcopy(row), label),
        )
        if got is None:
            return results
        ours_items.append(got[0])
        ref_items.append(got[1])
    kind = _ice_kind(template, label)
    ours_ice = build_ice(ours_api, ours_items, kind)
    ref_ice = build_ice(ref_api, ref_items, kind)
    if use_ice == "none":
        ours_ice = ref_ice = ""
    elif use_ice == "plain list":  # e.g. raw messages: string items are dropped (PL-06)
        ours_ice = list(ours_ice) if isinstance(ours_ice, list) else [ours_ice]
        ref_ice = list(ref_ice) if isinstance(ref_ice, list) else [ref_ice]
    note(f"ICE: {ref_ice!r}")

    prompts: list[tuple[str, Any, Any]] = []
    got = step(
        "generate_item",
        lambda: ours_t.generate_item(
            copy.deepcopy(test_row), output_field, output_token, ice_field_replace_token=ours_ice
        ),
        lambda: ref_t.generate_item(
            copy.deepcopy(test_row), output_field, output_token, ice_field_replace_token=ref_ice
        ),
    )
    if got is not None:
        prompts.append(("generate_item", *got))
    got = step(
        f"generate_label_prompt_item(remain_sep={remain_sep})",
        lambda: ours_t.generate_label_prompt_item(
            copy.deepcopy(test_row), ours_ice, label, remain_sep=remain_sep
        ),
        lambda: ref_t.generate_label_prompt_item(
            copy.deepcopy(test_row), ref_ice, label, remain_sep=remain_sep
        ),
    )
    if got is not None:
        prompts.append(("generate_label_prompt_item", *got))

    for parser in ("LMTemplateParser", "APITemplateParser"):
        got = step(
            f"{parser}(meta)",
            lambda parser=parser: getattr(ours_api, parser)(copy.deepcopy(meta)),
            lambda parser=parser: getattr(ref_api, parser)(copy.deepcopy(meta)),
            compare_value=False,
        )
        if got is None:
            continue
        ours_p, ref_p = got
        for name, ours_prompt, ref_prompt in prompts:
            step(
                f"{parser}.parse_template({name}, {mode!r})",
                lambda p=ours_p, x=ours_prompt: p.parse_template(copy.deepcopy(x), mode),
                lambda p=ref_p, x=ref_prompt: p.parse_template(copy.deepcopy(x), mode),
            )
        if len(prompts) == 2:  # a batch: a plain list of prompts gives a list of results
            step(
                f"{parser}.parse_template([<item>, <label item>], {mode!r})",
                lambda p=ours_p: p.parse_template(copy.deepcopy([x for _, x, _ in prompts]), mode),
                lambda p=ref_p: p.parse_template(copy.deepcopy([x for _, _, x in prompts]), mode),
            )
    return results


# ================================================================================== tests


@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_safe_format(impls: dict[str, Any], fw: str, backend: str, data: Any) -> None:
    ours_api, ref_api = apis(impls, fw)
    template = data.draw(template_texts(max_pieces=8, surrogates=True), label="template")
    row = data.draw(rows(), label="row")
    both(
        lambda t, r: ours_api.safe_format(t, **r),
        lambda t, r: ref_api.safe_format(t, **r),
        template,
        row,
        what="safe_format",
    )


@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_prompt_list_operations(impls: dict[str, Any], fw: str, backend: str, data: Any) -> None:
    ours_api, ref_api = apis(impls, fw)
    items = data.draw(prompt_lists(), label="items")
    row = data.draw(rows(), label="row")

    def on_both(what: str, op: Callable[[Any, Any], Any]) -> None:
        both(
            lambda its: op(ours_api.PromptList(its), ours_api),
            lambda its: op(ref_api.PromptList(its), ref_api),
            items,
            what=what,
        )

    on_both("PromptList.format", lambda pl, api: pl.format(**copy.deepcopy(row)))
    on_both("str(PromptList)", lambda pl, api: str(pl))

    src = data.draw(st.sampled_from([ICE, ICE, "{a}", "a", SEP, ""]), label="src")
    dst_kind = data.draw(st.sampled_from(["str", "str", "pl", "pl", "list", "int"]), label="dst")
    dst_items = data.draw(prompt_lists(), label="dst items")
    dst_text = data.draw(template_texts(max_pieces=3), label="dst text")

    def dst(api: Any) -> Any:
        if dst_kind == "str":
            return dst_text
        if dst_kind == "pl":
            return api.PromptList(copy.deepcopy(dst_items))
        if dst_kind == "list":
            return copy.deepcopy(dst_items)
        return 7

    on_both(f"PromptList.replace({src!r}, <{dst_kind}>)", lambda pl, api: pl.replace(src, dst(api)))

    other_kind = data.draw(
        st.sampled_from(["str", "empty", "none", "list", "pl", "tuple", "dict", "int"]),
        label="other",
    )
    other_text = data.draw(template_texts(max_pieces=2), label="other text")

    def other(api: Any) -> Any:
        return {
            "str": other_text,
            "empty": "",
            "none": None,
            "list": copy.deepcopy(dst_items),
            "pl": api.PromptList(copy.deepcopy(dst_items)),
            "tuple": tuple(copy.deepcopy(dst_items)),
            "dict": {"role": "HUMAN", "prompt": "x"},
            "int": 3,
        }[other_kind]

    on_both(f"PromptList + <{other_kind}>", lambda pl, api: pl + other(api))
    on_both(f"<{other_kind}> + PromptList", lambda pl, api: other(api) + pl)

    def iadd(pl: Any, api: Any) -> Any:
        alias = pl
        pl += other(api)
        return (pl is alias, pl)

    on_both(f"PromptList += <{other_kind}>", iadd)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_template_pipeline(impls: dict[str, Any], fw: str, backend: str, data: Any) -> None:
    """template -> ICE (generate_ice_item of 0..5 train rows) -> generate_item /
    generate_label_prompt_item -> LMTemplateParser / APITemplateParser.parse_template."""
    run_pipeline(impls, fw, data, well_typed=False)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_parsers_on_prompt_lists(impls: dict[str, Any], fw: str, backend: str, data: Any) -> None:
    """parse_template on dialogue-shaped PromptLists (some with broken section structure)."""
    ours_api, ref_api = apis(impls, fw)
    items = data.draw(dialogue_prompt_lists(), label="prompt")
    meta = data.draw(meta_templates(), label="meta template")
    mode = data.draw(st.sampled_from(["gen", "ppl"]), label="mode")
    for parser in ("LMTemplateParser", "APITemplateParser"):
        ours_p, ref_p, ok = both(
            getattr(ours_api, parser),
            getattr(ref_api, parser),
            meta,
            what=parser,
            compare_value=False,
        )
        if not ok:
            continue
        both(
            lambda its, p=ours_p.value: p.parse_template(ours_api.PromptList(its), mode),
            lambda its, p=ref_p.value: p.parse_template(ref_api.PromptList(its), mode),
            items,
            what=f"{parser}.parse_template(<PromptList>, {mode!r})",
        )


@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_rust_core_does_not_fall_back(
    impls: dict[str, Any], fw: str, rust_backend: None, data: Any
) -> None:
    """On well-typed inputs (str values without surrogates, str role fields, standard markers)
    every call the reference completes is rendered by the Rust core, and still matches."""
    for stage in run_pipeline(impls, fw, data, well_typed=True):
        # a stage the reference fails may use the Python path to build the exact error
        if stage.ref.ok:
            assert stage.fallbacks == 0, (
                f"{stage.what}: the Rust core handed a well-typed call to the Python path "
                f"({stage.ours.describe()})"
            )

    # the parsers alone, on dialogue-shaped PromptLists
    ours_api, ref_api = apis(impls, fw)
    items = data.draw(dialogue_prompt_lists(well_typed=True), label="prompt")
    meta = data.draw(meta_templates(well_typed=True), label="meta template")
    mode = data.draw(st.sampled_from(["gen", "ppl"]), label="mode")
    for parser in ("LMTemplateParser", "APITemplateParser"):
        ours_p, ref_p, ok = both(
            getattr(ours_api, parser),
            getattr(ref_api, parser),
            meta,
            what=parser,
            compare_value=False,
        )
        if not ok:
            continue
        before = _backend.fallbacks
        _, _ref, ok = both(
            lambda its, p=ours_p.value: p.parse_template(ours_api.PromptList(its), mode),
            lambda its, p=ref_p.value: p.parse_template(ref_api.PromptList(its), mode),
            items,
            what=f"{parser}.parse_template(<PromptList>, {mode!r})",
        )
        if ok:
            assert _backend.fallbacks == before, f"{parser}: the Rust core fell back to Python"


# ------------------------------------------------------------------- single-pass substitution

SP_KEYS = [k for k in KEYS if "{" not in k and "}" not in k]
SP_TEMPLATE_TEXT = st.lists(
    st.one_of(
        SAFE_LITERAL,
        st.sampled_from(SP_KEYS + MISSING).map(lambda k: "{" + k + "}"),
        st.sampled_from(["}", ICE, SEP]),
        st.sampled_from([ICE, SEP]),
    ),
    max_size=4,
).map("".join)
SP_VALUE = st.one_of(SAFE_LITERAL, st.integers(-99, 99), st.none(), st.booleans(), st.floats())


def _sp_rows() -> st.SearchStrategy[dict[str, Any]]:
    return st.lists(
        st.tuples(st.sampled_from(SP_KEYS), SP_VALUE), max_size=6, unique_by=lambda kv: kv[0]
    ).map(dict)


@st.composite
def _sp_templates(draw: Any) -> Any:
    texts = SP_TEMPLATE_TEXT
    if draw(st.booleans()):
        return draw(texts)
    return draw(dialogues(well_typed=True, texts=texts))


@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_single_pass_equals_compat_without_braces_in_values(
    fw: str, backend: str, data: Any
) -> None:
    """Values without braces or ice/sep tokens, templates without nested braces: the
    ``single_pass`` output equals the compat output (spec 01 §1.3)."""
    api = OURS[fw]
    ice_token = data.draw(st.sampled_from([None, ICE]))
    sep_token = data.draw(st.sampled_from([None, SEP]))
    template = data.draw(_sp_templates(), label="template")
    row = data.draw(_sp_rows(), label="row")
    output_field = data.draw(st.sampled_from([None, "answer", "missing"]))
    label = None
    ice_kind = "str" if isinstance(template, str) else "list"
    ice_texts = data.draw(st.lists(SAFE_LITERAL, max_size=3), label="ice texts")
    if ice_kind == "str":
        ice: Any = "".join(t + "\n" for t in ice_texts)
    else:
        ice = api.PromptList()
        for t in ice_texts:
            ice += [
                {"section": "ice", "pos": "begin"},
                {"role": "HUMAN", "prompt": t},
                {"section": "ice", "pos": "end"},
            ]
    remain_sep = data.draw(st.booleans())

    def both_modes(fn: Callable[[Any], Any]) -> None:
        compat = run(lambda: fn(api.PromptTemplate(copy.deepcopy(template), ice_token, sep_token)))
        single = run(
            lambda: fn(
                api.PromptTemplate(
                    copy.deepcopy(template), ice_token, sep_token, substitution="single_pass"
                )
            )
        )
        note(f"compat {compat.describe()} | single_pass {single.describe()}")
        if compat.ok:
            assert single.ok, f"single_pass {single.describe()}, compat {compat.describe()}"
            assert type(single.value) is type(compat.value)
            assert repr(single.value) == repr(compat.value)
        else:
            assert not single.ok, f"compat {compat.describe()}, single_pass {single.describe()}"
            assert type(single.error) is type(compat.error), (
                f"compat {compat.describe()}, single_pass {single.describe()}"
            )

    both_modes(
        lambda t: t.generate_item(copy.deepcopy(row), output_field, "", ice_field_replace_token=ice)
    )
    both_modes(lambda t: t.generate_ice_item(copy.deepcopy(row), label))
    both_modes(
        lambda t: t.generate_label_prompt_item(
            copy.deepcopy(row), ice, label, remain_sep=remain_sep
        )
    )


_PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")


def single_pass_oracle(template: str, row: dict[str, Any]) -> str:
    """Each innermost ``{name}`` whose name is a key becomes ``str(value)``; never rescanned."""
    return _PLACEHOLDER_RE.sub(
        lambda m: str(row[m.group(1)]) if m.group(1) in row else m.group(0), template
    )


@pytest.mark.parametrize("fw", FRAMEWORKS)
@SETTINGS
@given(data=st.data())
def test_single_pass_never_substitutes_values(fw: str, backend: str, data: Any) -> None:
    """In ``single_pass`` mode a value containing ``{other_key}`` is inserted verbatim."""
    api = OURS[fw]
    keys = data.draw(
        st.lists(st.sampled_from(SP_KEYS), min_size=2, max_size=5, unique=True), label="keys"
    )
    value_st = st.lists(
        st.one_of(
            SAFE_LITERAL,
            st.sampled_from(keys).map(lambda k: "{" + k + "}"),
            st.sampled_from(["{", "}"]),
        ),
        min_size=1,
        max_size=4,
    ).map("".join)
    row = {k: data.draw(value_st, label=f"row[{k!r}]") for k in keys}
    template = data.draw(
        st.lists(
            st.one_of(SAFE_LITERAL, st.sampled_from(keys).map(lambda k: "{" + k + "}"), NESTED),
            max_size=6,
        ).map("".join),
        label="template",
    )
    output_field = data.draw(st.sampled_from([None, keys[0]]))
    masked = dict(row)
    if output_field is not None:
        masked[output_field] = ""

    t = api.PromptTemplate(template, substitution="single_pass")
    got = t.generate_item(copy.deepcopy(row), output_field)
    assert got == single_pass_oracle(template, masked)

    dialogue = {
        "round": [
            {"role": "HUMAN", "prompt": template},
            {"role": "BOT", "prompt": "{" + keys[1] + "}"},
        ]
    }
    d = api.PromptTemplate(dialogue, substitution="single_pass")
    out = d.generate_item(copy.deepcopy(row), output_field)
    assert [x["prompt"] for x in out if isinstance(x, dict) and "prompt" in x] == [
        single_pass_oracle(template, masked),
        single_pass_oracle("{" + keys[1] + "}", masked),
    ]
    assert t.generate_ice_item(copy.deepcopy(row), None) == single_pass_oracle(template, row)


def test_one_string_template_over_rows_of_changing_keys(reference: dict[str, Any]) -> None:
    """One template object over a run of rows whose keys change (braces in keys and values, a
    non-str key, missing keys): the per-template memory of checked keys never changes a result."""
    import promptweave

    ref_cls = reference["oc"].PromptTemplate
    template = "{a} and {b}: {answer}"
    ours, ref = promptweave.PromptTemplate(template), ref_cls(template)
    rows: list[dict[Any, Any]] = [
        {"a": "x", "b": "y", "answer": "z"},
        {"a": "x", "{b}": "inner", "b": "{a}", "answer": "z"},
        {"a": "x", "b": "y", "answer": "z"},
        {"{a}": "1", "a": "2"},
        {1: "one", "a": "x", "b": "y", "answer": "z"},
        {"b": "{answer}", "answer": "done", "a": "{b}"},
        {"a": "x", "b": "y", "answer": "z"},
    ]

    def outcome(t: Any, row: dict[Any, Any], column: str | None) -> Any:
        try:
            return t.generate_item(row, output_field=column, output_field_replace_token="?")
        except Exception as exc:  # the reference's own failure (a non-str key)
            return type(exc)

    for row in rows:
        for column in ("answer", None):
            want = outcome(ref, row, column)
            got = outcome(ours, row, column)
            assert got == want or (isinstance(want, type) and issubclass(got, want)), (row, column)


@pytest.mark.parametrize("fw", ["oc", "ais"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(
        st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
        | st.sampled_from(['"', "\\", "\x7f", "\x00\x1f", "\u2028", "\U0001f600é", ""]),
        max_size=4,
    ),
    shape=st.lists(st.sampled_from(["str", "role", "marker", "no-prompt"]), max_size=4),
)
def test_str_of_prompt_list_escapes_every_character_as_the_reference(
    reference: dict[str, Any], fw: str, texts: list[str], shape: list[str]
) -> None:
    """``str(PromptList)`` over any Unicode text (AISBench: each prompt JSON-encoded, every
    non-printable-ASCII character escaped) is the reference's, and stays in the Rust core."""
    ours_api = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}[fw]
    items: list[Any] = []
    for i, kind in enumerate(shape):
        text = texts[i % len(texts)] if texts else ""
        items.append(
            {
                "str": text,
                "role": {"role": "HUMAN", "prompt": text},
                "marker": {"section": "round", "pos": "begin"},
                "no-prompt": {"role": "BOT"},
            }[kind]
        )
    want = str(reference[fw].PromptList(copy.deepcopy(items)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_backend, "FORCE_PYTHON", False)
        assert str(ours_api.PromptList(copy.deepcopy(items))) == want
        assert _core.concat_prompts(items, fw == "ais") == want


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_prompt_list_format_in_rust_keeps_the_sequential_quirks(
    reference: dict[str, Any], fw: str
) -> None:
    """``PromptList.format`` of plain items and values runs in the Rust core with the
    reference's order-dependent substitution (a value's placeholder filled by a later key, not
    by an earlier one), copies dicts, and leaves other items to the Python path."""
    ours_api = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}[fw]
    items: list[Any] = [
        "{a} then {b}",
        {"role": "HUMAN", "prompt": "{b} before {a}", "begin": "{a}"},
        {"section": "round", "pos": "begin"},
        {"role": "BOT"},
        "{missing} {{a}} ünï {a}",
    ]
    kwargs_cases: list[dict[str, Any]] = [
        {"a": "<{b}>", "b": "<{a}>"},
        {"b": "{a}", "a": 1.5},
        {"a": None, "b": True},
        {},
    ]
    for kwargs in kwargs_cases:
        want = reference[fw].PromptList(copy.deepcopy(items)).format(**kwargs)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_backend, "FORCE_PYTHON", False)
            fallbacks = _backend.fallbacks
            pl = ours_api.PromptList(copy.deepcopy(items))
            got = pl.format(**kwargs)
            assert _backend.fallbacks == fallbacks
        assert type(got) is ours_api.PromptList
        assert repr(got) == repr(want), kwargs
        assert all(g is not o for g, o in zip(got, pl, strict=True) if isinstance(o, dict))
    # a list value, a nested dict item: the Python path, same result
    for kwargs, extra in (({"a": [1]}, "{a}"), ({"a": "x"}, {"role": "X", "prompt": ["{a}"]})):
        want = reference[fw].PromptList([*copy.deepcopy(items), extra])
        ours = ours_api.PromptList([*copy.deepcopy(items), extra])
        got_outcome = run(lambda o=ours, k=kwargs: o.format(**k))
        want_outcome = run(lambda w=want, k=kwargs: w.format(**k))
        if want_outcome.ok:
            assert repr(got_outcome.value) == repr(want_outcome.value), kwargs
        else:
            assert isinstance(got_outcome.error, type(want_outcome.error)), kwargs


@pytest.mark.parametrize("fw", ["oc", "ais"])
@pytest.mark.parametrize(
    "items",
    [[], [{"role": "HUMAN"}], [{"section": "round", "pos": "begin"}], ["{a}"], ["{big}"]],
    ids=["empty", "no-prompt", "marker", "text", "used"],
)
def test_prompt_list_format_str_of_a_value_only_where_an_item_is_formatted(
    reference: dict[str, Any], fw: str, items: list[Any]
) -> None:
    """The reference ``str()``s the entry's values per formatted item: an int past Python's
    digit limit raises only when some item is formatted."""
    ours_api = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}[fw]
    kwargs = {"a": 1, "big": 10**5000}
    want = run(lambda: reference[fw].PromptList(copy.deepcopy(items)).format(**kwargs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_backend, "FORCE_PYTHON", False)
        got = run(lambda: ours_api.PromptList(copy.deepcopy(items)).format(**kwargs))
    if want.ok:
        assert got.ok, got.error
        assert repr(got.value) == repr(want.value)
    else:
        assert isinstance(got.error, type(want.error))
