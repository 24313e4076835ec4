"""Seeded ablations at a fixed step budget (the EMS paper's Table 13, small): train every variant
with every seed on the same prepared data, score each model, print mean ± sd per variant.

    python -m ems.apps.studies.ablation [--config configs/ablation/demo.yaml] [--out runs/ablation] [--data-dir DIR]
                           [--seeds 0 1 2] [--variants NAME ...] [--set max_steps=300 ...]

Data are prepared once with the recipes' data stages (data_prep.recipe, ems.apps.demo.prepare_data) under OUT/data, and
for a variant that distils (TrainConfig.teacher), its teacher's vectors of the training and
held-out shards once (data_prep.teacher). A variant of `data_variants` trains on its own data (a
data config file, or keys set over data_config: another vocabulary, corpus_mix, ...), prepared once
under OUT/data-<variant> (one directory for variants with equal data settings) with the same languages and
held-out pairs. Each run trains with the base training config, the
variant's overrides and its seed into OUT/runs/<variant>/seed<k>/, and is scored with the config's
evaluation suite (eval.run_all on the trained languages; default: the held-out pairs, Tatoeba and
FLORES-200 devtest) on the config's `metrics`. Reference encoders (e.g. the teacher) are scored
once with the same suite, as rows of the table. A run that already has its scores is not trained
again, and one whose training finished (trained.json) but whose scoring did not (killed, or a metric
path the results lack: one line naming what they have) is scored again without retraining. A run
whose training was stopped (SIGTERM, SIGUSR1 or a STOP file: one line, exit 99 as ems.training.train) or
killed resumes from its newest checkpoint, so an interrupted ablation resumes where it stopped;
its recorded training seconds are those of all its invocations (training_seconds.json).
`--variants` runs (and tabulates) only the variants named, so several processes or machines can
share one ablation's OUT; a run without it then tabulates them all from their stored scores.
Writes OUT/ablation.json, OUT/ablation.md (the table) and OUT/ablation.png (means with sd bars; a
variant with one seed has no sd: null in the JSON, the score alone in the table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from data_prep.recipe import RecipeDataConfig, trained_languages
from ems.apps.demo import DEFAULT_DATA_DIR, DEMO_SUITE, Stages, data_paths, prepare_data
from ems.cli import UserError, add_debug_option, run_main
from ems.configs import ConfigError, FieldsOf, as_values, load_config, merge
from ems.teacher_store import teacher_slug
from ems.training.config import REPO_ROOT, TrainConfig
from ems.training.stopping import PREEMPTED_EXIT_CODE

SCORES_FILE = "scores.json"
TRAINED_FILE = "trained.json"  # a run's training is done: its steps, seconds and model directory
# a run's training seconds so far, summed over the invocations that trained it (one killed with
# SIGKILL adds nothing: it never gets to write)
TRAINING_SECONDS_FILE = "training_seconds.json"
DEFAULT_METRICS = {
    "held-out P@1": {"task": "heldout", "path": ["average", "mean"]},
    "Tatoeba P@1": {"task": "tatoeba", "path": ["average", "mean"]},
    "FLORES-200 P@1": {"task": "flores200", "path": ["average", "mean"]},
}


TrainOverrides = Annotated[dict, FieldsOf(TrainConfig)]  # TrainConfig keys, checked when the ablation config loads
DataOverrides = Annotated[dict, FieldsOf(RecipeDataConfig)]  # RecipeDataConfig keys, checked likewise


@dataclass
class AblationConfig:
    data_config: str = "configs/data/demo.yaml"  # RecipeDataConfig: what to train on
    # RecipeDataConfig keys set over data_config's for every run (a study that keeps the settings it ran with)
    data_overrides: DataOverrides = field(default_factory=dict)
    train_config: str = "configs/train/demo.yaml"  # the base TrainConfig of every run
    train_overrides: TrainOverrides = field(default_factory=dict)  # applied to every run (the step budget, ...)
    variants: dict[str, TrainOverrides] = field(default_factory=dict)  # {name: its overrides}, in table order
    # {variant name: a RecipeDataConfig file, or RecipeDataConfig keys set over data_config} for variants that
    # train on other data (another vocabulary, preprocessing or corpus mix), prepared once under
    # OUT/data-<variant> (shared by variants whose data settings are equal); same languages, same held-out pairs
    data_variants: dict[str, str | DataOverrides] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    suite: str = str(DEMO_SUITE)  # the evaluation suite every model is scored with (eval.run_all)
    # {task name: directory, relative to the ablation's out directory} for suite tasks whose data is
    # built, not shipped; a missing directory of a task in TASK_DIR_BUILDERS (flores_bucc: the FLORES
    # pseudo-BUCC task; tico19_dev: TICO-19's pairs, a development set) is built there
    task_dirs: dict[str, str] = field(default_factory=dict)
    # {column: {"task", "path": keys into the task's result, optional "rows": the language rows or
    # tracks to average the path over (or "except_rows": every row but these), "group": only the rows
    # of languages whose training pairs in data_config's shards put them in this group of
    # eval.language_groups.GROUPS, "scale"}, or {"mean_of": [other columns]}}; see metric_columns

    metrics: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(DEFAULT_METRICS))
    reference_encoders: list[str] = field(
        default_factory=list
    )  # ems.encoder_kinds specs scored once (e.g. the teacher)
    teacher_batch_size: int = 64  # sentences per teacher call when building a teacher store

    def __post_init__(self) -> None:
        unknown = [name for name in self.data_variants if name not in self.variants]
        if unknown:
            raise ConfigError("AblationConfig", [f"data_variants names {', '.join(map(repr, unknown))}, not a variant"])


class MetricNotFound(UserError, KeyError):
    """A metric of the ablation config that a run's results do not have; the message names what is there."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def metric_value(results: dict, metric: dict, training_pairs: dict[str, int] | None = None) -> float:
    """One number from eval.run_all results ({task: eval.results.TaskResult}): the task's result
    mapping (TaskResult.to_dict) followed down `path`, or its mean over its ["languages"][row] for
    each of `rows` (or each row but those of `except_rows`; with `group`, only the rows whose language's
    `training_pairs`, {canonical code: pairs}, fall in that group of eval.language_groups.group_of),
    times `scale` (default 1). MetricNotFound naming what is missing and what is there."""
    result = results.get(metric["task"])
    if result is None or not result.ran:
        raise MetricNotFound(f"task {metric['task']} has no result ({result.error if result else 'not in the suite'})")
    task = result.to_dict()

    def follow(node, where: str) -> float:
        for depth, key in enumerate(metric["path"]):
            if not isinstance(node, dict) or node.get(key) is None:
                there = sorted(node) if isinstance(node, dict) else type(node).__name__
                raise MetricNotFound(
                    f"{where} has no {'/'.join(metric['path'])}: "
                    f"{'/'.join([where, *metric['path'][:depth]])} has {there}"
                )
            node = node[key]
        return float(node)

    if "rows" in metric or "except_rows" in metric or "group" in metric:
        rows = task.get("languages", {})
        named = metric.get("rows", metric.get("except_rows", []))
        missing = [row for row in named if row not in rows]
        if missing:
            raise MetricNotFound(f"task {metric['task']} has no rows {missing}")
        chosen = metric["rows"] if "rows" in metric else [row for row in rows if row not in named]
        if "group" in metric:
            chosen = rows_in_group(chosen, metric["group"], training_pairs)
        if not chosen:
            raise MetricNotFound(
                f"task {metric['task']} has no rows "
                + (f"in group {metric['group']!r} " if "group" in metric else "")
                + ("but those except_rows names" if "except_rows" in metric else "")
            )
        value = statistics.fmean(follow(rows[row], f"{metric['task']}/{row}") for row in chosen)
    else:
        value = follow(task, metric["task"])
    return value * metric.get("scale", 1.0)


