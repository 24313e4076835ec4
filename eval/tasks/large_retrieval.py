"""Large-pool retrieval: each query against many candidates by margin, P@1 (eval.evaluators.large_retrieval,
whose LargeRetrievalConfig is this type's config)."""

from __future__ import annotations

from eval.evaluators.large_retrieval import LargeRetrievalConfig, evaluate_large_retrieval
from eval.report import retrieval_table
from eval.task import TaskRun, TaskType


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    pairs = config.pairs
    if options.canonical is not None:
        pairs = [pair for pair in pairs if pair.src_lang in options.canonical]
    return evaluate_large_retrieval(encoder, config, task.data_dir, pairs, options.max_sentences, options.progress)


TASK = TaskType(
    name="large_retrieval",
    metric="retrieval_p_at_1",
    run=run,
    table=retrieval_table,
    config=LargeRetrievalConfig,
    headline=lambda row: row["p_at_1"],
    headline_label="P@1 (%)",
)
