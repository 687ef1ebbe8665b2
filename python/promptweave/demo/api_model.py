# An OpenCompass-style model config: an OpenAI-compatible API model (message lists).
from opencompass.models import OpenAISDK

_api_meta_template = dict(
    round=[
        dict(role='HUMAN', api_role='HUMAN'),
        dict(role='BOT', api_role='BOT', generate=True),
    ],
    reserved_roles=[dict(role='SYSTEM', api_role='SYSTEM')],
)

models = [
    dict(
        type=OpenAISDK,
        abbr='demo-api',
        path='demo-model',
        key='ENV',
        openai_api_base='http://localhost:8000/v1',
        meta_template=_api_meta_template,
        query_per_second=1,
        max_out_len=16,
        batch_size=8,
    )
]
