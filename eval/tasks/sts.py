"""SemEval-2017 STS, every track: Pearson r / Spearman ρ of cosine(sent1, sent2) with the gold
score, raw and through each head's meaning view (eval.evaluators.sts, eval.evaluators.correlation)."""

from __future__ import annotations

from eval.evaluators.correlation import HeadTraining, evaluate_correlation_task
from eval.report import correlation_table
from eval.evaluators.sts import read_sts_tracks
from eval.task import TaskRun, TaskType, pair_in_filter
from eval.tasks.qe import raw_pearson

SETTINGS = frozenset({"tracks", "heads", "head_training"})


def run(encoder, task: TaskRun) -> dict:
    options, settings = task.options, task.pick(SETTINGS)
    tracks = [track for track in settings["tracks"] if pair_in_filter(track.get("langs", []), options)]
    pair_sets, errors = read_sts_tracks(task.data_dir, tracks, options.max_sentences)
    training = HeadTraining.from_config(settings.get("heads"), settings.get("head_training"), options.data_root, str(task.config_path))
    return evaluate_correlation_task(encoder, task.name, TASK.metric, pair_sets, training, None, options.progress, errors)


TASK = TaskType(
    name="sts",
    metric="sts_correlation",
    run=run,
    table=correlation_table,
    settings=SETTINGS,
    headline=raw_pearson,
    headline_label="Pearson r × 100 (raw embeddings)",
)