def rows_in_group(rows: list[str], group: str, training_pairs: dict[str, int] | None) -> list[str]:
    """The language rows whose training pairs ({canonical code: pairs}; a row's variety counts its
    language's: eval.language_groups) put them in `group`. UserError for an unknown group or no counts."""
    from eval.language_groups import GROUPS, canonical_or_self, group_of

    if group not in GROUPS:
        raise UserError(f"metric group must be one of {', '.join(map(repr, GROUPS))}, got {group!r}")
    if training_pairs is None:
        raise UserError(f"a metric with group {group!r} needs the training pairs of the prepared data")
    return [row for row in rows if group_of(training_pairs.get(canonical_or_self(row), 0)) == group]


def variant_data_config(cfg: AblationConfig, variant: str) -> RecipeDataConfig:
    """The RecipeDataConfig of a data variant: its file, or data_config with data_overrides and then the
    variant's keys over it."""
    config = cfg.data_variants[variant]
    if isinstance(config, str):
        return load_config(RecipeDataConfig, _resolve(config))
    return load_config(RecipeDataConfig, _resolve(cfg.data_config), values=as_values(merge(cfg.data_overrides, config)))


def base_data_config(cfg: AblationConfig) -> RecipeDataConfig:
    """The RecipeDataConfig every run without a data variant trains on: data_config, data_overrides over it."""
    return load_config(RecipeDataConfig, _resolve(cfg.data_config), values=as_values(cfg.data_overrides))


