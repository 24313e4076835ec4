"""Large-pool retrieval: each query against many candidates by margin, P@1 (eval.evaluators.large_retrieval)."""

from __future__ import annotations

from dataclasses import dataclass

from eval.evaluators.large_retrieval import LargeRetrievalTask, RetrievalPair, evaluate_large_retrieval
from eval.report import retrieval_table
from eval.task import TaskConfig, TaskRun, TaskType

POOL = ("n_queries", "n_candidates")


@dataclass(kw_only=True)
class LargeRetrievalConfig(TaskConfig):
    """configs/eval/{paracrawl,flores_retrieval}.yaml: the file pairs ({src, tgt, src_lang,
    tgt_lang}: RetrievalPair), the pool (None: LargeRetrievalTask's default, or --max-sentences
    when given; --max-sentences caps both) and the margin search."""

    pairs: list[RetrievalPair]
    n_queries: int | None = None
    n_candidates: int | None = None
    k: int = LargeRetrievalTask.k
    margin: str = LargeRetrievalTask.margin
    index: str = LargeRetrievalTask.index

    def language_codes(self) -> list[str]:
        return [code for pair in self.pairs for code in (pair.src_lang, pair.tgt_lang)]


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    pairs = config.pairs
    if options.canonical is not None:
        pairs = [pair for pair in pairs if pair.src_lang in options.canonical]
    pool = {key: getattr(config, key) for key in POOL}
    if options.max_sentences is not None:
        pool = {
            key: min(options.max_sentences if size is None else size, options.max_sentences)
            for key, size in pool.items()
        }
    retrieval = LargeRetrievalTask(
        task.data_dir,
        pairs,
        name=task.name,
        k=config.k,
        margin=config.margin,
        index=config.index,
        source=config.source,
        **{key: size for key, size in pool.items() if size is not None},
    )
    return evaluate_large_retrieval(encoder, retrieval, options.progress)


TASK = TaskType(
    name="large_retrieval",
    metric="retrieval_p_at_1",
    run=run,
    table=retrieval_table,
    config=LargeRetrievalConfig,
    headline=lambda row: row["p_at_1"],
    headline_label="P@1 (%)",
)
