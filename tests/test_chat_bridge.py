"""The chat-model bridge (spec 02 §4): parsed prompt -> chat messages -> chat template.

* The spec's golden cases HF-01..HF-05 (default chat meta template of each framework, the
  PromptList -> messages conversion, the base-model join) run against
  :mod:`promptweave.chat_models`.
* :class:`promptweave.DatasetRenderer` with ``chat_template=`` is compared, on real dataset
  configs of both wheels, with the reference's whole chat-model path: the reference retriever and
  templates, the reference chat model's default ``APITemplateParser``, its
  ``_convert_chat_messages`` and transformers' ``apply_chat_template(...,
  add_generation_prompt=True, tokenize=False)``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import _golden_ns  # noqa: E402
import test_dataset_configs as tdc  # noqa: E402

import promptweave as pw  # noqa: E402
from promptweave import chat_models  # noqa: E402
from promptweave.errors import PromptRenderError  # noqa: E402

FLAVOR = {"oc": "opencompass", "ais": "aisbench"}
HF_CASES = ("HF-01", "HF-02", "HF-03", "HF-04", "HF-05")

# our own small templates in the two most common layouts (the real-template conformance lives
# in test_chat_template.py)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
    "\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def _golden() -> dict[str, Any]:
    path = _golden_ns.golden_dir() / "golden.json"
    with path.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def _hf(flavor: str) -> SimpleNamespace:
    """promptweave's counterpart of the reference chat-model module used by the HF cases."""
    return SimpleNamespace(
        _get_meta_template=lambda meta: chat_models.chat_parser(meta, flavor),
        _convert_chat_messages=chat_models.convert_chat_messages,
        _convert_base_messages=chat_models.convert_base_messages,
    )


def _case_code(case_id: str) -> str:
    # the spec's case list lives in the golden dir
    sys.path.insert(0, str(_golden_ns.golden_dir()))
    try:
        import cases_parsers
    finally:
        sys.path.pop(0)
    for cid, _fw, code in cases_parsers.CASES:
        if cid == case_id:
            return str(code)
    raise LookupError(case_id)


def _hf_params() -> list[tuple[str, str]]:
    golden = _golden()
    return [(cid, fw) for cid in HF_CASES for fw in ("oc", "ais") if fw in golden[cid]]


@pytest.mark.parametrize(("case_id", "fw"), _hf_params())
def test_hf_golden_case(case_id: str, fw: str) -> None:
    expected = _golden()[case_id][fw]
    ns = _golden_ns.namespace(fw)
    ns["HF"] = lambda: _hf(FLAVOR[fw])
    code = _case_code(case_id)
    if "raises" in expected:
        exc_type = {"KeyError": KeyError, "TypeError": TypeError}[expected["raises"]]
        with pytest.raises(exc_type) as info:
            exec(code, ns)
        assert isinstance(info.value, PromptRenderError)
        return
    exec(code, ns)
    result = ns["result"]
    assert repr(result) == expected["repr"]
    assert type(result).__name__ == expected["type"]


def test_convert_chat_messages_errors_name_the_item() -> None:
    with pytest.raises(KeyError, match=r"item 1 has role 'TOOL'"):
        chat_models.convert_chat_messages(
            [[{"role": "HUMAN", "prompt": "q"}, {"role": "TOOL", "prompt": "t"}]]
        )
    with pytest.raises(TypeError, match="not a role dict"):
        chat_models.convert_chat_messages([["raw text"]])


# ------------------------------------------------------------------ whole datasets vs reference


pytestmark = pytest.mark.usefixtures("quiet_reference_logs")


def _tokenizer(template: str) -> Any:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        chat_template=template,
    )


def _ref_chat_module(fw: str) -> Any:
    refload = _golden_ns.import_refload()
    with contextlib.redirect_stderr(io.StringIO()):
        return refload.opencompass_hf_chat() if fw == "oc" else refload.aisbench_hf_chat()


#: dataset configs compared per framework (gen configs of the corpus, every k-th)
PER_FRAMEWORK = {"oc": 40, "ais": 15}


