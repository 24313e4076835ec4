"""Saving a run's checkpoints, every save_every steps, at a wsd run's branch points and at its
end, and stopping a run that diverged without checkpointing anything non-finite (resuming from
them: ems.training.resume).

In: the DeepSpeed engine and the RunState; out: step<N>/ checkpoints under out/checkpoints (the
engine's state, RunState and the batch layout as DeepSpeed's client state, every rank's RNG state,
RUN_CONFIG_FILE), published atomically by ems.training.checkpoint. A model with non-finite weights is
never saved (TrainingDiverged), the checkpoints of a wsd run's branch points (TrainConfig.branch_steps,
and its own decay start) are kept whatever keep_checkpoints says, a failed write is one error naming
the newest intact checkpoint (CheckpointSaveFailed), and a non-finite step moves aside the checkpoint
it started from.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import torch

from ems.artifacts import free_space
from ems.cli import UserError
from ems.losses import OBJECTIVES
from ems.training.checkpoint import TAG_PATTERN, partial_dir, publish, reject, rng_file, rng_state, saved_tags, step_tag
from ems.training.config import TrainConfig
from ems.training.metrics import StepValues
from ems.training.runtime import BatchLayout, any_rank
from ems.training.schedule import wsd_decay_start

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

DIVERGED_EXIT_CODE = 3  # a non-finite loss, gradient norm or model: stopped, nothing non-finite saved
RUN_CONFIG_FILE = "run_config.json"  # in each checkpoint: the config it was trained under, checked on resume
WRITE_FAILURE_WORDS = ("inline_container", "PytorchStreamWriter", "write", "No space left")


class TrainingDiverged(UserError):
    """A non-finite loss, gradient norm or model (outside fp16 loss scaling): the run stops, and
    nothing non-finite is checkpointed."""

    exit_code = DIVERGED_EXIT_CODE


class CheckpointSaveFailed(UserError):
    """Writing a checkpoint failed (a full disk, a quota, an I/O error): the run stops, the partial
    checkpoint is removed and `latest` still names the newest intact one."""


@dataclass
class RunState:
    """Where a run is: what a checkpoint stores besides the DeepSpeed state."""

    step: int = 0
    position: tuple[int, int] = (0, 0)  # (epoch, index of the next global batch)
    max_steps: int = 0  # the schedule's end
    budget_fitted: bool = False  # max_steps was fitted to time_budget_minutes (kept on resume)


def nonfinite_parameters(module: torch.nn.Module) -> list[str]:
    """Names of the parameters holding a NaN or an infinity (one host sync)."""
    names, params = zip(*module.named_parameters())
    flags = torch.stack([~torch.isfinite(p.detach()).all() for p in params]).tolist()
    return [name for name, bad in zip(names, flags) if bad]


def batch_language_pairs(micro_batches: list[dict[str, torch.Tensor]], languages: list[str]) -> str:
    """'de-en 12, fr-en 20': the language pairs of this rank's batch and their counts."""
    counts = Counter()
    for batch in micro_batches:
        counts.update(
            f"{languages[a]}-{languages[b]}" for a, b in zip(batch["src_lang"].tolist(), batch["tgt_lang"].tolist())
        )
    return ", ".join(f"{pair} {n}" for pair, n in sorted(counts.items()))


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:200] if lines else type(error).__name__


def _newest_hint(last_saved: int) -> str:
    last = step_tag(last_saved) if last_saved else "none"
    return f"The last checkpoint: {last}; resume with a lower lr (a changed lr takes effect on resume)"


