"""Seeded ablations at a fixed step budget (the EMS paper's Table 13, small): train every variant
with every seed on the same prepared data, score each model, print mean ± sd per variant.

    python -m ems.ablation [--config configs/ablation/demo.yaml] [--out runs/ablation] [--data-dir DIR]
                           [--seeds 0 1 2] [--set max_steps=300 ...]

Data are prepared once with the demo's data stages (ems.demo.prepare_data) under OUT/data. Each
run trains with the base training config, the variant's overrides and its seed into
OUT/runs/<variant>/seed<k>/, and is scored on the held-out pairs, Tatoeba and FLORES-200 devtest
(the trained languages; eval.run_all). A run that already has its scores is not trained again, so
an interrupted ablation resumes where it stopped. Writes OUT/ablation.json, OUT/ablation.md (the
table) and OUT/ablation.png (means with sd bars).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ems.cli import add_debug_option, run_main
from ems.configs import _merge, load_config, parse_overrides
from ems.demo import DEFAULT_DATA_DIR, DEMO_SUITE, DemoDataConfig, Stages, data_paths, prepare_data
from ems.train import REPO_ROOT, TrainConfig

SCORES_FILE = "scores.json"
METRICS = {"heldout": "held-out P@1", "tatoeba": "Tatoeba P@1", "flores200": "FLORES-200 P@1"}


@dataclass
class AblationConfig:
    data_config: str = "configs/data/demo.yaml"  # DemoDataConfig: what to train on
    train_config: str = "configs/train/demo.yaml"  # the base TrainConfig of every run
    train_overrides: dict = field(default_factory=dict)  # applied to every run (the step budget, ...)
    variants: dict = field(default_factory=dict)  # {name: TrainConfig overrides}, in table order
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def run_scores(model_dir: Path, prepared: Path, data_dir: Path, languages: list[str]) -> dict[str, float]:
    """Average P@1 of a trained model on each METRICS task."""
    from ems.encoder import load
    from eval.faults import not_run
    from eval.run_all import run_all

    results = run_all(load(model_dir), data_dir, heldout_dir=prepared / "corpus" / "heldout", out_dir=model_dir.parent / "eval",
                      languages=languages, suite_path=DEMO_SUITE, progress=False, print_tables=False)
    missing = [task for task in METRICS if task not in results]
    failed = missing + not_run({task: results[task] for task in METRICS if task in results})
    if failed:  # a language that could not run would shrink the set a variant's average is over
        raise FileNotFoundError(f"could not score {model_dir} on {', '.join(failed)} (see {model_dir.parent / 'eval'})")
    return {task: results[task]["average"]["mean"] for task in METRICS}


def summarize(scores: dict[str, dict[int, dict[str, float]]]) -> dict[str, dict[str, dict]]:
    """{variant: {seed: {task: score}}} -> {variant: {task: {"mean", "sd", "n", "values"}}} (sd: sample
    standard deviation, 0 for one seed)."""
    summary = {}
    for variant, by_seed in scores.items():
        summary[variant] = {}
        for task in METRICS:
            values = [by_seed[seed][task] for seed in sorted(by_seed)]
            summary[variant][task] = {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
                                      "n": len(values), "values": values}
    return summary


def summary_table(summary: dict[str, dict[str, dict]], steps: int) -> str:
    """Markdown: one row per variant, mean ± sd of each metric."""
    seeds = {row["n"] for variant in summary.values() for row in variant.values()}
    lines = [f"### Ablation: {steps} steps, {'/'.join(map(str, sorted(seeds)))} seeds, mean ± sd of average P@1 (%)", "",
             "| variant | " + " | ".join(METRICS.values()) + " |", "|:--|" + "--:|" * len(METRICS)]
    for variant, rows in summary.items():
        lines.append(f"| {variant} | " + " | ".join(f"{rows[t]['mean']:.1f} ± {rows[t]['sd']:.1f}" for t in METRICS) + " |")
    return "\n".join(lines) + "\n"


def plot_summary(summary: dict[str, dict[str, dict]], path: Path) -> Path:
    """Grouped bars (one group per metric, one bar per variant) with sd error bars."""
    from eval.chart import plt, save_figure  # matplotlib without a display

    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(summary)
    for k, (variant, rows) in enumerate(summary.items()):
        xs = [i + k * width for i in range(len(METRICS))]
        ax.bar(xs, [rows[t]["mean"] for t in METRICS], width, yerr=[rows[t]["sd"] for t in METRICS], capsize=3, label=variant)
    ax.set_xticks([i + width * (len(summary) - 1) / 2 for i in range(len(METRICS))], list(METRICS.values()))
    ax.set_ylabel("average P@1 (%), mean ± sd over seeds")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def run_ablation(cfg: AblationConfig, out: Path, data_dir: Path, overrides: dict) -> str:
    """Prepare the data (once), train and score every (variant, seed) not yet scored, write and
    return the table."""
    from ems.train import train

    if not cfg.variants:
        raise ValueError("the ablation config lists no variants")
    data_cfg = load_config(DemoDataConfig, _resolve(cfg.data_config))
    prepared = out / "data"
    if not (prepared / "shards" / "heldout" / "index.json").is_file():
        prepare_data(data_cfg, data_dir, prepared, Stages())
    scores: dict[str, dict[int, dict[str, float]]] = {}
    steps = None
    for variant, variant_overrides in cfg.variants.items():
        for seed in cfg.seeds:
            run_dir = out / "runs" / variant.replace(" ", "_") / f"seed{seed}"
            scores_file = run_dir / SCORES_FILE
            if not scores_file.is_file():
                print(f"\n== {variant}, seed {seed} ==", flush=True)
                started = time.time()
                shutil.rmtree(run_dir / "run", ignore_errors=True)  # a run killed before its scores restarts
                values = {**data_paths(prepared, data_dir), "out": str(run_dir / "run"), "seed": seed}
                for extra in (cfg.train_overrides, variant_overrides or {}, overrides):
                    values = _merge(values, extra)
                result = train(load_config(TrainConfig, _resolve(cfg.train_config), values))
                record = {"variant": variant, "seed": seed, "steps": result["steps"], "train_seconds": round(time.time() - started),
                          **run_scores(Path(result["model_dir"]), prepared, data_dir, data_cfg.languages)}
                scores_file.write_text(json.dumps(record, indent=2) + "\n")
            record = json.loads(scores_file.read_text())
            steps = record["steps"]
            scores.setdefault(variant, {})[seed] = {task: record[task] for task in METRICS}
            print(f"{variant}, seed {seed}: " + ", ".join(f"{METRICS[t]} {record[t]:.1f}" for t in METRICS), flush=True)
    summary = summarize(scores)
    table = summary_table(summary, steps)
    (out / "ablation.json").write_text(json.dumps({"steps": steps, "summary": summary}, indent=2) + "\n")
    (out / "ablation.md").write_text(table)
    plot_summary(summary, out / "ablation.png")
    return table + f"\nwrote {out / 'ablation.md'}, {out / 'ablation.json'}, {out / 'ablation.png'}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO_ROOT / "configs/ablation/demo.yaml"))
    parser.add_argument("--out", type=Path, default=Path("runs/ablation"))
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("EMS_DATA_DIR", DEFAULT_DATA_DIR)),
                        help="directory with tatoeba_challenge/, tatoeba/, flores200/ (default: $EMS_DATA_DIR or ../shared/data)")
    parser.add_argument("--seeds", type=int, nargs="+", help="override the config's seeds")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="TrainConfig overrides for every run")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    cfg = load_config(AblationConfig, args.config)
    if args.seeds:
        cfg.seeds = args.seeds
    print(run_ablation(cfg, args.out, args.data_dir, parse_overrides(args.set)))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
