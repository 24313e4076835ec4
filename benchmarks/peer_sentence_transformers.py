"""The peer benchmark: sentence-transformers' stock trainer against the EMS trainer, at equal time.

    python -m benchmarks.peer_sentence_transformers --demo runs/demo --out runs/peer
    python -m benchmarks.peer_sentence_transformers --demo runs/multilingual --out runs/peer-multilingual \
        --suite configs/eval/suite_multilingual.yaml
    python -m benchmarks.peer_sentence_transformers ... --vocab-grid 8000 16000 32000 64000 --lr-grid 1e-3 3e-3 1e-2 \
        --extend 2 --precision auto --equal-pairs --seed 0
    python -m benchmarks.peer_sentence_transformers --demo runs/map/data --run runs/map/runs/tiny/30min \
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
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ems.cli import UserError, add_debug_option, run_main
from ems.corpus import list_parallel, read_parallel

REPO_ROOT = Path(__file__).resolve().parents[1]

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB_GRID = [8000, 16000, 32000, 64000]
LR_GRID = [1e-3, 3e-3, 1e-2]
EXTEND = 2  # extensions of each axis beyond an edge pick
MIN_VOCAB = 1000  # an extension below this is not run
PROBE_STEPS, PROBE_LR = 40, 1e-3
BATCH_SIZE = 256
PRECISIONS = ("fp32", "bf16")

WARMUP_RATIO = 0.1  # a share, not a step count: the same schedule shape at any length
REFIT_AT = 0.2  # share of the budget after which the schedule's end is re-fitted to the run's own rate
STEP_CAP = 1.5  # the trainer's loop bound, x the first estimate: room for a run faster than its probe
POINT_FILE = "point.json"  # OUT/grid-vV-lrL/point.json: a point's settings, steps, seconds and scores (reused)
METRICS = {"held-out": "heldout", "Tatoeba": "tatoeba", "FLORES-200": "flores200"}  # column -> task; P@1 means


@dataclass(frozen=True)
class PeerShape:
    """The peer BertModel's shape: the EMS model's width, depth, heads, ffn, dropout and max_len (tokens)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_len: int
    dropout: float = 0.1  # BERT's hidden and attention dropout

    def bert_config(self, vocab_size: int):
        from transformers import BertConfig

        return BertConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_len,
            hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=self.dropout,
        )

    def describe(self) -> str:
        return (
            f"d {self.hidden_size}, {self.num_hidden_layers} layers, {self.num_attention_heads} heads, "
            f"ffn {self.intermediate_size}, dropout {self.dropout:g}, {self.max_len} tokens"
        )


TINY = PeerShape(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, max_len=64)


def peer_shape(cfg) -> PeerShape:
    """The peer's shape from an EMS model config (ems.model.EMSConfig, `ems.load(DIR).model.cfg`)."""
    return PeerShape(
        hidden_size=cfg.d_model,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        intermediate_size=cfg.d_ffn,
        max_len=cfg.max_len,
        dropout=cfg.dropout,
    )


@dataclass(frozen=True)
class PeerTraining:
    """What every peer run shares besides its vocabulary, lr and steps."""

    shape: PeerShape = TINY
    weight_decay: float = 1e-5
    precision: str = "fp32"  # or "bf16": autocast, as sentence-transformers' trainer does with bf16=True
    seed: int = 0


@dataclass
class LinearDecay:
    """lr factor: linear warm-up over `warmup` steps, then linear decay to 0 at `end`; the same
    factors as transformers' "linear" schedule, but `end` is mutable (re-fitted mid-run)."""

    warmup: int
    end: int

    @classmethod
    def for_run(cls, steps: int, warmup_ratio: float = WARMUP_RATIO) -> LinearDecay:
        """The schedule of a `steps`-step run: warm-up over its first warmup_ratio, decay to 0 at its end."""
        return cls(warmup=round(warmup_ratio * steps), end=steps)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return step / max(1, self.warmup)
        return max(0.0, (self.end - step) / max(1, self.end - self.warmup))


def refit_end(step: int, elapsed: float, steady_rate: float, seconds: float, cap: int) -> int:
    """The step at which a run at `step`, `elapsed` seconds into a `seconds` budget, running at
    `steady_rate` steps/s, uses up its budget; at least step + 1, at most `cap`."""
    return max(step + 1, min(cap, step + int(steady_rate * max(0.0, seconds - elapsed))))


