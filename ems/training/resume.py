"""Resuming a run from its newest usable checkpoint, exactly, or elastically on another layout.

A rerun with the same `out` loads the newest checkpoint that verifies and has finite weights with
the config given applied: a changed lr, warm-up, schedule end or weight decay takes effect from
the resume step; a change of what fixes the model, the data order or the optimizer layout
(FIXED_KEYS, Checkpointer.fixed) is refused (ResumeConfigError). The process count, batch_size
and accumulation may change: with the same global batch the run replays the same samples in the
same order; with another it goes on after the pairs consumed in the epoch (resumed_position).
ZeRO optimizer partitions saved by another number of ranks go through DeepSpeed's universal
checkpoint (load_checkpoint).

A wsd run's branch (TrainConfig.branch_from, a fresh `out` only) starts from a plateau checkpoint
of another run the same way, its whole training state restored, and goes on to its own max_steps T:
the model of a wsd run of max_steps T from the start, to the bit (same layout). From a checkpoint at
T's decay start T - round(decay_fraction * T) it only decays (a shorter budget of a long run); from
an earlier one it holds the peak lr up to there first (a longer run going on from a shorter one's
plateau). It is refused (BranchError) unless the checkpoint's step is at most T's decay start, its
run was on its plateau there, and it was trained under this config but for BRANCH_FREE_KEYS. A plain
resume of a wsd run past its decay start may not change that decay (refuse_changed_decay): a longer
budget of a finished run is a branch from its last plateau checkpoint. The configs' PATH_KEYS are
compared as the files they name (runs store them resolved: ems.training.config.with_resolved_paths).

In: the run's Checkpointer (its engine, directory, config and layout) and lr schedule; out:
the RunState to go on from, the config changes, and train_config.yaml / CONFIG_HISTORY_FILE.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import yaml

from ems.artifacts import write_text
from ems.cli import UserError
from ems.configs import dump_config, load_yaml
from ems.training.checkpoint import (
    LATEST,
    TAG_PATTERN,
    load_rng_state,
    no_usable_checkpoint,
    resumable_tags,
    rng_file,
    saved_tags,
    tensor_files_only,
    to_universal,
    verify,
    zero_partitions,
)
from ems.training.config import TrainConfig, with_resolved_paths
from ems.training.runtime import BatchLayout, any_rank, seed_rngs
from ems.training.saving import RUN_CONFIG_FILE, Checkpointer, RunState, nonfinite_parameters
from ems.training.schedule import Schedule, WSDSchedule, effective_schedule, wsd_decay_start

CONFIG_HISTORY_FILE = "train_config_history.yaml"
# How TrainConfig keys may differ when a run resumes (config_changes, apply_schedule_on_resume).
# lr, warmup_steps, weight_decay and these, the schedule's end, take effect from the resume step
# (a changed end also drops a time-budget fit):
SCHEDULE_END_KEYS = ("max_steps", "max_epochs", "time_budget_minutes", "budget_probe_steps")
# These fix the model, the data order or the optimizer's layout, so a change is refused, as is a
# change of the merged DeepSpeed config or of the shards' content (Checkpointer.fixed). All other keys
# (paths, logging, saving, validation, probes, when to stop) may change. Every change is recorded.
# The process count, batch_size and accumulation may change (elastic resume, see resumed_position).
FIXED_KEYS = (
    "model",
    "model_overrides",
    "global_negatives",
    "pair_sampling_temperature",
    "pair_sampling_floor",
    "bucket_batches",
    "one_pair_batches",
    "seed",
    "spread_duplicates",
    "padding_budget",
    "autocast",
    "teacher",
    "adam_beta2",
    "adam_eps",
)
# The keys in which a branch's config (branch_from) may differ from its checkpoint's: the schedule's
# end, the run directory, the branch budgets and when to log, save and stop. None changes the weights.
BRANCH_FREE_KEYS = (
    *SCHEDULE_END_KEYS,
    "out",
    "branch_from",
    "branch_steps",
    "stop_at_step",
    "max_minutes",
    "log_every",
    "save_every",
    "keep_checkpoints",
)


class ResumeConfigError(UserError):
    """A resumed run's config changes a setting that is fixed for the life of a run."""


