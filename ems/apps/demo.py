"""The whole system, offline, on real human translations of real sentences:

    Tatoeba Translation Challenge pairs (12 languages, from --data-dir) -> clean (every sentence of
    every evaluation set removed) -> held-out split -> SentencePiece vocab -> shards -> EMS training
    through DeepSpeed (a fixed number of steps, with learning curves) -> Tatoeba, FLORES-200 and
    held-out retrieval of the untrained and the trained model, side by side.

    python -m ems.apps.demo [--out runs/demo] [--data-dir ../shared/data] [--set max_steps=300 ...]

The schedule is a number of steps, so the same machine type gives the same model whatever its
load; `--set time_budget_minutes=8` fits it to a wall-clock budget instead.

    python -m ems.apps.demo --recipe multilingual [--out runs/multilingual] [--set ...]

trains on every language of the Tatoeba Translation Challenge, TICO-19, NLLB-Seed and the eBible subset
(configs/data/multilingual_lowres.yaml, configs/train/multilingual.yaml), resumes where it stopped (the
data are kept when prepared with the same config, training goes on from its checkpoints), and scores
the model on every language of Tatoeba, FLORES-200 (P@1 and xSIM) and SIB-200, those it never saw
zero-shot, by training-data group. `--data-config configs/data/multilingual.yaml` trains on the Tatoeba
Challenge and TICO-19 alone. The data stages (corpus, vocab, binarize) are data_prep.recipe's: `ems-prep
recipe --config configs/data/demo.yaml --out DIR` prepares the same data without training.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from data_prep.recipe import RecipeDataConfig, prepare_recipe_data, prepared_recipe_data
from ems.cli import UserError, add_debug_option, run_main
from ems.configs import load_config
from ems.corpus import check_output_not_input
from ems.training.config import REPO_ROOT, TrainConfig
from ems.training.stopping import PREEMPTED_EXIT_CODE

DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEMO_SUITE = REPO_ROOT / "configs" / "eval" / "suite_demo.yaml"
MULTILINGUAL_SUITE = REPO_ROOT / "configs" / "eval" / "suite_multilingual.yaml"
REPORT_FILE = "demo_report.md"
STAGES_FILE = "demo_stages.json"  # {"seconds": {stage: wall seconds}, "steps": training steps}
CHART_FILE = "demo_chart.png"


class Stages:
    """Prints a header per stage and keeps its wall time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._current: tuple[str, float] | None = None

    def start(self, name: str) -> None:
        self.stop()
        self._current = name, time.time()
        print(f"\n== {name} ==", flush=True)

    def stop(self) -> None:
        if self._current is not None:
            name, started = self._current
            self.seconds[name] = round(time.time() - started, 1)
            self._current = None


def comparison_table(before, after, task: str) -> str:
    """Markdown: mean P@1 per language, untrained vs trained (eval.results.TaskResult), for one task."""
    if not before.ran or not after.ran:
        return f"### {task}\n\nNot run: {before.error or after.error}\n"
    before, after = before.to_dict(), after.to_dict()
    lines = [
        f"### {task}: mean P@1 (%) of xx→en and en→xx",
        "",
        "| lang | n | untrained | trained |",
        "|:--|--:|--:|--:|",
    ]
    for lang, row in after["languages"].items():
        lines.append(f"| {lang} | {row['n']} | {before['languages'][lang]['mean']:.1f} | {row['mean']:.1f} |")
    b, a = before["average"], after["average"]
    lines.append(
        f"| **average** ({a['n_languages']} languages) | {a['n']} | **{b['mean']:.1f}** | **{a['mean']:.1f}** |"
    )
    skipped = {reason: codes for reason, codes in after.get("skipped", {}).items() if codes}
    if skipped:
        lines += ["", "skipped: " + "; ".join(f"{reason}: {', '.join(codes)}" for reason, codes in skipped.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="default: runs/<recipe>")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("EMS_DATA_DIR", DEFAULT_DATA_DIR)),
        help="directory with tatoeba_challenge/, tatoeba/, flores200/, ... (default: $EMS_DATA_DIR or ../shared/data)",
    )
    parser.add_argument(
        "--recipe",
        choices=RECIPES,
        default="demo",
        help="demo: 12 languages, from scratch each time, untrained vs trained; multilingual: every language of "
        "the Tatoeba Challenge, TICO-19, NLLB-Seed and the eBible subset, resumable, evaluated on every language "
        "by training-data group",
    )
    parser.add_argument("--data-config", default=None, help="default: the recipe's (RECIPE_DATA)")
    parser.add_argument("--train-config", default=None, help="default: the recipe's (configs/train/<recipe>.yaml)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override training config keys")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    out = Path("runs") / args.recipe if args.out is None else args.out
    data_config = args.data_config or str(REPO_ROOT / "configs" / "data" / RECIPE_DATA[args.recipe])
    train_config = args.train_config or str(REPO_ROOT / "configs" / "train" / f"{args.recipe}.yaml")
    # every config and --set item checked before the first stage (the corpus takes minutes), and --out
    # none of the inputs
    inputs = [("--data-dir", args.data_dir), ("--data-config", data_config), ("--train-config", train_config)]
    check_output_not_input(("--out", out), inputs)
    data_cfg = load_config(RecipeDataConfig, data_config)
    train_cfg = load_config(TrainConfig, train_config, args.set, run_paths(out, args.data_dir))
    summary = RECIPES[args.recipe](data_cfg, args.data_dir, out, train_cfg)
    print(summary)
    return 0