def read_pairs(root: Path) -> list[tuple[str, str]]:
    """Every (l1, l2) sentence pair of a corpus root (`<root>/<l1>-<l2>/<name>.<l1|l2>`)."""
    pairs = [pair for files in list_parallel(root) for pair in read_parallel(files.path_l1, files.path_l2)]
    if not pairs:
        raise UserError(f"no sentence pairs under {root}")
    return pairs


def train_tokenizer(pairs: list[tuple[str, str]], vocab_size: int, out: Path, max_len: int = TINY.max_len):
    """A `PreTrainedTokenizerFast` (Unigram, NFKC + lowercase, BERT's [CLS] x [SEP]) trained on both sides."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, unk_token="[UNK]", show_progress=False
    )
    tokenizer.train_from_iterator((side for pair in pairs for side in pair), trainer=trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_len,
    )
    fast.save_pretrained(out)
    return fast


def initial_model(tokenizer, out: Path, seed: int, shape: PeerShape = TINY):
    """A from-scratch SentenceTransformer: BertModel of `shape` + mean pooling, saved in out."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel

    torch.manual_seed(seed)
    BertModel(shape.bert_config(len(tokenizer))).save_pretrained(out)
    tokenizer.save_pretrained(out)
    transformer = models.Transformer(str(out), max_seq_length=shape.max_len)
    return SentenceTransformer(modules=[transformer, models.Pooling(shape.hidden_size, "mean")], device="cpu")


