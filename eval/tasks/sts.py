"""SemEval-2017 STS, every track: Pearson r / Spearman ρ of cosine(sent1, sent2) with the gold
score, raw and through each head's meaning view (eval.evaluators.sts, eval.evaluators.correlation)."""

from __future__ import annotations

from dataclasses import dataclass

from eval.evaluators.correlation import HeadsConfig, evaluate_correlation_task
from eval.evaluators.sts import StsTrack, read_sts_tracks
from eval.report import correlation_table
from eval.task import TaskRun, TaskType, pair_in_filter
from eval.tasks.qe import raw_pearson


@dataclass(kw_only=True)
class StsConfig(HeadsConfig):
    """configs/eval/sts2017.yaml: the tracks ({name, file, langs}: StsTrack), the heads and their training."""

    tracks: list[StsTrack]

    def language_codes(self) -> list[str]:
        return [lang for track in self.tracks for lang in track.langs]


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    tracks = [track for track in config.tracks if pair_in_filter(track.langs, options)]
    pair_sets, errors = read_sts_tracks(task.data_dir, tracks, options.max_sentences)
    return evaluate_correlation_task(
        encoder, config, TASK.metric, pair_sets, options.data_root, options.progress, errors
    )


TASK = TaskType(
    name="sts",
    metric="sts_correlation",
    run=run,
    table=correlation_table,
    config=StsConfig,
    headline=raw_pearson,
    headline_label="Pearson r × 100 (raw embeddings)",
)
