"""``parse_template`` of ``LMTemplateParser`` and ``APITemplateParser`` as the instance's own Rust
method, and parsers as plain objects (copied, deep-copied and pickled as the reference's are).

A parser installs ``_core.ParseMethod(...).parse_template`` on itself: a ``str`` prompt comes back
as it is and a ``PromptList`` of the parser's flavour is rendered by the compiled meta template
(API: unless it is OpenCompass raw messages or has text items the API walk ignores, which the
class method warns about), without a Python frame; everything else goes to the class method.
These tests check that the installed method gives what the class method gives (and what the
reference gives) in every case, follows ``FORCE_PYTHON`` switched after construction, keeps a
subclass's override, keeps a temporary parser alive through the call, and lets the garbage
collector free a parser.
"""

from __future__ import annotations

import copy
import gc
import pickle
import weakref
from typing import Any

import pytest
from _metas import CHATML

import promptweave.aisbench
import promptweave.opencompass
from promptweave import _backend, _core

OURS = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}
FRAMEWORKS = list(OURS)

META = {**CHATML, "eos_token_id": 151645}
API_META = {
    "round": [
        {"role": "HUMAN", "api_role": "HUMAN"},
        {"role": "BOT", "api_role": "BOT", "generate": True},
    ],
    "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
    "eos_token_id": 151645,
}


def _prompt(M: Any) -> Any:
    return M.PromptList(
        [
            {"section": "round", "pos": "begin"},
            {"role": "HUMAN", "prompt": "What is 2+2? {x}"},
            {"role": "BOT", "prompt": "4"},
            {"role": "HUMAN", "prompt": "And 3+3?"},
            {"role": "BOT", "prompt": ""},
            {"section": "round", "pos": "end"},
        ]
    )


def _inputs(M: Any) -> list[Any]:
    """Prompts of every kind the parser takes: the shortcut's two and the class method's."""
    plain = M.PromptList(["a ", "b"])
    return [
        "plain text",
        _prompt(M),
        plain,
        ("x", "y"),  # a sequence of prompts: parsed one by one
        [_prompt(M), "z"],
    ]


