"""The peer benchmark: sentence-transformers' stock trainer against the EMS trainer, at equal time.

    python benchmarks/peer_sentence_transformers.py --demo runs/demo --out runs/peer
    python benchmarks/peer_sentence_transformers.py ... --lr-grid 3e-4 1e-3 3e-3 --grid-fraction 0.25 --seed 0

What a new user would try instead of this project, built the way its documentation teaches, on the
same training pairs (`DEMO/corpus/train`, what `ems-demo` wrote), on the same machine, for the same
wall-clock training time as the demo's EMS run (its "train" stage in `DEMO/demo_stages.json`: the
whole `ems.train` call, DeepSpeed set-up, validations and learning-curve probes included):

- a from-scratch `transformers.BertModel` of the EMS `tiny` shape (d 128, 2 layers, 4 heads, ffn
  512, mean pooling, 64 tokens at most);
- a Unigram tokenizer (`tokenizers`: NFKC + lowercase, Metaspace) trained on the same raw text, of
  the EMS model's vocabulary size unless `--vocab-size` says otherwise (the demo's: 32k);
- `MultipleNegativesSymmetricRankingLoss` (scale 10 = the EMS temperature 0.1),
  `BatchSamplers.NO_DUPLICATES`, batch 256, linear warm-up (150 steps) and decay, fp32,
  `SentenceTransformerTrainer`.

The peer's learning rate is chosen from `--lr-grid` on the held-out pairs (`DEMO/corpus/heldout`)
with shorter runs (`--grid-fraction` of the budget each, the same schedule shape); Tatoeba and
FLORES-200 are never used to choose. A choice at the grid's edge is printed and recorded
(`lr_at_grid_edge`): the grid should then be extended. The chosen lr then trains for the whole
budget: its step count is first the budget times the steady steps/s of a 40-step probe (its first
10 steps, start-up included, not counted), then re-fitted once a fifth of the budget has passed,
from the run's own steady rate so far (`refit_end`): the linear decay is stretched or shortened to
end at the budget, as the EMS trainer's time budget does (ems.training.schedule.TimeBudget). The
probe alone had left 11% of the budget unused (the run went faster than its probe). A callback stops
it at the budget whatever happens, so it never trains longer than the EMS run did. Both models are
then scored the same way (`eval.run_all` with the demo's suite: Tatoeba, FLORES-200 devtest, and the
held-out pairs), and one table compares steps, steps/s, real tokens/s and the P@1 averages, EMS /
peer as ratios.
Writes OUT/peer_report.json and OUT/peer_report.md; the peer's model is OUT/peer/model (`st:DIR`).
One run each: quiet machine, nothing else running (two heavy jobs on 2 cores slow each other >2x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from ems.cli import UserError, add_debug_option, run_main  # noqa: E402
from ems.corpus import list_parallel, read_parallel  # noqa: E402

SHAPE = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)
MAX_TOKENS = 64
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


REFIT_AT = 0.2  # share of the budget after which the schedule's end is re-fitted to the run's own rate
STEP_CAP = 1.5  # the trainer's loop bound, x the first estimate: room for a run faster than its probe


@dataclass
class LinearDecay:
    """lr factor: linear warm-up over `warmup` steps, then linear decay to 0 at `end`; the same
    factors as transformers' "linear" schedule, but `end` is mutable (re-fitted mid-run)."""

    warmup: int
    end: int

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return step / max(1, self.warmup)
        return max(0.0, (self.end - step) / max(1, self.end - self.warmup))


def refit_end(step: int, elapsed: float, steady_rate: float, seconds: float, cap: int) -> int:
    """The step at which a run at `step`, `elapsed` seconds into a `seconds` budget, running at
    `steady_rate` steps/s, uses up its budget; at least step + 1, at most `cap`."""
    return max(step + 1, min(cap, step + int(steady_rate * max(0.0, seconds - elapsed))))


@dataclass
class PeerRun:
    lr: float
    steps: int
    seconds: float
    pairs: int
    real_tokens: int  # non-pad tokens of both sides over every pair trained on ([CLS]/[SEP] included)
    model_dir: str


def read_pairs(root: Path) -> list[tuple[str, str]]:
    """Every (l1, l2) sentence pair of a corpus root (`<root>/<l1>-<l2>/<name>.<l1|l2>`)."""
    pairs = [pair for files in list_parallel(root) for pair in read_parallel(files.path_l1, files.path_l2)]
    if not pairs:
        raise UserError(f"no sentence pairs under {root}")
    return pairs


def train_tokenizer(pairs: list[tuple[str, str]], vocab_size: int, out: Path):
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
        model_max_length=MAX_TOKENS,
    )
    fast.save_pretrained(out)
    return fast


