"""Every real meta template of the OpenCompass wheel's model configs, through both parsers.

The meta templates are those of every model config file of OpenCompass 0.5.4 that has one
(loaded with :func:`promptweave.config.load_config` + :func:`~promptweave.config.meta_template_of`;
AISBench 3.1's model configs have none). Each parses the prompts of a set of dialogue and string
templates (system prompts, a ``fallback_role``, in-context examples at an ``ice_token``, an
``end`` section, several rounds) in ``gen`` and ``ppl`` mode, with ``LMTemplateParser`` and
``APITemplateParser``, in both flavours; the ``repr`` of the result must equal the reference's
(OpenCompass or AISBench), or both must raise the same builtin family.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _wheels import configs_root

import promptweave.aisbench
import promptweave.opencompass
from promptweave.config import load_config, meta_template_of

OURS = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}


def _h(p: str) -> dict[str, Any]:
    return {"role": "HUMAN", "prompt": p}


def _b(p: str) -> dict[str, Any]:
    return {"role": "BOT", "prompt": p}


#: (name, template, ice_token)
TEMPLATES: list[tuple[str, Any, str | None]] = [
    ("dialogue", {"round": [_h("Q: {q}"), _b("{a}")]}, None),
    (
        "system",
        {
            "begin": [{"role": "SYSTEM", "prompt": "You are {a}."}, "x"],
            "round": [_h("{q}"), _b("A: {a}")],
        },
        None,
    ),
    (
        "fallback",
        {
            "begin": [{"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": "sys {q}"}],
            "round": [_h("Q: {q}"), _b("{a}")],
        },
        None,
    ),
    ("ice", {"begin": "</E>", "round": [_h("Q: {q}"), _b("{a}")]}, "</E>"),
    ("end", {"round": [_h("Q: {q}"), _b("{a}")], "end": [_h("then?"), _b("")]}, None),
    ("rounds", {"round": [_h("Q1 {q}"), _b("A1 {a}"), _h("Q2 {q}"), _b("{a}")]}, None),
    ("string", "Q: {q}\nA: {a}", None),
]
ICE_TEMPLATE = {"round": [_h("Q: {q}"), _b("{a}")]}
ROW = {"q": "what 中文 {x}?", "a": "ans"}
TRAIN = [{"q": f"t{i}", "a": f"b{i}"} for i in range(3)]


@functools.cache
def _metas() -> list[tuple[str, Any]]:
    root = configs_root("oc") / "models"
    out = []
    for path in sorted(root.rglob("*.py")):
        if "meta_template" not in path.read_text("utf-8"):
            continue
        for model in load_config(path).models():
            meta = meta_template_of(model)
            if meta is not None:
                out.append((str(Path(path).relative_to(root)), meta))
    return out


def _parse(M: Any, meta: Any, template: Any, ice_token: str | None, mode: str, api: bool) -> Any:
    pt = M.PromptTemplate(copy.deepcopy(template), ice_token=ice_token)
    ice: Any = ""
    if ice_token:
        it = M.PromptTemplate(copy.deepcopy(ICE_TEMPLATE))
        ice = M.PromptList()
        for t in TRAIN:
            ice += it.generate_ice_item(t, t["a"])
    masked = {"output_field": "a"} if mode == "gen" else {}
    prompt = pt.generate_item(ROW, ice_field_replace_token=ice, **masked)
    parser = (M.APITemplateParser if api else M.LMTemplateParser)(copy.deepcopy(meta))
    # the reference prints warnings for some meta templates
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return parser.parse_template(prompt, mode=mode)


def _outcome(f: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", repr(f())
    except Exception as exc:
        return "error", type(exc)


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_every_model_meta_template_parses_like_the_reference(
    fw: str, reference: dict[str, Any]
) -> None:
    metas = _metas()
    assert len(metas) >= 50, len(metas)
    compared = 0
    for rel, meta in metas:
        for name, template, ice_token in TEMPLATES:
            for mode in ("gen", "ppl"):
                for api in (False, True):
                    where = (rel, name, mode, "api" if api else "lm")
                    args = (meta, template, ice_token, mode, api)
                    want = _outcome(functools.partial(_parse, reference[fw], *args))
                    got = _outcome(functools.partial(_parse, OURS[fw], *args))
                    if want[0] == "ok":
                        assert got == want, where
                    else:
                        assert got[0] == "error", (where, want, got)
                        builtin = [c for c in want[1].__mro__ if c.__module__ == "builtins"]
                        assert issubclass(got[1], builtin[0]), (where, want, got)
                    compared += 1
    assert compared == len(metas) * len(TEMPLATES) * 4
