"""Golden cases run against promptweave.

Every case of ``tests/fixtures/api/golden_cases.json`` (the spec's foundation cases plus our
``PW-*`` cases, recorded from the reference by ``tests/fixtures/regen.py``) is evaluated, for each
framework it applies to, in the namespace of ``tests/_golden_ns.py`` and compared with the
recorded outcome:

* value -> same ``repr`` and same type name;
* builtin exception -> an instance of that builtin class that is also a ``PromptRenderError``
  (except for :data:`PYTHON_RAISED` cases, where Python raises before promptweave runs);
* AISBench exception -> a ``PromptRenderError`` with the reference's ``[CODE]`` in its message
  and as ``.error_code``;
* promptweave never prints; where the reference printed (unknown role, 06 §C) it must raise
  ``UnknownRoleError``;
* ``RecursionError`` in the reference -> promptweave returns a value, listed in
  :data:`DEVIATIONS`;
* recorded warnings are issued too.

Self-test: ``PROMPTWEAVE_GOLDEN_SELFTEST=1`` runs the same cases against the reference itself
(see ``_golden_ns.framework_api``); promptweave-only policies are then replaced by "behaves as
recorded" checks and every :data:`DEVIATIONS` case is a strict xfail -- proving the check fails.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import importlib.util
import io
import json
import re
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import _golden_ns  # noqa: E402

FIXTURE = TESTS_DIR / "fixtures" / "api" / "golden_cases.json"

#: Deliberate deviations from the reference: case id -> the outcome promptweave must produce
#: instead, for every framework (or ``{'oc': outcome, 'ais': outcome}``).  Keep it small.
DEVIATIONS: dict[str, dict[str, Any]] = {
    # 06 §B.10: `non_empty_list + PromptList` recurses forever in both references
    # (RecursionError); promptweave concatenates like a list and returns a PromptList.
    "PL-15": {"type": "PromptList", "repr": "['q', 'a']"},
}

#: Cases whose recorded builtin exception is raised by Python itself, for the same reason, before
#: any promptweave code runs -- so it cannot be a PromptRenderError.
PYTHON_RAISED: frozenset[str] = frozenset(
    {
        "SF-12",  # `M.safe_format('{1}', **{1: 'x'})`: the call syntax raises TypeError
        # ('keywords must be strings') before safe_format is entered
    }
)

SELFTEST = _golden_ns.selftest_enabled()
ANSI = re.compile(r"\x1b\[[0-9;]*m")
AIS_CODE = re.compile(r"^\[([A-Z0-9]+(?:-[A-Z0-9]+)+)\]")
WARNING_MARK = "Non-empty string"  # the warnings run_cases.run_one records


def _load_cases() -> list[dict[str, Any]]:
    with FIXTURE.open(encoding="utf-8") as f:
        cases: list[dict[str, Any]] = json.load(f)["cases"]
    return cases


CASES = _load_cases()
CASES_BY_ID = {c["id"]: c for c in CASES}


def _params() -> list[Any]:
    params = []
    for case in CASES:
        for fw in case["outcome"]:
            marks = []
            if SELFTEST and case["id"] in DEVIATIONS:
                marks.append(
                    pytest.mark.xfail(strict=True, reason="deliberate deviation from the reference")
                )
            params.append(pytest.param(case["id"], fw, marks=marks, id=f"{case['id']}:{fw}"))
    return params


def is_ais_error(name: str) -> bool:
    return name.startswith("AISBench") or name == "ParameterValueError"


def expected_outcome(cid: str, fw: str) -> dict[str, Any]:
    """The outcome promptweave must produce: the recorded one, or the deviation."""
    if cid in DEVIATIONS:
        dev = DEVIATIONS[cid]
        per_fw: dict[str, Any] = dev[fw] if fw in dev else dev
        return per_fw
    recorded: dict[str, Any] = CASES_BY_ID[cid]["outcome"][fw]
    return recorded


@dataclass
class Run:
    value: Any = None
    error: Exception | None = None
    stdout: str = ""
    warnings: list[str] = field(default_factory=list)


def run_case(code: str, ns: dict[str, Any]) -> Run:
    """Evaluate a case like the spec's ``run_cases.run_one``, keeping the exception object."""
    ns = dict(ns)
    run = Run()
    buf = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(buf):
        warnings.simplefilter("always")
        try:
            try:
                compiled = compile(code, "<case>", "eval")
            except SyntaxError:
                compiled = None
            if compiled is None:  # statements: must assign `result`
                exec(code, ns)  # case code from our own fixture
                run.value = ns["result"]
            else:
                run.value = eval(compiled, ns)
        except Exception as exc:  # every exception is checked by the caller
            run.error = exc
    run.stdout = buf.getvalue()
    run.warnings = sorted({str(w.message) for w in caught if WARNING_MARK in str(w.message)})
    return run


def _describe(run: Run) -> str:
    if run.error is not None:
        return f"raised {type(run.error).__name__}: {run.error}"
    return f"returned {type(run.value).__name__}: {run.value!r}"


def check_value(run: Run, expected: dict[str, Any]) -> None:
    assert run.error is None, f"expected {expected['repr']}, but {_describe(run)}"
    assert repr(run.value) == expected["repr"]
    assert type(run.value).__name__ == expected["type"]