def variant_data_dirs(
    cfg: AblationConfig, data_cfg: RecipeDataConfig, out: Path
) -> tuple[dict[str, RecipeDataConfig], dict[str, Path]]:
    """({variant: its RecipeDataConfig}, {variant: the directory its data are prepared in}) for the data
    variants the run trains (cfg.variants, after --variants): OUT/data-<variant>, shared by variants whose
    settings are equal (prepared once), and OUT/data for one equal to the base data (`data_cfg`)."""
    configs, dirs = {}, {}
    for variant in cfg.data_variants:
        if variant not in cfg.variants:  # left out by --variants
            continue
        configs[variant] = variant_cfg = variant_data_config(cfg, variant)
        if variant_cfg.languages != data_cfg.languages or variant_cfg.seed != data_cfg.seed:
            raise UserError(
                f"data_variants: {variant}'s data must have data_config's languages and seed (the same held-out pairs)"
            )
        same = out / "data" if variant_cfg == data_cfg else None
        same = same or next((dirs[other] for other in dirs if configs[other] == variant_cfg), None)
        dirs[variant] = same or out / f"data-{variant.replace(' ', '_')}"
    return configs, dirs


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def score_encoder(
    encoder,
    out_dir: Path,
    cfg: AblationConfig,
    prepared: Path,
    data_dir: Path,
    languages: list[str],
    task_dirs: dict[str, Path],
) -> dict[str, float]:
    """{metric column: value} of an encoder on the config's suite (results in out_dir)."""
    from eval.faults import not_run
    from eval.run_all import run_all

    results = run_all(
        encoder,
        data_dir,
        heldout_dir=prepared / "corpus" / "heldout",
        out_dir=out_dir,
        languages=languages,
        suite_path=_resolve(cfg.suite),
        task_dirs=task_dirs,
        progress=False,
        print_tables=False,
    )
    tasks = sorted({metric["task"] for metric in cfg.metrics.values() if "task" in metric})  # not mean_of's
    missing = [task for task in tasks if task not in results]
    failed = missing + not_run({task: results[task] for task in tasks if task in results})
    if failed:  # a language that could not run would shrink the set a variant's average is over
        raise FileNotFoundError(f"could not score on {', '.join(failed)} (see {out_dir})")
    return metric_columns(results, cfg.metrics, metric_training_pairs(cfg, prepared))


