"""Error behaviour: the exception hierarchy, ``make_error``, and what every error site raises.

* :mod:`promptweave.errors` defines the hierarchy of spec 06 §C; ``make_error`` combines a family
  with the builtin the reference raises at that site (same class name, cached, readable ``str``,
  ``[CODE]`` prefix and ``.error_code`` in the AISBench flavour, ``.path``).
* For each error site of spec 06 §C (run on both flavours and both backends) the raised error is
  checked against the reference run on the same input: it is a ``PromptRenderError`` of the
  family the spec recommends, an instance of the builtin the reference raises (OC, and AIS where
  the reference raises a builtin), carries the AISBench code where the reference raises an
  AISBench error, has the documented ``.path``, prints nothing and survives pickling (errors
  cross process boundaries in the frameworks' multiprocess runners).
"""

from __future__ import annotations

import contextlib
import io
import pickle
import re
import warnings
from typing import Any

import pytest

import promptweave.aisbench
import promptweave.opencompass
from promptweave import _backend, errors
from promptweave.errors import (
    ArgumentError,
    IceTokenError,
    LabelError,
    MetaTemplateError,
    MultimodalContentError,
    PromptRenderError,
    PromptTypeError,
    RetrieverError,
    TemplateError,
    TemplateStructureError,
    UnknownRoleError,
    make_error,
)

OURS = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
AIS_CODE = re.compile(r"^\[([A-Z0-9]+(?:-[A-Z0-9]+)+)\]")

#: family -> the bases spec 06 §C requires
FAMILIES: dict[type[PromptRenderError], tuple[type[BaseException], ...]] = {
    TemplateError: (PromptRenderError, ValueError),
    IceTokenError: (TemplateError, LookupError),
    LabelError: (TemplateError, KeyError),
    PromptTypeError: (PromptRenderError, TypeError),
    MetaTemplateError: (PromptRenderError, ValueError),
    UnknownRoleError: (PromptRenderError, KeyError),
    TemplateStructureError: (PromptRenderError, ValueError),
    ArgumentError: (PromptRenderError, ValueError),
    RetrieverError: (PromptRenderError, ValueError),
    MultimodalContentError: (PromptRenderError, ValueError),
}

COMPATS: list[type[BaseException]] = [
    AssertionError,
    TypeError,
    KeyError,
    IndexError,
    LookupError,
    ValueError,
    AttributeError,
    NotImplementedError,
]


# ============================================================================ hierarchy


def test_base_class() -> None:
    assert issubclass(PromptRenderError, Exception)
    err = PromptRenderError("x")
    assert err.path is None
    assert err.error_code is None


@pytest.mark.parametrize("family", list(FAMILIES), ids=lambda c: c.__name__)
def test_family_bases(family: type[PromptRenderError]) -> None:
    for base in FAMILIES[family]:
        assert issubclass(family, base), f"{family.__name__} is not a {base.__name__}"
    assert family.__module__ == "promptweave.errors"


def test_exports() -> None:
    names = {c.__name__ for c in FAMILIES} | {"PromptRenderError", "make_error"}
    assert names <= set(errors.__all__)
    for name in errors.__all__:
        assert hasattr(errors, name), name


# =========================================================================== make_error


