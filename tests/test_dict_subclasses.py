"""Template items that are dict subclasses keep their class, as in the reference.

The reference deep-copies every dict item of a template (``PromptList.format``), so an item of a
dict subclass -- mmengine's ``ConfigDict`` (every dict of a config loaded with
``mmengine.Config``), an ``OrderedDict`` -- comes out of ``generate_item``,
``generate_ice_item`` and ``generate_label_prompt_item`` as an instance of that class. The Rust
path copies such a dict with a clone proven equal to ``copy.deepcopy`` on the class's first
instance; other classes (one written in C, one whose deep copy or ``__setitem__`` does more) take
the Python path. The outputs below are compared with the reference's, class and instance
attributes of every item included.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
from mmengine.config import ConfigDict

import promptweave
import promptweave.aisbench
from promptweave import _backend

OURS = {"oc": promptweave, "ais": promptweave.aisbench}


class Upper(dict[str, Any]):
    """A dict subclass whose ``__setitem__`` stores something else (str values upper-cased), so
    storing into its table is not the same: left to the Python path."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value.upper() if isinstance(value, str) else value)


class Marked(dict[str, Any]):
    """A dict subclass whose deep copy is marked: a clone is not its deep copy."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Marked:
        out = Marked(self)
        out.copied = True
        return out


CLASSES = [ConfigDict, collections.OrderedDict, Upper, Marked]
#: the classes copied by the Rust path (the others: by the Python path, as the reference does)
CLONED = {ConfigDict}


@pytest.fixture(autouse=True)
def _rust(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", False)


def _dialogue(cls: type) -> dict[str, Any]:
    return {
        "begin": [cls(role="SYSTEM", prompt="sys {x}"), "plain"],
        "round": [cls(role="HUMAN", prompt="{x}"), cls(role="BOT", prompt="{y}")],
    }


def _shape(out: Any) -> Any:
    """repr, class and instance attributes of every item (an attribute-less dict: None)."""
    if isinstance(out, list):
        return [(repr(i), type(i).__name__, getattr(i, "__dict__", None)) for i in out]
    return repr(out)


def _outputs(M: Any, cls: type) -> list[Any]:
    row = {"x": "X", "y": "Y"}
    t = M.PromptTemplate(_dialogue(cls))
    labels = M.PromptTemplate(
        {"A": _dialogue(cls), "B": {"round": [cls(role="HUMAN", prompt="b")]}}
    )
    spliced = M.PromptTemplate(
        {"round": ["</E>", cls(role="HUMAN", prompt="{x}")]}, ice_token="</E>"
    )
    ice = M.PromptList([cls(role="BOT", prompt="example"), "\n"])
    return [
        # twice: the class's first instance proves the clone, later ones use it
        t.generate_item(row),
        t.generate_item(row),
        t.generate_item(row, output_field="y", output_field_replace_token="?"),
        # twice: the second is the remembered output's copy (the ICE memo)
        t.generate_ice_item(row, "Y"),
        t.generate_ice_item(row, "Y"),
        labels.generate_label_prompt_item(row, "", "A"),
        spliced.generate_item(row, ice_field_replace_token=ice),
        spliced.generate_item(row, ice_field_replace_token=ice),
    ]


@pytest.mark.parametrize("fw", list(OURS))
@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_dict_subclass_items_keep_their_class(
    reference: dict[str, Any], fw: str, cls: type
) -> None:
    fallbacks = _backend.fallbacks
    got = [_shape(o) for o in _outputs(OURS[fw], cls)]
    want = [_shape(o) for o in _outputs(reference[fw], cls)]
    assert got == want
    assert (_backend.fallbacks == fallbacks) == (cls in CLONED)


@pytest.mark.parametrize("fw", list(OURS))
def test_dict_subclass_outputs_are_fresh(fw: str) -> None:
    """Each call's items are new objects: changing one changes no later output."""
    M = OURS[fw]
    t = M.PromptTemplate(_dialogue(ConfigDict))
    first = t.generate_item({"x": "X", "y": "Y"})
    first[1]["prompt"] = "changed"
    first[1].extra = 1
    second = t.generate_item({"x": "X", "y": "Y"})
    assert second[1] == {"role": "SYSTEM", "prompt": "sys X"}
    assert "extra" not in second[1]
    assert type(second[1]) is ConfigDict
    row = {"x": "X", "y": "Y"}
    first = t.generate_ice_item(row, "Y")
    want = repr(first)
    for item in first:
        if isinstance(item, ConfigDict):
            item["prompt"] = "changed"
            item.extra = 1
    second = t.generate_ice_item(row, "Y")  # from the ICE memo
    assert repr(second) == want
    assert all(type(i) is ConfigDict and "extra" not in vars(i) for i in second[1:3])
