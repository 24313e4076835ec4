"""The peer of the peer benchmark (benchmarks/peer/sentence_transformers.py), built and trained as
sentence-transformers' documentation teaches: its shape and training settings (read from the EMS
model's), its Unigram tokenizer, a run of SentenceTransformerTrainer on a linear schedule that a time
budget re-fits, and the probes that time a vocabulary and a precision. A helper of that benchmark: no
command line.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PROBE_STEPS, PROBE_LR = 40, 1e-3
BATCH_SIZE = 256
PRECISIONS = ("fp32", "bf16")

WARMUP_RATIO = 0.1  # a share, not a step count: the same schedule shape at any length
REFIT_AT = 0.2  # share of the budget after which the schedule's end is re-fitted to the run's own rate
STEP_CAP = 1.5  # the trainer's loop bound, x the first estimate: room for a run faster than its probe


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
    """The peer's shape from an EMS model config (ems.model_config.EMSConfig, `ems.load(DIR).model.cfg`)."""
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
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertModel

    torch.manual_seed(seed)
    BertModel(shape.bert_config(len(tokenizer))).save_pretrained(out)
    tokenizer.save_pretrained(out)
    transformer = Transformer(str(out), max_seq_length=shape.max_len)
    return SentenceTransformer(modules=[transformer, Pooling(shape.hidden_size, "mean")], device="cpu")


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
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers
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
