"""Namespace in which the golden cases run against promptweave.

The spec's golden cases (``shared/spec/golden``) are Python expressions over a
namespace built by ``run_cases.build_ns(M)`` for the reference frameworks.
:func:`build_ns` builds the same namespace for promptweave: ``M`` is a flavour
module (``promptweave.opencompass`` / ``promptweave.aisbench``) seen through
:class:`FlavorAPI`, which adds ``M.name`` (``'oc'`` / ``'ais'``); ``PL``, ``H``,
``B``, ``S`` and ``dlg`` are the same helpers; the constants are the same plain
data (``tests/test_golden.py`` checks them against ``run_cases`` when the
reference is installed).

Only the helpers the foundation families need are provided (no retrievers,
inferencers or model stand-ins); ``tests/fixtures/regen.py`` keeps exactly the
cases whose names all resolve here.

Self-test: with ``PROMPTWEAVE_GOLDEN_SELFTEST=1`` :func:`framework_api` returns
the *reference* framework namespace (from the spec's ``refload.py``) instead of
promptweave, so the whole harness -- helpers, constants and checks -- can be
validated against the reference itself.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "FRAMEWORKS",
    "SELFTEST_ENV",
    "FlavorAPI",
    "build_ns",
    "framework_api",
    "golden_dir",
    "import_refload",
    "namespace",
    "repo_root",
    "selftest_enabled",
]

#: framework short name (as used by the golden files) -> promptweave flavour module
FRAMEWORKS: dict[str, str] = {"oc": "promptweave.opencompass", "ais": "promptweave.aisbench"}

#: env switch: run the harness against the reference instead of promptweave
SELFTEST_ENV = "PROMPTWEAVE_GOLDEN_SELFTEST"
#: env override for the location of the spec's golden directory
GOLDEN_DIR_ENV = "PROMPTWEAVE_GOLDEN_DIR"


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def golden_dir() -> Path:
    """``$PROMPTWEAVE_GOLDEN_DIR`` or ``<repo>/../shared/spec/golden``."""
    env = os.environ.get(GOLDEN_DIR_ENV)
    return Path(env).resolve() if env else repo_root().parent / "shared" / "spec" / "golden"


def import_refload() -> ModuleType:
    """Import the spec's ``refload`` (needs the reference wheels installed)."""
    path = str(golden_dir())
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("refload")


def hf_loaded(
    test: list[dict[str, Any]],
    train: list[dict[str, Any]] | None = None,
    names: tuple[str, str] = ("train", "test"),
) -> Any:
    """Rows as a dataset's ``load()`` returns them: one HuggingFace ``Dataset`` (``train`` is
    ``None``), or a ``DatasetDict`` of the train and test splits under ``names``."""
    from datasets import Dataset, DatasetDict

    def hf(rows: list[dict[str, Any]]) -> Any:
        return Dataset.from_list([dict(r) for r in rows])

    if train is None:
        return hf(test)
    return DatasetDict({names[0]: hf(train), names[1]: hf(test)})


def reference_base_dataset(
    M: Any,
    test: list[dict[str, Any]],
    train: list[dict[str, Any]] | None,
    reader_cfg: dict[str, Any],
    *,
    abbr: str = "dataset",
    n: int = 1,
) -> Any:
    """The framework ``M``'s real ``BaseDataset`` (``refload.base_dataset_class``) whose
    ``load()`` returns :func:`hf_loaded` of the rows (split names from the reader config), with
    the whole reader config (its ranges too), ``abbr`` and ``n``."""
    names = (reader_cfg.get("train_split", "train"), reader_cfg.get("test_split", "test"))
    data = hf_loaded(test, train, names)
    base = import_refload().base_dataset_class(M)
    cls = type("LoadedDS", (base,), {"load": staticmethod(lambda **kw: data)})
    return cls(reader_cfg=copy.deepcopy(reader_cfg), abbr=abbr, n=n)


def selftest_enabled() -> bool:
    return os.environ.get(SELFTEST_ENV, "") not in ("", "0")


class FlavorAPI:
    """``M`` of the golden cases: a promptweave flavour module plus ``name``."""

    def __init__(self, module: ModuleType, name: str) -> None:
        self.module = module
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.module, attr)

    def __repr__(self) -> str:
        return f"FlavorAPI({self.module.__name__!r}, name={self.name!r})"