def initial_model(tokenizer, out: Path, seed: int):
    """A from-scratch SentenceTransformer: BertModel of the EMS tiny shape + mean pooling, saved in out."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=MAX_TOKENS, **SHAPE)
    BertModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    transformer = models.Transformer(str(out), max_seq_length=MAX_TOKENS)
    return SentenceTransformer(modules=[transformer, models.Pooling(SHAPE["hidden_size"], "mean")], device="cpu")


def count_tokens(tokenizer, pairs: list[tuple[str, str]]) -> float:
    """Mean real tokens per pair (both sides, at most MAX_TOKENS each) under the peer's tokenizer."""
    sample = pairs[:: max(1, len(pairs) // 20_000)]
    lengths = [min(len(ids), MAX_TOKENS) for side in zip(*sample) for ids in tokenizer(list(side))["input_ids"]]
    return 2 * statistics.fmean(lengths)


def train_peer(
    pairs,
    tokenizer,
    out: Path,
    lr: float,
    max_steps: int,
    seconds: float | None,
    seed: int,
    batch_size: int = 256,
    warmup_steps: int = 150,
    settle_steps: int = 10,
) -> tuple[int, float, float]:
    """Train a fresh peer (saved in out/model) on a linear schedule ending at max_steps. With a budget
    of `seconds`, the schedule's end is re-fitted once REFIT_AT of it has passed (refit_end) and
    training stops at that end or at the budget, whichever comes first. Returns (steps taken,
    training seconds, steps/s after the first `settle_steps`)."""
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
    from sentence_transformers.training_args import BatchSamplers
    from transformers import TrainerCallback

    schedule = LinearDecay(warmup_steps, max_steps)
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

    model = initial_model(tokenizer, out / "init", seed)
    data = Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [b for _, b in pairs]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"),
        per_device_train_batch_size=batch_size,
        learning_rate=lr,
        max_steps=cap,
        weight_decay=0.01,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        dataloader_drop_last=True,
        save_strategy="no",
        logging_steps=50,
        report_to="none",
        seed=seed,
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


def ems_budget(demo: Path) -> dict:
    """The demo's EMS training: seconds and steps (demo_stages.json), mean real tokens/s (metrics.jsonl)."""
    from ems.demo import STAGES_FILE

    stages_file, metrics_file = demo / STAGES_FILE, demo / "run" / "metrics.jsonl"
    for path in (stages_file, metrics_file, demo / "run" / "model"):
        if not path.exists():
            raise UserError(f"{path} not found: --demo must be the directory of a finished ems-demo run")
    stages = json.loads(stages_file.read_text())
    rates = [
        line["tokens_per_s"]
        for line in map(json.loads, metrics_file.read_text().splitlines())
        if "tokens_per_s" in line
    ]
    return {
        "seconds": float(stages["seconds"]["train"]),
        "steps": int(stages["steps"]),
        "tokens_per_s": statistics.fmean(rates) if rates else None,
    }


def score(encoder, prepared: Path, data_dir: Path, out: Path, languages: list[str]) -> dict[str, float]:
    """Average P@1 (both directions) on Tatoeba, FLORES-200 devtest and the held-out pairs."""
    from ems.demo import DEMO_SUITE
    from eval.run_all import run_all

    results = run_all(
        encoder,
        data_dir,
        heldout_dir=prepared / "corpus" / "heldout",
        out_dir=out,
        languages=languages,
        suite_path=DEMO_SUITE,
        progress=False,
        print_tables=False,
    )
    names = {"Tatoeba": "tatoeba", "FLORES-200": "flores200", "held-out": "heldout"}
    scores = {}
    for column, task in names.items():
        result = results.get(task)
        if result is None or not result.ran:
            raise UserError(f"{task} could not be scored ({result.error if result else 'not in the suite'}); see {out}")
        scores[column] = float(result.to_dict()["average"]["mean"])
    return scores


def heldout_score(model_dir: Path, prepared: Path, languages: list[str]) -> float:
    from ems.encoder_kinds import load_encoder
    from eval.evaluators.heldout import evaluate_heldout

    result = evaluate_heldout(
        load_encoder(f"st:{model_dir}"), prepared / "corpus" / "heldout", languages, progress=False
    )
    return float(result["average"]["mean"])


def ems_vocab_size(demo: Path) -> int:
    """The EMS model's vocabulary size (its config.json), pad, unk and <2xx> tokens included."""
    config = demo / "run" / "model" / "config.json"
    if not config.is_file():
        raise UserError(f"{config} not found: give --vocab-size, or --demo a finished ems-demo run")
    return json.loads(config.read_text())["vocab_size"]


def languages_of(prepared: Path) -> list[str]:
    return sorted(
        {lang for files in list_parallel(prepared / "corpus" / "train") for lang in (files.l1, files.l2)} - {"en"}
    )


def report_table(ems: dict, peer: dict) -> str:
    rows = [
        ("steps", "steps", "{:.0f}"),
        ("training seconds", "seconds", "{:.0f}"),
        ("steps/s", "steps_per_s", "{:.2f}"),
        ("real tokens/s", "tokens_per_s", "{:,.0f}"),
        ("Tatoeba P@1", "Tatoeba", "{:.1f}"),
        ("FLORES-200 P@1", "FLORES-200", "{:.1f}"),
        ("held-out P@1", "held-out", "{:.1f}"),
    ]
    lines = ["| | EMS | sentence-transformers | EMS / peer |", "|:--|--:|--:|--:|"]
    for label, key, fmt in rows:
        a, b = ems.get(key), peer.get(key)
        ratio = f"{a / b:.2f}" if a is not None and b else "–"
        lines.append(
            f"| {label} | {fmt.format(a) if a is not None else '–'} | "
            f"{fmt.format(b) if b is not None else '–'} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--demo", type=Path, required=True, help="a finished ems-demo directory (corpus/, run/, demo_stages.json)"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/peer"))
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("EMS_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    )
    parser.add_argument("--lr-grid", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3])
    parser.add_argument("--grid-fraction", type=float, default=0.25, help="each grid run's share of the time budget")
    parser.add_argument("--seconds", type=float, help="the time budget (default: the EMS run's training seconds)")
    parser.add_argument("--vocab-size", type=int, help="the peer's tokenizer size (default: the EMS model's)")
    parser.add_argument("--seed", type=int, default=0)
    add_debug_option(parser)
    args = parser.parse_args(argv)
    if not 0 < args.grid_fraction <= 1:
        raise UserError(f"--grid-fraction must be in (0, 1], got {args.grid_fraction}")
    budget = ems_budget(args.demo)
    if not (args.data_dir / "tatoeba").is_dir():
        raise UserError(f"{args.data_dir} holds no tatoeba/: point --data-dir (or EMS_DATA_DIR) at the evaluation data")
    seconds = args.seconds or budget["seconds"]
    languages = languages_of(args.demo)
    pairs = read_pairs(args.demo / "corpus" / "train")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"{len(pairs):,} training pairs, {', '.join(languages)}; budget {seconds:.0f} s (the EMS run's training time)",
        flush=True,
    )
    vocab_size = args.vocab_size or ems_vocab_size(args.demo)
    tokenizer = train_tokenizer(pairs, vocab_size, out / "tokenizer")
    tokens_per_pair = count_tokens(tokenizer, pairs)

    probe_steps, probe_seconds, rate = train_peer(pairs, tokenizer, out / "probe", 1e-3, 40, None, args.seed)
    startup = max(0.0, probe_seconds - probe_steps / rate)  # the trainer's fixed cost, beyond the steps
    print(
        f"probe: {probe_steps} steps in {probe_seconds:.1f} s ({rate:.2f} steps/s after the first 10; "
        f"{startup:.1f} s of start-up)",
        flush=True,
    )

    def steps_in(budget_seconds: float) -> int:
        return max(1, int(rate * (budget_seconds - startup)))

    grid = {}
    for lr in args.lr_grid:
        steps, taken, _ = train_peer(
            pairs,
            tokenizer,
            out / f"grid-{lr:g}",
            lr,
            steps_in(seconds * args.grid_fraction),
            seconds * args.grid_fraction,
            args.seed,
        )
        grid[lr] = heldout_score(out / f"grid-{lr:g}" / "model", args.demo, languages)
        print(f"grid lr {lr:g}: {steps} steps in {taken:.0f} s, held-out P@1 {grid[lr]:.1f}", flush=True)
    lr = max(grid, key=grid.get)
    at_edge = len(grid) > 1 and lr in (min(grid), max(grid))
    if at_edge:
        print(f"lr {lr:g} is at the grid's edge: extend --lr-grid beyond it", flush=True)

    steps, taken, _ = train_peer(pairs, tokenizer, out / "peer", lr, steps_in(seconds), seconds, args.seed)
    run = PeerRun(
        lr=lr,
        steps=steps,
        seconds=taken,
        pairs=steps * 256,
        real_tokens=round(steps * 256 * tokens_per_pair),
        model_dir=str(out / "peer" / "model"),
    )
    print(f"peer: lr {lr:g}, {steps} steps in {taken:.0f} s", flush=True)

    from ems.encoder import load
    from ems.encoder_kinds import load_encoder

    peer = {
        "steps": steps,
        "seconds": taken,
        "steps_per_s": steps / taken,
        "tokens_per_s": run.real_tokens / taken,
        **score(load_encoder(f"st:{run.model_dir}"), args.demo, args.data_dir, out / "eval-peer", languages),
    }
    ems = {
        "steps": budget["steps"],
        "seconds": budget["seconds"],
        "steps_per_s": budget["steps"] / budget["seconds"],
        "tokens_per_s": budget["tokens_per_s"],
        **score(load(args.demo / "run" / "model"), args.demo, args.data_dir, out / "eval-ems", languages),
    }
    table = report_table(ems, peer)
    (out / "peer_report.json").write_text(
        json.dumps(
            {
                "ems": ems,
                "peer": peer,
                "peer_run": asdict(run),
                "lr_grid_heldout": grid,
                "lr_at_grid_edge": at_edge,
                "vocab_size": vocab_size,
                "budget_seconds": seconds,
                "languages": languages,
            },
            indent=2,
        )
        + "\n"
    )
    (out / "peer_report.md").write_text(table)
    print(table + f"\nwrote {out / 'peer_report.md'}, {out / 'peer_report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
