"""The peer benchmark: sentence-transformers' stock trainer against the EMS trainer, at equal time.

    python -m benchmarks.peer.sentence_transformers --demo runs/demo --out runs/peer
    python -m benchmarks.peer.sentence_transformers --demo runs/multilingual --out runs/peer-multilingual \
        --suite configs/eval/suite_multilingual.yaml
    python -m benchmarks.peer.sentence_transformers ... --vocab-grid 8000 16000 32000 64000 --lr-grid 1e-3 3e-3 1e-2 \
        --extend 2 --precision auto --equal-pairs --seed 0
    python -m benchmarks.peer.sentence_transformers --demo runs/map/data --run runs/map/runs/tiny/30min \
        --seconds 2760 --suite configs/eval/suite_multilingual.yaml --out runs/peer-map   # a map point

What a new user would try instead of this project, built the way its documentation teaches, on the
same training pairs (`DEMO/corpus/train`, what `ems-demo` wrote, `--recipe demo` or `multilingual`),
on the same machine, for the same wall-clock training time as the EMS run (its "train" stage in
`DEMO/demo_stages.json`: the whole `ems.training.train` call, DeepSpeed set-up, validations and
learning-curve probes included):

- a from-scratch `transformers.BertModel` of the EMS model's shape, read from its config
  (`DEMO/run/model/config.json`, what `ems.load` reads): d_model, n_layers, n_heads, d_ffn, dropout,
  and its max_len as the peer's max_position_embeddings and max_seq_length, so both cut sentences at
  the same length (the demo's: d 128, 2 layers, 4 heads, ffn 512, dropout 0, 64 tokens; the peer's
  [CLS] and [SEP] count in its length); mean pooling;
- a Unigram tokenizer (`tokenizers`: NFKC + lowercase, Metaspace) trained on the same raw text;
- `MultipleNegativesSymmetricRankingLoss` (scale 10 = the EMS temperature 0.1),
  `BatchSamplers.NO_DUPLICATES`, batch 256, linear warm-up (the first 10% of the run's steps, the
  `warmup_ratio` of sentence-transformers' training examples) and decay, the EMS run's weight decay
  (its train_config.yaml), `SentenceTransformerTrainer`; in bf16 or fp32, whichever trains faster on
  this CPU (`--precision auto`: a 40-step probe of each, the first vocabulary), as EMS's autocast does.

The grid, at the full budget. Every (vocabulary, lr) point the search visits trains for the whole
budget and is scored on everything: the peer is not one run but every run of the grid. The search is a
coordinate search: every vocabulary size (`--vocab-grid`) at the middle lr of `--lr-grid` (the lower
middle of an even one), then every other lr at the best of those sizes; the best is the held-out pairs'
(`DEMO/corpus/heldout`; Tatoeba and FLORES-200 never choose). A best at an axis's edge extends that axis
beyond it by the edge's own step (64k after 32k: 128k; 1e-2 after 3e-3: 3.3e-2), up to `--extend` times
per axis; a best still at an edge after that is flagged (`vocab_at_grid_edge`, `lr_at_grid_edge`).
It costs (vocabularies + lrs - 1 + extensions) budgets of training, plus a tokenizer and a 40-step
probe per vocabulary.

EMS is then reported against two peers on each metric: the held-out pick (what a user choosing on
development data gets) and **the best grid point on that very metric** (the worst case for EMS: its
ratio is the smallest over every setting tried). `--equal-pairs` also trains the held-out pick for the
EMS run's pairs (its steps x its batch), untimed: equal pairs seen, beside equal seconds. Each run's
schedule: its step count first the budget times the steady steps/s of its vocabulary's probe (its first
10 steps, start-up included, not counted), then re-fitted once a fifth of the budget has passed, from
the run's own steady rate so far (`refit_end`), as the EMS trainer's time budget does
(ems.training.schedule.TimeBudget); a callback stops it at the budget whatever happens.

Both models are scored the same way: `eval.run_all` with `--suite` (default: the demo's,
configs/eval/suite_demo.yaml: Tatoeba and FLORES-200 devtest; the all-language recipe's is
configs/eval/suite_multilingual.yaml) and the held-out pairs, on the EMS run's training languages
(`--score-languages trained`, the default with the demo's suite) or on every language of the suite
(`all`, the default with any other suite), languages the EMS model never saw zero-shot for both (the
EMS model as `ems:DIR,unseen=neutral`; the peer's tokenizer covers any text). When `DEMO/shards/train`
exists, both models' Tatoeba and FLORES-200 P@1 (the peer: the held-out pick) are also split by each
language's training pairs (eval.language_groups: "≥10k pairs", "1k–10k", "<1k", "unseen").
Writes OUT/peer_report.json and OUT/peer_report.md (the CPU model named: equal-time ratios move with
it); the grid's models are OUT/grid-vVOCAB-lrLR/model (`st:DIR`). One run at a time on a quiet machine
(two heavy jobs on 2 cores slow each other more than 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.peer import grid as peer_grid
from benchmarks.peer import report as peer_report
from benchmarks.peer import scoring as peer_scoring
from benchmarks.peer import training as peer_training
from ems.cli import UserError, add_debug_option, run_main
from ems.corpus import list_parallel, read_parallel

if TYPE_CHECKING:
    from ems.model_config import EMSConfig

REPO_ROOT = Path(__file__).resolve().parents[2]

VOCAB_GRID = [8000, 16000, 32000, 64000]
LR_GRID = [1e-3, 3e-3, 1e-2]


def read_pairs(root: Path) -> list[tuple[str, str]]:
    """Every (l1, l2) sentence pair of a corpus root (`<root>/<l1>-<l2>/<name>.<l1|l2>`)."""
    pairs = [pair for files in list_parallel(root) for pair in read_parallel(files.path_l1, files.path_l2)]
    if not pairs:
        raise UserError(f"no sentence pairs under {root}")
    return pairs


def ems_budget(demo: Path, run: Path | None = None, seconds: float | None = None) -> dict:
    """The EMS training: seconds and steps, mean real tokens/s (RUN/metrics.jsonl). The demo's run
    (`run` None: DEMO/run) takes its seconds and steps from DEMO/demo_stages.json; another run (a
    point of the compute map) needs its training `seconds` given, and its steps are its last logged."""
    from ems.apps.demo import STAGES_FILE

    stages_file = demo / STAGES_FILE
    run = run or demo / "run"
    for path in ([stages_file] if run == demo / "run" else []) + [run / "metrics.jsonl", run / "model"]:
        if not path.exists():
            what = "the directory of a finished ems-demo run" if run == demo / "run" else "a finished training run"
            raise UserError(f"{path} not found: {'--demo' if run == demo / 'run' else '--run'} must be {what}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [row["tokens_per_s"] for row in rows if "tokens_per_s" in row]
    if run == demo / "run":
        stages = json.loads(stages_file.read_text())
        seconds, steps = float(stages["seconds"]["train"]), int(stages["steps"])
    elif seconds is None:
        raise UserError(f"--run {run}: give its training time with --seconds (a map point's train_seconds)")
    else:
        steps = max(row["step"] for row in rows if "loss" in row)
    return {"seconds": seconds, "steps": steps, "tokens_per_s": statistics.fmean(rates) if rates else None}


def ems_config(run: Path):
    """The EMS model's config (ems.model_config.EMSConfig: RUN/model/config.json, what ems.load reads)."""
    from ems.encoder import CONFIG_FILE
    from ems.model_config import EMSConfig

    config = run / "model" / CONFIG_FILE
    if not config.is_file():
        raise UserError(f"{config} not found: the EMS run has no exported model")
    return EMSConfig.from_dict(json.loads(config.read_text()))


