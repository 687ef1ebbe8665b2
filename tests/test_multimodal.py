"""AISBench multimodal prompts: ``MMPromptTemplate``, ``PromptList.format_mm``, the ``<AIS_*>``
content tags (Rust parser and Python fallback) and ``prompt_mm`` on the model side.

* every MM-* spec case and promptweave's PW-MM-* cases (``tests/fixtures/api/flow_cases.json``,
  recorded from the reference by ``tests/fixtures/regen.py``), through the Rust and the Python
  path;
* hypothesis: our tag parser and ``format_mm`` against the reference's on generated content
  strings (unicode, stray ``<``, partial/unknown tags, many parts, lone surrogates); the strict
  parser's round trip and error positions; whole templates and the model-side parsers against
  the reference.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _flows_ns
import _golden_ns

from promptweave import _backend, _core
from promptweave import aisbench as ais
from promptweave.errors import MultimodalContentError, PromptRenderError

TS, IS, VS, AS, CT = (
    ais.AIS_TEXT_START,
    ais.AIS_IMAGE_START,
    ais.AIS_VIDEO_START,
    ais.AIS_AUDIO_START,
    ais.AIS_CONTENT_TAG,
)
CASES = _flows_ns.load_flow_cases(("MM-", "PW-MM-"))
SELFTEST = _golden_ns.selftest_enabled()


@pytest.fixture(params=["rust", "python"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", request.param == "python")
    return str(request.param)


# ================================================================================== fixtures


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_flow_case(case: dict[str, Any], backend: str) -> None:
    if case["id"] in _flows_ns.NOT_PORTED:
        pytest.skip(_flows_ns.NOT_PORTED[case["id"]])
    value, error = _flows_ns.run_code(case["code"], _flows_ns.flow_namespace())
    _flows_ns.check_outcome(value, error, case["outcome"]["ais"], selftest=SELFTEST)


def test_fixture_covers_every_spec_case() -> None:
    ids = {c["id"] for c in CASES}
    spec = {c["id"] for c in CASES if c["source"] == "spec"}
    # MM-01..22 and MM-30..37: every MM case of the spec (there is no MM-23..29)
    assert {f"MM-{i:02d}" for i in (*range(1, 23), *range(30, 38))} == spec
    assert len(ids) == len(CASES)


def test_parse_content_stays_in_rust(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", False)
    before = _backend.fallbacks
    assert ais.parse_content(TS + "中文😀" + CT + IS + "x") == [("text", "中文😀"), ("image", "x")]
    assert _backend.fallbacks == before
    # a lone surrogate cannot cross into Rust: the Python path gives the same parts
    assert ais.parse_content(TS + "\ud800" + CT) == [("text", "\ud800")]
    assert _backend.fallbacks == before + 1


# ============================================================================ unit behaviour


def test_format_mm_parses_once_and_copies_part_templates() -> None:
    pm = {"text": {"type": "text", "text": "{question}"}}
    pl = ais.PromptList([{"role": "HUMAN", "prompt_mm": pm}, {"role": "BOT", "prompt_mm": pm}])
    out = pl.format_mm(content=TS + "q" + CT + TS + "r" + CT)
    assert type(out) is ais.PromptList
    assert (
        out[0]["prompt_mm"]
        == out[1]["prompt_mm"]
        == [
            {"type": "text", "text": "q"},
            {"type": "text", "text": "r"},
        ]
    )
    assert out[0]["prompt_mm"][0] is not out[0]["prompt_mm"][1]
    assert pm == {"text": {"type": "text", "text": "{question}"}}  # template untouched


@pytest.mark.parametrize(
    ("content", "tag", "position"),
    [
        (TS + "中文😀" + IS + "x" + CT, IS, 19),
        ("é" + TS + "a" + CT, None, 0),
        (TS + "a" + CT + "尾", None, 34),
        (TS + "ü" + CT + VS + "v", VS, 34),
        (TS + CT, TS, 0),
        (TS + "😀" + CT + CT, CT, 34),
        (IS + "😀<AIS_PDF_START>" + CT, "<AIS_PDF_START>", 18),
    ],
)
def test_strict_errors_name_tag_and_character_position(
    content: str, tag: str | None, position: int, backend: str
) -> None:
    with pytest.raises(MultimodalContentError) as info:
        ais.parse_content(content, strict=True)
    assert isinstance(info.value, ValueError)
    assert info.value.tag == tag
    assert info.value.position == position
    assert f"at character {position}" in str(info.value)
    if tag is not None:
        assert content[position:].startswith(tag)


def test_strict_template_rejects_what_compat_drops() -> None:
    t = {
        "round": [{"role": "HUMAN", "prompt_mm": {"text": {"type": "text", "text": "{question}"}}}]
    }
    row = {"content": "lead" + TS + "q" + CT}
    assert ais.MMPromptTemplate(t).generate_item(row)[1]["prompt_mm"] == []
    with pytest.raises(MultimodalContentError, match="at character 0"):
        ais.MMPromptTemplate(t, strict=True).generate_item(row)
    custom = ais.MMPromptTemplate(t, content_field="mm")
    assert custom.generate_item({"mm": TS + "q" + CT})[1]["prompt_mm"] == [
        {"type": "text", "text": "q"}
    ]


def test_render_content_inverts_parse() -> None:
    parts = [("image", "a.png"), ("text", "问题 {x}"), ("audio", ""), ("video", "v")]
    assert ais.parse_content(ais.render_content(parts)) == parts
    with pytest.raises(MultimodalContentError):
        ais.render_content([("pdf", "x")])


def test_errors_are_promptweave_errors_with_builtin_compat() -> None:
    t = ais.MMPromptTemplate({"round": [{"role": "HUMAN", "prompt_mm": {}}]})
    with pytest.raises(KeyError) as missing:
        t.generate_item({"question": "q"})
    assert isinstance(missing.value, MultimodalContentError)
    assert missing.value.path == "entry['content']"
    with pytest.raises(KeyError) as modality:
        t.generate_item({"content": IS + "x" + CT})
    assert isinstance(modality.value, PromptRenderError)
    assert "image" in str(modality.value)


# ================================================================================ hypothesis

_PIECES = st.sampled_from(
    [
        TS, IS, VS, AS, CT, CT, "<AIS_", "<AIS_TEXT", "<AIS_TEXT_START", "AIS_IMAGE_START>",
        "<AIS_CONTENT_TA", "<AIS_PDF_START>", "<AIS_>", "<AIS_x>", "<", ">", "<<", "{question}",
        "{image}", "{", "}", "中文", "😀", "e\u0301", "\n", " ", "\ud800",
    ]
)  # fmt: skip
CONTENT = st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=14).map("".join)
VALID_TEXT = st.text(max_size=6).filter(lambda s: "<AIS_" not in s)
PM_IDENTITY = {
    "text": {"type": "text", "text": "{question}"},
    "image": {"type": "image_url", "image_url": {"url": "{image}"}},
    "video": {"type": "video_url", "video_url": "{video}"},
    "audio": {"type": "audio_url", "audio_url": {"url": "a:{audio}", "detail": "low"}},
}


@given(content=CONTENT)
def test_format_mm_matches_reference(reference: dict[str, Any], content: str) -> None:
    ref = reference["ais"]
    item = {"role": "HUMAN", "prompt_mm": PM_IDENTITY}
    want = ref.PromptList([item, "{x}"]).format_mm(content=content, x="X")
    got = ais.PromptList([item, "{x}"]).format_mm(content=content, x="X")
    assert repr(got) == repr(want)
    parts = ais.parse_content(content)
    assert len(parts) == len(want[0]["prompt_mm"])


@given(content=CONTENT, strict=st.booleans())
def test_rust_and_python_parsers_agree(content: str, strict: bool) -> None:
    def parse(force_python: bool) -> Any:
        saved = _backend.FORCE_PYTHON
        _backend.FORCE_PYTHON = force_python
        try:
            return ais.parse_content(content, strict=strict)
        except MultimodalContentError as exc:
            return (str(exc), exc.tag, exc.position)
        finally:
            _backend.FORCE_PYTHON = saved

    assert parse(False) == parse(True)


@given(content=CONTENT)
def test_strict_success_round_trips_and_errors_point_at_tags(content: str) -> None:
    try:
        parts = ais.parse_content(content, strict=True)
    except MultimodalContentError as exc:
        err = exc
    else:
        assert parts == ais.parse_content(content)
        assert ais.render_content(parts) == content
        return
    assert err.position is not None
    assert 0 <= err.position < len(content)
    if err.tag is not None:
        assert content[err.position :].startswith(err.tag)


@given(
    parts=st.lists(
        st.tuples(st.sampled_from(["text", "image", "video", "audio"]), VALID_TEXT), max_size=8
    )
)
def test_render_then_parse_round_trips(parts: list[tuple[str, str]]) -> None:
    content = ais.render_content(parts)
    assert ais.parse_content(content) == parts
    if all(payload for _, payload in parts):
        assert ais.parse_content(content, strict=True) == parts


def test_rust_parser_direct_matches_fallback_on_surrogate_free_input() -> None:
    content = IS + "a" + IS + "b" + CT + "x" + TS + "<AIS_TEXT_<AIS_TEXT_START>START>" + CT
    assert _core.parse_content(content) == [("image", "ab")]
    assert _core.parse_content(TS + "<AIS_TEXT_" + TS + "START>" + CT) == [("text", TS)]


_FORMS = {
    "url": _golden_ns.PM_URL,
    "b64": _golden_ns.PM_B64,
    "str": {
        "text": {"type": "text", "text": "Q: {question} {anything}"},
        "image": {"type": "image_url", "image_url": "file://{image}"},
        "video": {"type": "video_url", "video_url": "data:video/mp4;base64,{video}"},
        "audio": {"type": "audio_url", "audio_url": "data:audio/wav;base64,{audio}"},
    },
}


@st.composite
def mm_templates(draw: st.DrawFn) -> dict[str, Any]:
    form = _FORMS[draw(st.sampled_from(sorted(_FORMS)))]
    kinds = draw(st.sets(st.sampled_from(sorted(form)), min_size=1))
    round_: list[Any] = [{"role": "HUMAN", "prompt_mm": {k: form[k] for k in kinds}}]
    if draw(st.booleans()):
        round_.append({"role": "BOT", "prompt": "{answer}"})
    template: dict[str, Any] = {"round": round_}
    if draw(st.booleans()):
        template["begin"] = [
            {"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": "sys {anything}"},
            *draw(st.lists(st.sampled_from(["STR {anything}", "", "{content}"]), max_size=2)),
        ]
    return template


@given(template=mm_templates(), content=CONTENT, anything=st.text(max_size=3))
def test_mm_template_matches_reference(
    reference: dict[str, Any], template: dict[str, Any], content: str, anything: str
) -> None:
    ref = reference["ais"]
    row = {"anything": anything, "content": content, "answer": "A"}
    want = _flows_ns.outcome(
        lambda: ref.MMPromptTemplate(copy.deepcopy(template)).generate_item(row)
    )
    got = _flows_ns.outcome(
        lambda: ais.MMPromptTemplate(copy.deepcopy(template)).generate_item(row)
    )
    assert got == want


_PARSERS = [
    ("api", "API_HBS"),
    ("api", "API_HB"),
    ("api", None),
    ("lm", "META_HB"),
    ("lm", "META_HBS"),
    ("lm", None),
]


@given(
    template=mm_templates(),
    content=st.lists(st.sampled_from([TS + "t" + CT, IS + "图" + CT, AS + "a" + CT]), max_size=3),
    parser=st.sampled_from(_PARSERS),
    mode=st.sampled_from(["gen", "ppl"]),
)
def test_model_side_prompt_mm_matches_reference(
    reference: dict[str, Any],
    template: dict[str, Any],
    content: list[str],
    parser: tuple[str, str | None],
    mode: str,
) -> None:
    ref = reference["ais"]
    kind, meta_name = parser
    meta = getattr(_golden_ns, meta_name) if meta_name else None
    row = {"anything": "x", "content": "".join(content), "answer": "A"}

    def run(api: Any) -> Any:
        prompt = api.MMPromptTemplate(copy.deepcopy(template)).generate_item(row)
        cls = api.APITemplateParser if kind == "api" else api.LMTemplateParser
        return cls(copy.deepcopy(meta)).parse_template(prompt, mode)

    assert _flows_ns.outcome(lambda: run(ais)) == _flows_ns.outcome(lambda: run(ref))


@given(
    prompt=st.lists(
        st.one_of(
            st.sampled_from(["", "s", "{x}"]),
            st.fixed_dictionaries(
                {
                    "role": st.sampled_from(["HUMAN", "BOT", "SYSTEM"]),
                    "prompt_mm": st.sampled_from([[1], ["p", "q"], [], "ab", {"k": 1}, 5]),
                },
                optional={"prompt": st.sampled_from(["", "p", "{x}"])},
            ),
        ),
        max_size=5,
    )
)
def test_api_no_meta_collects_prompt_mm_like_reference(
    reference: dict[str, Any], prompt: list[Any]
) -> None:
    ref = reference["ais"]
    want = _flows_ns.outcome(
        lambda: ref.APITemplateParser(None).parse_template(ref.PromptList(prompt), "gen")
    )
    got = _flows_ns.outcome(
        lambda: ais.APITemplateParser(None).parse_template(ais.PromptList(prompt), "gen")
    )
    assert got == want


@given(
    prompt=st.lists(
        st.one_of(
            st.just({"section": "round", "pos": "begin"}),
            st.just({"section": "round", "pos": "end"}),
            st.sampled_from(["s", {"k": "v"}, 5]),
            st.fixed_dictionaries({"content": st.sampled_from([[], "s", [{"type": "text"}]])}),
        ),
        max_size=4,
    )
)
def test_is_mm_prompt_matches_reference(reference: dict[str, Any], prompt: list[Any]) -> None:
    ref = reference["ais"]
    assert _flows_ns.outcome(lambda: ais.is_mm_prompt(prompt)) == _flows_ns.outcome(
        lambda: ref.is_mm_prompt(prompt)
    )
