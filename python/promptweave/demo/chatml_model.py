# An OpenCompass-style model config: a base model driven through a ChatML meta template.
from opencompass.models import HuggingFaceCausalLM

_meta_template = dict(
    round=[
        dict(role='HUMAN', begin='<|im_start|>user\n', end='<|im_end|>\n'),
        dict(role='BOT', begin='<|im_start|>assistant\n', end='<|im_end|>\n', generate=True),
    ],
    reserved_roles=[
        dict(role='SYSTEM', begin='<|im_start|>system\n', end='<|im_end|>\n'),
    ],
    eos_token_id=151645,
)

models = [
    dict(
        type=HuggingFaceCausalLM,
        abbr='demo-chatml-7b',
        path='demo/chatml-7b',
        meta_template=_meta_template,
        max_seq_len=4096,
        max_out_len=16,
        batch_size=8,
        run_cfg=dict(num_gpus=1),
    )
]