class BranchError(UserError):
    """branch_from names a checkpoint that this run cannot branch from (see the module's docstring)."""


def _layout(world_size: int, accumulation: int | None, batch_size: int | None) -> str:
    processes = f"{world_size} process{'' if world_size == 1 else 'es'}"
    return f"{processes} x {accumulation or '?'} accumulation x {batch_size or '?'} pairs"


ABSENT = "(not a setting of that version)"  # _differences: a key one of the two configs does not have
# Settings added after checkpoints were first written whose default trains as before they existed: a stored
# config without one was trained under that default (TrainConfig's), which _differences reads in its place
ADDED_KEYS = ("pair_sampling_floor",)


def _describe(changes: dict[str, list]) -> str:
    return ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())


def _as_json(value):
    return json.loads(json.dumps(value))


def resumed_position(client_state: dict, layout: BatchLayout, rank: int) -> tuple[int, int]:
    """The data position to go on from. The batch order depends only on the global batch, so with
    the same global batch it is the saved position, whatever the process count, batch_size and
    accumulation (elastic resume replays the same samples). With another global batch it is the
    batch of the new order after the pairs consumed so far in the epoch, and the run says so."""
    epoch, batch = client_state["data_position"]
    old_global, new_layout = client_state["global_batch"], (layout.world_size, layout.accumulation, layout.batch_size)
    old_layout = (client_state["world_size"], client_state.get("accumulation"), client_state.get("batch_size"))
    if old_global == layout.global_batch:
        if old_layout != new_layout and rank == 0:
            print(
                f"elastic resume: {_layout(*old_layout)} -> {_layout(*new_layout)}, the same global batch of "
                f"{old_global} pairs: the same samples in the same order",
                flush=True,
            )
        return epoch, batch
    consumed = batch * old_global
    new_batch = consumed // layout.global_batch
    if rank == 0:
        print(
            f"the global batch changed from {old_global} to {layout.global_batch} pairs ({_layout(*old_layout)} -> "
            f"{_layout(*new_layout)}): going on after the {consumed:,} pairs consumed in epoch {epoch}, at batch "
            f"{new_batch} of the new order; the order is not the old one, so up to one bucketing window of "
            f"pairs around this point is seen twice or not at all this epoch",
            flush=True,
        )
    return epoch, new_batch


def load_checkpoint(checkpointer: Checkpointer, tag: str, directory: Path | None = None) -> tuple[str | None, dict]:
    """engine.load_checkpoint of `tag` in `directory` (default: the run's own). A checkpoint whose
    optimizer state is split over another number of ranks (ZeRO 1/2, bf16) goes through
    DeepSpeed's universal format first (ems.training.checkpoint.to_universal, rank 0, into the run's own
    checkpoint directory, deleted once loaded), which DeepSpeed re-partitions."""
    import torch.distributed as dist

    directory = directory or checkpointer.directory
    rank, engine = checkpointer.rank, checkpointer.engine
    world_size = checkpointer.layout.world_size
    partitions = zero_partitions(directory / tag)
    if not partitions or partitions == world_size:
        return engine.load_checkpoint(str(directory), tag=tag)
    universal = checkpointer.directory / f"universal-{tag}"  # not a step tag: never listed as a checkpoint
    if rank == 0:
        print(
            f"{tag} holds optimizer partitions of {partitions} ranks; this run has {world_size}: converting it to "
            f"DeepSpeed's universal checkpoint in {universal}",
            flush=True,
        )
        shutil.rmtree(universal, ignore_errors=True)
        universal.mkdir(parents=True)
        to_universal(directory / tag, universal / tag)
    dist.barrier()
    config = engine._config  # DeepSpeed reads this flag when loading, not only at initialize
    config.load_universal_checkpoint = True
    try:
        with tensor_files_only():
            load_path, client_state = engine.load_checkpoint(str(universal), tag=tag)
    finally:
        config.load_universal_checkpoint = False
    dist.barrier()
    if rank == 0:
        shutil.rmtree(universal)
    return load_path and f"{directory / tag} (through its universal copy)", client_state


