"""``python -m promptweave demo``: render a built-in example through every layer."""

from __future__ import annotations

import sys

from promptweave import APITemplateParser, LMTemplateParser, PromptList, PromptTemplate

_TRAIN = [
    {"input": "What is 2 + 2?", "A": "3", "B": "4", "C": "5", "D": "22", "target": "B"},
    {"input": "Which planet is known as the red planet?", "A": "Venus", "B": "Jupiter",
     "C": "Mars", "D": "Mercury", "target": "C"},
]
_TEST = [
    {"input": "What is the boiling point of water at sea level in °C?", "A": "90", "B": "100",
     "C": "110", "D": "120", "target": "B"},
    {"input": "水的化学式是什么？", "A": "H2O", "B": "CO2", "C": "O2", "D": "NaCl", "target": "A"},
]
_QUESTION = "{input}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer: "

_ICE_TEMPLATE = PromptTemplate(
    {"round": [{"role": "HUMAN", "prompt": _QUESTION}, {"role": "BOT", "prompt": "{target}\n"}]}
)
_PROMPT_TEMPLATE = PromptTemplate(
    {
        "begin": [
            {"role": "SYSTEM", "fallback_role": "HUMAN",
             "prompt": "The following are multiple choice questions."},
            "</E>",
        ],
        "round": [{"role": "HUMAN", "prompt": _QUESTION}, {"role": "BOT", "prompt": "{target}"}],
    },
    ice_token="</E>",
)
_CHATML = {
    "round": [
        {"role": "HUMAN", "begin": "<|im_start|>user\n", "end": "<|im_end|>\n"},
        {"role": "BOT", "begin": "<|im_start|>assistant\n", "end": "<|im_end|>\n",
         "generate": True},
    ],
    "reserved_roles": [
        {"role": "SYSTEM", "begin": "<|im_start|>system\n", "end": "<|im_end|>\n"},
    ],
}
_API_META = {
    "round": [{"role": "HUMAN", "api_role": "HUMAN"},
              {"role": "BOT", "api_role": "BOT", "generate": True}],
    "reserved_roles": [{"role": "SYSTEM", "api_role": "SYSTEM"}],
}


def _ice() -> PromptList:
    """Two fixed in-context examples, as a FixK retriever with ids [0, 1] builds them."""
    ice = PromptList()
    for row in _TRAIN:
        ice += _ICE_TEMPLATE.generate_ice_item(row, row["target"])
    return ice


def demo() -> None:
    """Print the prompts a ChatML model and an API model receive for two test rows."""
    lm, api = LMTemplateParser(_CHATML), APITemplateParser(_API_META)
    ice = _ice()
    for i, row in enumerate(_TEST):
        prompt = _PROMPT_TEMPLATE.generate_item(
            row, output_field="target", ice_field_replace_token=ice
        )
        print(f"===== row {i}: ChatML model, gen mode (2-shot) =====")
        print(lm.parse_template(prompt, mode="gen"))
        print(f"===== row {i}: API model, gen mode =====")
        for message in api.parse_template(prompt, mode="gen"):
            print(f"  {message['role']:>6}: {message['prompt']!r}")
    label_template = PromptTemplate(
        {label: f"</E>{_QUESTION}{label}" for label in "ABCD"}, ice_token="</E>"
    )
    print("===== row 0: perplexity prompts, one per label (zero-shot) =====")
    for label in "ABCD":
        print(f"  {label}: {label_template.generate_label_prompt_item(_TEST[0], '', label)!r}")


def main(argv: list[str]) -> int:
    if argv[1:] == ["demo"]:
        demo()
        return 0
    print("usage: python -m promptweave demo", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
