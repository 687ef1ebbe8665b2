"""Helpers of the AISBench multi-turn (MT-*) and multimodal (MM-*) golden cases.

The spec's ``run_cases.build_ns`` gives the reference namespace ``MM_ITEM`` and ``multiturn``;
:func:`add_flow_helpers` gives promptweave's namespace the same two, built on
:func:`promptweave.aisbench.multiturn_prompt_requests`, plus ``mt_run`` -- a generalised
``multiturn`` (any template, row, parser and ``max_out_len``) that drives the *reference*
``MultiTurnGenInferencer`` when ``M`` is the reference and promptweave's driver otherwise, so the
same case code runs on both (``tests/fixtures/regen.py`` records its outcomes).
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import json
import re
import types
from pathlib import Path
from typing import Any

__all__ = [
    "NOT_PORTED",
    "add_flow_helpers",
    "check_outcome",
    "flow_namespace",
    "is_reference",
    "load_flow_cases",
    "mt_run",
    "outcome",
    "run_code",
]

TS, IS, CT = "<AIS_TEXT_START>", "<AIS_IMAGE_START>", "<AIS_CONTENT_TAG>"


def is_reference(api: Any) -> bool:
    """Whether ``api`` is the reference AISBench namespace (it has the inferencer module)."""
    return hasattr(api, "multiturn") and not hasattr(api, "multiturn_prompt_requests")


def _reference_requests(
    api: Any, prompt: Any, mode: str, parser: Any, generate: Any, max_out_len: Any
) -> int:
    """Run the reference ``MultiTurnGenInferencer.do_request`` on one sample (as the spec's
    ``run_cases.multiturn``); returns the number of reported turns."""
    mod = api.multiturn

    class Counter:
        async def post(self) -> None: ...
        async def rev(self) -> None: ...
        async def failed(self) -> None: ...
        async def finish(self) -> None: ...
        async def case_finish(self) -> None: ...

    class Handler:
        def __init__(self) -> None:
            self.reports: list[Any] = []

        async def report_cache_info(self, *args: Any) -> None:
            self.reports.append(args)

    class Out:
        def __init__(self, perf_mode: bool = False) -> None:
            self.content, self.success = "", True

    inf = object.__new__(mod.MultiTurnGenInferencer)
    inf.infer_mode = mode
    inf.status_counter, inf.output_handler = Counter(), Handler()
    inf.logger = types.SimpleNamespace(warning=lambda *a, **k: None, info=lambda *a, **k: None)
    inf.perf_mode = False

    async def model_generate(
        history: Any, budget: Any, output: Any, session: Any = None, **kw: Any
    ) -> None:
        reply = generate(history, budget)
        if reply is None:
            output.success = False
        else:
            output.content = reply

    inf.model = types.SimpleNamespace(parse_template=parser.parse_template, generate=model_generate)
    data = {"index": 0, "prompt": prompt, "data_abbr": "d", "max_out_len": max_out_len, "gold": "g"}
    saved = mod.RequestOutput
    mod.RequestOutput = Out
    try:
        asyncio.run(inf.do_request(data, None, None))
    finally:
        mod.RequestOutput = saved
    return len(inf.output_handler.reports)


def mt_run(
    api: Any,
    prompt: Any,
    mode: str,
    parser: Any,
    fail_at: int | None = None,
    max_out_len: Any = None,
) -> dict[str, Any]:
    """The model calls of one multi-turn sample: ``{'calls': [{'model_input', 'max_out_len'}],
    'n_reports': n}``; the model answers ``answer<k>`` and fails at call ``fail_at``."""
    calls: list[dict[str, Any]] = []

    def generate(model_input: Any, budget: Any) -> str | None:
        calls.append({"model_input": copy.deepcopy(model_input), "max_out_len": budget})
        if fail_at is not None and len(calls) == fail_at:
            return None
        return f"answer{len(calls)}"

    if is_reference(api):
        n = _reference_requests(api, prompt, mode, parser, generate, max_out_len)
    else:
        n = len(
            api.multiturn_prompt_requests(prompt, mode, parser, generate, max_out_len=max_out_len)
        )
    return {"calls": calls, "n_reports": n}


def add_flow_helpers(ns: dict[str, Any]) -> dict[str, Any]:
    """Add ``MM_ITEM``, ``multiturn`` (when missing) and ``mt_run`` to a golden namespace."""
    api = ns["M"]
    H, B, S = ns["H"], ns["B"], ns["S"]

    def mm_item(with_sys: bool = True, with_bot: bool = True) -> Any:
        pm = {
            "text": {"type": "text", "text": "{question} Answer briefly."},
            "image": {"type": "image_url", "image_url": {"url": "file://{image}"}},
        }
        t: dict[str, Any] = {"round": [{"role": "HUMAN", "prompt_mm": pm}]}
        if with_bot:
            t["round"].append(B("{answer}"))
        if with_sys:
            t["begin"] = [S("sys")]
        return api.MMPromptTemplate(t).generate_item(
            {"content": IS + "a.jpg" + CT + TS + "What?" + CT, "answer": "x"}
        )

    def multiturn(
        mode: str, parser_kind: str, fail_at: int | None = None, bot_role: str = "BOT"
    ) -> dict[str, Any]:
        meta = {"api": ns["API_HBS"], "lm": ns["META_HB"], "nometa": None}[parser_kind]
        if bot_role != "BOT":
            meta = {
                "round": [
                    {"role": "HUMAN", "api_role": "HUMAN"},
                    {"role": bot_role, "api_role": "BOT", "generate": True},
                ],
                "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
            }
        parser = api.LMTemplateParser(meta) if parser_kind == "lm" else api.APITemplateParser(meta)
        prompt = api.MultiTurnPromptTemplate(
            {
                "begin": [S("sys")],
                "round": [H("{question}"), {"role": bot_role, "prompt": "{answer}"}],
            }
        ).generate_item(ns["EMT"], output_field="answer")
        return mt_run(api, prompt, mode, parser, fail_at=fail_at, max_out_len=[10, 20, 30])

    ns.setdefault("MM_ITEM", mm_item)
    ns.setdefault("multiturn", multiturn)
    ns["mt_run"] = lambda *a, **k: mt_run(api, *a, **k)
    return ns


# ------------------------------------------------------------------------- fixture checking

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "api" / "flow_cases.json"
AIS_CODE = re.compile(r"^\[([A-Z0-9]+(?:-[A-Z0-9]+)+)\]")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: spec cases outside promptweave's scope: case id -> reason
NOT_PORTED: dict[str, str] = {
    "MM-37": "VLLMCustomAPIChat.ROLE_MAP belongs to the chat request body (VCHAT family), which "
    "promptweave does not build",
}


def load_flow_cases(prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    """The fixture's cases whose id starts with one of ``prefixes``."""
    with FIXTURE.open(encoding="utf-8") as f:
        cases: list[dict[str, Any]] = json.load(f)["cases"]
    return [c for c in cases if c["id"].startswith(prefixes)]


