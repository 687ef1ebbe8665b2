# An OpenCompass-style dataset config: MMLU-like multiple choice, 2-shot, generation.
# `promptweave render`/`show` load it without OpenCompass installed (the imports become
# stand-ins); OpenCompass itself could run it too.
from opencompass.datasets import MMLUDataset
from opencompass.openicl.icl_evaluator import AccwithDetailsEvaluator
from opencompass.openicl.icl_inferencer import GenInferencer
from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_retriever import FixKRetriever
from opencompass.utils.text_postprocessors import first_option_postprocess

_question = '{input}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer: '

mmlu_demo_reader_cfg = dict(
    input_columns=['input', 'A', 'B', 'C', 'D'],
    output_column='target',
    train_split='dev',
)

mmlu_demo_infer_cfg = dict(
    ice_template=dict(
        type=PromptTemplate,
        template=dict(round=[
            dict(role='HUMAN', prompt=_question),
            dict(role='BOT', prompt='{target}\n'),
        ]),
    ),
    prompt_template=dict(
        type=PromptTemplate,
        template=dict(
            begin=[
                dict(role='SYSTEM', fallback_role='HUMAN',
                     prompt='The following are multiple choice questions (with answers).'),
                '</E>',
            ],
            round=[
                dict(role='HUMAN', prompt=_question),
            ],
        ),
        ice_token='</E>',
    ),
    retriever=dict(type=FixKRetriever, fix_id_list=[0, 1]),
    inferencer=dict(type=GenInferencer),
)

mmlu_demo_eval_cfg = dict(
    evaluator=dict(type=AccwithDetailsEvaluator),
    pred_postprocessor=dict(type=first_option_postprocess, options='ABCD'),
)

mmlu_demo_datasets = [
    dict(
        abbr='mmlu_demo_gen',
        type=MMLUDataset,
        path='promptweave/demo',
        name='demo',
        reader_cfg=mmlu_demo_reader_cfg,
        infer_cfg=mmlu_demo_infer_cfg,
        eval_cfg=mmlu_demo_eval_cfg,
    )
]