def metric_columns(
    results: dict, metrics: dict[str, dict], training_pairs: dict[str, int] | None = None
) -> dict[str, float]:
    """{column: value} of every metric (metric_value), in the config's order; a metric {"mean_of":
    [columns]} is the mean of those other columns (e.g. one development score over several groups)."""
    values = {
        column: metric_value(results, metric, training_pairs)
        for column, metric in metrics.items()
        if "mean_of" not in metric
    }
    direct = set(values)
    for column, metric in metrics.items():
        if "mean_of" in metric:
            unknown = [name for name in metric["mean_of"] if name not in direct]
            if unknown or not metric["mean_of"]:
                raise MetricNotFound(
                    f"metric {column!r}: mean_of must name other (non-mean) metric columns; "
                    f"not among them: {unknown or 'an empty list'}"
                )
            values[column] = statistics.fmean(values[name] for name in metric["mean_of"])
    return {column: values[column] for column in metrics}


def metric_training_pairs(cfg: AblationConfig, prepared: Path) -> dict[str, int] | None:
    """{canonical code: training pairs} of the prepared data's shards where a metric selects by group
    (eval.language_groups.training_pairs), else None."""
    from eval.language_groups import training_pairs

    if not any("group" in metric for metric in cfg.metrics.values()):
        return None
    return training_pairs(prepared / "shards" / "train")


def with_all_columns(scores_file: Path, eval_dir: Path, cfg: AblationConfig, prepared: Path) -> dict:
    """A scored run's record, with any metric column added to the config since it was scored read
    from its eval_dir/results.json (and stored): a new column needs no retraining."""
    from eval.results import read_results

    record = json.loads(scores_file.read_text())
    missing = [column for column in cfg.metrics if column not in record]
    if missing:
        results = read_results(eval_dir)
        values = metric_columns(results, cfg.metrics, metric_training_pairs(cfg, prepared))
        record.update({column: values[column] for column in missing})
        scores_file.write_text(json.dumps(record, indent=2) + "\n")
    return record


def summarize(scores: dict[str, dict[int, dict[str, float]]], columns: list[str]) -> dict[str, dict[str, dict]]:
    """{variant: {seed: {column: score}}} -> {variant: {column: {"mean", "sd", "n", "values"}}} (sd: sample
    standard deviation; None for one seed, which has no spread)."""
    summary = {}
    for variant, by_seed in scores.items():
        summary[variant] = {}
        for column in columns:
            values = [by_seed[seed][column] for seed in sorted(by_seed)]
            summary[variant][column] = {
                "mean": statistics.fmean(values),
                "sd": statistics.stdev(values) if len(values) > 1 else None,
                "n": len(values),
                "values": values,
            }
    return summary


def summary_table(
    summary: dict[str, dict[str, dict]],
    steps: int | dict[str, int],
    references: dict[str, dict[str, float]] | None = None,
) -> str:
    """Markdown: one row per reference encoder (scored once) and per variant, mean ± sd of each metric
    (the score alone where a variant has one seed). `steps`: the runs' steps, one number, or per
    variant where variants set their own max_steps (then a steps column instead of one in the title)."""
    columns = list(next(iter(summary.values())))
    counts = sorted({row["n"] for variant in summary.values() for row in variant.values()})
    seeds = f"{'/'.join(map(str, counts))} seed{'s' if counts[-1] > 1 else ''}"
    spread = "mean ± sd" if counts[-1] > 1 else "one run each, no spread"
    per_variant = isinstance(steps, dict)
    title = "steps by variant" if per_variant else f"{steps} steps"
    lines = [
        f"### Ablation: {title}, {seeds}, {spread}",
        "",
        "| model | " + ("steps | " if per_variant else "") + " | ".join(columns) + " |",
        "|:--|" + "--:|" * (len(columns) + per_variant),
    ]
    for name, values in (references or {}).items():
        cells = ([""] if per_variant else []) + [f"{values[c]:.1f}" for c in columns]
        lines.append(f"| {name} (reference) | " + " | ".join(cells) + " |")
    for variant, rows in summary.items():
        cells = ([str(steps[variant])] if per_variant else []) + [_mean_and_spread(rows[c]) for c in columns]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def runs_steps(steps: dict[str, int]) -> int | dict[str, int]:
    """The steps of every variant's runs: one number where all variants trained as long, else per variant."""
    values = set(steps.values())
    return values.pop() if len(values) == 1 else steps