@dataclass
class Checkpointer:
    """One run's checkpoints (see the module's docstring). `fixed` is what may not change on
    resume besides FIXED_KEYS: {"deepspeed": the optimizer layout of the merged DeepSpeed config,
    "data": the shards' fingerprint[, "teacher": its store's identity]}."""

    directory: Path
    engine: DeepSpeedEngine
    rank: int
    layout: BatchLayout
    cfg: TrainConfig
    fixed: dict
    last_saved: int = 0  # the step of the newest checkpoint this run saved or resumed from

    def branch_points(self, max_steps: int) -> set[int]:
        """The steps whose checkpoints a wsd run keeps for branches: those of TrainConfig.branch_steps
        and its own decay start at its schedule's end `max_steps` (RunState.max_steps: max_steps,
        max_epochs' steps or a time budget's fitted end), the last step on the plateau, from which
        a longer run can go on (TrainConfig.branch_from)."""
        cfg = self.cfg
        if cfg.lr_schedule != "wsd":
            return set()
        return {wsd_decay_start(budget, cfg.decay_fraction) for budget in (*cfg.branch_steps, max_steps)}

    def should_save(self, step: int, max_steps: int) -> bool:
        """Whether to checkpoint at `step` of a schedule ending at `max_steps`."""
        return step % self.cfg.save_every == 0 or step in self.branch_points(max_steps)

    def save(self, state: RunState) -> None:
        """Checkpoint the engine and `state` at its step (every rank; see ems.training.checkpoint)."""
        import torch.distributed as dist

        bad = nonfinite_parameters(self.engine.module)
        if any_rank(self.layout.world_size, self.engine.device, bool(bad))[0]:
            raise TrainingDiverged(
                f"the model has non-finite weights at step {state.step} ({', '.join(bad[:3]) or 'on another rank'}"
                f"{' ...' if len(bad) > 3 else ''}): not checkpointed. {_newest_hint(self.last_saved)}"
            )
        tag = step_tag(state.step)
        staging = partial_dir(self.directory, tag)
        if self.rank == 0 and staging.exists():
            shutil.rmtree(staging)  # left by a crash during an earlier save of this step
        dist.barrier()
        try:
            self._write(state, staging, tag)
        except (OSError, RuntimeError) as error:
            # torch's serializer reports a failed write as a RuntimeError from its zip writer
            if isinstance(error, RuntimeError) and not any(word in str(error) for word in WRITE_FAILURE_WORDS):
                raise
            shutil.rmtree(staging, ignore_errors=True)
            newest = step_tag(self.last_saved) if self.last_saved else "none yet"
            raise CheckpointSaveFailed(
                f"checkpoint save failed at step {state.step} ({_first_line(error)}); {free_space(self.directory)}; "
                f"the newest intact checkpoint is {newest}: free space and rerun to resume from it"
            ) from None
        dist.barrier()
        self.last_saved = state.step

    def _write(self, state: RunState, staging: Path, tag: str) -> None:
        """Every rank's part of checkpoint `tag` into `staging`, then rank 0 publishes it (ems.training.checkpoint)."""
        import torch.distributed as dist

        layout = self.layout
        client_state = {
            "step": state.step,
            "data_position": list(state.position),
            "world_size": layout.world_size,
            "accumulation": layout.accumulation,
            "batch_size": layout.batch_size,
            "global_batch": layout.global_batch,
            "max_steps": state.max_steps,
            "budget_fitted": state.budget_fitted,
        }
        self.engine.save_checkpoint(str(staging), tag=tag, client_state=client_state, save_latest=False)
        (staging / tag).mkdir(parents=True, exist_ok=True)
        rng_file(staging / tag, self.rank).write_text(json.dumps(rng_state()))
        if self.rank == 0:
            run_config = {"config": dataclasses.asdict(self.cfg), "fixed": self.fixed}
            (staging / tag / RUN_CONFIG_FILE).write_text(json.dumps(run_config, indent=1) + "\n")
        dist.barrier()
        if self.rank == 0:
            keep = {step_tag(point) for point in self.branch_points(state.max_steps)}
            publish(self.directory, tag, self.cfg.keep_checkpoints, keep=keep)

    def stop_diverged(
        self,
        step: int,
        values: StepValues,
        micro_batches: list[dict[str, torch.Tensor]],
        position: tuple[int, int],
        languages: list[str],
    ) -> NoReturn:
        """Stop at `step`, whose loss or gradient norm is not finite (on this or another rank), taken
        on the batch at `position` (epoch, index): raises TrainingDiverged with the diagnostic. When
        the step started from a checkpoint, that checkpoint is moved aside first: finite,
        yet its weights gave a non-finite loss or gradient (typically one update too large), so a
        resume from it would diverge again at once."""
        import torch.distributed as dist

        rejected, last_good = "", self.last_saved
        if self.last_saved and self.last_saved == step - 1:  # (a new run's first step starts from none)
            tag = step_tag(self.last_saved)
            if self.rank == 0:
                moved_to = reject(self.directory, tag).name
                rejected = f" Checkpoint {tag}, whose weights this step started from, was moved aside to {moved_to}."
            dist.barrier()
            remaining = saved_tags(self.directory)
            last_good = int(TAG_PATTERN.fullmatch(remaining[-1]).group(1)) if remaining else 0
        losses = values.losses
        where = (
            f"loss {losses['loss']:.4g} ({', '.join(f'{name} {losses[name]:.4g}' for name in OBJECTIVES)}), "
            f"gradient norm {values.grad_norm:.4g}, lr {values.lr:.4g}; rank {self.rank}'s batch: "
            f"{batch_language_pairs(micro_batches, languages)}"
        )
        raise TrainingDiverged(
            f"training diverged at step {step} (epoch {position[0]}, batch {position[1]}): {where}. "
            f"Nothing non-finite was checkpointed.{rejected} {_newest_hint(last_good)}"
        )