def prepare_data(data_cfg: RecipeDataConfig, data_dir: Path, out: Path, stages: Stages) -> dict:
    """The data stages of data_prep.recipe (corpus, vocab, binarize: `ems-prep recipe`) into `out`,
    each timed by `stages`; returns the corpus summary (data_prep.recipe.build_corpus)."""
    corpus = prepare_recipe_data(data_cfg, data_dir, out, stages.start)
    stages.stop()
    return corpus


def training_pairs_text(corpus: dict) -> str:
    """The training pairs of a `build_corpus` summary, for a report: its pairs with English, and those of
    two non-English languages (data_prep.pivot) where there are any."""
    other = corpus["non_english_pairs"]
    return f"{corpus['train_pairs']} training pairs" + (f" (and {other} of two non-English languages)" if other else "")


def data_paths(prepared: Path, data_dir: Path) -> dict[str, str]:
    """TrainConfig keys that point a run at the data of `prepare_data`."""
    return {
        "data": str(prepared / "shards" / "train"),
        "vocab": str(prepared / "vocab"),
        "valid_data": str(prepared / "shards" / "heldout"),
        "probe_data": str(data_dir),
    }


class DemoStopped(UserError):
    """Training was stopped (signal or STOP file): nothing to evaluate; exit as the trainer does
    (TrainResult.exit_code: PREEMPTED_EXIT_CODE, INTERRUPTED_EXIT_CODE after a Ctrl-C)."""

    def __init__(self, message: str, exit_code: int = PREEMPTED_EXIT_CODE):
        super().__init__(message)
        self.exit_code = exit_code


def run_paths(out: Path, data_dir: Path) -> dict[str, str]:
    """TrainConfig keys of a recipe's run: the data of `prepare_data` under `out`, the run in out/run."""
    return {**data_paths(out, data_dir), "out": str(out / "run")}


def run_demo(data_cfg: RecipeDataConfig, data_dir: Path, out: Path, train_cfg: TrainConfig) -> str:
    """Every stage (`train_cfg`: the run's config, `run_paths` set); returns the report (also written
    to out/demo_report.md)."""
    from ems.encoder import load
    from ems.training.train import train
    from eval.chart import write_comparison_chart
    from eval.curves import CURVES_FILE, plot_curves, read_metrics
    from eval.run_all import run_all

    stages = Stages()
    corpus = prepare_data(data_cfg, data_dir, out, stages)

    stages.start("train")
    shutil.rmtree(out / "run", ignore_errors=True)  # the demo always trains from scratch
    result = train(train_cfg)
    if result.preempted:
        raise DemoStopped(
            f"training stopped at step {result.steps} of {result.max_steps} (a stop signal or "
            f"{out / 'run' / 'STOP'}); the demo trains from scratch each time: run it again",
            result.exit_code,
        )

    stages.start("eval")
    evaluations = {}
    for name, model_dir in (("untrained", out / "run" / "model-init"), ("trained", Path(result.model_dir))):
        print(f"-- {name} model ({model_dir})", flush=True)
        evaluations[name] = run_all(
            load(model_dir),
            data_dir,
            heldout_dir=out / "corpus" / "heldout",
            out_dir=out / "eval" / name,
            languages=corpus["languages"],
            suite_path=DEMO_SUITE,
            print_tables=False,
        )
    chart = write_comparison_chart(evaluations, out / CHART_FILE)
    curves = plot_curves({"demo": read_metrics(out / "run")}, out / "run" / CURVES_FILE)
    stages.stop()

    tables = "\n".join(
        comparison_table(evaluations["untrained"][task], evaluations["trained"][task], task)
        for task in evaluations["trained"]
    )
    valid = [h for h in result.history if "valid_loss" in h]
    summary = (
        f"# EMS demo\n\n{training_pairs_text(corpus)} in {len(corpus['languages'])} languages "
        f"({', '.join(data_cfg.corpora)}; {corpus['removed_in_eval_set']} pairs sharing a sentence with an "
        "evaluation set removed); "
        f"trained {result.steps} steps; held-out loss {valid[0]['valid_loss']:.3f} -> {valid[-1]['valid_loss']:.3f} "
        f"(xtr {valid[0]['valid_xtr']:.3f} -> {valid[-1]['valid_xtr']:.3f}, contrastive "
        f"{valid[0]['valid_contrastive']:.3f} -> {valid[-1]['valid_contrastive']:.3f})\n\n"
        f"stage seconds: {json.dumps(stages.seconds)} (total {sum(stages.seconds.values()):.0f})\n\n{tables}"
    )
    (out / REPORT_FILE).write_text(summary)
    (out / STAGES_FILE).write_text(json.dumps({"seconds": stages.seconds, "steps": result.steps}, indent=2) + "\n")
    return (
        summary
        + f"""
where everything is:
  corpus      {out / "corpus"}  (raw/import_report.<corpus>.json, clean/clean_report.json, heldout/split_report.json)
  vocabulary  {out / "vocab"}
  shards      {out / "shards"}
  checkpoints {out / "run" / "checkpoints"}   TensorBoard: tensorboard --logdir {out / "run" / "tb"}
  curves      {curves}   (python -m eval.curves {out / "run"})
  model       {out / "run" / "model"}   (ems.load(...).encode(sentences, lang=...))
  evaluation  {out / "eval"}/{{untrained,trained}}/results.json, report.md
  chart       {chart}
  this report {out / REPORT_FILE}"""
    )