def _mean_and_spread(cell: dict) -> str:
    """'85.0 ± 0.3' over several seeds; '85.0' for one."""
    return f"{cell['mean']:.1f}" if cell["sd"] is None else f"{cell['mean']:.1f} ± {cell['sd']:.1f}"


def plot_summary(summary: dict[str, dict[str, dict]], path: Path) -> Path:
    """Grouped bars (one group per metric, one bar per variant) with sd error bars."""
    from eval.chart import plt, save_figure  # matplotlib without a display

    columns = list(next(iter(summary.values())))
    fig, ax = plt.subplots(figsize=(max(9, 1.2 * len(columns)), 4))
    width = 0.8 / len(summary)
    for k, (variant, rows) in enumerate(summary.items()):
        xs = [i + k * width for i in range(len(columns))]
        ax.bar(
            xs,
            [rows[c]["mean"] for c in columns],
            width,
            yerr=[rows[c]["sd"] or 0.0 for c in columns],  # no bar for one seed
            capsize=3,
            label=variant,
        )
    ax.set_xticks([i + width * (len(summary) - 1) / 2 for i in range(len(columns))], columns, fontsize=7, rotation=20)
    ax.set_ylabel("mean ± sd over seeds")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def _build_flores_bucc(data_dir: Path, prepared: Path, out: Path, languages: list[str]) -> None:
    from eval.make_flores_bucc import build_flores_bucc

    build_flores_bucc(data_dir, out, languages)


def _build_tico19_dev(data_dir: Path, prepared: Path, out: Path, languages: list[str]) -> None:
    """TICO-19's English-X pairs of `languages` (those it has), in the held-out layout: a development set
    of another domain (COVID-19 texts) for a corpus that does not train on TICO-19."""
    from data_prep.importers import CORPUS_SOURCES

    CORPUS_SOURCES["tico19"].build(data_dir / "tico19", out, languages, None)


def _build_tico19_heldout(data_dir: Path, prepared: Path, out: Path, languages: list[str]) -> None:
    """The prepared corpus's held-out pairs that come from TICO-19 (a split by corpus: data_prep.split), in
    the held-out layout: for a corpus that trains on TICO-19, held-out pairs of another domain (COVID-19
    texts) than the Tatoeba Challenge's everyday sentences, the same English in every language (pivot draw)."""
    from data_prep.split import heldout_of_corpus

    written = heldout_of_corpus(prepared / "corpus" / "heldout", out, "tico19")
    (out / "build.json").write_text(json.dumps({"corpus": "tico19", "pairs": written}, indent=2) + "\n")


# Suite tasks whose data an ablation builds under its out directory (AblationConfig.task_dirs): {task name:
# (what it is, builder(data_dir, prepared data, directory, trained languages), the file its build writes last)}
TASK_DIR_BUILDERS = {
    "flores_bucc": ("the FLORES pseudo-BUCC task", _build_flores_bucc, "build.json"),
    "tico19_dev": ("TICO-19's pairs (development set)", _build_tico19_dev, "import_report.json"),
    "tico19_heldout": ("the held-out TICO-19 pairs (development set)", _build_tico19_heldout, "build.json"),
}


