"""Train and evaluate the runs of a compute→quality map: several model sizes, several budgets each,
on one corpus; each finished model becomes one point (OUT/points/<size>/<budget>/map_point.json).

    python -m ems.apps.studies.compute_map_runs --config configs/scaling/multilingual.yaml --out runs/map
                                          [--sizes tiny ...] [--budgets LABEL ...] [--data-dir DIR] [--map]

Per size, ONE warm-up–stable–decay run to the largest budget keeps a checkpoint at each smaller
budget's branch point (TrainConfig branch_steps), and a short decay branch from each (branch_from)
gives the model of that budget: the same model, to the bit, as a run of that length from scratch
(tests/test_wsd_schedule.py). A budget larger than the runs made so far goes on from the latest
checkpoint of their plateau (every wsd run keeps its own decay start), so adding a budget later
costs only its new steps. Budgets are steps, so a run means the same compute on any machine;
their labels say what they take on the machine they were sized on. Each model is scored with the
config's suite (zero-shot on the languages it never saw: `ems:DIR,unseen=neutral`), split by each
language's training pairs (eval.language_groups), and written as a point: training FLOPs (steps x
global batch x ems.flops per pair on random batches of the shards), training seconds (a run's own wall
time, plus that of the run it went on from up to where it did, pro rata of its steps), and the group averages.

Every stage is skipped when its output exists, so the same command resumes after a kill, and
`--sizes` lets one process per size run side by side. `--map` then (or alone) writes the map:
ems.apps.studies.compute_map on OUT/points, into OUT/map (python -m ems.apps.studies.compute_map OUT/points
--out DIR does the same from committed points).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from data_prep.recipe import RecipeDataConfig
from ems.cli import UserError, add_debug_option, run_main
from ems.configs import ConfigError, FieldsOf, as_values, load_config, load_yaml
from ems.training.config import REPO_ROOT
from ems.training.model_card import TRAIN_CONFIG_FILE

TASK_METRICS = {"tatoeba": "tatoeba", "flores200": "flores", "sib200": "sib200"}  # results.json task -> metric name
TIMES_FILE = "train_seconds.json"


@dataclass
class SizeConfig:
    budgets: dict[str, int]  # label -> steps
    # TrainConfig keys for this size over the train config's (e.g. lr, model_overrides)
    overrides: dict = field(default_factory=dict)


@dataclass
class MapConfig:
    data_config: str
    train_config: str
    suite: str
    sizes: dict[str, dict]  # preset name -> SizeConfig fields
    # RecipeDataConfig keys set over data_config's (another corpus_mix, ...)
    data_overrides: Annotated[dict, FieldsOf(RecipeDataConfig)] = field(default_factory=dict)
    flops_batches: int = 20  # random batches the FLOPs per pair are averaged over

    def __post_init__(self) -> None:
        problems = []
        for name, values in self.sizes.items():
            if not isinstance(values, dict):
                problems.append(f"sizes.{name} must be a mapping of budgets and overrides, got {values!r:.80}")
                continue
            try:
                size = SizeConfig(**values)
            except TypeError as error:
                problems.append(f"sizes.{name}: {error}")
                continue
            budgets = size.budgets if isinstance(size.budgets, dict) else {}
            if not budgets or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in budgets.values()):
                problems.append(f"sizes.{name}.budgets must map labels to step counts >= 1, got {size.budgets!r:.80}")
            elif len(set(budgets.values())) != len(budgets):
                problems.append(f"sizes.{name}.budgets must be different step counts, got {size.budgets}")
            if not isinstance(size.overrides, dict):
                problems.append(f"sizes.{name}.overrides must map TrainConfig keys, got {size.overrides!r:.60}")
        if not self.sizes:
            problems.append("sizes must name at least one model preset")
        if problems:
            raise ConfigError("MapConfig", problems)

    def size(self, name: str) -> SizeConfig:
        return SizeConfig(**self.sizes[name])


def resolved(path: str) -> Path:
    return Path(path) if Path(path).is_absolute() or Path(path).exists() else REPO_ROOT / path


def prepared_data(cfg: MapConfig, data_dir: Path, out: Path) -> Path:
    """The corpus, vocabulary and shards (ems.apps.demo.prepare_data) of data_config with
    data_overrides over it, made once under OUT/data."""
    from ems.apps.demo import Stages, prepare_data

    prepared = out / "data"
    if not (prepared / "shards" / "heldout" / "index.json").is_file():
        data_cfg = load_config(RecipeDataConfig, resolved(cfg.data_config), values=as_values(cfg.data_overrides))
        prepare_data(data_cfg, data_dir, prepared, Stages())
    return prepared


def train_config(cfg: MapConfig, size: str, prepared: Path, data_dir: Path, values: dict):
    from ems.apps.demo import data_paths
    from ems.training.config import TrainConfig

    overrides = {**cfg.size(size).overrides}
    model_overrides = overrides.pop("model_overrides", {})
    base = load_config(TrainConfig, resolved(cfg.train_config))
    return load_config(
        TrainConfig,
        resolved(cfg.train_config),
        values={
            **data_paths(prepared, data_dir),
            "model": size,
            "model_overrides": {**base.model_overrides, **model_overrides},
            "lr_schedule": "wsd",
            "max_epochs": None,
            "time_budget_minutes": None,
            **overrides,
            **values,
        },
    )


def training_seconds(metrics: Path) -> float:
    """A run's training wall seconds from its metrics.jsonl: the sum of its log windows' `seconds`,
    the newest row of each logged step (a resumed run logs again the steps after its checkpoint), so
    the time of a killed piece is neither lost nor counted twice."""
    windows = {}
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if "loss" in row:
            windows[row["step"]] = row["seconds"]
    return sum(windows.values())


def timed_train(cfg) -> None:
    """Train (or resume) `cfg`, then write its training seconds and steps into OUT/train_seconds.json."""
    from ems.training.train import train

    result = train(cfg)
    if result.preempted:
        raise UserError(f"training of {cfg.out} stopped at step {result.steps}: run the same command again")
    times = {"seconds": training_seconds(Path(cfg.out) / "metrics.jsonl"), "steps": result.steps}
    (Path(cfg.out) / TIMES_FILE).write_text(json.dumps(times) + "\n")


def selected_budgets(cfg: MapConfig, size: str, labels: list[str] | None) -> dict[str, int]:
    """The size's budgets named in `labels` (None: all of them)."""
    budgets = cfg.size(size).budgets
    return dict(budgets) if labels is None else {label: budgets[label] for label in labels if label in budgets}