def ems_train_settings(run: Path) -> tuple[float, int]:
    """(weight decay, global batch) of the EMS run (RUN/train_config.yaml; TrainConfig's defaults without one)."""
    import yaml

    from ems.training.config import TrainConfig

    values = yaml.safe_load((run / "train_config.yaml").read_text()) if (run / "train_config.yaml").is_file() else {}
    default = {field.name: field.default for field in fields(TrainConfig)}
    batch = values.get("global_batch_size") or values.get("batch_size", default["batch_size"])
    return float(values.get("weight_decay", default["weight_decay"])), int(batch)


def languages_of(prepared: Path) -> list[str]:
    """The languages of the training pairs under PREPARED/corpus/train besides English, sorted."""
    return sorted(
        {lang for files in list_parallel(prepared / "corpus" / "train") for lang in (files.l1, files.l2)} - {"en"}
    )


def positive_int(text: str) -> int:
    value = int(text)
    if value <= len(peer_training.SPECIAL):
        raise argparse.ArgumentTypeError(
            f"a vocabulary needs more than {len(peer_training.SPECIAL)} pieces, got {value}"
        )
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    from ems.apps.demo import DEMO_SUITE
    from eval.run_all import add_task_dir_option

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peer.sentence_transformers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--demo", type=Path, required=True, help="a finished ems-demo directory (corpus/, run/, demo_stages.json)"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/peer"))
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("EMS_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    )
    parser.add_argument(
        "--suite",
        type=Path,
        default=DEMO_SUITE,
        help="the evaluation suite scoring both models (default: the demo's; the all-language recipe's is "
        "configs/eval/suite_multilingual.yaml)",
    )
    add_task_dir_option(parser)
    parser.add_argument(
        "--score-languages",
        choices=("trained", "all"),
        help="score the EMS run's training languages or every language of the suite (unseen ones zero-shot); "
        "default: trained with the demo's suite, all with any other",
    )
    parser.add_argument("--lr-grid", type=positive_float, nargs="+", default=LR_GRID)
    vocab = parser.add_mutually_exclusive_group()
    vocab.add_argument(
        "--vocab-grid",
        type=positive_int,
        nargs="+",
        default=VOCAB_GRID,
        help="the peer's tokenizer sizes to choose from on held-out (default: %(default)s)",
    )
    vocab.add_argument("--vocab-size", type=positive_int, help="no vocabulary grid: the peer's tokenizer has this size")
    parser.add_argument(
        "--extend",
        type=int,
        default=peer_grid.EXTEND,
        help="extensions of each axis past an edge pick (default: %(default)s)",
    )
    parser.add_argument(
        "--precision",
        choices=("auto", *peer_training.PRECISIONS),
        default="auto",
        help="the peer's training precision; auto: the faster of a 40-step probe of each (default)",
    )
    parser.add_argument(
        "--equal-pairs",
        action="store_true",
        help="also train the held-out pick for the EMS run's pairs (its steps x batch), untimed",
    )
    parser.add_argument(
        "--run",
        type=Path,
        help="the EMS training run to compare with, trained on DEMO's corpus (default: DEMO/run; another, e.g. a "
        "compute-map point's run directory, needs --seconds)",
    )
    parser.add_argument("--seconds", type=float, help="the time budget (default: the EMS run's training seconds)")
    parser.add_argument("--seed", type=int, default=0)
    add_debug_option(parser)
    args = parser.parse_args(argv)
    if args.extend < 0:
        raise UserError(f"--extend must be 0 or more, got {args.extend}")
    return args


@dataclass
class Study:
    """What the benchmark reads before it trains anything: the EMS run (`ems_run`, its `budget`, model config
    `cfg`, weight decay and global batch), the peer's `training` settings, the `scoring` both sides share, the
    training `pairs` and `languages`, and each language's training pairs (None without DEMO/shards/train)."""

    args: argparse.Namespace
    ems_run: Path
    budget: dict
    seconds: float
    cfg: EMSConfig
    weight_decay: float
    ems_batch: int
    training: peer_training.PeerTraining
    score_languages: str
    scoring: peer_scoring.Scoring
    pairs: list[tuple[str, str]]
    languages: list[str]
    pairs_by_language: dict[str, int] | None
    vocab_grid: list[int]


def read_study(args: argparse.Namespace) -> Study:
    """The Study of `args`, every input checked (a missing or malformed suite fails now, not after the training)."""
    from ems.apps.demo import DEMO_SUITE
    from eval.run_all import suite_task_configs

    ems_run = args.run or args.demo / "run"
    budget = ems_budget(args.demo, args.run, args.seconds)
    cfg = ems_config(ems_run)
    weight_decay, ems_batch = ems_train_settings(ems_run)
    training = peer_training.PeerTraining(
        shape=peer_training.peer_shape(cfg), weight_decay=weight_decay, seed=args.seed
    )
    if not (args.data_dir / "tatoeba").is_dir():
        raise UserError(f"{args.data_dir} holds no tatoeba/: point --data-dir (or EMS_DATA_DIR) at the evaluation data")
    suite_task_configs(args.suite)
    score_languages = args.score_languages or (
        "trained" if args.suite.resolve() == Path(DEMO_SUITE).resolve() else "all"
    )
    pairs_by_language = None
    if (args.demo / "shards" / "train").is_dir():
        from eval.language_groups import training_pairs

        pairs_by_language = training_pairs(args.demo / "shards" / "train")
    languages = languages_of(args.demo)
    scored = languages if score_languages == "trained" else None
    return Study(
        args=args,
        ems_run=ems_run,
        budget=budget,
        seconds=args.seconds or budget["seconds"],
        cfg=cfg,
        weight_decay=weight_decay,
        ems_batch=ems_batch,
        training=training,
        score_languages=score_languages,
        scoring=peer_scoring.Scoring(args.demo, args.data_dir, scored, args.suite, dict(args.task_dir) or None),
        pairs=read_pairs(args.demo / "corpus" / "train"),
        languages=languages,
        pairs_by_language=pairs_by_language,
        vocab_grid=[args.vocab_size] if args.vocab_size else args.vocab_grid,
    )


def describe_study(study: Study) -> str:
    """The line printed before the training: the pairs, languages, budget and the peer."""
    from ems.run_metadata import cpu_model

    args, languages = study.args, study.languages
    runs = len(set(study.vocab_grid)) + len(set(args.lr_grid)) - 1
    named = ", ".join(languages) if len(languages) <= 20 else f"{', '.join(languages[:20])}, ..."
    return (
        f"{len(study.pairs):,} training pairs, {len(languages)} languages ({named}); budget {study.seconds:.0f} s "
        f"(the EMS run's training time) per grid point, {runs} points (+ up to {args.extend} extensions per axis); "
        f"peer: {study.training.shape.describe()} (the EMS model's), weight decay {study.weight_decay:g}; "
        f"CPU {cpu_model()}"
    )


def choose_precision(study: Study, out: Path) -> tuple[str, dict[str, float] | None]:
    """(--precision, None), or with `auto` the faster of bf16 and fp32 on a 40-step probe of the first
    vocabulary and each one's steps/s."""
    if study.args.precision != "auto":
        return study.args.precision, None
    vocab = min(study.vocab_grid)
    first = peer_training.train_tokenizer(study.pairs, vocab, out / f"tokenizer-{vocab}", study.training.shape.max_len)
    return peer_training.faster_precision(study.pairs, first, out, study.training)


def peer_row(point: peer_grid.GridPoint) -> dict:
    """A peer run's row of the report: its steps, pairs, seconds, rates and scores."""
    return {
        "steps": point.steps,
        "pairs": point.steps * peer_training.BATCH_SIZE,
        "seconds": point.seconds,
        "steps_per_s": point.steps / point.seconds,
        "tokens_per_s": point.real_tokens / point.seconds,
        "scores": point.scores,
    }


def ems_row(study: Study, out: Path) -> dict:
    """The EMS run's row of the report, its model scored (zero-shot on the languages it never saw)."""
    budget = study.budget
    ems_spec = f"ems:{study.ems_run / 'model'},unseen=neutral"
    return {
        "steps": budget["steps"],
        "pairs": budget["steps"] * study.ems_batch,
        "seconds": budget["seconds"],
        "steps_per_s": budget["steps"] / budget["seconds"],
        "tokens_per_s": budget["tokens_per_s"],
        "scores": peer_scoring.score(ems_spec, study.scoring, out / "eval-ems"),
    }


def equal_pairs_row(
    study: Study,
    out: Path,
    choice: peer_grid.GridChoice,
    vocabularies: dict[int, peer_training.Vocabulary],
    ems_pairs: int,
    training: peer_training.PeerTraining,
) -> dict:
    """The held-out pick trained, untimed, for the EMS run's pairs (its steps x its batch), and scored."""
    steps = -(-ems_pairs // peer_training.BATCH_SIZE)
    run_dir = out / "equal-pairs"
    if choice.vocab_size not in vocabularies:  # the pick's point was trained by an earlier run
        vocabularies[choice.vocab_size] = peer_training.prepare_vocabulary(
            study.pairs, choice.vocab_size, out, training
        )
    vocabulary = vocabularies[choice.vocab_size]
    taken_steps, taken, _ = peer_training.train_peer(
        study.pairs, vocabulary.tokenizer, run_dir, choice.lr, steps, None, training
    )
    scores = peer_scoring.score(f"st:{run_dir / 'model'}", study.scoring, run_dir / "eval")
    real_tokens = round(taken_steps * peer_training.BATCH_SIZE * vocabulary.tokens_per_pair)
    point = peer_grid.GridPoint(
        choice.vocab_size, choice.lr, taken_steps, taken, scores, str(run_dir / "model"), real_tokens
    )
    return peer_row(point)


@dataclass
class Results:
    """What the benchmark measured: the grid's `choice`, the EMS row, the equal-pairs row (or None), the
    worst cases, the precision chosen with its probes, and the comparison by language group (or None)."""

    choice: peer_grid.GridChoice
    ems: dict
    equal_pairs: dict | None
    cases: dict[str, dict]
    training: peer_training.PeerTraining
    precision_rates: dict[str, float] | None
    groups: dict | None = None
    types: dict[str, str] = field(default_factory=dict)


def run_study(study: Study, out: Path) -> Results:
    """The precision, the grid search, the EMS model's scores, the equal-pairs run and the groups."""
    precision, precision_rates = choose_precision(study, out)
    training = replace(study.training, precision=precision)
    args = study.args
    choice, vocabularies = peer_grid.search_peer(
        study.pairs, study.vocab_grid, args.lr_grid, study.seconds, out, study.scoring, training, args.extend
    )
    ems = ems_row(study, out)
    equal_pairs = None
    if args.equal_pairs:
        equal_pairs = equal_pairs_row(study, out, choice, vocabularies, ems["pairs"], training)
    results = Results(
        choice, ems, equal_pairs, peer_report.worst_case(ems["scores"], choice), training, precision_rates
    )
    if study.pairs_by_language is not None:
        from eval.language_groups import grouped_results

        ems_rows = grouped_results(out / "eval-ems" / "results.json", study.pairs_by_language)
        pick_results = Path(choice.pick.model_dir).parent / "eval" / "results.json"
        peer_rows = grouped_results(pick_results, study.pairs_by_language)
        results.groups = peer_report.group_comparison(ems_rows, peer_rows)
        results.types = {row["task"]: row["type"] for row in ems_rows}
    return results


def report_markdown(study: Study, results: Results, cpu: str) -> str:
    """OUT/peer_report.md."""
    choice, training, args = results.choice, results.training, study.args
    on = (
        f"the {len(study.languages)} training languages"
        if study.scoring.languages
        else "every language of the suite (zero-shot where the EMS model never saw one)"
    )
    rates = results.precision_rates
    speed = ", ".join(f"{p} {r:.2f} steps/s" for p, r in rates.items()) if rates else "not probed"
    report = [
        "# EMS against sentence-transformers at equal time",
        "",
        f"CPU: {cpu}. Peer: BertModel {training.shape.describe()} (the EMS model's shape), mean pooling, "
        f"weight decay {study.weight_decay:g}, {training.precision} (probes: {speed}); every grid point trained "
        f"for the whole budget, {study.seconds:.0f} s (the EMS run's training time). Unigram vocabulary and lr of "
        f"the pick chosen on the held-out pairs: {choice.vocab_size:,} pieces (the EMS model's: "
        f"{study.cfg.vocab_size:,}), lr {choice.lr:g}. Both scored with {args.suite.name} and the held-out pairs, "
        f"on {on}.",
        "",
        "## EMS against the best peer on each metric (worst case) and the held-out pick",
        "",
        peer_report.worst_case_table(results.cases, choice),
        "## EMS against the held-out pick, equal seconds",
        "",
        peer_report.report_table(results.ems, peer_row(choice.pick)),
    ]
    if results.equal_pairs is not None:
        report += [
            "## EMS against the held-out pick, equal pairs seen (untimed)",
            "",
            peer_report.report_table(results.ems, results.equal_pairs),
        ]
    report += [
        f"## The grid ({len(choice.points)} runs, each the whole budget; coordinate search on held-out, pick in bold)",
        "",
        peer_report.grid_table(choice),
        *(
            f"Note: the {axis} {value} is still at the grid's edge after {args.extend} extensions.\n"
            for axis, flag, value in (
                ("vocabulary", choice.vocab_at_grid_edge, f"{choice.vocab_size:,}"),
                ("lr", choice.lr_at_grid_edge, f"{choice.lr:g}"),
            )
            if flag
        ),
    ]
    if results.groups is not None:
        report += [
            "## By the language's training pairs (DEMO/shards/train; the peer: the pick)",
            "",
            peer_report.group_table(results.groups, results.types),
        ]
    return "\n".join(report)


def report_record(study: Study, results: Results, cpu: str) -> dict:
    """OUT/peer_report.json."""
    choice, training = results.choice, results.training
    return {
        "cpu": cpu,
        "ems": results.ems,
        "peer": peer_row(choice.pick),
        "equal_pairs": results.equal_pairs,
        "worst_case": results.cases,
        "peer_shape": asdict(training.shape),
        "peer_training": {**asdict(training), "shape": None, "precision_probes": results.precision_rates},
        "grid": [asdict(point) for point in choice.points],
        "vocab_size": choice.vocab_size,
        "lr": choice.lr,
        "vocab_at_grid_edge": choice.vocab_at_grid_edge,
        "lr_at_grid_edge": choice.lr_at_grid_edge,
        "ems_vocab_size": study.cfg.vocab_size,
        "budget_seconds": study.seconds,
        "suite": str(study.args.suite),
        "score_languages": study.score_languages,
        "languages": study.languages,
        "groups": results.groups,
    }


def main(argv: list[str]) -> int:
    from ems.run_metadata import cpu_model

    args = parse_args(argv)
    study = read_study(args)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(describe_study(study), flush=True)
    results = run_study(study, out)
    cpu = cpu_model()
    record = report_record(study, results, cpu)
    (out / "peer_report.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    text = report_markdown(study, results, cpu)
    (out / "peer_report.md").write_text(text, encoding="utf-8")
    print(text + f"\nwrote {out / 'peer_report.md'}, {out / 'peer_report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
