# An OpenCompass-style dataset config: the same questions scored by perplexity, one prompt per
# answer option (a label-dict template), zero-shot.
from opencompass.datasets import MMLUDataset
from opencompass.openicl.icl_evaluator import AccEvaluator
from opencompass.openicl.icl_inferencer import PPLInferencer
from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_retriever import ZeroRetriever

mmlu_demo_reader_cfg = dict(
    input_columns=['input', 'A', 'B', 'C', 'D'],
    output_column='target',
)

mmlu_demo_infer_cfg = dict(
    prompt_template=dict(
        type=PromptTemplate,
        template={
            opt: dict(round=[
                dict(role='HUMAN', prompt='{input}\nA. {A}\nB. {B}\nC. {C}\nD. {D}\nAnswer: '),
                dict(role='BOT', prompt=opt),
            ])
            for opt in ['A', 'B', 'C', 'D']
        },
    ),
    retriever=dict(type=ZeroRetriever),
    inferencer=dict(type=PPLInferencer),
)

mmlu_demo_datasets = [
    dict(
        abbr='mmlu_demo_ppl',
        type=MMLUDataset,
        path='promptweave/demo',
        name='demo',
        reader_cfg=mmlu_demo_reader_cfg,
        infer_cfg=mmlu_demo_infer_cfg,
        eval_cfg=dict(evaluator=dict(type=AccEvaluator)),
    )
]