def _differences(checkpointer: Checkpointer, tag_dir: Path) -> dict[str, list] | None:
    """{key: [old, new]} between the config checkpoint `tag_dir` was trained under (its
    RUN_CONFIG_FILE, with Checkpointer.fixed) and this run's; None when it has no RUN_CONFIG_FILE.
    A key only one of them has (a config another version of this code wrote: a setting renamed, added
    or removed since) is a change from or to ABSENT, so a renamed setting that fixes the run is refused
    rather than left unchecked, except an ADDED_KEYS setting absent from the stored config, which reads as its
    default; the PATH_KEYS are stored resolved and compared with this run's,
    resolved (with_resolved_paths)."""
    path = tag_dir / RUN_CONFIG_FILE
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.name in ADDED_KEYS}
    # (fixed's "data", the shards' fingerprint, stands for their path)
    saved = {**_as_json(defaults), **stored["config"], **stored["fixed"]}
    current = _as_json({**dataclasses.asdict(with_resolved_paths(checkpointer.cfg)), **checkpointer.fixed})
    return {
        key: [saved.get(key, ABSENT), current.get(key, ABSENT)]
        for key in [*current, *(key for key in saved if key not in current)]
        if saved.get(key, ABSENT) != current.get(key, ABSENT)
    }


def config_changes(checkpointer: Checkpointer, tag_dir: Path) -> dict[str, list]:
    """{key: [old, new]} between the config checkpoint `tag_dir` was trained under (its
    RUN_CONFIG_FILE) and this run's; ResumeConfigError for a change of a FIXED_KEYS key or of
    Checkpointer.fixed (the merged DeepSpeed config, the shards' content)."""
    changes = _differences(checkpointer, tag_dir)
    if changes is None:
        raise ResumeConfigError(
            f"{tag_dir} has no {RUN_CONFIG_FILE}, so its config cannot be checked: it is no checkpoint this code "
            "wrote; train into a new out= directory"
        )
    refused = {key: change for key, change in changes.items() if key in FIXED_KEYS or key in checkpointer.fixed}
    if refused:
        raise ResumeConfigError(
            f"{checkpointer.directory.parent} was trained to {tag_dir.name} with other settings that fix its model, "
            "data order or "
            f"optimizer layout: {_describe(refused)}. Resume with the old values, or train into a new out= "
            "directory (lr, the schedule, weight decay, logging, saving, validation and stopping may change)"
        )
    return changes


def apply_schedule_on_resume(
    checkpointer: Checkpointer, schedule: Schedule, max_steps: int, client_state: dict, changes: dict[str, list]
) -> dict:
    """The schedule, lr and weight decay of this run's config from the resume step on
    (apply_schedule); a schedule fitted to a time budget is kept unless its end's settings
    changed; a wsd decay under way may not change (refuse_changed_decay). Returns the RunState
    fields {"max_steps", "budget_fitted"}."""
    budget_fitted = bool(client_state.get("budget_fitted")) and not changes.keys() & set(SCHEDULE_END_KEYS)
    max_steps = client_state["max_steps"] if budget_fitted else max_steps
    refuse_changed_decay(checkpointer, client_state, changes, max_steps)
    apply_schedule(checkpointer, schedule, max_steps)
    return {"max_steps": max_steps, "budget_fitted": budget_fitted}


