"""Train an EMS model with DeepSpeed, on one process or many, resumable exactly.

    python -m ems.training.train --config configs/train/demo.yaml --set data=SHARDS vocab=VOCAB out=RUN
    deepspeed --num_gpus 4 --module ems.training.train --config ...      # 4 GPU processes through the launcher
    torchrun --nproc_per_node 4 -m ems.training.train --config ...       # the same through torchrun (also on CPU, gloo)

Reads `data_prep binarize` shards; writes, under `out`:
    checkpoints/   step<N>/ checkpoints (DeepSpeed model/optimizer/scheduler/loss-scaler state,
                   step, data position, every rank's RNG states, run_config.json, manifest.json)
                   and `latest`; see ems.training.checkpoint. A rerun with the same `out` resumes from
                   the newest checkpoint that verifies and has finite weights.
    tb/            TensorBoard: loss/{total,xtr,contrastive,distill}, lr, grad_norm, overflow_steps (fp16),
                   tokens_per_s, real_token_ratio (real tokens / the token slots the step computes over:
                   ems.training.batches.real_and_padded_tokens), duplicate_rows (share of rows with an
                   in-batch duplicate), data_wait_fraction, valid/{total,xtr,contrastive,distill}, valid_pair/<l1-l2>,
                   probe/{tatoeba,flores}/{average,<lang>}
    valid_sample.json  the stratified validation sample (ems.training.validator), drawn once per run
    model/         the inference export (`ems.load(out/model)`) with its model card README.md and run_metadata.json
    run_metadata.json  this invocation's code commit, package versions, command line, host, CPU and torch threads, time
    train_config.yaml, train_config_history.yaml, metrics.jsonl (a row per log window: the TensorBoard
                   scalars and its wall `seconds`; a row per validation)

Stopping: SIGUSR1 or SIGTERM (SLURM's pre-emption warning) on any rank, or a file named STOP in
`out`, makes every rank finish the current step, save a checkpoint and exit with status
PREEMPTED_EXIT_CODE (99; slurm/train.sh requeues the job on it). The STOP file is removed once
honoured, so the requeued run trains on. SIGINT (Ctrl-C) stops the same way but exits with
INTERRUPTED_EXIT_CODE (130, not requeued); a second SIGINT raises KeyboardInterrupt at once. The
signals are caught from the module's first line, so one that arrives during start-up also ends in a
checkpoint-and-exit.

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

WSD branches: with lr_schedule=wsd, `branch_steps` keeps the checkpoints a shorter budget T branches
from (step T - round(decay_fraction * T)), and `branch_from` starts a new run from one, which decays to
max_steps = T: the model of a wsd run of T steps, to the bit (ems.training.resume.branch).

Divergence: a non-finite loss or gradient norm stops the run at the step it happens (outside fp16
loss scaling, which skips such steps), with its data position, the batch's language pairs, the
gradient norm and the lr, exit status DIVERGED_EXIT_CODE (3). A model with non-finite weights is
never checkpointed, resume skips a checkpoint whose weights are not finite, and the checkpoint the
diverging step started from is moved aside (rejected-step<N>/), so a resume with a lower lr works.

Checkpoint files are loaded as tensors only (ems.training.checkpoint.load_tensor_file): a file naming any
other Python object is refused, and nothing in it runs. User errors (bad values, missing files,
unusable checkpoints) are one line `error: ...` and status 2 (ems.cli; --debug for the traceback).

This module is the command line and the training loop; the loop's components (config, setup,
runtime, schedule, stopping, saving and resume, metrics, validator, probe) are the modules
of ems.training.
"""

from __future__ import annotations

from ems.stop_signals import hold_stop_signals

if __name__ == "__main__":
    hold_stop_signals()  # first, before the seconds of imports below (see ems.stop_signals)

import argparse
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ems.artifacts import staged_directory
from ems.cli import add_debug_option, run_main
from ems.configs import load_config
from ems.encoder import export_encoder
from ems.run_metadata import RUN_METADATA_FILE
from ems.training.batches import real_and_padded_tokens, to_device
from ems.training.config import TrainConfig, with_resolved_paths
from ems.training.metrics import LOSSES, StepValues, show_losses
from ems.training.model_card import model_facts, write_model_card
from ems.training.runtime import any_rank, init_distributed, world_of_one_unless_launched
from ems.training.setup import Run, check_inputs, run_directory_lock, setup
from ems.training.stopping import Stop, StopRequest