def count_tokens(tokenizer, pairs: list[tuple[str, str]], max_len: int = TINY.max_len) -> float:
    """Mean real tokens per pair (both sides, at most max_len each) under the peer's tokenizer."""
    sample = pairs[:: max(1, len(pairs) // 20_000)]
    lengths = [min(len(ids), max_len) for side in zip(*sample) for ids in tokenizer(list(side))["input_ids"]]
    return 2 * statistics.fmean(lengths)


def train_peer(
    pairs,
    tokenizer,
    out: Path,
    lr: float,
    max_steps: int,
    seconds: float | None,
    training: PeerTraining = PeerTraining(),
    settle_steps: int = 10,
) -> tuple[int, float, float]:
    """Train a fresh peer (saved in out/model) on a linear schedule ending at max_steps, warmed up
    over its first WARMUP_RATIO (kept when the end is re-fitted). With a budget of `seconds`, the
    schedule's end is re-fitted once REFIT_AT of it has passed (refit_end) and training stops at that
    end or at the budget, whichever comes first. Returns (steps taken, training seconds, steps/s
    after the first `settle_steps`)."""
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
    from sentence_transformers.training_args import BatchSamplers
    from transformers import TrainerCallback

    schedule = LinearDecay.for_run(max_steps)
    cap = max_steps if seconds is None else int(STEP_CAP * max_steps)

    class Trainer(SentenceTransformerTrainer):
        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, schedule)
            return self.lr_scheduler

    class Budget(TrainerCallback):
        """Re-fits the schedule's end once, and ends training at it or at `seconds` (the equal-time guard)."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.time()
            self.settled = None
            self.refitted = seconds is None

        def on_step_end(self, args, state, control, **kwargs):
            step, elapsed = state.global_step, time.time() - self.started
            if step == settle_steps:
                self.settled = time.time()
            if not self.refitted and self.settled and step > settle_steps and elapsed >= REFIT_AT * seconds:
                rate = (step - settle_steps) / (time.time() - self.settled)
                schedule.end = refit_end(step, elapsed, rate, seconds, cap)
                self.refitted = True
            if step >= schedule.end or (seconds is not None and elapsed >= seconds):
                control.should_training_stop = True

    model = initial_model(tokenizer, out / "init", training.seed, training.shape)
    data = Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [b for _, b in pairs]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"),
        per_device_train_batch_size=BATCH_SIZE,
        learning_rate=lr,
        max_steps=cap,
        weight_decay=training.weight_decay,
        bf16=training.precision == "bf16",
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        dataloader_drop_last=True,
        save_strategy="no",
        logging_steps=50,
        report_to="none",
        seed=training.seed,
        use_cpu=True,
        disable_tqdm=True,
    )
    loss = losses.MultipleNegativesSymmetricRankingLoss(model, scale=10.0)
    guard = Budget()
    trainer = Trainer(model=model, args=args, train_dataset=data, loss=loss, callbacks=[guard])
    started = time.time()
    result = trainer.train()
    finished = time.time()
    model.save(str(out / "model"))
    steps = int(result.global_step)
    steady = (
        (steps - settle_steps) / (finished - guard.settled)
        if guard.settled and steps > settle_steps
        else steps / (finished - started)
    )
    return steps, finished - started, steady


@dataclass
class Vocabulary:
    """The peer's tokenizer of one size, and its probe: the steady steps/s of a PROBE_STEPS run
    and the trainer's start-up seconds (its fixed cost beyond the steps)."""

    size: int
    tokenizer: object
    rate: float
    startup: float
    tokens_per_pair: float

    def steps_in(self, seconds: float) -> int:
        """The steps a run of this vocabulary takes in `seconds`, at its probe's rate."""
        return max(1, int(self.rate * (seconds - self.startup)))


def probe(pairs, tokenizer, out: Path, training: PeerTraining) -> tuple[float, float]:
    """(steady steps/s, start-up seconds) of a PROBE_STEPS run of `tokenizer` under `training`."""
    steps, taken, rate = train_peer(pairs, tokenizer, out, PROBE_LR, PROBE_STEPS, None, training)
    return rate, max(0.0, taken - steps / rate)


def prepare_vocabulary(pairs, size: int, out: Path, training: PeerTraining) -> Vocabulary:
    """Train the tokenizer of `size` pieces (out/tokenizer-SIZE) and probe its training rate (out/probe-SIZE)."""
    tokenizer = train_tokenizer(pairs, size, out / f"tokenizer-{size}", training.shape.max_len)
    rate, startup = probe(pairs, tokenizer, out / f"probe-{size}", training)
    print(
        f"vocabulary {size:,} ({len(tokenizer):,} pieces): probe {PROBE_STEPS} steps, {rate:.2f} steps/s "
        f"after the first 10, {startup:.1f} s of start-up ({training.precision})",
        flush=True,
    )
    return Vocabulary(size, tokenizer, rate, startup, count_tokens(tokenizer, pairs, training.shape.max_len))


def faster_precision(pairs, tokenizer, out: Path, training: PeerTraining) -> tuple[str, dict[str, float]]:
    """The precision (PRECISIONS) whose PROBE_STEPS probe trains fastest on this CPU, and every probe's steps/s."""
    rates = {
        precision: probe(pairs, tokenizer, out / f"precision-{precision}", replace(training, precision=precision))[0]
        for precision in PRECISIONS
    }
    print("precision probes: " + ", ".join(f"{p} {r:.2f} steps/s" for p, r in rates.items()), flush=True)
    return max(rates, key=rates.get), rates


@dataclass
class GridPoint:
    vocab_size: int
    lr: float
    steps: int
    seconds: float
    scores: dict[str, float]  # every metric (METRICS' columns); "held-out" chooses
    model_dir: str = ""
    real_tokens: int = 0  # non-pad tokens of both sides over every pair trained on ([CLS]/[SEP] included)

    @property
    def heldout(self) -> float:
        return self.scores["held-out"]


@dataclass
class GridChoice:
    points: list[GridPoint]  # in the order they were run
    vocab_size: int
    lr: float
    vocab_at_grid_edge: bool
    lr_at_grid_edge: bool

    @property
    def pick(self) -> GridPoint:
        return next(p for p in self.points if (p.vocab_size, p.lr) == (self.vocab_size, self.lr))

    def best_on(self, metric: str) -> GridPoint:
        """The grid point with the highest `metric` (the first run of equals): EMS's worst case on it."""
        return max(self.points, key=lambda point: point.scores[metric])


def middle(values: list[float]) -> float:
    """The middle of a sorted grid (the lower middle of an even one)."""
    return values[(len(values) - 1) // 2]


def beyond(values: list, best) -> object | None:
    """The next value past `best` at an edge of the sorted axis `values`, one step of the edge's own
    ratio to its neighbour (32k, 64k: 128k); None when `best` is inside or the axis has one value."""
    if len(values) < 2 or best not in (values[0], values[-1]):
        return None
    edge, neighbour = (values[-1], values[-2]) if best == values[-1] else (values[0], values[1])
    value = edge * edge / neighbour
    return round(value) if isinstance(edge, int) else float(f"{value:.3g}")


def coordinate_search(
    vocab_grid: list[int],
    lr_grid: list[float],
    run_point: Callable[[int, float], GridPoint],
    extend: int = EXTEND,
) -> GridChoice:
    """Every vocabulary size (ascending) at the middle lr, the vocabulary axis extended past an edge
    best (`beyond`) up to `extend` times; then every other lr (ascending) at the best size, extended
    the same way; the best point by held-out P@1 (the first run of equals). An edge flag is set when
    the choice is still the smallest or largest of an axis that has more than one value."""
    vocabs, lrs = sorted(set(vocab_grid)), sorted(set(lr_grid))
    points: dict[tuple[int, float], GridPoint] = {}

    def visit(vocab: int, lr: float) -> None:
        if (vocab, lr) not in points:
            points[vocab, lr] = run_point(vocab, lr)

    lr0 = middle(lrs)
    for vocab in vocabs:
        visit(vocab, lr0)
    for _ in range(extend):
        more = beyond(vocabs, max(vocabs, key=lambda vocab: points[vocab, lr0].heldout))
        if more is None or more < MIN_VOCAB:
            break
        vocabs = sorted([*vocabs, more])
        visit(more, lr0)
    best_vocab = max(vocabs, key=lambda vocab: points[vocab, lr0].heldout)
    for lr in lrs:
        visit(best_vocab, lr)
    for _ in range(extend):
        more = beyond(lrs, max(lrs, key=lambda lr: points[best_vocab, lr].heldout))
        if more is None:
            break
        lrs = sorted([*lrs, more])
        visit(best_vocab, more)
    best = max(points.values(), key=lambda point: point.heldout)
    return GridChoice(
        points=list(points.values()),
        vocab_size=best.vocab_size,
        lr=best.lr,
        vocab_at_grid_edge=len(vocabs) > 1 and best.vocab_size in (vocabs[0], vocabs[-1]),
        lr_at_grid_edge=len(lrs) > 1 and best.lr in (lrs[0], lrs[-1]),
    )


@dataclass
class Scoring:
    """How every model is scored: the suite and held-out pairs of `prepared`, on `languages` (None: all)."""

    prepared: Path
    data_dir: Path
    languages: list[str] | None
    suite: Path
    task_dirs: dict[str, Path] | None = None  # {task name: its data directory}, as ems-eval's --task-dir


def search_peer(
    pairs,
    vocab_grid: list[int],
    lr_grid: list[float],
    seconds: float,
    out: Path,
    scoring: Scoring,
    training: PeerTraining,
    extend: int = EXTEND,
) -> tuple[GridChoice, dict[int, Vocabulary]]:
    """The coordinate search of (vocab, lr), each point trained for the whole `seconds` (out/grid-vVOCAB-lrLR)
    and scored on everything; returns the choice and the vocabularies made."""
    vocabularies: dict[int, Vocabulary] = {}

    def run_point(vocab: int, lr: float) -> GridPoint:
        run_dir = out / f"grid-v{vocab}-lr{lr:g}"
        trained = {"seconds": seconds, "pairs": len(pairs), **asdict(training)}
        scored = {"suite": str(scoring.suite), "languages": scoring.languages, "task_dirs": str(scoring.task_dirs)}
        record = json.loads((run_dir / POINT_FILE).read_text()) if (run_dir / POINT_FILE).is_file() else {}
        if record.get("trained") == trained and (run_dir / "model").is_dir():
            point = GridPoint(**record["point"])
            print(f"grid vocab {vocab:,} lr {lr:g}: trained before ({run_dir / POINT_FILE})", flush=True)
        else:
            if vocab not in vocabularies:
                vocabularies[vocab] = prepare_vocabulary(pairs, vocab, out, training)
            vocabulary = vocabularies[vocab]
            steps, taken, _ = train_peer(
                pairs, vocabulary.tokenizer, run_dir, lr, vocabulary.steps_in(seconds), seconds, training
            )
            real_tokens = round(steps * BATCH_SIZE * vocabulary.tokens_per_pair)
            point = GridPoint(vocab, lr, steps, taken, {}, str(run_dir / "model"), real_tokens)
        run_dir.mkdir(parents=True, exist_ok=True)
        if record.get("scored") != scored or not point.scores:
            point.scores = score(f"st:{run_dir / 'model'}", scoring, run_dir / "eval")
        (run_dir / POINT_FILE).write_text(json.dumps({"trained": trained, "scored": scored, "point": asdict(point)}))
        print(
            f"grid vocab {vocab:,} lr {lr:g}: {point.steps} steps in {point.seconds:.0f} s, "
            + ", ".join(f"{metric} {value:.1f}" for metric, value in point.scores.items()),
            flush=True,
        )
        return point

    choice = coordinate_search(vocab_grid, lr_grid, run_point, extend)
    for axis, flag, value in (
        ("vocab", choice.vocab_at_grid_edge, f"{choice.vocab_size:,}"),
        ("lr", choice.lr_at_grid_edge, f"{choice.lr:g}"),
    ):
        if flag:
            print(f"{axis} {value} is at the grid's edge after {extend} extensions", flush=True)
    return choice, vocabularies


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
    """The EMS model's config (ems.model.EMSConfig: RUN/model/config.json, what ems.load reads)."""
    from ems.encoder import CONFIG_FILE
    from ems.model import EMSConfig

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


def score(encoder_spec: str, scoring: Scoring, out: Path) -> dict[str, float]:
    """eval.run_all of the encoder `encoder_spec` (ems.encoder_kinds) on the suite and the held-out pairs,
    results in out/results.json; returns the average P@1 (both directions) of each task of METRICS and of
    every other task of the suite with a P@1 average (e.g. a development set). Embeddings are cached
    for the run only: FLORES-200's bitext and xSIM tasks (and every language's English side) encode
    the same sentences."""
    from ems.encoder_kinds import load_encoder
    from eval.run_all import run_all

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="embeddings-", dir=out) as cache:
        results = run_all(
            load_encoder(encoder_spec, Path(cache)),
            scoring.data_dir,
            heldout_dir=scoring.prepared / "corpus" / "heldout",
            out_dir=out,
            languages=scoring.languages,
            suite_path=scoring.suite,
            task_dirs=scoring.task_dirs,
            progress=False,
            print_tables=False,
        )
    scores = {}
    for column, task in METRICS.items():
        result = results.get(task)
        if result is None or not result.ran:
            raise UserError(f"{task} could not be scored ({result.error if result else 'not in the suite'}); see {out}")
        scores[column] = float(result.to_dict()["average"]["mean"])
    for task, result in results.items():
        mean = result.to_dict().get("average", {}).get("mean") if result.ran else None
        if task not in METRICS.values() and isinstance(mean, (int, float)):
            scores[task] = float(mean)
    return scores


def languages_of(prepared: Path) -> list[str]:
    return sorted(
        {lang for files in list_parallel(prepared / "corpus" / "train") for lang in (files.l1, files.l2)} - {"en"}
    )


def report_table(ems: dict, peer: dict) -> str:
    """EMS against one peer run: steps, pairs, speed and every metric both have, with EMS / peer."""
    rows = [
        ("steps", "steps", "{:,.0f}"),
        ("pairs seen", "pairs", "{:,.0f}"),
        ("training seconds", "seconds", "{:.0f}"),
        ("steps/s", "steps_per_s", "{:.2f}"),
        ("real tokens/s", "tokens_per_s", "{:,.0f}"),
    ]
    rows += [
        (f"{metric} P@1", metric, "{:.1f}") for metric in ems.get("scores", {}) if metric in peer.get("scores", {})
    ]
    lines = ["| | EMS | sentence-transformers | EMS / peer |", "|:--|--:|--:|--:|"]
    for label, key, fmt in rows:
        a, b = ems.get(key, ems.get("scores", {}).get(key)), peer.get(key, peer.get("scores", {}).get(key))
        lines.append(f"| {label} | {_cell(a, fmt)} | {_cell(b, fmt)} | {_ratio(a, b)} |")
    return "\n".join(lines) + "\n"


def worst_case(ems_scores: dict[str, float], choice: GridChoice) -> dict[str, dict]:
    """Per metric EMS has: EMS, the held-out pick's score, and the best grid point on that metric, with
    EMS / each (the second is EMS's worst case over every setting the grid tried)."""
    pick, rows = choice.pick, {}
    for metric, value in ems_scores.items():
        if metric not in pick.scores:
            continue
        best = choice.best_on(metric)
        rows[metric] = {
            "ems": value,
            "pick": pick.scores[metric],
            "ems_over_pick": value / pick.scores[metric] if pick.scores[metric] else None,
            "best": best.scores[metric],
            "best_at": {"vocab_size": best.vocab_size, "lr": best.lr},
            "ems_over_best": value / best.scores[metric] if best.scores[metric] else None,
        }
    return rows


def worst_case_table(rows: dict[str, dict], choice: GridChoice) -> str:
    lines = [
        f"| P@1 | EMS | peer: held-out pick ({choice.vocab_size:,}, lr {choice.lr:g}) | EMS / pick | "
        "peer: best on this metric | EMS / best (worst case) |",
        "|:--|--:|--:|--:|--:|--:|",
    ]
    for metric, row in rows.items():
        at = f"{row['best_at']['vocab_size']:,}, lr {row['best_at']['lr']:g}"
        lines.append(
            f"| {metric} | {row['ems']:.1f} | {row['pick']:.1f} | {_ratio(row['ems'], row['pick'])} | "
            f"{row['best']:.1f} ({at}) | **{_ratio(row['ems'], row['best'])}** |"
        )
    return "\n".join(lines) + "\n"


def _cell(value, fmt: str = "{:.1f}") -> str:
    return fmt.format(value) if value is not None else "–"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "–"


def grid_table(choice: GridChoice) -> str:
    """Every grid point run: vocabulary, lr, steps, then each metric; the held-out pick in bold."""
    metrics = list(choice.points[0].scores)
    lines = [
        "| vocabulary | lr | steps | " + " | ".join(metrics) + " |",
        "|--:|--:|--:|" + "--:|" * len(metrics),
    ]
    for point in sorted(choice.points, key=lambda p: (p.vocab_size, p.lr)):
        bold = "**" if (point.vocab_size, point.lr) == (choice.vocab_size, choice.lr) else ""
        cells = [f"{bold}{_cell(point.scores.get(metric))}{bold}" for metric in metrics]
        lines.append(f"| {point.vocab_size:,} | {point.lr:g} | {point.steps:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


GROUPED_TYPES = {"tatoeba": "Tatoeba", "flores": "FLORES-200"}  # task type -> its label; P@1 (%) rows


def group_comparison(ems_rows: list[dict], peer_rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{task: {group: {"languages", "ems", "peer"}}} of the Tatoeba and FLORES tasks of two models'
    eval.language_groups.grouped_results rows: each model's mean P@1 over the group's languages that
    both scored (None for a group with none), the groups of GROUPS then "all"."""
    from eval.language_groups import ALL, GROUPS

    peer_scores = {(row["task"], row["language"]): row["score"] for row in peer_rows}
    tasks = {row["task"]: None for row in ems_rows if row["type"] in GROUPED_TYPES}
    comparison = {}
    for task in tasks:
        both = [row for row in ems_rows if row["task"] == task and (task, row["language"]) in peer_scores]
        comparison[task] = {}
        for group in (*GROUPS, ALL):
            members = [row for row in both if group in (ALL, row["group"])]
            ems = [row["score"] for row in members]
            peer = [peer_scores[task, row["language"]] for row in members]
            comparison[task][group] = {
                "languages": len(members),
                "ems": statistics.fmean(ems) if ems else None,
                "peer": statistics.fmean(peer) if peer else None,
            }
    return comparison


def group_table(comparison: dict[str, dict[str, dict]], types: dict[str, str]) -> str:
    """One markdown table per task of `group_comparison`: group, languages, EMS, peer, EMS / peer
    (`types`: task -> its type, for the task's label)."""
    from eval.language_groups import ALL

    parts = []
    for task, groups in comparison.items():
        lines = [
            f"### {GROUPED_TYPES[types[task]]} P@1 ({task}) by the language's training pairs",
            "",
            "| group | languages | EMS | peer | EMS / peer |",
            "|:--|--:|--:|--:|--:|",
        ]
        for group, row in groups.items():
            label = f"**{group}**" if group == ALL else group
            lines.append(
                f"| {label} | {row['languages']} | {_cell(row['ems'])} | {_cell(row['peer'])} | "
                f"{_ratio(row['ems'], row['peer'])} |"
            )
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= len(SPECIAL):
        raise argparse.ArgumentTypeError(f"a vocabulary needs more than {len(SPECIAL)} pieces, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    from ems.apps.demo import DEMO_SUITE
    from eval.run_all import add_task_dir_option

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
        "--extend", type=int, default=EXTEND, help="extensions of each axis past an edge pick (default: %(default)s)"
    )
    parser.add_argument(
        "--precision",
        choices=("auto", *PRECISIONS),
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


def main(argv: list[str]) -> int:
    from ems.apps.demo import DEMO_SUITE
    from ems.run_metadata import cpu_model

    args = parse_args(argv)
    ems_run = args.run or args.demo / "run"
    budget = ems_budget(args.demo, args.run, args.seconds)
    cfg = ems_config(ems_run)
    weight_decay, ems_batch = ems_train_settings(ems_run)
    training = PeerTraining(shape=peer_shape(cfg), weight_decay=weight_decay, seed=args.seed)
    if not (args.data_dir / "tatoeba").is_dir():
        raise UserError(f"{args.data_dir} holds no tatoeba/: point --data-dir (or EMS_DATA_DIR) at the evaluation data")
    from eval.run_all import suite_task_configs

    suite_task_configs(args.suite)  # a missing or malformed suite fails now, not after the training
    score_languages = args.score_languages or (
        "trained" if args.suite.resolve() == Path(DEMO_SUITE).resolve() else "all"
    )
    pairs_by_language = None
    if (args.demo / "shards" / "train").is_dir():
        from eval.language_groups import training_pairs

        pairs_by_language = training_pairs(args.demo / "shards" / "train")
    seconds = args.seconds or budget["seconds"]
    languages = languages_of(args.demo)
    scored = languages if score_languages == "trained" else None
    scoring = Scoring(args.demo, args.data_dir, scored, args.suite, dict(args.task_dir) or None)
    pairs = read_pairs(args.demo / "corpus" / "train")
    vocab_grid = [args.vocab_size] if args.vocab_size else args.vocab_grid
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    runs = len(set(vocab_grid)) + len(set(args.lr_grid)) - 1
    named = ", ".join(languages) if len(languages) <= 20 else f"{', '.join(languages[:20])}, ..."
    print(
        f"{len(pairs):,} training pairs, {len(languages)} languages ({named}); budget {seconds:.0f} s (the EMS "
        f"run's training time) per grid point, {runs} points (+ up to {args.extend} extensions per axis); peer: "
        f"{training.shape.describe()} (the EMS model's), weight decay {weight_decay:g}; CPU {cpu_model()}",
        flush=True,
    )

    precision_rates = None
    if args.precision == "auto":
        first = train_tokenizer(pairs, min(vocab_grid), out / f"tokenizer-{min(vocab_grid)}", training.shape.max_len)
        precision, precision_rates = faster_precision(pairs, first, out, training)
    else:
        precision = args.precision
    training = replace(training, precision=precision)
    choice, vocabularies = search_peer(pairs, vocab_grid, args.lr_grid, seconds, out, scoring, training, args.extend)
    pick = choice.pick

    def peer_row(point: GridPoint) -> dict:
        return {
            "steps": point.steps,
            "pairs": point.steps * BATCH_SIZE,
            "seconds": point.seconds,
            "steps_per_s": point.steps / point.seconds,
            "tokens_per_s": point.real_tokens / point.seconds,
            "scores": point.scores,
        }

    ems_spec = f"ems:{ems_run / 'model'},unseen=neutral"  # zero-shot on languages it never saw
    ems = {
        "steps": budget["steps"],
        "pairs": budget["steps"] * ems_batch,
        "seconds": budget["seconds"],
        "steps_per_s": budget["steps"] / budget["seconds"],
        "tokens_per_s": budget["tokens_per_s"],
        "scores": score(ems_spec, scoring, out / "eval-ems"),
    }
    equal_pairs = None
    if args.equal_pairs:
        steps = -(-ems["pairs"] // BATCH_SIZE)
        run_dir = out / "equal-pairs"
        if choice.vocab_size not in vocabularies:  # the pick's point was trained by an earlier run
            vocabularies[choice.vocab_size] = prepare_vocabulary(pairs, choice.vocab_size, out, training)
        vocabulary = vocabularies[choice.vocab_size]
        taken_steps, taken, _ = train_peer(pairs, vocabulary.tokenizer, run_dir, choice.lr, steps, None, training)
        scores = score(f"st:{run_dir / 'model'}", scoring, run_dir / "eval")
        real_tokens = round(taken_steps * BATCH_SIZE * vocabulary.tokens_per_pair)
        point = GridPoint(choice.vocab_size, choice.lr, taken_steps, taken, scores, str(run_dir / "model"), real_tokens)
        equal_pairs = peer_row(point)
    cases = worst_case(ems["scores"], choice)
    on = (
        f"the {len(languages)} training languages"
        if scoring.languages
        else "every language of the suite (zero-shot where the EMS model never saw one)"
    )
    speed = ", ".join(f"{p} {r:.2f} steps/s" for p, r in precision_rates.items()) if precision_rates else "not probed"
    report = [
        "# EMS against sentence-transformers at equal time",
        "",
        f"CPU: {cpu_model()}. Peer: BertModel {training.shape.describe()} (the EMS model's shape), mean pooling, "
        f"weight decay {weight_decay:g}, {precision} (probes: {speed}); every grid point trained for the whole "
        f"budget, {seconds:.0f} s (the EMS run's training time). Unigram vocabulary and lr of the pick chosen on "
        f"the held-out pairs: {choice.vocab_size:,} pieces (the EMS model's: "
        f"{cfg.vocab_size:,}), lr {choice.lr:g}. Both scored with {args.suite.name} and the held-out pairs, on {on}.",
        "",
        "## EMS against the best peer on each metric (worst case) and the held-out pick",
        "",
        worst_case_table(cases, choice),
        "## EMS against the held-out pick, equal seconds",
        "",
        report_table(ems, peer_row(pick)),
    ]
    if equal_pairs is not None:
        report += ["## EMS against the held-out pick, equal pairs seen (untimed)", "", report_table(ems, equal_pairs)]
    report += [
        f"## The grid ({len(choice.points)} runs, each the whole budget; coordinate search on held-out, pick in bold)",
        "",
        grid_table(choice),
        *(
            f"Note: the {axis} {value} is still at the grid's edge after {args.extend} extensions.\n"
            for axis, flag, value in (
                ("vocabulary", choice.vocab_at_grid_edge, f"{choice.vocab_size:,}"),
                ("lr", choice.lr_at_grid_edge, f"{choice.lr:g}"),
            )
            if flag
        ),
    ]
    groups = None
    if pairs_by_language is not None:
        from eval.language_groups import grouped_results

        ems_rows = grouped_results(out / "eval-ems" / "results.json", pairs_by_language)
        peer_rows = grouped_results(Path(pick.model_dir).parent / "eval" / "results.json", pairs_by_language)
        groups = group_comparison(ems_rows, peer_rows)
        types = {row["task"]: row["type"] for row in ems_rows}
        report += [
            "## By the language's training pairs (DEMO/shards/train; the peer: the pick)",
            "",
            group_table(groups, types),
        ]
    record = {
        "cpu": cpu_model(),
        "ems": ems,
        "peer": peer_row(pick),
        "equal_pairs": equal_pairs,
        "worst_case": cases,
        "peer_shape": asdict(training.shape),
        "peer_training": {**asdict(training), "shape": None, "precision_probes": precision_rates},
        "grid": [asdict(point) for point in choice.points],
        "vocab_size": choice.vocab_size,
        "lr": choice.lr,
        "vocab_at_grid_edge": choice.vocab_at_grid_edge,
        "lr_at_grid_edge": choice.lr_at_grid_edge,
        "ems_vocab_size": cfg.vocab_size,
        "budget_seconds": seconds,
        "suite": str(args.suite),
        "score_languages": score_languages,
        "languages": languages,
        "groups": groups,
    }
    (out / "peer_report.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    text = "\n".join(report)
    (out / "peer_report.md").write_text(text, encoding="utf-8")
    print(text + f"\nwrote {out / 'peer_report.md'}, {out / 'peer_report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