@pytest.fixture(autouse=True)
def _rust(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", False)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("meta", [None, META], ids=["no-meta", "chatml"])
def test_installed_method_equals_the_class_method_and_the_reference(
    reference: dict[str, Any], fw: str, meta: Any
) -> None:
    M = OURS[fw]
    ours, ref = M.LMTemplateParser(meta), reference[fw].LMTemplateParser(meta)
    assert isinstance(ours.__dict__["parse_template"].__self__, _core.ParseMethod)
    for prompt, ref_prompt in zip(_inputs(M), _inputs(reference[fw]), strict=True):
        for mode in ("gen", "ppl"):
            got = repr(ours.parse_template(prompt, mode=mode))
            assert got == repr(type(ours).parse_template(ours, prompt, mode))
            assert got == repr(ref.parse_template(ref_prompt, mode=mode))
    # a bad mode reaches the class method, which raises the reference's error
    with pytest.raises(ValueError, match="mode"):
        ours.parse_template("x", mode="bad")
    with pytest.raises(ValueError, match="mode"):
        ours.parse_template(_prompt(M), "GEN")


def _fresh(s: str) -> str:
    """A str equal to ``s`` that is another object than the interned one (as a key read from
    JSON is)."""
    fresh = "".join(list(s))
    assert fresh == s
    assert fresh is not s
    return fresh


def _two_key_items(M: Any) -> Any:
    """Items of exactly two keys in each form: either key order, keys and marker names that
    are not the interned strings."""
    return M.PromptList(
        [
            {"pos": "begin", "section": "round"},
            {"prompt": "What is 2+2? {x}", "role": "HUMAN"},
            {_fresh("role"): "BOT", _fresh("prompt"): "4"},
            {_fresh("prompt"): "And 3+3?", _fresh("role"): "HUMAN"},
            {"role": "BOT", "prompt": ""},
            {_fresh("section"): _fresh("round"), _fresh("pos"): _fresh("end")},
        ]
    )


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("meta", [None, META], ids=["no-meta", "chatml"])
def test_two_key_items_in_any_form(reference: dict[str, Any], fw: str, meta: Any) -> None:
    M = OURS[fw]
    ours, ref = M.LMTemplateParser(meta), reference[fw].LMTemplateParser(meta)
    fallbacks = _backend.fallbacks
    for mode in ("gen", "ppl"):
        got = ours.parse_template(_two_key_items(M), mode=mode)
        assert repr(got) == repr(ref.parse_template(_two_key_items(reference[fw]), mode=mode))
        assert repr(got) == repr(ours.parse_template(_prompt(M), mode=mode))
    assert _backend.fallbacks == fallbacks


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_api_role_text_that_is_a_prompt_list(reference: dict[str, Any], fw: str) -> None:
    """A meta role's ``begin`` given as a ``PromptList``: the reference's ``+=`` on it appends
    the prompt and ``end`` strings as items (a ``PromptList``'s ``+=``), not their characters."""
    outs = []
    for M in (OURS[fw], reference[fw]):
        meta = {
            "round": [
                {
                    "role": "HUMAN",
                    "api_role": "HUMAN",
                    "begin": M.PromptList(["pre"]),
                    "end": "</H>",
                },
                {"role": "BOT", "api_role": "BOT", "generate": True},
            ]
        }
        prompt = M.PromptList(
            [
                {"section": "round", "pos": "begin"},
                {"role": "HUMAN", "prompt": "q"},
                {"section": "round", "pos": "end"},
            ]
        )
        outs.append(repr(M.APITemplateParser(meta).parse_template(prompt, mode="gen")))
    assert outs[0] == outs[1]
    assert "'pre', 'q', '</H>'" in outs[0]


@pytest.mark.parametrize(
    ("fw", "cls", "meta"),
    [("oc", "LMTemplateParser", META), ("ais", "APITemplateParser", API_META)],
    ids=["lm-oc", "api-ais"],
)
def test_installed_method_stays_in_rust_and_follows_force_python(
    monkeypatch: pytest.MonkeyPatch, fw: str, cls: str, meta: Any
) -> None:
    M = OURS[fw]
    parser = getattr(M, cls)(meta)
    want = type(parser).parse_template(parser, _prompt(M), "gen")
    fallbacks = _backend.fallbacks
    got = parser.parse_template(_prompt(M), mode="gen")
    assert got == want
    assert type(got) is type(want)
    assert _backend.fallbacks == fallbacks
    # switched after the parser was built: the pure-Python path renders (and is counted)
    monkeypatch.setattr(_backend, "FORCE_PYTHON", True)
    assert parser.parse_template(_prompt(M), mode="gen") == want
    assert _backend.fallbacks == fallbacks + 1


def test_subclass_override_is_kept() -> None:
    class Upper(promptweave.opencompass.LMTemplateParser):
        def parse_template(self, prompt_template: Any, mode: str) -> Any:
            return str(super().parse_template(prompt_template, mode)).upper()

    parser = Upper(META)
    assert "parse_template" not in parser.__dict__
    assert parser.parse_template("abc", mode="gen") == "ABC"


def test_temporary_parser_lives_through_the_call_and_parsers_are_freed() -> None:
    M = promptweave.opencompass
    # the parser object is only referenced by the installed method during this call
    assert M.LMTemplateParser(META).parse_template(_prompt(M), mode="ppl").endswith("<|im_end|>\n")
    with pytest.raises(ValueError, match="mode"):
        M.LMTemplateParser().parse_template("x", mode="bad")
    parser = M.LMTemplateParser(META)
    ref = weakref.ref(parser)
    del parser
    gc.collect()
    assert ref() is None, "the parser and its installed method were not freed"


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("cls", ["LMTemplateParser", "APITemplateParser"])
def test_parsers_copy_deepcopy_and_pickle(reference: dict[str, Any], fw: str, cls: str) -> None:
    M = OURS[fw]
    meta = copy.deepcopy(META if cls == "LMTemplateParser" else API_META)
    parser = getattr(M, cls)(meta)
    ref = getattr(reference[fw], cls)(copy.deepcopy(meta))
    want = repr(ref.parse_template(_prompt(reference[fw]), mode="gen"))
    for other in (copy.copy(parser), copy.deepcopy(parser), pickle.loads(pickle.dumps(parser))):
        assert type(other) is type(parser)
        assert other.meta_template == meta
        assert other.eos_token_id == parser.eos_token_id == 151645
        assert repr(other.parse_template(_prompt(M), mode="gen")) == want
        # its own installed method, serving the copy
        assert (
            other.__dict__["parse_template"].__self__
            is not parser.__dict__["parse_template"].__self__
        )
    assert copy.deepcopy(parser).meta_template is not meta


def _api_inputs(M: Any) -> list[Any]:
    """Prompts of every kind the API parser takes, the shortcut's and the class method's."""
    return [
        "plain text",
        _prompt(M),
        M.PromptList([{"role": "HUMAN", "prompt": "hi"}, "ignored text", {"role": "BOT"}]),
        # a text item inside a round: the API walk ignores it, and the class method warns
        M.PromptList(
            [
                {"section": "round", "pos": "begin"},
                {"role": "HUMAN", "prompt": "hi"},
                "ignored text",
                {"role": "BOT", "prompt": ""},
                {"section": "round", "pos": "end"},
            ]
        ),
        # every item a string with both substrings: raw messages to OpenCompass
        M.PromptList(["the role and its content", "content, role"]),
        # raw messages (OpenCompass passes them through), as a PromptList and a plain list
        M.PromptList([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}]),
        [{"role": "user", "content": "hi"}],
        # strings are tested for the substrings, as the reference tests them
        M.PromptList(["a role and its content", {"role": "HUMAN", "prompt": "x"}]),
        M.PromptList([{"role": "user", "content": "c"}, {"role": "HUMAN", "prompt": "p"}]),
        M.PromptList([{"role": "HUMAN", "prompt": "p"}, 7]),
        M.PromptList([{"section": "round", "pos": "begin"}, {"role": "SYSTEM", "prompt": "s"}]),
        M.PromptList([]),
        ("x", "y"),
    ]