def plateau_checkpoints(size_dir: Path, decay_fraction: float) -> dict[int, Path]:
    """{step S: checkpoint} of the size's runs (SIZE_DIR/<budget>/checkpoints/step<S>) taken while their
    run was on its plateau (S at most the decay start of the run's max_steps): a run of any budget whose
    decay starts at or after S can go on from there (TrainConfig.branch_from), and is the model of that
    budget trained from the start."""
    from ems.training.checkpoint import TAG_PATTERN
    from ems.training.schedule import wsd_decay_start

    found = {}
    for config in sorted(size_dir.glob(f"*/{TRAIN_CONFIG_FILE}")):
        decay_start = wsd_decay_start(load_yaml(config)["max_steps"], decay_fraction)
        for tag in sorted((config.parent / "checkpoints").glob("step*")):
            step = TAG_PATTERN.fullmatch(tag.name)
            if step and 0 < int(step.group(1)) <= decay_start:
                found.setdefault(int(step.group(1)), tag)
    return found


def train_size(
    cfg: MapConfig, size: str, budgets: dict[str, int], prepared: Path, data_dir: Path, out: Path
) -> dict[str, Path]:
    """The runs of one size's `budgets`, the largest first: each goes on from the latest plateau
    checkpoint of the size's runs before its own decay start (a shorter budget: the long run's branch
    point, which the long run keeps; a longer one: where a shorter run left its plateau), or starts
    from scratch; {budget label: run directory}."""
    from ems.training.schedule import wsd_decay_start

    runs = {label: out / "runs" / size / label for label in budgets}
    decay_fraction = train_config(cfg, size, prepared, data_dir, {}).decay_fraction
    for label, steps in sorted(budgets.items(), key=lambda item: -item[1]):
        if (runs[label] / "model").is_dir():
            continue
        decay_start = wsd_decay_start(steps, decay_fraction)
        plateau = plateau_checkpoints(runs[label].parent, decay_fraction)
        starts = {s: tag for s, tag in plateau.items() if s <= decay_start}
        start = max(starts, default=0)
        todo = [s for other, s in budgets.items() if s < steps and not (runs[other] / "model").is_dir()]
        values = {
            "out": str(runs[label]),
            "max_steps": steps,
            "branch_steps": [s for s in todo if wsd_decay_start(s, decay_fraction) > start],
        }
        written = runs[label] / TRAIN_CONFIG_FILE
        if written.is_file():  # a rerun resumes from the run's own checkpoints, started as before
            values["branch_from"] = load_yaml(written).get("branch_from")
        elif start:
            values["branch_from"] = str(starts[start])
        print(f"\n== {size}: {label}, {steps} steps, from {values.get('branch_from') or 'scratch'} ==", flush=True)
        timed_train(train_config(cfg, size, prepared, data_dir, values))
    return runs


def run_seconds(run_dir: Path, step: int | None = None) -> float:
    """Training seconds of the model of `run_dir` up to `step` (default: its end): its own wall time,
    pro rata of its steps, plus that of the run it went on from (branch_from) up to where it did."""
    from ems.training.checkpoint import TAG_PATTERN

    own = json.loads((run_dir / TIMES_FILE).read_text())
    branch_from = load_yaml(run_dir / TRAIN_CONFIG_FILE).get("branch_from")
    if branch_from:
        start = int(TAG_PATTERN.fullmatch(Path(branch_from).name).group(1))
        inherited = run_seconds(Path(branch_from).parent.parent, start)
    else:
        start, inherited = 0, 0.0
    step = own["steps"] if step is None else step
    return inherited + own["seconds"] * (step - start) / (own["steps"] - start)