def prepared_corpus(data_cfg: RecipeDataConfig, data_dir: Path, out: Path, stages: Stages) -> dict:
    """prepare_data, unless `out` already holds the data of this very config (data_prep.recipe.
    prepared_recipe_data: prepared before by a recipe or by `ems-prep recipe`)."""
    corpus = prepared_recipe_data(data_cfg, data_dir, out, stages.start)
    stages.stop()
    return corpus


def run_multilingual(data_cfg: RecipeDataConfig, data_dir: Path, out: Path, train_cfg: TrainConfig) -> str:
    """The all-language recipe: data (kept when prepared before with the same config), training
    (resumed from out/run's checkpoints), then the multilingual suite on every language the sets
    cover, zero-shot on those the model never saw (`ems:DIR,unseen=neutral`), split by each
    language's training pairs (eval.language_groups); returns the report (out/demo_report.md)."""
    from ems.encoder_kinds import load_encoder
    from ems.training.train import train
    from eval.language_groups import MARKDOWN_FILE, grouped_results, training_pairs, write_grouped
    from eval.run_all import run_all

    stages = Stages()
    corpus = prepared_corpus(data_cfg, data_dir, out, stages)
    # a resumed run's training seconds go on from what the earlier invocations recorded
    earlier = out / STAGES_FILE
    trained_before = (
        json.loads(earlier.read_text())["seconds"].get("train", 0.0)
        if earlier.is_file() and (out / "run" / "checkpoints").is_dir()
        else 0.0
    )
    stages.start("train")
    result = train(train_cfg)
    if result.preempted:
        raise DemoStopped(
            f"training stopped at step {result.steps} of {result.max_steps} (a stop signal or "
            f"{out / 'run' / 'STOP'}); run the same command again: it resumes from the last checkpoint",
            result.exit_code,
        )
    stages.start("eval")
    encoder = load_encoder(f"ems:{result.model_dir},unseen=neutral", cache_dir=out / "cache")
    run_all(
        encoder,
        data_dir,
        heldout_dir=out / "corpus" / "heldout",
        out_dir=out / "eval",
        suite_path=MULTILINGUAL_SUITE,
        print_tables=False,
    )
    pairs = training_pairs(out / "shards" / "train")
    write_grouped(grouped_results(out / "eval" / "results.json", pairs), out / "eval" / "groups", pairs)
    stages.stop()
    stages.seconds["train"] = round(stages.seconds["train"] + trained_before, 1)
    (out / STAGES_FILE).write_text(json.dumps({"seconds": stages.seconds, "steps": result.steps}, indent=2) + "\n")
    summary = (
        f"# EMS, every language\n\n{training_pairs_text(corpus)} in {len(corpus['languages'])} languages "
        f"({', '.join(data_cfg.corpora)}; {corpus['removed_in_eval_set']} pairs sharing a sentence with an "
        f"evaluation set removed; {len(corpus['left_out'])} languages under {data_cfg.min_pairs} pairs left out); "
        f"{train_cfg.model} model, trained {result.steps} steps\n\n"
        f"stage seconds: {json.dumps(stages.seconds)}\n\n" + (out / "eval" / "groups" / MARKDOWN_FILE).read_text()
    )
    (out / REPORT_FILE).write_text(summary)
    return (
        summary
        + f"""
where everything is:
  corpus      {out / "corpus"}  (languages.json: pairs per language imported, after cleaning, held out, trained)
  model       {out / "run" / "model"}   (ems.load(...).encode(sentences, lang=...))
  evaluation  {out / "eval"}/results.json, report.md; by group: {out / "eval" / "groups"}
  this report {out / REPORT_FILE}"""
    )


# --recipe NAME -> its function; its configs are configs/{data,train}/NAME.yaml
RECIPES = {"demo": run_demo, "multilingual": run_multilingual}
# each recipe's data config under configs/data/: the all-language recipe trains on the Tatoeba Challenge,
# TICO-19, NLLB-Seed and the eBible subset, with the corpus_mix its screen chose
RECIPE_DATA = {"demo": "demo.yaml", "multilingual": "multilingual_lowres.yaml"}


if __name__ == "__main__":
    sys.exit(run_main(main))