def framework_api(framework: str) -> Any:
    """``M`` for ``framework`` ('oc' or 'ais'): promptweave, or the reference in self-test."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}")
    if selftest_enabled():
        refload = import_refload()
        return refload.opencompass() if framework == "oc" else refload.aisbench()
    return FlavorAPI(importlib.import_module(FRAMEWORKS[framework]), framework)


# ----------------------------------------------------------------- helpers


def _human(p: Any, **kw: Any) -> dict[str, Any]:
    return {"role": "HUMAN", "prompt": p, **kw}


def _bot(p: Any, **kw: Any) -> dict[str, Any]:
    return {"role": "BOT", "prompt": p, **kw}


def _system(p: Any, **kw: Any) -> dict[str, Any]:
    return {"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": p, **kw}


# the golden cases' names for the role-dict helpers
H = _human
B = _bot
S = _system

# --------------------------------------------------------------- constants
# Plain data, equal to the module-level constants of the spec's run_cases.py.

E1 = {"question": "1+1=?", "answer": "2", "anything": "blabla"}
LT = {"A": "</E>Q: {question}\nAnswer: A", "B": "</E>Q: {question}\nAnswer: B"}
RQA = [H("Question: {question}"), B("Answer: {answer}")]
RQA2 = [H("{question}"), B("{answer}")]
EMT = {"question": ["1+1=?", "2+2=?", "3+3=?"], "answer": ["2", "4", "6"]}
CONV4 = [H("1+1=?"), B("2"), H("2+2=?"), B("4")]
CONV4G = [H("1+1=?"), B("2"), H("2+2=?"), B("")]
MSGS = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U1"},
    {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "U2"},
]
CHAT4 = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a"},
    {"role": "user", "content": "u2"},
]
ER = {
    "problem": "1+1",
    "input": "Q1",
    "output": "A1",
    "n": 5,
    "dialogue": [
        {"role": "user", "content": "hi {problem}"},
        {"role": "assistant", "content": ""},
    ],
}
RAW_T = [
    {"role": "system", "content": "sys"},
    "</E>",
    {"role": "user", "content": "Query: {input}"},
]
RAW_ICE = [{"role": "user", "content": "Query: Q0"}, {"role": "assistant", "content": "A0"}]

META_DOC1 = {
    "round": [
        {"role": "HUMAN", "begin": "<HUMAN>: ", "end": "<eoh>\n"},
        {"role": "BOT", "begin": "<BOT>: ", "end": "<eob>\n"},
    ]
}
META_DOC2 = {
    "round": [
        {"role": "HUMAN", "begin": "<HUMAN>: ", "end": "<eoh>\n"},
        {"role": "BOT", "begin": "<BOT>: ", "end": "<eob>\n", "generate": True},
    ],
    "reserved_roles": [{"role": "SYSTEM", "begin": "<SYSTEM>: ", "end": "<eosys>\n"}],
    "begin": "Meta instruction: You are now a helpful and harmless AI assistant.\n",
    "end": "end of conversation",
}
META_DOC3 = {k: v for k, v in META_DOC2.items() if k != "reserved_roles"}
META_T = {
    "begin": "Meta instruction: You are now a helpful and harmless AI assistant.",
    "round": [
        {"role": "HUMAN", "begin": "HUMAN: ", "end": "<eoh>\n"},
        {"role": "THOUGHTS", "begin": "THOUGHTS: ", "end": "<eot>\n", "prompt": "None"},
        {"role": "BOT", "begin": "BOT: ", "generate": True, "end": "<eob>\n"},
    ],
    "end": "end of conversion",
    "reserved_roles": [{"role": "SYSTEM", "begin": "SYSTEM: ", "end": "\n"}],
    "eos_token_id": 10000,
}
META_HB = {
    "round": [
        {"role": "HUMAN", "begin": "<H>", "end": "</H>"},
        {"role": "BOT", "begin": "<B>", "end": "</B>", "generate": True},
    ]
}
META_HB_NOGEN = {
    "round": [
        {"role": "HUMAN", "begin": "<H>", "end": "</H>"},
        {"role": "BOT", "begin": "<B>", "end": "</B>"},
    ]
}
META_HBS = {
    "round": [
        {"role": "HUMAN", "begin": "<H>", "end": "</H>"},
        {"role": "BOT", "begin": "<B>", "end": "</B>", "generate": True},
    ],
    "reserved_roles": [{"role": "SYSTEM", "begin": "<S>", "end": "</S>"}],
    "begin": "[BEGIN]",
    "end": "[END]",
}
API_HB = {
    "round": [
        {"role": "HUMAN", "api_role": "HUMAN"},
        {"role": "BOT", "api_role": "BOT", "generate": True},
    ]
}
API_HBS = {
    "round": [
        {"role": "HUMAN", "api_role": "HUMAN"},
        {"role": "BOT", "api_role": "BOT", "generate": True},
    ],
    "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
}

TS = "<AIS_TEXT_START>"
IS = "<AIS_IMAGE_START>"
VS = "<AIS_VIDEO_START>"
AS = "<AIS_AUDIO_START>"
CT = "<AIS_CONTENT_TAG>"
PM_URL = {
    "text": {"type": "text", "text": "{anything}\nQuestion: {question}"},
    "image": {"type": "image_url", "image_url": {"url": "file://{image}"}},
    "video": {"type": "video_url", "video_url": {"url": "file://{video}"}},
    "audio": {"type": "audio_url", "audio_url": {"url": "file://{audio}"}},
}
PM_B64 = {
    "text": {"type": "text", "text": "{question}"},
    "image": {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,{image}"}},
    "video": {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,{video}"}},
    "audio": {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,{audio}"}},
}

ROWS6 = [{"question": f"{i}+{i}=?", "answer": str(2 * i)} for i in range(6)]
TEST2 = [{"question": "1+1=?", "answer": "2"}, {"question": "9+9=?", "answer": "18"}]
SEED_ROWS = [
    {"question": "2+2=?", "answer": "4", "irrelavent_infos": "blabla"},
    {"question": "3+3=?", "answer": "6", "irrelavent_infos": "blabla"},
]
SEED_TEST = [{"question": "1+1=?", "answer": "2", "irrelavent_infos": "blabla"}]
LABEL_ROWS = [{"question": "q0", "answer": "A"}, {"question": "q1", "answer": "B"}]

ICE_SPECS = {
    "meta": ({"round": [H("{question}"), B("{answer}")]}, None),
    "str": ("{question}\n{answer}", None),
    "label": (
        {
            "A": {"round": [H("{question}"), B("A")]},
            "B": {"round": [H("{question}"), B("B")]},
        },
        None,
    ),
    "omitted": ("</E>Q: {question}\nA: {answer}", "</E>"),
}
PT_SPECS = {
    "str_ice": ("Solve.\n</E>{question}\n{answer}", "</E>"),
    "seed000": (
        {
            "begin": [S("Solve the following questions."), "</E>"],
            "round": [H("{question}"), B("{answer}")],
        },
        "</E>",
    ),
    "str_noice": ("Q: {question}", None),
}

#: the plain-data constants put into every namespace
CONSTANT_NAMES: tuple[str, ...] = (
    *("E1", "LT", "RQA", "RQA2", "EMT", "CONV4", "CONV4G", "MSGS", "CHAT4", "ER"),
    *("RAW_T", "RAW_ICE", "META_DOC1", "META_DOC2", "META_DOC3", "META_T", "META_HB"),
    *("META_HB_NOGEN", "META_HBS", "API_HB", "API_HBS", "TS", "IS", "VS", "AS", "CT"),
    *("PM_URL", "PM_B64", "ROWS6", "TEST2", "SEED_ROWS", "SEED_TEST", "LABEL_ROWS"),
    *("ICE_SPECS", "PT_SPECS"),
)


def build_ns(api: Any) -> dict[str, Any]:
    """The golden-case namespace for framework API ``api`` (``M``), with fresh constants."""
    g = globals()
    ns: dict[str, Any] = {k: copy.deepcopy(g[k]) for k in CONSTANT_NAMES}

    def prompt_list(*items: Any) -> Any:
        return api.PromptList(list(items))

    def dlg(items: list[Any], begin: list[Any] | None = None, end: list[Any] | None = None) -> Any:
        """A PromptList laid out exactly like PromptTemplate encodes a dialogue template."""
        out: list[Any] = []
        if begin is not None:
            out += [{"section": "begin", "pos": "begin"}, *begin]
            out.append({"section": "begin", "pos": "end"})
        out += [{"section": "round", "pos": "begin"}, *items, {"section": "round", "pos": "end"}]
        if end is not None:  # PromptTemplate uses pos='end' for BOTH end-section markers
            out += [{"section": "end", "pos": "end"}, *end, {"section": "end", "pos": "end"}]
        return api.PromptList(out)

    ns.update(M=api, copy=copy, H=H, B=B, S=S, PL=prompt_list, dlg=dlg)
    return ns


def namespace(framework: str) -> dict[str, Any]:
    """:func:`build_ns` over :func:`framework_api` (promptweave, or the reference in self-test)."""
    return build_ns(framework_api(framework))
