"""A template changed in place after it was compiled renders as the reference renders it.

The reference reads ``self.template`` at every call; promptweave compiles it once. Its dicts
and lists (the template, its sections, their role dicts) are compared with what was compiled at
every call: a change made in place -- a role's prompt rewritten, an item appended, a key added,
a label's body replaced -- compiles the template again, and remembered in-context examples of
the old template are not served.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import promptweave
import promptweave.aisbench
from promptweave import _backend

OURS = {"oc": promptweave, "ais": promptweave.aisbench}
ROW = {"x": "X", "y": "Y"}

Change = Callable[[Any], None]


def _rewrite_prompt(t: dict[str, Any]) -> None:
    t["round"][0]["prompt"] = "new {x}"


def _append_item(t: dict[str, Any]) -> None:
    t["round"].append({"role": "BOT", "prompt": "{y}!"})


def _add_key(t: dict[str, Any]) -> None:
    t["round"][0]["note"] = "n"


def _add_section(t: dict[str, Any]) -> None:
    t["begin"] = [{"role": "SYSTEM", "prompt": "sys"}]


CHANGES = [_rewrite_prompt, _append_item, _add_key, _add_section]


def _dialogue() -> dict[str, Any]:
    return {"round": [{"role": "HUMAN", "prompt": "old {x}"}, {"role": "BOT", "prompt": "{y}"}]}


def _calls(M: Any, change: Change) -> list[str]:
    template = _dialogue()
    t = M.PromptTemplate(template)
    out = [repr(t.generate_ice_item(ROW, "Y")), repr(t.generate_item(ROW))]
    change(template)
    # the same row again: the example remembered for it is the old template's
    out += [repr(t.generate_ice_item(ROW, "Y")), repr(t.generate_ice_item(ROW, "Y"))]
    out.append(repr(t.generate_item(ROW, output_field="y")))
    return out


@pytest.fixture(autouse=True)
def _rust(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", False)


@pytest.mark.parametrize("fw", list(OURS))
@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__.strip("_") for c in CHANGES])
def test_change_in_place_renders_as_reference(
    reference: dict[str, Any], fw: str, change: Change
) -> None:
    got = _calls(OURS[fw], change)
    assert got == _calls(reference[fw], change)
    assert (got[0], got[1]) != (got[2], got[4])  # the change shows


@pytest.mark.parametrize("fw", list(OURS))
def test_label_body_replaced_in_place(reference: dict[str, Any], fw: str) -> None:
    outs = []
    for M in (OURS[fw], reference[fw]):
        template = {"A": "a {x}", "B": "b {x}"}
        t = M.PromptTemplate(template)
        first = t.generate_label_prompt_item(ROW, "", "B")
        template["B"] = "changed {x}"
        outs.append((first, t.generate_label_prompt_item(ROW, "", "B")))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("fw", list(OURS))
def test_compiled_again_once(fw: str) -> None:
    """After a change, the template is compiled again: later calls stay in Rust."""
    template = _dialogue()
    t = OURS[fw].PromptTemplate(template)
    t.generate_item(ROW)
    fallbacks = _backend.fallbacks
    _rewrite_prompt(template)
    assert "new X" in repr(t.generate_item(ROW))
    assert _backend.fallbacks == fallbacks + 1  # the call that found the change
    for _ in range(3):
        t.generate_item(ROW)
        t.generate_ice_item(ROW, "Y")
    assert _backend.fallbacks == fallbacks + 1