def flow_namespace() -> dict[str, Any]:
    """The AISBench golden namespace (promptweave, or the reference in self-test) + helpers."""
    import _golden_ns

    return add_flow_helpers(_golden_ns.namespace("ais"))


def run_code(code: str, ns: dict[str, Any]) -> tuple[Any, Exception | None]:
    """Evaluate a case like ``run_cases.run_one``: ``(value, exception)``."""
    ns = dict(ns)
    try:
        try:
            compiled = compile(code, "<case>", "eval")
        except SyntaxError:
            exec(code, ns)  # statements: the case assigns `result`
            return ns["result"], None
        return eval(compiled, ns), None
    except Exception as exc:  # the caller checks every exception
        return None, exc


def outcome(fn: Any) -> tuple[str, str]:
    """``('value', repr)``, ``('error', AISBench code)`` or ``('error', builtin base name)`` of
    ``fn()`` -- comparable across implementations (promptweave errors derive from the
    reference's builtin and carry the AISBench code)."""
    try:
        return "value", repr(fn())
    except Exception as exc:  # compared by family
        code = getattr(exc, "error_code", None)
        match = AIS_CODE.match(ANSI.sub("", str(exc)))
        if code or match:
            return "error", code or (match.group(1) if match else "")
        for base in (KeyError, AttributeError, TypeError, IndexError, ValueError):
            if isinstance(exc, base):
                return "error", base.__name__
        return "error", type(exc).__name__


def check_outcome(
    value: Any, error: Exception | None, expected: dict[str, Any], *, selftest: bool = False
) -> None:
    """Assert that a run matches a recorded outcome (see ``tests/test_golden.py``): same repr
    and type name; a builtin exception -> that builtin and a PromptRenderError; an AISBench
    exception -> a PromptRenderError carrying its ``[CODE]``."""
    from promptweave.errors import PromptRenderError

    described = f"raised {type(error).__name__}: {error}" if error else f"returned {value!r}"
    if "raises" not in expected:
        assert error is None, f"expected {expected['repr']}, but {described}"
        assert repr(value) == expected["repr"]
        assert type(value).__name__ == expected["type"]
        return
    name, message = expected["raises"], expected["message"]
    assert error is not None, f"expected {name}, but {described}"
    if selftest:
        assert type(error).__name__ == name, described
        return
    assert isinstance(error, PromptRenderError), f"not a PromptRenderError: {described}"
    if name.startswith("AISBench") or name == "ParameterValueError":
        match = AIS_CODE.match(message)
        assert match, message
        assert error.error_code == match.group(1), described
        assert f"[{match.group(1)}]" in str(error)
    else:
        assert isinstance(error, getattr(builtins, name)), f"expected a {name}, but {described}"
