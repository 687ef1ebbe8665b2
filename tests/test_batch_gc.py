"""The batch paths and the cyclic garbage collector.

``DatasetRenderer``'s batches (multimodal, OpenAI messages, the Rust dataset job) make their
output with the collector off. When that leaves many new tracked objects, they are moved to the
oldest generation as the batch ends, so that the first allocation afterwards does not start a
young collection walking the whole output (``promptweave.dataset._collector_paused``). These tests
pin what that may and may not change: the collector's state as the caller left it, a caller's
``gc.freeze()``, a small batch (nothing moved), and the output staying collectable.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from promptweave import aisbench as ais
from promptweave.dataset import DatasetRenderer

TS, VS, CT = ais.AIS_TEXT_START, ais.AIS_VIDEO_START, ais.AIS_CONTENT_TAG

MM_INFER = {
    "prompt_template": {
        "type": "MMPromptTemplate",
        "template": {
            "round": [
                {
                    "role": "HUMAN",
                    "prompt_mm": {
                        "text": {"type": "text", "text": "{question}"},
                        "video": {"type": "video_url", "video_url": {"url": "file://{video}"}},
                    },
                }
            ]
        },
    },
    "retriever": {"type": "ZeroRetriever"},
    "inferencer": {"type": "GenInferencer"},
}
MM_READER = {"input_columns": ["question", "video"], "output_column": "answer"}
API_META = {
    "round": [
        {"role": "HUMAN", "api_role": "HUMAN"},
        {"role": "BOT", "api_role": "BOT", "generate": True},
    ]
}
RAW_INFER = {
    "ice_template": {
        "type": "RawPromptTemplate",
        "messages": [
            {"role": "user", "content": "Q: {q}"},
            {"role": "assistant", "content": "A: {a}"},
        ],
    },
    "prompt_template": {
        "type": "RawPromptTemplate",
        "messages": ["</E>", {"role": "user", "content": "Q: {q}"}],
    },
    "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1]},
    "inferencer": {"type": "GenInferencer"},
}
RAW_READER = {"input_columns": ["q"], "output_column": "a"}


def mm_rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "content": f"{VS}/v/{i}.mp4{CT}{TS}frames{CT}{TS}Question {i}?{CT}",
            "answer": {"answer": "ABCD"[i % 4]},
        }
        for i in range(n)
    ]


def raw_rows(n: int) -> list[dict[str, Any]]:
    return [{"q": f"question {i}", "a": str(i)} for i in range(n)]


def render_mm(n: int) -> list[Any]:
    renderer = DatasetRenderer(MM_INFER, MM_READER, API_META, api=True, flavor="aisbench")
    rows = mm_rows(n)
    return renderer.render(rows, rows).prompts


def render_raw(n: int) -> list[Any]:
    renderer = DatasetRenderer(RAW_INFER, RAW_READER, API_META, api=True)
    rows = raw_rows(n)
    return renderer.render(rows, rows).prompts


RENDER = {"mm": render_mm, "raw": render_raw}


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    """Each test leaves the collector as it found it (on, thresholds, nothing frozen)."""
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    if enabled:
        gc.enable()
    else:
        gc.disable()


def first_message(prompt: Any) -> Any:
    return prompt[0]


@pytest.mark.parametrize("flow", ["mm", "raw"])
def test_large_batch_output_goes_to_the_oldest_generation(flow: str) -> None:
    gc.enable()
    gc.collect()
    out = RENDER[flow](5000)
    assert gc.isenabled()
    # no young collection is pending: the count of new objects is back under the threshold
    assert gc.get_count()[0] < gc.get_threshold()[0]
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(out[0]) in oldest
    assert id(out[-1]) in oldest
    message = first_message(out[-1])  # (RAW: a dict of str only, which CPython does not track)
    assert id(message) in oldest or not gc.is_tracked(message)
    assert flow == "raw" or gc.is_tracked(message)
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("flow", ["mm", "raw"])
def test_the_output_stays_collectable(flow: str) -> None:
    gc.enable()
    out = RENDER[flow](5000)
    message = first_message(out[-1])
    # a cycle through the output: freed only by a (full) collection
    message["self"] = message
    probe = weakref.ref(out[-1]) if type(out[-1]) is not list else None
    holder = [out[-1]]
    holder.append(holder)
    ref = weakref.ref(_Box(holder))
    del out, message, holder
    gc.collect()
    assert ref() is None
    if probe is not None:
        assert probe() is None


class _Box:
    """A weakly referenceable object kept alive only by a cycle through the output."""

    def __init__(self, holder: list[Any]) -> None:
        self.holder = holder
        holder.append(self)


@pytest.mark.parametrize("flow", ["mm", "raw"])
def test_a_callers_frozen_objects_stay_frozen(flow: str) -> None:
    gc.enable()
    keep = [{"x": [i]} for i in range(100)]
    gc.freeze()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    out = RENDER[flow](5000)
    assert gc.get_freeze_count() == frozen
    assert len(out) == 5000
    assert keep


@pytest.mark.parametrize("flow", ["mm", "raw"])
def test_a_disabled_collector_stays_disabled(flow: str) -> None:
    gc.disable()
    before = gc.get_count()[0]
    out = RENDER[flow](5000)
    assert not gc.isenabled()
    # nothing was moved: the batch's objects are still counted as new
    assert gc.get_count()[0] > before + 5000
    assert len(out) == 5000


@pytest.mark.parametrize("flow", ["mm", "raw"])
def test_a_small_batch_moves_nothing(flow: str) -> None:
    gc.enable()
    RENDER[flow](3)  # (the renderer's first use imports and caches what it needs)
    gc.collect()
    mine = [[i] for i in range(50)]  # the caller's own new objects
    out = RENDER[flow](3)
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert not any(id(x) in oldest for x in mine)
    assert len(out) == 3


def test_promote_young_refuses_when_objects_are_frozen() -> None:
    from promptweave import _core

    gc.freeze()
    frozen = gc.get_freeze_count()
    assert _core._promote_young() is False
    assert gc.get_freeze_count() == frozen
    gc.unfreeze()
    young = [[i] for i in range(10)]
    assert _core._promote_young() is True
    assert gc.get_freeze_count() == 0
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(x) in oldest for x in young)


@pytest.mark.parametrize("flow", ["mm", "raw"])
def test_garbage_made_before_a_large_batch_is_not_held(flow: str) -> None:
    """A large batch collects the young generations before it starts: garbage cycles the
    caller made just before are freed then, not moved to the oldest generation with the
    batch's output (where only a full collection would free them)."""
    gc.enable()
    if flow == "mm":
        renderer = DatasetRenderer(MM_INFER, MM_READER, API_META, api=True, flavor="aisbench")
        rows = mm_rows(5000)
    else:
        renderer = DatasetRenderer(RAW_INFER, RAW_READER, API_META, api=True)
        rows = raw_rows(5000)
    renderer.render(rows[:3], rows)  # (the first use imports and caches what it needs)
    gc.collect()
    holder: list[Any] = []
    holder.append(holder)
    ref = weakref.ref(_Box(holder))
    del holder
    out = renderer.render(rows, rows).prompts
    assert ref() is None
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(out[-1]) in oldest
