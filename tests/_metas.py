"""Model meta templates shared by several test modules (written here, in the shape of the
OpenCompass model configs' ChatML meta template)."""

from __future__ import annotations

from typing import Any

#: ChatML (Qwen-style): user / assistant rounds, a reserved system role
CHATML: dict[str, Any] = {
    "round": [
        {"role": "HUMAN", "begin": "<|im_start|>user\n", "end": "<|im_end|>\n"},
        {
            "role": "BOT",
            "begin": "<|im_start|>assistant\n",
            "end": "<|im_end|>\n",
            "generate": True,
        },
    ],
    "reserved_roles": [{"role": "SYSTEM", "begin": "<|im_start|>system\n", "end": "<|im_end|>\n"}],
}
