"""A model config's class decides how prompts are parsed: ``promptweave.config.model_prompting``
against the model classes of the reference wheels.

* The class table is checked against the wheels' own source: every model class of OpenCompass
  0.5.4 and AISBench 3.1 that builds a template parser (itself or through a base class) is read
  with ``ast``, and the kind of parser it builds -- ``APITemplateParser(meta_template)``,
  ``LMTemplateParser(meta_template)``, ``LMTemplateParser()``, the chat models'
  ``_get_meta_template(meta_template)`` -- must be the one ``model_prompting`` reports.
* Every model config shipped in both wheels names a class promptweave knows.
* Behaviour: for every distinct (class, meta template) of those configs, prompts rendered by
  ``DatasetRenderer.from_config(dataset, model_cfg)`` equal the reference's prompts parsed by the
  parser the class builds: AISBench's service models are instantiated from the wheel (their
  constructors need no network), the chat models' parser comes from the wheel's own
  ``_get_meta_template``, the others from the wheel's parser classes.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import _golden_ns  # noqa: E402
import test_dataset_configs as T  # noqa: E402
from _wheels import configs_root  # noqa: E402

from promptweave.chat_models import chat_meta_template  # noqa: E402
from promptweave.config import load_config, model_prompting  # noqa: E402
from promptweave.dataset import DatasetRenderer  # noqa: E402

FLAVOR = {"oc": "opencompass", "ais": "aisbench"}
MODEL_PACKAGES = {"oc": ("opencompass", "models"), "ais": ("ais_bench", "benchmark/models")}


def _package_dir(fw: str) -> Path:
    top, sub = MODEL_PACKAGES[fw]
    spec = importlib.util.find_spec(top)
    assert spec is not None, top
    assert spec.origin is not None, top
    return Path(spec.origin).parent / sub


@functools.cache
def _classes(fw: str) -> dict[str, tuple[list[str], ast.ClassDef, str]]:
    """Every class of the wheel's model package: name -> (base class names, node, file name)."""
    classes = {}
    for path in sorted(_package_dir(fw).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                classes[node.name] = (bases, node, path.name)
    return classes


def _inherited(fw: str, name: str, own: Any, seen: tuple[str, ...] = ()) -> Any:
    """``own(class node)`` of the class ``name`` or of its nearest base class where it is not
    ``None`` (the wheel's own classes only)."""
    classes = _classes(fw)
    if name not in classes or name in seen:
        return None
    bases, node, _ = classes[name]
    found = own(node)
    for base in bases:
        if found is not None:
            break
        found = _inherited(fw, base, own, (*seen, name))
    return found


def _parser_kind(node: ast.ClassDef) -> str | None:
    """The kind of template parser a class's own code builds: 'api', 'lm', 'lm-no-meta',
    'chat' or ``None``."""
    kind = None
    for sub in ast.walk(node):
        if not (isinstance(sub, ast.Assign) and len(sub.targets) == 1):
            continue
        if ast.unparse(sub.targets[0]) != "self.template_parser":
            continue
        call = sub.value
        assert isinstance(call, ast.Call), ast.unparse(sub)
        fn = ast.unparse(call.func).rsplit(".", 1)[-1]
        if fn == "_get_meta_template":
            kind = "chat"
        elif fn == "APITemplateParser":
            kind = "api"
        elif fn == "LMTemplateParser":
            kind = "lm" if call.args or call.keywords else "lm-no-meta"
        else:
            raise AssertionError(f"{node.name}: {ast.unparse(sub)}")
    return kind


@functools.cache
def _parser_kinds(fw: str) -> dict[str, str]:
    """Class name -> the kind of template parser its constructor (or its nearest base class
    that has one) builds, read from the wheel's source."""
    kinds = {name: _inherited(fw, name, _parser_kind) for name in _classes(fw)}
    return {name: kind for name, kind in kinds.items() if kind is not None}


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_class_table_matches_the_wheels_sources(fw: str) -> None:
    kinds = _parser_kinds(fw)
    assert len(kinds) >= (60 if fw == "oc" else 20), kinds
    meta = {"round": [{"role": "HUMAN", "begin": "<u>"}, {"role": "BOT", "generate": True}]}
    wrong = []
    for name, kind in sorted(kinds.items()):
        p = model_prompting({"type": name, "meta_template": meta}, FLAVOR[fw])
        got = (
            "chat"
            if p.chat_template
            else "api"
            if p.api
            else "lm-no-meta"
            if p.meta_template is None
            else "lm"
        )
        if got != kind or not p.known:
            wrong.append(f"{name}: the source builds {kind}, model_prompting says {got}")
    assert not wrong, "\n".join(wrong)


def _model_configs(fw: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((configs_root(fw) / "models").rglob("*.py")):
        if "__pycache__" in path.parts or path.name == "__init__.py":
            continue
        for model in load_config(str(path)).models():
            out.append((str(path.relative_to(configs_root(fw))), model))
    return out


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_every_model_config_names_a_known_class(fw: str) -> None:
    """... or a class the wheel does not have (OpenCompass's LMDeploy PyTorch configs name a
    ``LmdeployPytorchModel`` that 0.5.4 no longer defines)."""
    configs = _model_configs(fw)
    assert len(configs) >= (500 if fw == "oc" else 15)
    defined = _parser_kinds(fw)
    unknown = [
        f"{rel}: {p.model_class!r}"
        for rel, model in configs
        if not (p := model_prompting(model, FLAVOR[fw])).known and p.model_class in defined
    ]
    assert not unknown, unknown
    missing = {
        p.model_class
        for _, model in configs
        if (p := model_prompting(model, FLAVOR[fw])).model_class not in defined
    }
    assert missing == ({"LmdeployPytorchModel"} if fw == "oc" else set())


# ------------------------------------------------------------------------------- behaviour

INFER = {
    "ice_template": {
        "template": {
            "round": [
                {"role": "HUMAN", "prompt": "Q: {question}"},
                {"role": "BOT", "prompt": "A: {answer}"},
            ]
        }
    },
    "prompt_template": {
        "template": {
            "begin": [{"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": "Be brief."}, "</E>"],
            "round": [
                {"role": "HUMAN", "prompt": "Q: {question}"},
                {"role": "BOT", "prompt": "A: {answer}"},
            ],
        },
        "ice_token": "</E>",
    },
    "retriever": {"type": "FixKRetriever", "fix_id_list": [0, 1]},
    "inferencer": {"type": "GenInferencer"},
}
#: a perplexity (label-dict) dataset of the same rows
PPL_INFER = {
    "prompt_template": {"template": {"a": "Q: {question}\nA: a", "b": "Q: {question}\nA: b"}},
    "retriever": {"type": "ZeroRetriever"},
    "inferencer": {"type": "PPLInferencer"},
}
READER = {"input_columns": ["question"], "output_column": "answer"}
ROWS = T.Rows(
    [{"question": f"train {i} {{x}}", "answer": f"t{i}"} for i in range(3)],
    [{"question": "what?", "answer": "a"}, {"question": "中文?", "answer": "b"}],
    ["question", "answer"],
)


@pytest.fixture
def quiet() -> Iterator[None]:
    logging.disable(logging.WARNING)  # deprecated AISBench classes warn when built
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def _ais_class(name: str) -> Any:
    base = _package_dir("ais") / "api_models"
    for path in sorted(base.glob("*.py")):
        module = importlib.import_module(f"ais_bench.benchmark.models.api_models.{path.stem}")
        cls = getattr(module, name, None)
        if isinstance(cls, type) and cls.__module__ == module.__name__:
            return cls
    return None


def _reference_parser(fw: str, M: Any, model: dict[str, Any]) -> Any:
    """The template parser the reference model class builds for ``model``."""
    refload = _golden_ns.import_refload()
    name = model_prompting(model, FLAVOR[fw]).model_class
    meta = copy.deepcopy(model.get("meta_template"))
    kind = _parser_kinds(fw)[name]
    if fw == "ais" and (cls := _ais_class(name)) is not None:
        # the service models build their parser (and default meta template) in the
        # constructor; the one network call there (asking the server for the model's name) is
        # answered here
        params = inspect.signature(cls.__init__).parameters
        kw: dict[str, Any] = {"path": "", "meta_template": meta}
        if "model" in params:
            kw["model"] = "m"
        offline = type(name, (cls,), {"_get_service_model_path": lambda self: "m"})
        return offline(**kw).template_parser
    if kind == "chat":
        hf = refload.opencompass_hf_chat() if fw == "oc" else refload.aisbench_hf_chat()
        return hf._get_meta_template(meta)
    if kind == "api":
        return M.APITemplateParser(meta)
    return M.LMTemplateParser(meta if kind == "lm" else None)


@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_model_configs_render_as_their_classes_parse(
    fw: str, reference: dict[str, Any], quiet: None
) -> None:
    M = reference[fw]
    ref = T.RefPipeline(M, fw, INFER, READER, ROWS)
    built = ref.build("gen")
    assert not built.errors
    seen: set[str] = set()
    checked = raised = 0
    for rel, model in _model_configs(fw):
        name = model_prompting(model, FLAVOR[fw]).model_class
        key = repr((name, model.get("meta_template")))
        if key in seen or name not in _parser_kinds(fw):  # a class the wheel lacks: no reference
            continue
        seen.add(key)
        ds = {"infer_cfg": INFER, "reader_cfg": READER, "abbr": "d"}
        try:
            parser = _reference_parser(fw, M, model)
        except AssertionError:  # a malformed meta template in the config (a 1-tuple)
            with pytest.raises(AssertionError):
                DatasetRenderer.from_config(ds, model, flavor=FLAVOR[fw])
            raised += 1
            continue
        want = [parser.parse_template(p, mode="gen") for p in built.prompts or []]
        got = DatasetRenderer.from_config(ds, model, flavor=FLAVOR[fw]).render(
            ROWS.test, ROWS.train
        )
        assert repr(got.prompts) == repr(want), f"{rel} ({key})"
        checked += 1
    assert checked >= (20 if fw == "oc" else 10), checked
    assert raised <= 2, raised


def test_ais_chat_service_model_without_meta_gets_messages() -> None:
    """AISBench's VLLMCustomAPIChat with no meta template: message lists through its default
    chat meta template (a reserved SYSTEM role), not one joined string."""
    p = model_prompting({"type": "VLLMCustomAPIChat"}, "aisbench")
    assert p.api
    assert not p.chat_template
    assert p.meta_template == chat_meta_template("aisbench")
    ds = {"infer_cfg": INFER, "reader_cfg": READER}
    out = DatasetRenderer.from_config(ds, {"type": "VLLMCustomAPIChat"}, flavor="aisbench")
    first = out.render(ROWS.test, ROWS.train).prompts[0]
    assert [m["role"] for m in first] == ["SYSTEM", "HUMAN", "BOT", "HUMAN", "BOT", "HUMAN"]
    # api= and meta_template= given to from_config win over the model config
    lm = DatasetRenderer.from_config(ds, {"type": "VLLMCustomAPIChat"}, api=False)
    assert isinstance(lm.render(ROWS.test, ROWS.train).prompts[0], str)


def test_estimating_classes_match_the_wheels_sources() -> None:
    """The classes whose max_seq_len counting needs no tokenizer are exactly the OpenCompass
    model classes whose ``get_token_len`` is ``BaseAPIModel``'s (read from the source, through
    base classes)."""

    def defines(node: ast.ClassDef) -> str | None:
        body = node.body
        own = any(isinstance(f, ast.FunctionDef) and f.name == "get_token_len" for f in body)
        return node.name if own else None

    def owner(name: str) -> str | None:
        found: str | None = _inherited("oc", name, defines)
        return found

    wrong = []
    for name in sorted(_parser_kinds("oc")):
        estimates = owner(name) == "BaseAPIModel"
        counted = model_prompting({"type": name}).token_count == "words"
        if estimates != counted:
            wrong.append(f"{name}: get_token_len of {owner(name)}, model_prompting: {counted}")
    assert not wrong, wrong


def _ais_ppl_support(name: str) -> str:
    """What AISBench 3.1's ``PPLInferencer`` does with the model class ``name``, read from the
    wheel's source: ``'local'`` (not a service model: the inferencer drives service models
    only), ``'none'`` (its nearest ``get_ppl_request_body`` raises: 'PPL is not supported'),
    ``'ppl'`` (it makes the request)."""

    def service(node: ast.ClassDef) -> bool | None:
        return True if node.name == "BaseAPIModel" else None

    def ppl_body(node: ast.ClassDef) -> str | None:
        for f in node.body:
            if isinstance(f, ast.AsyncFunctionDef | ast.FunctionDef):
                if f.name == "get_ppl_request_body":
                    return "none" if isinstance(f.body[-1], ast.Raise) else "ppl"
        return None

    if not _inherited("ais", name, service):
        return "local"
    return str(_inherited("ais", name, ppl_body) or "none")


def test_ais_ppl_with_a_model_aisbench_cannot_score_is_refused(quiet: None) -> None:
    """A perplexity (ppl) dataset with an AISBench model config: what AISBench 3.1's
    PPLInferencer refuses is refused with its error code and built-in type (stream=True in the
    config: ValueError ICLI-PARAM-007; a service class without a perplexity request:
    NotImplementedError ICLI-IMPL-008; a local model, which the inferencer cannot drive:
    AttributeError); the others render. Every stock model config of the wheel."""
    ds = {"infer_cfg": PPL_INFER, "reader_cfg": READER, "abbr": "d"}
    seen: dict[str, int] = {}
    for rel, model in _model_configs("ais"):
        name = model_prompting(model, "aisbench").model_class
        if name not in _classes("ais"):
            continue
        support = _ais_ppl_support(name)
        if model.get("stream") == True:  # noqa: E712  (the reference's own test)
            expected: tuple[type[BaseException], str | None] | None = (ValueError, "PARAM-007")
        elif support == "none":
            expected = (NotImplementedError, "IMPL-008")
        elif support == "local":
            expected = (AttributeError, None)
        else:
            expected = None
        if expected is None:
            out = DatasetRenderer.from_config(ds, model, flavor="aisbench", mode="ppl")
            assert out.render(ROWS.test, ROWS.train).prompts, rel
        else:
            with pytest.raises(expected[0]) as info:
                DatasetRenderer.from_config(ds, model, flavor="aisbench", mode="ppl")
            assert name in str(info.value), rel
            if expected[1] is not None:
                assert expected[1] in str(info.value), rel
        key = "renders" if expected is None else expected[0].__name__
        seen[key] = seen.get(key, 0) + 1
    # the stock configs cover each case
    assert set(seen) == {"renders", "ValueError", "NotImplementedError", "AttributeError"}, seen
    # and promptweave's class lists are the wheel's
    from promptweave.dataset import _AIS_LOCAL_MODELS, _AIS_NO_PPL_API_MODELS

    assert {_ais_ppl_support(n) for n in _AIS_LOCAL_MODELS} == {"local"}
    assert {_ais_ppl_support(n) for n in _AIS_NO_PPL_API_MODELS} == {"none"}
    # the gen datasets are not affected, nor is the OpenCompass flavour
    stream = {"type": "VLLMCustomAPIChat", "stream": True}
    gen = {"infer_cfg": INFER, "reader_cfg": READER}
    assert DatasetRenderer.from_config(gen, stream, flavor="aisbench").render(ROWS.test).prompts
    assert DatasetRenderer.from_config(ds, stream, flavor="opencompass", mode="ppl")


def _reference_request_messages(model: dict[str, Any], parsed: Any) -> list[Any]:
    """The ``messages`` of the request the AISBench class of ``model`` builds for ``parsed``
    (its own ``get_request_body``, no network)."""
    import asyncio

    from ais_bench.benchmark.models.output import RequestOutput

    name = model_prompting(model, "aisbench").model_class
    cls = _ais_class(name)
    offline = type(name, (cls,), {"_get_service_model_path": lambda self: "m"})
    keys = ("meta_template", "stream", "generation_kwargs")
    kw = {k: copy.deepcopy(v) for k, v in model.items() if k in keys}
    kw.setdefault("generation_kwargs", {})
    instance = offline(path="", model="m", **kw)
    body = asyncio.run(instance.get_request_body(parsed, 16, RequestOutput(False)))
    return list(body["messages"])


def test_ais_request_messages_are_the_chat_service_models_requests(
    reference: dict[str, Any], quiet: None
) -> None:
    """``ais_request_messages`` of what promptweave renders for every stock AISBench chat
    service model config is, byte for byte (JSON), the ``messages`` of the request the class
    itself builds for the reference's parsed prompt: gen and ppl datasets, a SYSTEM turn, a
    plain string prompt, extra message keys, a custom role; a bare string item (a meta
    template's ``begin``) fails in both."""
    import json

    from promptweave.chat_models import AIS_CHAT_SERVICE_MODELS, ais_request_messages

    ds = {"infer_cfg": INFER, "reader_cfg": READER, "abbr": "d"}
    ppl = {"infer_cfg": PPL_INFER, "reader_cfg": READER, "abbr": "d"}
    compared = 0
    for rel, model in _model_configs("ais"):
        name = model_prompting(model, "aisbench").model_class
        if name not in AIS_CHAT_SERVICE_MODELS:
            continue
        for cfg, mode in ((ds, "gen"), (ppl, "ppl")):
            if mode == "ppl" and model.get("stream") == True:  # noqa: E712 (refused)
                continue
            r = DatasetRenderer.from_config(cfg, model, flavor="aisbench", mode=mode)
            prompts = r.render(ROWS.test, ROWS.train).prompts
            inputs = [p for row in prompts for p in (row.values() if mode == "ppl" else [row])]
            for parsed in inputs:
                want = _reference_request_messages(model, copy.deepcopy(parsed))
                got = ais_request_messages(parsed)
                assert json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False)
                compared += 1
        assert compared, rel
    assert compared >= 16, compared  # 4 stock configs: 2 gen rows, 2 x 2 ppl labels if not stream
    # by hand: a str prompt, extra keys, an unknown role, a bare string item
    model = {"type": "VLLMCustomAPIChat"}
    odd = [
        {"role": "SYSTEM", "prompt": "s", "name": "x"},
        {"role": "TOOL", "prompt": "t"},
        {"role": "CRITIC", "prompt": [{"type": "text", "text": "c"}]},
    ]
    for parsed in ("plain text", odd):
        want = _reference_request_messages(model, copy.deepcopy(parsed))
        assert json.dumps(ais_request_messages(parsed)) == json.dumps(want)
    with pytest.raises(TypeError):
        _reference_request_messages(model, ["begin", *odd])
    with pytest.raises(TypeError, match="item 0 of the model input is 'begin', not a message"):
        ais_request_messages(["begin", *odd])