def _api_outcome(fn: Any) -> tuple[str, Any, int]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return "ok", repr(fn()), len(caught)
        except Exception as exc:
            return "error", type(exc).__name__, len(caught)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("meta", [None, API_META], ids=["no-meta", "api-roles"])
def test_api_installed_method_equals_the_class_method_and_the_reference(
    reference: dict[str, Any], fw: str, meta: Any
) -> None:
    M = OURS[fw]
    ours = M.APITemplateParser(copy.deepcopy(meta))
    ref = reference[fw].APITemplateParser(copy.deepcopy(meta))
    assert isinstance(ours.__dict__["parse_template"].__self__, _core.ParseMethod)
    for prompt, ref_prompt in zip(_api_inputs(M), _api_inputs(reference[fw]), strict=True):
        for mode in ("gen", "ppl"):
            got = _api_outcome(lambda p=prompt, m=mode: ours.parse_template(p, mode=m))
            cls_got = _api_outcome(lambda p=prompt, m=mode: type(ours).parse_template(ours, p, m))
            want = _api_outcome(lambda p=ref_prompt, m=mode: ref.parse_template(p, mode=m))
            assert got == cls_got, (prompt, mode)
            if want[0] == "ok":
                assert got == want, (prompt, mode)
            else:
                assert got[0] == "error", (prompt, mode, got, want)
    with pytest.raises(ValueError, match="mode"):
        ours.parse_template(_prompt(M), "GEN")


def test_api_subclass_override_is_kept() -> None:
    class Tagged(promptweave.opencompass.APITemplateParser):
        def parse_template(self, prompt_template: Any, mode: str) -> Any:
            return ("tagged", super().parse_template(prompt_template, mode))

    parser = Tagged(API_META)
    assert "parse_template" not in parser.__dict__
    assert parser.parse_template("abc", mode="gen") == ("tagged", "abc")


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("cls_name", ["LMTemplateParser", "APITemplateParser"])
def test_meta_template_or_roles_replaced_after_construction(
    reference: dict[str, Any], fw: str, cls_name: str
) -> None:
    """The reference reads ``self.meta_template`` and ``self.roles`` on every call: replacing
    either after construction changes what later calls render (the compiled form must not
    outlive them)."""
    meta = API_META if cls_name == "APITemplateParser" else META
    other = {
        "round": [
            {"role": "HUMAN", "begin": "<U>", "end": "</U>\n", "api_role": "HUMAN"},
            {"role": "BOT", "begin": "<A>", "end": "</A>\n", "generate": True, "api_role": "BOT"},
        ],
        "begin": "MB",
        "end": "ME",
    }

    def steps(M: Any) -> list[str]:
        parser = getattr(M, cls_name)(copy.deepcopy(meta))
        out = []
        for mode in ("gen", "ppl"):
            out.append(repr(parser.parse_template(_prompt(M), mode)))
        parser.roles = {k: {**v, "begin": "[" + str(k) + "]"} for k, v in parser.roles.items()}
        out.append(repr(parser.parse_template(_prompt(M), "ppl")))
        parser.meta_template = copy.deepcopy(other)
        out.append(repr(parser.parse_template(_prompt(M), "gen")))
        parser.meta_template = None
        for mode in ("gen", "ppl"):
            out.append(repr(parser.parse_template(_prompt(M), mode)))
        return out

    want = steps(reference[fw])
    assert steps(OURS[fw]) == want
    assert len(set(want)) > 2  # the replacements changed the output
