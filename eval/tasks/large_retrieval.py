"""Large-pool retrieval: each query against many candidates by margin, P@1 (eval.evaluators.large_retrieval)."""

from __future__ import annotations

from eval.evaluators.large_retrieval import LargeRetrievalTask, evaluate_large_retrieval
from eval.report import retrieval_table
from eval.task import TaskRun, TaskType

SETTINGS = frozenset({"n_queries", "n_candidates", "k", "margin", "index", "source"})


def run(encoder, task: TaskRun) -> dict:
    options, settings = task.options, task.pick(SETTINGS)
    pairs = task.config["pairs"]
    if options.canonical is not None:
        pairs = [pair for pair in pairs if pair["src_lang"] in options.canonical]
    if options.max_sentences is not None:
        for key in ("n_queries", "n_candidates"):
            settings[key] = min(settings.get(key, options.max_sentences), options.max_sentences)
    retrieval = LargeRetrievalTask(task.data_dir, pairs, name=task.name, **settings)
    return evaluate_large_retrieval(encoder, retrieval, options.progress)


TASK = TaskType(
    name="large_retrieval",
    metric="retrieval_p_at_1",
    run=run,
    table=retrieval_table,
    settings=SETTINGS,
    headline=lambda row: row["p_at_1"],
    headline_label="P@1 (%)",
)