def prepare_task_dirs(
    cfg: AblationConfig, out: Path, data_dir: Path, languages: list[str], prepared: Path
) -> dict[str, Path]:
    """{task name: directory} of `task_dirs` under `out`; one of a task in TASK_DIR_BUILDERS whose build
    did not finish (its last file missing) is built for the languages."""
    task_dirs = {name: out / directory for name, directory in cfg.task_dirs.items()}
    for name, directory in task_dirs.items():
        if name in TASK_DIR_BUILDERS and not (directory / TASK_DIR_BUILDERS[name][2]).is_file():
            what, build, _ = TASK_DIR_BUILDERS[name]
            print(f"building {what} for {len(languages)} languages in {directory}", flush=True)
            build(data_dir, prepared, directory, languages)
    return task_dirs


def prepare_teachers(cfg: AblationConfig, prepared: Path) -> None:
    """The teacher store of every teacher a run distils from, for the training and held-out shards."""
    from data_prep.teacher import build_teacher_store

    teachers = {variant.get("teacher") for variant in cfg.variants.values()} | {cfg.train_overrides.get("teacher")}
    for teacher in sorted(t for t in teachers if t):
        for split in ("train", "heldout"):
            report = build_teacher_store(
                prepared / "shards" / split, prepared / "corpus" / split, teacher, batch_size=cfg.teacher_batch_size
            )
            print(
                f"teacher {teacher}, {split}: encoded {report['encoded']}, reused {report['reused']} sentences "
                f"({report['seconds']} s)",
                flush=True,
            )


@dataclass
class Inputs:
    """What every run of an ablation trains and is scored on: the base data (`prepared`), each data variant's
    (`variant_data`), the trained `languages` and the built task directories (`task_dirs`)."""

    prepared: Path
    variant_data: dict[str, Path]
    languages: list[str]
    task_dirs: dict[str, Path]

    def data_of(self, variant: str) -> Path:
        return self.variant_data.get(variant, self.prepared)


def prepare_inputs(cfg: AblationConfig, out: Path, data_dir: Path, overrides: list[str]) -> Inputs:
    """Every config and --set item checked (before the first stage: preparing the data takes minutes), then
    the data, the teachers' vectors, each data variant's data and the built tasks, each prepared once."""
    data_cfg = base_data_config(cfg)
    prepared = out / "data"
    variant_cfgs, variant_data = variant_data_dirs(cfg, data_cfg, out)
    for variant in cfg.variants:
        for seed in cfg.seeds:
            run_config(cfg, variant, seed, variant_data.get(variant, prepared), data_dir, out, overrides)
    if not (prepared / "shards" / "heldout" / "index.json").is_file():
        prepare_data(data_cfg, data_dir, prepared, Stages())
    prepare_teachers(cfg, prepared)
    languages = data_cfg.languages if data_cfg.languages is not None else trained_languages(prepared)
    for variant, variant_cfg in variant_cfgs.items():
        if not (variant_data[variant] / "shards" / "heldout" / "index.json").is_file():
            prepare_data(variant_cfg, data_dir, variant_data[variant], Stages())
    task_dirs = prepare_task_dirs(cfg, out, data_dir, languages, prepared)
    return Inputs(prepared, variant_data, languages, task_dirs)


def reference_scores(cfg: AblationConfig, out: Path, data_dir: Path, inputs: Inputs) -> dict[str, dict[str, float]]:
    """{encoder spec: {metric: score}} of the reference encoders, each scored once."""
    from ems.encoder_kinds import load_encoder

    references = {}
    for spec in cfg.reference_encoders:
        scores_file = out / "references" / teacher_slug(spec) / SCORES_FILE
        if not scores_file.is_file():
            print(f"\n== reference {spec} ==", flush=True)
            encoder = load_encoder(spec, cache_dir=out / "embedding_cache")
            values = score_encoder(
                encoder, scores_file.parent / "eval", cfg, inputs.prepared, data_dir, inputs.languages, inputs.task_dirs
            )
            scores_file.write_text(json.dumps({"encoder": spec, **values}, indent=2) + "\n")
        record = with_all_columns(scores_file, scores_file.parent / "eval", cfg, inputs.prepared)
        references[spec] = {column: record[column] for column in cfg.metrics}
    return references