@dataclass(frozen=True)
class TrainResult:
    """What one invocation of train() ended with.

    steps: the step the run reached (counted from the run's start, resumed segments included).
    max_steps: the schedule's end; a time budget's fitted end once fitted (time_budget_minutes).
    history: this invocation's records in order, each a dict with its "step": a row per log window
        (metrics.jsonl's: losses, lr, throughput, wall seconds), one per validation (valid_*) and one per probe
        (probe_*), those of the model at step 0 (a fresh run) and at the end (unless pre-empted) included.
    model_dir: the exported model (`ems.load(model_dir)`); None when pre-empted.
    preempted: whether a stop signal or the STOP file ended it (checkpointed, no export: rerun to resume).
    exit_code: the command line's status: 0, or when pre-empted PREEMPTED_EXIT_CODE (INTERRUPTED_EXIT_CODE
        after a SIGINT).
    """

    steps: int
    max_steps: int
    history: list[dict]
    model_dir: str | None
    preempted: bool
    exit_code: int = 0


def _module_grad_norm(module: torch.nn.Module) -> torch.Tensor | None:
    """2-norm of the gradients held in the parameters' .grad, left on the device (None without any)."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads) if grads else None


STEP_KEYS = (*LOSSES, "duplicate_rows")  # the values a step reads back, in PendingStep.sums' order


@dataclass
class PendingStep:
    """A training step's values on their way to the host: `sums` (len(STEP_KEYS) + 1,) float64, the mean of
    each STEP_KEYS value over the micro-batches, then the gradient norm (nan when there is none), copied
    asynchronously into pinned memory on a GPU; `ready` the CUDA event after that copy (None on CPU,
    where the copy is synchronous). `values` waits for it: the loop calls it once the next step is queued,
    so the host never waits for the device inside a step."""

    sums: torch.Tensor
    ready: torch.cuda.Event | None
    lr: float
    real_tokens: int
    token_slots: int

    def values(self) -> StepValues:
        if self.ready is not None:
            self.ready.synchronize()
        *sums, grad_norm = self.sums.tolist()
        named = dict(zip(STEP_KEYS, sums, strict=True))
        duplicate_rows = named.pop("duplicate_rows")
        return StepValues(named, grad_norm, self.lr, duplicate_rows, self.real_tokens, self.token_slots)


def train_step(run: Run, micro_batches: list[dict]) -> PendingStep:
    """Forward, backward and optimizer step over one global batch (this rank's micro-batches); returns the
    step's values still on their way to the host (PendingStep): nothing here reads a device value."""
    engine, accumulation = run.engine, run.layout.accumulation
    lr = float(engine.get_lr()[0])
    unclipped_norm = None
    step_sums = []  # per micro-batch: its values / accumulation, float64 on the device
    real_tokens = token_slots = 0
    for micro_batch in micro_batches:
        real, slots = real_and_padded_tokens(micro_batch)
        real_tokens += real
        token_slots += slots
        micro_batch = to_device(micro_batch, engine.device, non_blocking=True)
        with run.autocast:
            out = run.forward(**micro_batch)
        engine.backward(out["loss"])
        if engine.is_gradient_accumulation_boundary():
            unclipped_norm = (
                torch.nn.utils.clip_grad_norm_(engine.module.parameters(), run.clip_norm, foreach=True)
                if run.clip_norm
                else _module_grad_norm(engine.module)
            )
        engine.step()
        step_sums.append(torch.stack([out[key].detach().double() for key in STEP_KEYS]) / accumulation)
    # DeepSpeed keeps the norm it clipped with, except under ZeRO 0 in fp32 (where the loop clips, or the
    # gradients are whole in .grad, so the norm taken before the step is the same value)
    grad_norm = engine.get_global_grad_norm()
    if grad_norm is None:
        grad_norm = torch.tensor(math.nan) if unclipped_norm is None else unclipped_norm
    grad_norm = torch.as_tensor(grad_norm, dtype=torch.float64).to(engine.device).reshape(1)
    sums = torch.cat([torch.stack(step_sums).sum(dim=0), grad_norm])
    ready = None
    if sums.device.type == "cuda":
        host = torch.empty(sums.shape, dtype=sums.dtype, pin_memory=True)
        host.copy_(sums, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        sums = host
    return PendingStep(sums, ready, lr, real_tokens, token_slots)


def diverged(run: Run, values: StepValues) -> bool:
    """Whether a step's loss or gradient norm is not finite on any rank. Never under fp16: DeepSpeed's
    loss scaler skips such a step (counted as overflow_steps)."""
    return not run.engine.fp16_enabled() and any_rank(run.layout.world_size, run.engine.device, not values.finite)[0]


def evaluate(run: Run, step: int) -> list[dict]:
    """Validation and the probe of the model at `step` (a run's start and end): the records made."""
    return [record for record in (run.validator.run(step), run.probe.run(step)) if record]


def finish(run: Run, history: list[dict], preempted: bool) -> TrainResult:
    """End of an invocation. Pre-empted: checkpoint and report (train() exits 99 to be requeued).
    Otherwise: validate, probe, checkpoint and export the model with its card."""
    import torch.distributed as dist

    state = run.state
    if preempted:
        if state.step != run.checkpointer.last_saved:
            run.checkpointer.save(state)
        run.stopping.honoured(state.step)
        return TrainResult(
            state.step, state.max_steps, history, None, preempted=True, exit_code=run.stopping.request.exit_code
        )
    history += evaluate(run, state.step)
    if state.step != run.checkpointer.last_saved:
        run.checkpointer.save(state)
    model_dir = run.out / "model"
    if run.rank == 0:
        with staged_directory(model_dir, "model export", replace=True) as staging:  # whole or absent
            export_encoder(run.engine.module.encoder, run.tokenizer, staging)
            shutil.copyfile(run.out / RUN_METADATA_FILE, staging / RUN_METADATA_FILE)
            write_model_card(staging, model_facts(staging, run.out, steps=state.step))
    dist.barrier()
    return TrainResult(state.step, state.max_steps, history, model_dir=str(model_dir), preempted=False)


def train_loop(run: Run) -> TrainResult:
    """Train from run.state to the end of the schedule (or a stop), then finish; see train(). A step's
    values are read (logged, checked for divergence) after the next step is queued, or at once where the
    loop logs, saves, evaluates or ends after it."""
    from tqdm import tqdm

    state, started, stop = run.state, time.time(), None
    history = evaluate(run, 0) if state.step == 0 else []
    unread = None  # (PendingStep, its micro-batches, data position, step) of the last step, not yet read

    def read(step: tuple) -> None:
        pending, micro_batches, position, step_number = step
        values = pending.values()
        run.metrics.add(values, run.batches.wait_seconds)
        if diverged(run, values):
            run.checkpointer.stop_diverged(step_number, values, micro_batches, position, run.tokenizer.languages)

    # closed on any exit, so that an error's one line is not written after a half-drawn bar
    with tqdm(
        total=state.max_steps, initial=state.step, disable=run.rank != 0, desc="train", unit="step", mininterval=2.0
    ) as bar:
        while state.step < run.stopping.last_step(state.max_steps):
            if stop := run.stopping.requested(state.step, started):
                break
            (epoch, batch), micro_batches = next(run.batches)
            pending = train_step(run, micro_batches)
            if unread is not None:
                read(unread)
            state.step, state.position = state.step + 1, (epoch, batch + 1)
            unread = (pending, micro_batches, (epoch, batch), state.step)
            bar.update(1)
            if (fitted := run.budget.fitted_end(state.step, state.max_steps, state.budget_fitted, started)) is not None:
                state.max_steps = run.schedule.max_steps = bar.total = fitted
                state.budget_fitted = True
            last = run.stopping.last_step(state.max_steps)
            log, save = (
                run.metrics.should_log(state.step, last),
                run.checkpointer.should_save(state.step, state.max_steps),
            )
            evaluations = [e for e in (run.validator, run.probe) if e.should_run(state.step, last)]
            if log or save or evaluations or state.step >= last:
                read(unread)
                unread = None
            if log:
                history.append(logged := run.metrics.log(state.step, epoch))
                show_losses(bar, logged, run.engine.module.cfg)
            if save:
                run.checkpointer.save(state)
            for evaluation in evaluations:  # not at the last step: finish runs them
                if record := evaluation.run(state.step):
                    history.append(record)
        if unread is not None:
            read(unread)
    return finish(run, history, preempted=stop is Stop.PREEMPTED)


def train(cfg: TrainConfig) -> TrainResult:
    """Run (or resume) training to the schedule's end or a stop; see TrainResult. The stop signals are caught
    from the start, set-up included."""
    check_inputs(cfg)
    cfg = with_resolved_paths(cfg)  # stored so: a resume or branch compares the files, not their spelling
    with world_of_one_unless_launched(), StopRequest() as stop_request:
        with run_directory_lock(Path(cfg.out), init_distributed):  # the lock before torch.distributed starts
            run = setup(cfg, stop_request)
            try:
                return train_loop(run)
            finally:
                run.close()


def main(argv: list[str]) -> int:
    """The command line: 0 trained, PREEMPTED_EXIT_CODE stopped to be requeued, INTERRUPTED_EXIT_CODE
    stopped by a SIGINT (user errors: ems.cli.run_main's one line and status 2; DIVERGED_EXIT_CODE for a
    non-finite loss)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML file of TrainConfig keys")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override config keys")
    parser.add_argument(
        "--local_rank", type=int, default=None, help=argparse.SUPPRESS
    )  # the deepspeed launcher adds it
    add_debug_option(parser)
    args = parser.parse_args(argv)
    cfg = load_config(TrainConfig, args.config, args.set)
    for key in ("data", "vocab"):
        if not getattr(cfg, key):
            parser.error(f"{key} is not set (in the config or with --set {key}=PATH)")
    result = train(cfg)
    if result.preempted:
        return result.exit_code
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"trained {result.steps} steps; model: {result.model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