def check_builtin_error(cid: str, run: Run, expected: dict[str, Any]) -> None:
    name = expected["raises"]
    cls = getattr(builtins, name)
    assert run.error is not None, f"expected {name}, but {_describe(run)}"
    assert isinstance(run.error, cls), f"expected a {name}, but {_describe(run)}"
    if SELFTEST:
        assert type(run.error).__name__ == name
        return
    if cid not in PYTHON_RAISED:
        from promptweave.errors import PromptRenderError

        assert isinstance(run.error, PromptRenderError), (
            f"{type(run.error).__name__} is not a PromptRenderError: {run.error}"
        )


def check_ais_error(run: Run, expected: dict[str, Any]) -> None:
    name, message = expected["raises"], expected["message"]
    match = AIS_CODE.match(message)
    assert match, f"no [CODE] at the start of the recorded {name} message: {message!r}"
    code = match.group(1)
    assert run.error is not None, f"expected {name} [{code}], but {_describe(run)}"
    if SELFTEST:
        assert type(run.error).__name__ == name
        assert ANSI.sub("", str(run.error)) == message
        return
    from promptweave.errors import PromptRenderError

    assert isinstance(run.error, PromptRenderError), f"expected [{code}], but {_describe(run)}"
    assert f"[{code}]" in str(run.error), f"[{code}] missing from message: {run.error}"
    assert run.error.error_code == code


def check_stdout(run: Run, expected: dict[str, Any]) -> None:
    if SELFTEST:
        assert ANSI.sub("", run.stdout) == expected.get("stdout", "")
        return
    assert run.stdout == "", f"promptweave must never print; printed {run.stdout!r}"
    if "stdout" in expected:  # the reference printed "... neither has an appropriate role ..."
        from promptweave.errors import UnknownRoleError

        assert isinstance(run.error, UnknownRoleError), (
            f"expected UnknownRoleError, but {_describe(run)}"
        )


#: Value-returning cases that the Rust core hands to the pure-Python path on purpose (inputs it
#: does not model); every other value-returning case must be rendered by Rust.
RUST_FALLBACK_EXPECTED: frozenset[str] = frozenset(
    {
        # a dict with a 'section' key and extra keys: a role item in the no-meta join but a
        # marker in the meta walks; the core only takes exact {section, pos} markers
        "LM-13",
    }
)


@pytest.fixture(params=["rust", "python"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a case through the Rust core (default) or force the pure-Python path."""
    from promptweave import _backend

    monkeypatch.setattr(_backend, "FORCE_PYTHON", request.param == "python")
    return str(request.param)


@pytest.mark.parametrize(("cid", "fw"), _params())
def test_golden(cid: str, fw: str, backend: str, capfd: pytest.CaptureFixture[str]) -> None:
    case = CASES_BY_ID[cid]
    expected = expected_outcome(cid, fw)
    from promptweave import _backend

    before = _backend.fallbacks
    run = run_case(case["code"], _golden_ns.namespace(fw))
    if backend == "rust" and "raises" not in expected and not _golden_ns.selftest_enabled():
        fell_back = _backend.fallbacks != before
        assert fell_back == (cid in RUST_FALLBACK_EXPECTED), (
            f"{cid}: rendered by the {'Python' if fell_back else 'Rust'} path"
        )
    run.stdout += capfd.readouterr().out  # output written below sys.stdout (e.g. from Rust)

    if cid in DEVIATIONS:
        check_value(run, expected)
    elif "raises" not in expected:
        check_value(run, expected)
    elif expected["raises"] == "RecursionError":
        pytest.fail(
            "the reference raised RecursionError; promptweave must return a value "
            f"({_describe(run)}) -- record the expected outcome in DEVIATIONS"
        )
    elif is_ais_error(expected["raises"]):
        check_ais_error(run, expected)
    else:
        check_builtin_error(cid, run, expected)
    check_stdout(run, expected)
    assert run.warnings == expected.get("warnings", [])


def test_fixture_consistent() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    for case in CASES:
        fws = ["oc", "ais"] if case["impls"] == "both" else [case["impls"]]
        assert sorted(case["outcome"]) == sorted(fws), case["id"]
    assert set(DEVIATIONS) <= set(ids), "DEVIATIONS names unknown cases"
    assert PYTHON_RAISED <= set(ids), "PYTHON_RAISED names unknown cases"


def test_namespace_constants_match_reference(reference: dict[str, Any]) -> None:
    """The constants of _golden_ns equal those of the spec's run_cases.py."""
    del reference  # only ensures the reference (and thus run_cases' imports) is available
    # the golden dir is on sys.path once refload was imported
    run_cases = importlib.import_module("run_cases")

    try:
        ref_names = {k for k, v in vars(run_cases).items() if k.isupper() and not callable(v)}
        ref_names -= {"ALL_CASES", "ANSI", "HERE", "OUT"}
        assert set(_golden_ns.CONSTANT_NAMES) == ref_names
        for name in _golden_ns.CONSTANT_NAMES:
            assert repr(getattr(_golden_ns, name)) == repr(getattr(run_cases, name)), name
    finally:
        shutil.rmtree(run_cases.OUT, ignore_errors=True)


def test_fixtures_up_to_date(reference: dict[str, Any]) -> None:
    """Regenerating the fixtures from the reference reproduces the committed files."""
    del reference

    spec = importlib.util.spec_from_file_location("_pw_regen", TESTS_DIR / "fixtures" / "regen.py")
    assert spec is not None
    assert spec.loader is not None
    regen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regen)
    for path, text in regen.generate(verify=True).items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is stale: run tests/fixtures/regen.py"
        )