def refuse_changed_decay(
    checkpointer: Checkpointer, client_state: dict, changes: dict[str, list], max_steps: int
) -> None:
    """ResumeConfigError for a wsd run resumed past its decay start (client_state's step and max_steps, the
    decay_fraction before `changes`) with another max_steps or decay_fraction: its lr would leave the
    decay it is on (back up to the peak, for a finished run given a longer budget), which no wsd run of
    the new schedule has. The message names the run's last plateau checkpoint that a branch
    (TrainConfig.branch_from) to the new budget can start from."""
    cfg = checkpointer.cfg
    if cfg.lr_schedule != "wsd" or "lr_schedule" in changes:
        return
    step, old_end = client_state["step"], client_state["max_steps"]
    old_fraction = changes["decay_fraction"][0] if "decay_fraction" in changes else cfg.decay_fraction
    decay_start = wsd_decay_start(old_end, old_fraction)
    if step <= decay_start or (old_end, old_fraction) == (max_steps, cfg.decay_fraction):
        return
    new_start = wsd_decay_start(max_steps, cfg.decay_fraction)
    last = min(decay_start, new_start)  # a branch goes on from a plateau checkpoint at or before its decay start
    plateau = [tag for tag in saved_tags(checkpointer.directory) if int(TAG_PATTERN.fullmatch(tag).group(1)) <= last]
    branch = (
        f"train it into a new out= with branch_from={checkpointer.directory / plateau[-1]}, the run's last "
        "checkpoint on the plateau"
        if plateau
        else f"no checkpoint of the run at or before step {last} is left to branch from"
    )
    fraction = f", decay_fraction {cfg.decay_fraction:g}" if cfg.decay_fraction != old_fraction else ""
    raise ResumeConfigError(
        f"{checkpointer.directory.parent} is a wsd run decaying since step {decay_start} (max_steps {old_end}, "
        f"decay_fraction {old_fraction:g}) whose checkpoint is at step {step}: a resume with max_steps {max_steps}"
        f"{fraction} cannot change a decay under way (a wsd run of that schedule holds the peak lr to step "
        f"{new_start}). For that budget, {branch}"
    )


def apply_schedule(checkpointer: Checkpointer, schedule: Schedule, max_steps: int) -> None:
    """This run's config's schedule (ending at `max_steps`), peak lr and weight decay on an engine
    that loaded a checkpoint: LambdaLR restored the checkpoint's schedule fields into `schedule`
    and the optimizer its lr, both replaced here from the loaded step on."""
    cfg = checkpointer.cfg
    effective = effective_schedule(cfg, checkpointer.layout.global_batch)
    schedule.warmup_steps, schedule.max_steps = effective.warmup_steps, max_steps
    if isinstance(schedule, WSDSchedule):
        schedule.decay_fraction = cfg.decay_fraction
    scheduler = checkpointer.engine.lr_scheduler
    scheduler.base_lrs = [effective.lr] * len(scheduler.base_lrs)
    lr = effective.lr * schedule(scheduler.last_epoch)  # what LambdaLR would have set at this step
    for group, weight_decay in zip(scheduler.optimizer.param_groups, (cfg.weight_decay, 0.0), strict=True):
        group.update(initial_lr=effective.lr, lr=lr, weight_decay=weight_decay)


def _restore_rngs(checkpointer: Checkpointer, tag_dir: Path, client_state: dict) -> None:
    """Every rank's RNG states from checkpoint `tag_dir` saved by as many ranks; otherwise rank r's
    dropout stream has no saved counterpart: a fresh one per rank, seeded by the step."""
    rank = checkpointer.rank
    if client_state["world_size"] == checkpointer.layout.world_size:
        load_rng_state(rng_file(tag_dir, rank))
    else:
        seed_rngs(np.random.SeedSequence([checkpointer.cfg.seed, rank, client_state["step"]]))