@pytest.mark.parametrize("compat", COMPATS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("family", list(FAMILIES), ids=lambda c: c.__name__)
def test_make_error_combines(family: type[PromptRenderError], compat: type[BaseException]) -> None:
    err = make_error(family, "it's {broken}", compat=compat, path="template['round'][1]")
    assert isinstance(err, family)
    assert isinstance(err, compat)
    assert isinstance(err, PromptRenderError)
    assert type(err).__name__ == family.__name__  # the compat base is an implementation detail
    assert type(err).__module__ == "promptweave.errors"
    # KeyError's str() would be the repr of the message; ours stays readable
    assert str(err) == "it's {broken}"
    assert err.path == "template['round'][1]"
    assert err.error_code is None
    again = make_error(family, "other", compat=compat)
    assert type(again) is type(err), "combined classes must be cached"
    with pytest.raises(compat):
        raise err


def test_make_error_reuses_family_when_compat_is_a_base() -> None:
    assert type(make_error(UnknownRoleError, "m", compat=KeyError)) is UnknownRoleError
    assert type(make_error(IceTokenError, "m", compat=LookupError)) is IceTokenError
    assert type(make_error(PromptTypeError, "m", compat=TypeError)) is PromptTypeError
    assert type(make_error(TemplateError, "m")) is TemplateError


def test_make_error_code_prefix() -> None:
    err = make_error(IceTokenError, "ice_token '</E>' not found", code="ICLR-PARAM-001")
    assert str(err) == "[ICLR-PARAM-001] ice_token '</E>' not found"
    assert err.error_code == "ICLR-PARAM-001"
    plain = make_error(IceTokenError, "ice_token '</E>' not found")
    assert str(plain) == "ice_token '</E>' not found"
    assert plain.error_code is None


@pytest.mark.parametrize("compat", [None, *COMPATS], ids=lambda c: getattr(c, "__name__", "none"))
def test_make_error_pickles(compat: type[BaseException] | None) -> None:
    err = make_error(TemplateError, "bad", compat=compat, path="template", code="ICLR-TYPE-001")
    back = pickle.loads(pickle.dumps(err))
    assert type(back).__name__ == "TemplateError"
    assert isinstance(back, TemplateError)
    if compat is not None:
        assert isinstance(back, compat)
    assert str(back) == str(err)
    assert back.path == "template"
    assert back.error_code == "ICLR-TYPE-001"


# ============================================================================ error sites


def _h(p: Any, **kw: Any) -> dict[str, Any]:
    return {"role": "HUMAN", "prompt": p, **kw}


def _b(p: Any, **kw: Any) -> dict[str, Any]:
    return {"role": "BOT", "prompt": p, **kw}


def _dlg(items: list[Any], begin: list[Any] | None = None) -> list[Any]:
    out: list[Any] = []
    if begin is not None:
        out += [{"section": "begin", "pos": "begin"}, *begin, {"section": "begin", "pos": "end"}]
    return [*out, {"section": "round", "pos": "begin"}, *items, {"section": "round", "pos": "end"}]


META = {
    "round": [
        {"role": "HUMAN", "begin": "<H>", "end": "</H>", "api_role": "HUMAN"},
        {"role": "BOT", "begin": "<B>", "end": "</B>", "generate": True, "api_role": "BOT"},
    ]
}
USER = {"role": "USER", "prompt": "x"}

#: id -> (code over M, the family spec 06 §C recommends, the expected .path or None if
#: the site has no meaningful path, or ... for "any non-None path")
SITES: dict[str, tuple[str, type[PromptRenderError], Any]] = {
    "template-type": ("M.PromptTemplate(['x'])", PromptTypeError, "template"),
    "ice-token-type": ("M.PromptTemplate('x', ice_token=1)", PromptTypeError, "ice_token"),
    "sep-token-type": ("M.PromptTemplate('x', sep_token=2)", PromptTypeError, "sep_token"),
    "dict-value-type": ("M.PromptTemplate({'A': 1})", PromptTypeError, "template['A']"),
    "ice-token-missing": (
        "M.PromptTemplate('abc', ice_token='</E>')",
        IceTokenError,
        "template",
    ),
    "ice-token-missing-label": (
        "M.PromptTemplate({'A': 'abc', 'B': '</E>'}, ice_token='</E>')",
        IceTokenError,
        "template['A']",
    ),
    "label-missing": (
        "M.PromptTemplate({'A': 'a', 'B': 'b'}).generate_ice_item({}, 'C')",
        LabelError,
        "template['C']",
    ),
    # the reference's LM walk leaves a variable unbound (UnboundLocalError) on a round or ice
    # section when the meta template's round is empty
    "meta-empty-round": (
        "M.LMTemplateParser({'round': []}).parse_template(M.PromptList(['t', *dlg([])]), 'gen')",
        MetaTemplateError,
        "meta_template['round']",
    ),
    "no-round": (
        "M.PromptTemplate({'begin': 'x'}).generate_item({})",
        TemplateError,
        "template['round']",
    ),
    "pl-ice-into-role-prompt": (
        "M.PromptTemplate({'round': [H('</E>')]}, ice_token='</E>')"
        ".generate_item({}, ice_field_replace_token=M.PromptList([H('i')]))",
        PromptTypeError,
        ...,
    ),
    "pl-ice-into-str-template": (
        "M.PromptTemplate('</E>', ice_token='</E>')"
        ".generate_item({}, ice_field_replace_token=M.PromptList([H('i')]))",
        PromptTypeError,
        ...,
    ),
    "round-item-not-str": (
        "M.PromptTemplate({'round': [5]}).generate_item({'a': 1})",
        PromptTypeError,
        ...,
    ),
    "str-promptlist-bad-item": ("str(M.PromptList(['a', 1]))", PromptTypeError, "prompt[1]"),
    "format-bad-item": ("M.PromptList([1]).format(a=1)", PromptTypeError, "prompt[0]"),
    "replace-pl-into-prompt": (
        "M.PromptList([H('</E>')]).replace('</E>', M.PromptList(['x']))",
        PromptTypeError,
        "prompt[0]['prompt']",
    ),
    "meta-no-round": ("M.LMTemplateParser({'begin': 'x'})", MetaTemplateError, ...),
    "meta-round-not-list": ("M.LMTemplateParser({'round': 'x'})", MetaTemplateError, ...),
    "meta-bad-item": ("M.LMTemplateParser({'round': [5]})", MetaTemplateError, ...),
    "meta-duplicate-role": (
        "M.LMTemplateParser({'round': [dict(role='H'), dict(role='H')]})",
        MetaTemplateError,
        ...,
    ),
    "meta-list-begin": (
        "M.LMTemplateParser({'round': [dict(role='H', begin=['<s>'])]})",
        MetaTemplateError,
        ...,
    ),
    "api-meta-no-round": ("M.APITemplateParser({'begin': 'x'})", MetaTemplateError, ...),
    "api-meta-duplicate-role": (
        "M.APITemplateParser({'round': [dict(role='H'), dict(role='H')]})",
        MetaTemplateError,
        ...,
    ),
    "lm-mode": (
        "M.LMTemplateParser(META).parse_template(M.PromptList(dlg([H('a')])), 'foo')",
        ArgumentError,
        None,
    ),
    "api-mode": (
        "M.APITemplateParser(META).parse_template(M.PromptList(dlg([H('a')])), 'foo')",
        ArgumentError,
        None,
    ),
    "lm-input-type": ("M.LMTemplateParser(META).parse_template(5, 'gen')", PromptTypeError, None),
    "api-input-type": (
        "M.APITemplateParser(META).parse_template(5, 'gen')",
        PromptTypeError,
        None,
    ),
    "lm-round-role-unknown": (
        "M.LMTemplateParser(META).parse_template(M.PromptList(dlg([USER])), 'gen')",
        UnknownRoleError,
        "prompt[1]['role']",
    ),
    "lm-begin-role-unknown-no-fallback": (
        "M.LMTemplateParser(META).parse_template(M.PromptList(dlg([H('a')], begin=[USER])), 'gen')",
        UnknownRoleError,
        "prompt[1]['role']",
    ),
    "lm-fallback-role-unknown": (
        "M.LMTemplateParser(META).parse_template("
        "M.PromptList(dlg([H('a')], begin=[dict(USER, fallback_role='NOPE')])), 'gen')",
        UnknownRoleError,
        "prompt[1]['fallback_role']",
    ),
    "api-round-role-unknown": (
        "M.APITemplateParser(META).parse_template(M.PromptList(dlg([USER])), 'gen')",
        UnknownRoleError,
        "prompt[1]['role']",
    ),
    "api-begin-role-unknown-no-fallback": (
        "M.APITemplateParser(META).parse_template("
        "M.PromptList(dlg([H('a')], begin=[USER])), 'ppl')",
        UnknownRoleError,
        "prompt[1]['role']",
    ),
    "stray-end-marker": (
        "M.LMTemplateParser(META).parse_template("
        "M.PromptList([{'section': 'round', 'pos': 'end'}]), 'gen')",
        TemplateStructureError,
        "prompt[0]",
    ),
    "mismatched-markers": (
        "M.LMTemplateParser(META).parse_template(M.PromptList("
        "[{'section': 'round', 'pos': 'begin'}, {'section': 'begin', 'pos': 'end'}]), 'gen')",
        TemplateStructureError,
        "prompt[1]",
    ),
    "unknown-section": (
        "M.LMTemplateParser(META).parse_template("
        "M.PromptList([{'section': 'foo', 'pos': 'begin'}]), 'gen')",
        TemplateStructureError,
        "prompt[0]",
    ),
    "lm-bad-pos": (
        "M.LMTemplateParser(META).parse_template("
        "M.PromptList([{'section': 'round', 'pos': 'middle'}]), 'gen')",
        TemplateStructureError,
        ...,
    ),
    "api-bad-pos": (
        "M.APITemplateParser(META).parse_template("
        "M.PromptList([{'section': 'round', 'pos': 'middle'}]), 'gen')",
        TemplateStructureError,
        ...,
    ),
    "api-mismatched-markers": (
        "M.APITemplateParser(META).parse_template(M.PromptList("
        "[{'section': 'round', 'pos': 'begin'}, {'section': 'begin', 'pos': 'end'}]), 'gen')",
        TemplateStructureError,
        "prompt[1]",
    ),
    "dict-outside-sections": (
        "M.LMTemplateParser(META).parse_template(M.PromptList([H('a')]), 'gen')",
        TemplateStructureError,
        "prompt[0]",
    ),
    "end-section-ppl": (
        "M.LMTemplateParser(META).parse_template("
        "M.PromptTemplate({'round': [H('a')], 'end': [H('b')]}).generate_item({}), 'ppl')",
        TemplateStructureError,
        ...,
    ),
    "api-str-in-meta-round": (
        "M.APITemplateParser({'round': ['x', dict(role='HUMAN', api_role='HUMAN')]})"
        ".parse_template(M.PromptList(dlg([H('a')])), 'gen')",
        MetaTemplateError,
        ...,
    ),
    "api-no-api-role": (
        "M.APITemplateParser({'round': [dict(role='HUMAN')]})"
        ".parse_template(M.PromptList(dlg([H('a')])), 'gen')",
        MetaTemplateError,
        ...,
    ),
    "api-generate-role-in-begin": (
        "M.APITemplateParser(META).parse_template("
        "M.PromptList(dlg([H('a')], begin=[B('b')])), 'gen')",
        TemplateStructureError,
        ...,
    ),
    "api-empty-result": (
        "M.APITemplateParser(META).parse_template(M.PromptList([]), 'gen')",
        TemplateStructureError,
        ...,
    ),
}


def _ns(api: Any) -> dict[str, Any]:
    return {
        "M": api,
        "H": _h,
        "B": _b,
        "dlg": _dlg,
        "META": META,
        "USER": USER,
    }


def _run(code: str, api: Any) -> tuple[BaseException | None, str]:
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf):
        warnings.simplefilter("ignore")
        try:
            eval(code, _ns(api))  # site code from the table above
        except Exception as exc:  # every exception is checked by the caller
            return exc, buf.getvalue()
    return None, buf.getvalue()