def evaluate(cfg: MapConfig, model_dir: Path, data_dir: Path, out: Path) -> Path:
    """results.json of the suite for one model (zero-shot on its unseen languages); cached embeddings. Scored
    again when results.json lacks a task the map reads (a scoring cut off after its first tasks)."""
    from ems.encoder_kinds import load_encoder
    from eval.run_all import run_all

    eval_dir = model_dir.parent / "eval"
    results = eval_dir / "results.json"
    if not results.is_file() or not set(TASK_METRICS) <= set(json.loads(results.read_text())["tasks"]):
        encoder = load_encoder(f"ems:{model_dir},unseen=neutral", cache_dir=out / "cache")
        run_all(encoder, data_dir, out_dir=eval_dir, suite_path=resolved(cfg.suite), print_tables=False)
    return eval_dir / "results.json"


def group_scores(results: Path, pairs: dict[str, int]) -> dict[str, float]:
    """{"<metric>/<group>": mean score} for the map's tasks of the suite, over each group and "all";
    UserError for a task of the suite that did not run."""
    from eval.language_groups import ALL, GROUPS, grouped_results

    rows = grouped_results(results, pairs)
    ran = json.loads(results.read_text())["tasks"]
    scores = {}
    for task, metric in TASK_METRICS.items():
        task_rows = [row for row in rows if row["task"] == task]
        if task in ran and not task_rows:  # in the suite, but it did not run: the point would silently lack it
            raise UserError(f"{results}: task {task} has no per-language scores ({ran[task].get('error')})")
        for group in (*GROUPS, ALL):
            values = [row["score"] for row in task_rows if group in (ALL, row["group"])]
            if values:
                scores[f"{metric}/{group}"] = sum(values) / len(values)
    return scores


def write_points(
    cfg: MapConfig, size: str, budgets: dict[str, int], runs: dict[str, Path], prepared: Path, out: Path, data_dir: Path
) -> None:
    from ems.apps.studies.compute_map_points import MapPoint, point_path, write_point
    from ems.encoder import load
    from ems.flops import encoder_parameters, flops_per_pair, sample_batches
    from ems.shards import PairShards
    from eval.language_groups import training_pairs

    shards = PairShards(prepared / "shards" / "train")
    pairs = training_pairs(prepared / "shards" / "train")
    for label, steps in budgets.items():
        path = point_path(out / "points", size, label)
        if path.is_file():
            continue
        run_cfg = train_config(cfg, size, prepared, data_dir, {})
        model_cfg = load(runs[label] / "model").model.cfg
        batches = sample_batches(shards, run_cfg.batch_size, cfg.flops_batches)
        per_pair = flops_per_pair(model_cfg, shards, batches, model_cfg.xtr_vocabulary == "batch")
        results = evaluate(cfg, runs[label] / "model", data_dir, out)
        point = MapPoint(
            size=size,
            budget=label,
            train_flops=steps * run_cfg.batch_size * per_pair,
            train_seconds=run_seconds(runs[label]),
            steps=steps,
            params=encoder_parameters(model_cfg)["total"],
            scores=group_scores(results, pairs),
        )
        write_point(path, point)
        print(f"{size} {label}: {json.dumps(point.scores)}", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ems.apps.studies.compute_map_runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", nargs="*", default=None, help="the sizes to run (default: all of the config's)")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("EMS_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    )
    parser.add_argument(
        "--budgets",
        nargs="+",
        default=None,
        help="only these budget labels (the long run is the largest of them; a later run with more budgets "
        "keeps the points made)",
    )
    parser.add_argument("--map", action="store_true", help="write OUT/map from every point so far")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    cfg = load_config(MapConfig, args.config)
    sizes = cfg.sizes if args.sizes is None else args.sizes
    unknown = [size for size in sizes if size not in cfg.sizes]
    if unknown:
        raise UserError(f"--sizes {' '.join(unknown)}: not in {args.config} (sizes: {', '.join(cfg.sizes)})")
    labels = {label for size in sizes for label in cfg.size(size).budgets}
    unknown = [label for label in args.budgets or [] if label not in labels]
    if unknown:
        raise UserError(f"--budgets {' '.join(unknown)}: no size has them (budgets: {', '.join(sorted(labels))})")
    if args.sizes is None or args.sizes:
        prepared = prepared_data(cfg, args.data_dir, args.out)
        for size in sizes:
            budgets = selected_budgets(cfg, size, args.budgets)
            if budgets:
                runs = train_size(cfg, size, budgets, prepared, args.data_dir, args.out)
                write_points(cfg, size, budgets, runs, prepared, args.out, args.data_dir)
    if args.map:
        from ems.apps.studies.compute_map import write_map

        markdown, _ = write_map(args.out / "points", args.out / "map")
        print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