def train_run(train_cfg: TrainConfig, run_dir: Path, variant: str, seed: int) -> None:
    """Train one run (resumed from its newest checkpoint when a stopped or killed one left any:
    ems.training.train), counting the seconds of every invocation, and write its TRAINED_FILE;
    TrainingStopped when a signal or a STOP file stopped it."""
    from ems.training.train import train

    seconds_file, started = run_dir / TRAINING_SECONDS_FILE, time.time()
    try:
        result = train(train_cfg)
    finally:  # a stopped or failed invocation's seconds count: the rerun goes on from its work
        seconds = _seconds_so_far(seconds_file) + time.time() - started
        run_dir.mkdir(parents=True, exist_ok=True)
        seconds_file.write_text(json.dumps({"seconds": round(seconds, 1)}) + "\n")
    if result.preempted:
        raise TrainingStopped(
            f"{variant}, seed {seed}: training stopped at step {result.steps} of "
            f"{result.max_steps} (a signal or a STOP file) and checkpointed; "
            "rerun the same command to resume it",
            result.exit_code,
        )
    trained = {"steps": result.steps, "train_seconds": round(seconds)}
    (run_dir / TRAINED_FILE).write_text(json.dumps({**trained, "model_dir": result.model_dir}) + "\n")


def score_run(cfg: AblationConfig, run_dir: Path, variant: str, seed: int, data_dir: Path, inputs: Inputs) -> None:
    """Score a trained run (again without retraining when its scoring failed) into its SCORES_FILE."""
    from ems.encoder import load

    trained = json.loads((run_dir / TRAINED_FILE).read_text())
    model_dir = Path(trained["model_dir"])
    values = score_encoder(
        load(model_dir), model_dir.parent / "eval", cfg, inputs.prepared, data_dir, inputs.languages, inputs.task_dirs
    )
    record = {"variant": variant, "seed": seed, "steps": trained["steps"], "train_seconds": trained["train_seconds"]}
    (run_dir / SCORES_FILE).write_text(json.dumps({**record, **values}, indent=2) + "\n")


def write_summary(
    cfg: AblationConfig,
    out: Path,
    scores: dict[str, dict[int, dict[str, float]]],
    steps: int | dict[str, int],
    references: dict[str, dict[str, float]],
) -> str:
    """Write OUT/ablation.json, OUT/ablation.md and OUT/ablation.png; return the table and what was written."""
    summary = summarize(scores, list(cfg.metrics))
    table = summary_table(summary, steps, references)
    (out / "ablation.json").write_text(
        json.dumps({"steps": steps, "summary": summary, "references": references}, indent=2) + "\n"
    )
    (out / "ablation.md").write_text(table)
    plot_summary(summary, out / "ablation.png")
    return table + f"\nwrote {out / 'ablation.md'}, {out / 'ablation.json'}, {out / 'ablation.png'}"