@pytest.mark.parametrize("template_name", ["chatml", "llama3"])
@pytest.mark.parametrize("fw", ["oc", "ais"])
def test_dataset_with_chat_template_matches_reference(
    fw: str, template_name: str, reference: dict[str, Any]
) -> None:
    template = CHATML if template_name == "chatml" else LLAMA3
    tok = _tokenizer(template)
    hf = _ref_chat_module(fw)
    ours_template = pw.ChatTemplate(template, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    M = reference[fw]
    cases = [c for c in tdc._corpus(fw).cases if c.mode == "gen"]
    step = max(1, len(cases) // PER_FRAMEWORK[fw])
    compared = rows_compared = 0
    mismatches: list[str] = []
    for case in cases[::step]:
        rows = tdc.make_rows(case)
        if isinstance(rows, str):
            continue
        ref = tdc.RefPipeline(M, fw, case.infer_cfg, case.reader_cfg, rows)
        built = ref.build("gen")
        if built.errors or built.prompts is None:
            continue
        parser = hf._get_meta_template(None)
        parsed = [parser.parse_template(p, mode="gen") for p in built.prompts]
        messages = hf._convert_chat_messages(parsed)
        expected = [
            tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in messages
        ]
        renderer = pw.DatasetRenderer(
            case.infer_cfg, case.reader_cfg, flavor=FLAVOR[fw], chat_template=ours_template
        )
        result = renderer.render(rows.test, rows.train)
        compared += 1
        rows_compared += len(expected)
        if result.messages != messages:
            mismatches.append(f"{case.rel}: messages differ")
        if result.prompts != expected:
            first = next(
                i for i, (a, b) in enumerate(zip(result.prompts, expected, strict=True)) if a != b
            )
            mismatches.append(
                f"{case.rel}: row {first}: {result.prompts[first]!r} != {expected[first]!r}"
            )
    print(f"{fw}/{template_name}: {compared} dataset configs, {rows_compared} rows compared")
    assert compared >= PER_FRAMEWORK[fw] // 2, compared
    assert not mismatches, "\n".join(mismatches[:10])
    assert rows_compared > 0


def test_chat_template_refuses_ppl() -> None:
    cfg = {
        "prompt_template": {"template": {"A": "{q} A", "B": "{q} B"}},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "PPLInferencer"},
    }
    with pytest.raises(ValueError, match="ppl mode"):
        pw.DatasetRenderer(cfg, {"input_columns": ["q"]}, chat_template=pw.ChatTemplate(CHATML))


def test_system_fallback_differs_between_frameworks() -> None:
    """OpenCompass speaks SYSTEM as HUMAN (user turns end with a newline); AISBench keeps a
    system message."""
    cfg = {
        "prompt_template": {
            "template": {
                "begin": [{"role": "SYSTEM", "fallback_role": "HUMAN", "prompt": "Be brief."}],
                "round": [
                    {"role": "HUMAN", "prompt": "{q}"},
                    {"role": "BOT", "prompt": "{a}"},
                ],
            }
        },
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    reader = {"input_columns": ["q"], "output_column": "a"}
    rows = [{"q": "2+2?", "a": "4"}]
    t = pw.ChatTemplate(CHATML)
    oc = pw.DatasetRenderer(cfg, reader, chat_template=t).render(rows)
    ais = pw.DatasetRenderer(cfg, reader, flavor="aisbench", chat_template=t).render(rows)
    assert oc.prompts == ["<|im_start|>user\nBe brief.\n2+2?\n<|im_end|>\n<|im_start|>assistant\n"]
    assert ais.prompts == [
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ]


def test_demo_tokenizer_config_renders_like_transformers() -> None:
    """The demo's chat_tokenizer_config.json (a ChatML-style template with a default system
    prompt and ``trim``) renders as transformers renders it."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    path = Path(pw.__file__).parent / "demo" / "chat_tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token=config["eos_token"]["content"],
        pad_token=config["pad_token"],
        chat_template=config["chat_template"],
    )
    ours = pw.ChatTemplate.from_tokenizer_config(path)
    convs = [
        [{"role": "user", "content": " 2+2? \n"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1\n"},
            {"role": "user", "content": "q2"},
        ],
    ]
    for conv in convs:
        for gen in (False, True):
            want = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
            assert ours.render(conv, add_generation_prompt=gen) == want


# ------------------------------------------------------------------ chat models by class

#: a Qwen3-style switch: the template reads a variable the vLLM chat model's
#: ``chat_template_kwargs`` set
THINKING = LLAMA3 + (
    "{% if add_generation_prompt and enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% endif %}"
)
FASTCHAT_CASES = TESTS_DIR / "fixtures" / "api" / "fastchat_cases.json"


def test_fastchat_vicuna_matches_fastchat() -> None:
    """``format_fastchat`` against the text FastChat 0.2.36 itself made of the same messages
    (``tests/fixtures/regen_fastchat.py``)."""
    doc = json.loads(FASTCHAT_CASES.read_text("utf-8"))
    assert doc["template"] == "vicuna"
    assert len(doc["cases"]) >= 100
    got = chat_models.format_fastchat([c["messages"] for c in doc["cases"]], "vicuna")
    assert got == [c["expected"] for c in doc["cases"]]
    with pytest.raises(ValueError, match="FastChat template 'alpaca' is not supported"):
        chat_models.format_fastchat([], "alpaca")
    with pytest.raises(ValueError, match="unknown role 'tool'"):
        chat_models.format_fastchat([[{"role": "tool", "content": "x"}]], "vicuna")


@pytest.mark.parametrize(
    ("fw", "model_class"),
    [
        ("oc", "HuggingFacewithChatTemplate"),
        ("oc", "VLLMwithChatTemplate"),
        ("oc", "TurboMindModelwithChatTemplate"),
        ("oc", "fastchat"),
        # AISBench 3.1's chat-template models are HuggingFace ones
        ("ais", "HuggingFacewithChatTemplate"),
        ("ais", "fastchat"),
    ],
)
def test_chat_model_classes_match_reference(
    fw: str, model_class: str, reference: dict[str, Any]
) -> None:
    """``DatasetRenderer.from_config(dataset, model_cfg, chat_template=...)`` renders as the
    reference chat model's class does: the reference's default chat meta template and
    ``_convert_chat_messages``, then transformers' ``apply_chat_template`` with what the class
    adds (vLLM: its ``chat_template_kwargs``; LMDeploy: the tokenizer's BOS token removed from the
    front), or FastChat's template for a ``fastchat_template`` config."""
    tok = _tokenizer(THINKING)
    ours_template = pw.ChatTemplate(THINKING, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    hf = _ref_chat_module(fw)
    model: dict[str, Any] = {"type": model_class, "path": "unused"}
    if model_class == "fastchat":
        model = {"type": "HuggingFacewithChatTemplate", "fastchat_template": "vicuna"}
    if model_class == "VLLMwithChatTemplate":
        model["chat_template_kwargs"] = {"enable_thinking": False}
    M = reference[fw]
    cases = [c for c in tdc._corpus(fw).cases if c.mode == "gen" and c.retriever != "ZeroRetriever"]
    compared = 0
    for case in cases[:: max(1, len(cases) // 8)]:
        rows = tdc.make_rows(case)
        if isinstance(rows, str):
            continue
        built = tdc.RefPipeline(M, fw, case.infer_cfg, case.reader_cfg, rows).build("gen")
        if built.errors or built.prompts is None:
            continue
        parser = hf._get_meta_template(None)
        messages = hf._convert_chat_messages(
            [parser.parse_template(p, "gen") for p in built.prompts]
        )
        if model_class == "fastchat":
            expected = chat_models.format_fastchat(messages, "vicuna")
        else:
            kwargs = model.get("chat_template_kwargs", {})
            expected = [
                tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False, **kwargs)
                for m in messages
            ]
            if model_class == "TurboMindModelwithChatTemplate":
                expected = [e.removeprefix(tok.bos_token) for e in expected]
        ds = {"infer_cfg": case.infer_cfg, "reader_cfg": case.reader_cfg}
        chat = None if model_class == "fastchat" else ours_template
        renderer = pw.DatasetRenderer.from_config(ds, model, flavor=FLAVOR[fw], chat_template=chat)
        result = renderer.render(rows.test, rows.train)
        assert result.messages == messages, case.rel
        assert result.prompts == expected, case.rel
        compared += 1
    assert compared >= 3, compared
    # what each class adds is visible in the text
    first = result.prompts[0]
    assert first.endswith("<think>\n\n</think>\n\n") == (model_class == "VLLMwithChatTemplate")
    assert first.startswith("<|begin_of_text|>") == (
        model_class in ("HuggingFacewithChatTemplate", "VLLMwithChatTemplate")
    )
    assert first.startswith("A chat between") == (model_class == "fastchat")


def test_chat_token_counter_counts_like_a_chat_model() -> None:
    """``chat_token_counter``: what OpenCompass's chat-template models' ``get_token_len`` counts
    -- the prompt's text as one user message through ``apply_chat_template(...,
    add_generation_prompt=True, return_dict=True)``."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from promptweave.tokens import chat_token_counter

    vocab = {"<unk>": 0, "user": 1, "assistant": 2, "hello": 3, "<|begin_of_text|>": 4}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    # a Llama-style post-processor: encoding with special tokens adds BOS (the count must not)
    tk.post_processor = tokenizers.processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 4)]
    )
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        chat_template=LLAMA3,
    )
    template = pw.ChatTemplate(LLAMA3, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    for tokenizer in (hf.backend_tokenizer, hf):  # a tokenizers.Tokenizer, a transformers one
        ours = chat_token_counter(template, tokenizer)
        for text in ["", "hello", "hello world, 中文 <|eot_id|> x", "a\nb\n\n  c", "Q: 1+1?\nA: 2"]:
            message = [{"role": "user", "content": text}]
            want = hf.apply_chat_template(message, add_generation_prompt=True, return_dict=True)
            assert ours(text) == len(want["input_ids"]), (type(tokenizer), text)


RAISES_ON_PRIME = (
    "{% for m in messages %}{% if 'prime' in m['content'] %}"
    "{{ raise_exception('no primes') }}{% endif %}{{ m['content'] }}{% endfor %}"
)


def test_chat_template_errors_name_the_test_row() -> None:
    cfg = {
        "prompt_template": {"template": {"round": [{"role": "HUMAN", "prompt": "{q}"}]}},
        "retriever": {"type": "ZeroRetriever"},
        "inferencer": {"type": "GenInferencer"},
    }
    rows = [{"q": "one"}, {"q": "two"}, {"q": "a prime"}, {"q": "four"}]
    renderer = pw.DatasetRenderer(
        cfg, {"input_columns": ["q"]}, chat_template=pw.ChatTemplate(RAISES_ON_PRIME)
    )
    with pytest.raises(pw.errors.ChatTemplateRaised, match=r"^no primes") as info:
        renderer.render(rows)
    assert info.value.conversation == 2
    assert "while applying the chat template to test row 2" in info.value.__notes__