@pytest.fixture(params=["rust", "python"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(_backend, "FORCE_PYTHON", request.param == "python")
    return str(request.param)


@pytest.mark.parametrize("fw", ["oc", "ais"])
@pytest.mark.parametrize("site", list(SITES))
def test_error_site(
    site: str,
    fw: str,
    backend: str,
    reference: dict[str, Any],
    capfd: pytest.CaptureFixture[str],
) -> None:
    code, family, path = SITES[site]
    ref_err, ref_out = _run(code, reference[fw])
    assert ref_err is not None, f"{site}: the reference does not fail here"
    err, out = _run(code, OURS[fw])
    assert out == "", f"{site}: promptweave printed {out!r}"
    assert capfd.readouterr().out == "", f"{site}: promptweave wrote to stdout"
    assert err is not None, f"{site}: promptweave did not raise"
    assert isinstance(err, family), (
        f"{site}: {type(err).__name__}: {err} is not a {family.__name__}"
    )
    assert isinstance(err, PromptRenderError)

    ref_msg = ANSI.sub("", str(ref_err))
    match = AIS_CODE.match(ref_msg)
    if match:  # an AISBench error: same code, prefixed to our message
        assert err.error_code == match.group(1), f"{site}: {err.error_code!r} != {ref_msg!r}"
        assert str(err).startswith(f"[{match.group(1)}] ")
    else:  # a builtin: ours is an instance of it too
        assert type(ref_err).__module__ == "builtins", f"{site}: reference raised {ref_err!r}"
        assert isinstance(err, type(ref_err)), (
            f"{site}: {type(err).__name__} is not a {type(ref_err).__name__}"
        )
        assert err.error_code is None

    if ref_out:  # the reference printed (unknown role): ours raises a readable UnknownRoleError
        assert isinstance(err, UnknownRoleError)
    if isinstance(err, UnknownRoleError):
        assert err.args, "UnknownRoleError without a message"
        assert err.args[0] is not None, "never KeyError(None)"
        assert "USER" in str(err) or "NOPE" in str(err), f"{site}: role not named: {err}"

    if path is ...:
        assert err.path is not None, f"{site}: no .path on {type(err).__name__}: {err}"
    else:
        assert err.path == path, f"{site}: .path {err.path!r} != {path!r}"


@pytest.mark.parametrize("fw", ["oc", "ais"])
@pytest.mark.parametrize("site", list(SITES))
def test_error_site_pickles(site: str, fw: str) -> None:
    """Errors survive pickling (the frameworks run inference in worker processes)."""
    code, family, _ = SITES[site]
    err, _ = _run(code, OURS[fw])
    assert isinstance(err, PromptRenderError)
    back = pickle.loads(pickle.dumps(err))
    assert type(back).__name__ == type(err).__name__
    assert isinstance(back, family)
    for base in type(err).__mro__:
        assert isinstance(back, base), f"{site}: unpickled error is not a {base.__name__}"
    assert str(back) == str(err)
    assert (back.path, back.error_code) == (err.path, err.error_code)


_BUILTIN_FAMILIES = (TypeError, AssertionError, KeyError, ValueError, IndexError, AttributeError)


def _families(exc: BaseException) -> set[type[BaseException]]:
    return {f for f in _BUILTIN_FAMILIES if isinstance(exc, f)}


@pytest.mark.parametrize("fw", ["oc", "ais"])
@pytest.mark.parametrize("cls_name", ["LMTemplateParser", "APITemplateParser"])
@pytest.mark.parametrize(
    "meta",
    [
        ["round"],  # `'round' in meta` passes, then indexing with 'round' fails
        "around",
        5,
        {"begin": "x"},
        {"round": "x"},
        {"round": [{"norole": 1}], "reserved_roles": "x"},  # the list check comes first
        {"round": [{"norole": 1}]},
        {"round": [1]},
        {"round": [{"role": "A"}, {"role": "A"}]},
    ],
    ids=repr,
)
def test_malformed_meta_template_raises_the_reference_family(
    reference: dict[str, Any], fw: str, cls_name: str, meta: Any
) -> None:
    """The constructor raises an exception of the reference's built-in family (where the
    reference raises one of its own classes, any exception will do)."""
    ours = {"oc": promptweave.opencompass, "ais": promptweave.aisbench}[fw]
    want = _raised(lambda: getattr(reference[fw], cls_name)(meta))
    got = _raised(lambda: getattr(ours, cls_name)(meta))
    expected = _families(want)
    if expected:
        assert expected <= _families(got), (type(want), type(got).__mro__)


def _raised(fn: Any) -> BaseException:
    try:
        fn()
    except Exception as exc:  # any exception: its family is what is compared
        return exc
    raise AssertionError("no exception raised")


@pytest.mark.parametrize("parser", ["lm", "api"])
def test_bad_meta_text_reached_through_a_fallback_role_names_that_role(parser: str) -> None:
    """A prompt role missing from the meta template speaks as its fallback role: a bad
    ``begin`` there is that meta role's, and the message says so."""
    import promptweave as pw

    prompt = pw.PromptList(
        [
            {"section": "begin", "pos": "begin"},
            {"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": "sys"},
            {"section": "begin", "pos": "end"},
            {"section": "round", "pos": "begin"},
            {"role": "HUMAN", "prompt": "q"},
            {"section": "round", "pos": "end"},
        ]
    )
    meta = {"round": [{"role": "HUMAN", "begin": 5}, {"role": "BOT", "generate": True}]}
    if parser == "api":
        meta = {"round": [dict(r, api_role=r["role"]) for r in meta["round"]]}
    cls = pw.LMTemplateParser if parser == "lm" else pw.APITemplateParser
    with pytest.raises(TypeError, match=r"role 'SYSTEM' \(the meta template's role 'HUMAN'"):
        cls(meta).parse_template(prompt, mode="gen")


def test_make_error_with_a_compat_class_that_takes_other_arguments() -> None:
    """``UnicodeEncodeError`` takes five constructor arguments: the error is of its nearest
    base that takes a message (``UnicodeError``, a ``ValueError``), not a TypeError."""
    from promptweave.errors import RetrieverError, make_error

    err = make_error(RetrieverError, "a message", compat=UnicodeEncodeError)
    assert isinstance(err, UnicodeError)
    assert str(err) == "a message"


def test_range_expression_that_cannot_be_compiled() -> None:
    from promptweave.retrievers import partial_indices

    with pytest.raises(ValueError, match="test_range="):
        partial_indices(5, "[\ud800]", "test")