def run_ablation(cfg: AblationConfig, out: Path, data_dir: Path, overrides: list[str]) -> str:
    """Prepare the data (once), train and score every (variant, seed) not yet scored (`overrides`:
    `--set` items of every run's TrainConfig), write and return the table."""
    if not cfg.variants:
        raise ValueError("the ablation config lists no variants")
    inputs = prepare_inputs(cfg, out, data_dir, overrides)
    references = reference_scores(cfg, out, data_dir, inputs)
    scores: dict[str, dict[int, dict[str, float]]] = {}
    steps: dict[str, int] = {}
    for variant in cfg.variants:
        for seed in cfg.seeds:
            run_dir = run_directory(out, variant, seed)
            if not (run_dir / SCORES_FILE).is_file():
                print(f"\n== {variant}, seed {seed} ==", flush=True)
                if not (run_dir / TRAINED_FILE).is_file():
                    train_cfg = run_config(cfg, variant, seed, inputs.data_of(variant), data_dir, out, overrides)
                    train_run(train_cfg, run_dir, variant, seed)
                score_run(cfg, run_dir, variant, seed, data_dir, inputs)
            record = with_all_columns(run_dir / SCORES_FILE, run_dir / "run" / "eval", cfg, inputs.prepared)
            steps[variant] = record["steps"]
            scores.setdefault(variant, {})[seed] = {column: record[column] for column in cfg.metrics}
            print(f"{variant}, seed {seed}: " + ", ".join(f"{c} {record[c]:.1f}" for c in cfg.metrics), flush=True)
    return write_summary(cfg, out, scores, runs_steps(steps), references)


def run_directory(out: Path, variant: str, seed: int) -> Path:
    """Where the run of `variant` with `seed` trains and keeps its scores."""
    return out / "runs" / variant.replace(" ", "_") / f"seed{seed}"


def run_config(
    cfg: AblationConfig, variant: str, seed: int, data: Path, data_dir: Path, out: Path, overrides: list[str]
) -> TrainConfig:
    """The TrainConfig of one run: the base training config, the data prepared under `data`, the run's
    directory and seed, `train_overrides`, the variant's overrides and the `--set` items `overrides`."""
    values = {**data_paths(data, data_dir), "out": str(run_directory(out, variant, seed) / "run"), "seed": seed}
    values = merge(merge(values, cfg.train_overrides), cfg.variants[variant])
    return load_config(TrainConfig, _resolve(cfg.train_config), overrides, values)


def _seconds_so_far(seconds_file: Path) -> float:
    """The training seconds earlier invocations of a run recorded (0 for its first)."""
    return json.loads(seconds_file.read_text())["seconds"] if seconds_file.is_file() else 0.0


class TrainingStopped(Exception):
    """A run's training ended before its schedule did (SIGTERM, SIGUSR1, SIGINT or a STOP file): nothing is
    recorded as trained, and its checkpoint is where a rerun resumes. `exit_code`: the trainer's status
    (TrainResult.exit_code: PREEMPTED_EXIT_CODE, INTERRUPTED_EXIT_CODE after a Ctrl-C)."""

    def __init__(self, message: str, exit_code: int = PREEMPTED_EXIT_CODE):
        super().__init__(message)
        self.exit_code = exit_code


def select_variants(cfg: AblationConfig, names: list[str]) -> None:
    """Keep only the variants `names` of `cfg` (in the config's order); UserError for a name it lacks."""
    unknown = [name for name in names if name not in cfg.variants]
    if unknown:
        raise UserError(
            f"no variant {', '.join(map(repr, unknown))} in the config; it has {', '.join(map(repr, cfg.variants))}"
        )
    cfg.variants = {name: overrides for name, overrides in cfg.variants.items() if name in names}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ems.apps.studies.ablation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", default=str(REPO_ROOT / "configs/ablation/demo.yaml"))
    parser.add_argument("--out", type=Path, default=Path("runs/ablation"))
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("EMS_DATA_DIR", DEFAULT_DATA_DIR)),
        help="directory with tatoeba_challenge/, tatoeba/, flores200/ (default: $EMS_DATA_DIR or ../shared/data)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="override the config's seeds")
    parser.add_argument("--variants", nargs="+", metavar="NAME", help="run only these of the config's variants")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="TrainConfig overrides for every run")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    cfg = load_config(AblationConfig, args.config)
    if args.seeds:
        cfg.seeds = args.seeds
    if args.variants:
        select_variants(cfg, args.variants)
    try:
        print(run_ablation(cfg, args.out, args.data_dir, args.set))
    except TrainingStopped as stopped:
        print(stopped, file=sys.stderr)
        return stopped.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