def _branch_refusal(checkpointer: Checkpointer, tag_dir: Path, decay_start: int, max_steps: int) -> str | dict:
    """Rank 0's checks of branch_from=`tag_dir` before anything loads: why it is refused, or the
    config changes {key: [old, new]} (all in BRANCH_FREE_KEYS)."""
    cfg = checkpointer.cfg
    found = TAG_PATTERN.fullmatch(tag_dir.name)
    if not tag_dir.is_dir() or not found:
        return "it is not a checkpoint directory (RUN/checkpoints/step<N>)"
    if int(found.group(1)) > decay_start:
        return (
            f"it is the checkpoint of step {found.group(1)}, and a wsd run of max_steps {max_steps} with "
            f"decay_fraction {cfg.decay_fraction:g} decays from step {decay_start} (T - round(decay_fraction * T)); "
            f"branch from a checkpoint at or before step {decay_start}, or set a max_steps whose decay starts at "
            f"or after step {found.group(1)}"
        )
    if problem := verify(tag_dir):
        return f"it does not verify ({problem})"
    changes = _differences(checkpointer, tag_dir)
    if changes is None:
        return f"it has no {RUN_CONFIG_FILE}, so its config cannot be checked"
    refused = {key: change for key, change in changes.items() if key not in BRANCH_FREE_KEYS}
    if refused:
        return (
            f"it was trained with other settings: {_describe(refused)}; a branch may change only "
            f"{', '.join(BRANCH_FREE_KEYS)}"
        )
    return changes


def branch(checkpointer: Checkpointer, schedule: Schedule, max_steps: int) -> tuple[RunState, dict[str, list]]:
    """Start this (fresh) run from TrainConfig.branch_from, a plateau checkpoint of a wsd run, with
    its whole training state, to go on to `max_steps` (see the module's docstring). Returns the
    state to go on from and the config changes against the checkpoint's; BranchError, one line,
    for a checkpoint it cannot branch from."""
    import torch.distributed as dist

    cfg, rank, layout = checkpointer.cfg, checkpointer.rank, checkpointer.layout
    tag_dir = Path(cfg.branch_from)
    decay_start = wsd_decay_start(max_steps, cfg.decay_fraction)
    checked = [_branch_refusal(checkpointer, tag_dir, decay_start, max_steps) if rank == 0 else None]
    dist.broadcast_object_list(checked, src=0)
    if isinstance(checked[0], str):
        raise BranchError(f"cannot branch from branch_from={tag_dir}: {checked[0]}")
    changes = checked[0]
    load_path, client_state = load_checkpoint(checkpointer, tag_dir.name, tag_dir.parent)
    if load_path is None:
        raise BranchError(f"cannot branch from branch_from={tag_dir}: DeepSpeed found no checkpoint files in it")
    point, refusal = client_state["step"], None
    if wsd_decay_start(client_state["max_steps"], cfg.decay_fraction) < point:
        refusal = (
            f"its run was already decaying at step {point} (its schedule ended at step {client_state['max_steps']}), "
            "so it is off the plateau a branch goes on from"
        )
    elif client_state["global_batch"] != layout.global_batch:
        refusal = (
            f"it was trained at a global batch of {client_state['global_batch']} pairs and this run's is "
            f"{layout.global_batch} (set global_batch_size to keep it on any number of processes)"
        )
    if refusal:
        raise BranchError(f"cannot branch from branch_from={tag_dir}: {refusal}")
    bad = nonfinite_parameters(checkpointer.engine.module)
    if any_rank(layout.world_size, checkpointer.engine.device, bool(bad))[0]:
        raise BranchError(f"cannot branch from branch_from={tag_dir}: non-finite weights in {', '.join(bad[:3])}")
    apply_schedule(checkpointer, schedule, max_steps)
    state = RunState(step=point, position=resumed_position(client_state, layout, rank), max_steps=max_steps)
    _restore_rngs(checkpointer, tag_dir, client_state)
    if rank == 0:
        held = f"holding the peak lr to step {decay_start}, then " if point < decay_start else ""
        print(
            f"branched from {load_path} at step {point}, data position {state.position}: {held}decaying to 0 at "
            f"step {max_steps}; config changes: {_describe(changes)}",
            flush=True,
        )
    return state, changes


def resume(checkpointer: Checkpointer, schedule: Schedule, max_steps: int) -> tuple[RunState, dict[str, list]]:
    """Load the newest checkpoint that verifies and has finite weights (if any) into the engine,
    with this run's config applied to the engine and `schedule` (config_changes refuses what cannot
    apply, apply_schedule_on_resume), and set checkpointer.last_saved to its step. Returns the
    state to go on from (a new run's, at step 0 of `max_steps`, without a checkpoint, or a branch's
    from TrainConfig.branch_from) and the config changes, {key: [old, new]};
    NoUsableCheckpointError if checkpoints exist but none will do."""
    import torch.distributed as dist

    directory, rank, engine, layout = (
        checkpointer.directory,
        checkpointer.rank,
        checkpointer.engine,
        checkpointer.layout,
    )
    candidates = resumable_tags(directory) if rank == 0 else iter(())
    had_checkpoints = (
        rank == 0 and directory.is_dir() and (bool(saved_tags(directory)) or (directory / LATEST).is_file())
    )
    while True:
        chosen = [next(candidates, None), had_checkpoints]
        dist.broadcast_object_list(chosen, src=0)
        tag, had_checkpoints = chosen
        if tag is None:
            if had_checkpoints:
                raise no_usable_checkpoint(directory, "no checkpoint verifies and holds finite weights")
            checkpointer.last_saved = 0  # a branch's checkpoint is another run's
            if checkpointer.cfg.branch_from:
                return branch(checkpointer, schedule, max_steps)
            return RunState(max_steps=max_steps), {}
        changes = config_changes(checkpointer, directory / tag)  # before loading: a refused change never loads
        try:
            load_path, client_state = load_checkpoint(checkpointer, tag)
        except RuntimeError as error:  # e.g. torch's size mismatches, for a checkpoint without its config
            why = f"{tag} does not fit this model ({str(error).splitlines()[0]})"
            raise no_usable_checkpoint(directory, why) from None
        if load_path is None:
            raise no_usable_checkpoint(directory, f"DeepSpeed found no checkpoint files in {tag}")
        bad = nonfinite_parameters(engine.module)
        if not any_rank(layout.world_size, engine.device, bool(bad))[0]:
            break
        if rank == 0:
            print(
                f"warning: skipping checkpoint {tag}: non-finite weights in {', '.join(bad[:3])}"
                f"{' ...' if len(bad) > 3 else ''}; trying the previous one",
                flush=True,
            )
    step = client_state["step"]
    state = RunState(
        step=step,
        position=resumed_position(client_state, layout, rank),
        **apply_schedule_on_resume(checkpointer, schedule, max_steps, client_state, changes),
    )
    _restore_rngs(checkpointer, directory / tag, client_state)
    checkpointer.last_saved = step
    if rank == 0:
        changed = f"; config changes applied: {_describe(changes)}" if changes else ""
        print(f"resumed from {load_path} at step {step}, data position {state.position}{changed}")
    return state, changes


def record_config(cfg: TrainConfig, out: Path, step: int, changes: dict[str, list]) -> None:
    """train_config.yaml is the config in effect; CONFIG_HISTORY_FILE lists each segment of the
    run (from which step, what changed, the whole config). Rank 0's to call."""
    dump_config(cfg, out / "train_config.yaml")
    history_path = out / CONFIG_HISTORY_FILE
    history = load_yaml(history_path) if step and history_path.is_file() else None
    history = history if isinstance(history, list) else []
    if not history or changes:
        history.append(
            {
                "from_step": step,
                "changed": {key: {"from": old, "to": new} for key, (old, new) in changes.items()},
                "config": dataclasses.asdict(cfg),
            }
        )
        write_text(history_path, yaml.safe_dump(history, sort_keys=False), "config history")
