"""Setting a run up: every input checked before DeepSpeed starts, then the data, the model, the
engine, the resume and the components the training loop calls.

In: a TrainConfig (and the stop request held since start-up); out: a Run, everything the loop
(ems.training.train) holds: the engine, the RunState to go on from, the batches from that position, and
the checkpointer, metrics, validator, probe, time budget and stop conditions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ems.artifacts import recover_replaced, staged_directory
from ems.corpus import check_output_not_input
from ems.encoder import check_model_directory, export_encoder, initialize_from
from ems.locks import DirectoryInUse, exclusive
from ems.model import EMSModel, attention_path
from ems.model_config import EMSConfig, config_from_preset
from ems.run_metadata import run_metadata, write_run_metadata
from ems.shards import PairShards
from ems.teacher_store import STORE_FILE, TeacherStore, TeacherTargets, teacher_store_dir
from ems.text import Tokenizer
from ems.training.batch_order import BatchOrder
from ems.training.batches import Prefetcher, iterate_batches, prefetch_depth
from ems.training.config import TrainConfig
from ems.training.metrics import MetricsLog, TrainingMetrics
from ems.training.probe import Probe
from ems.training.resume import record_config, resume
from ems.training.runtime import (
    BatchLayout,
    accelerator_device,
    autocast_context,
    build_engine,
    clip_in_the_loop,
    compile_enabled,
    deepspeed_config,
    engine_autocast,
    gradient_accumulation,
    keep_freed_host_memory,
    optimizer_layout,
    seed_rngs,
    use_bf16,
)
from ems.training.saving import Checkpointer, RunState
from ems.training.schedule import Schedule, TimeBudget, build_schedule, effective_schedule
from ems.training.stopping import Stopping, StopRequest, planned_steps
from ems.training.validator import ValidationSet, Validator, validation_sample

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

    from ems.training.retrieval_probe import RetrievalProbe


@dataclass
class Run:
    """Everything a training run holds after setup."""

    cfg: TrainConfig
    out: Path
    rank: int
    layout: BatchLayout
    engine: DeepSpeedEngine
    autocast: contextlib.AbstractContextManager  # the forward pass's (runtime.autocast_context)
    # the training step's forward: the engine, or the model compiled (TrainConfig.compile) with the engine's
    # backward and step around it
    forward: Callable[..., dict]
    clip_norm: float | None  # the max gradient norm the loop clips to (runtime.clip_in_the_loop); None: DeepSpeed does
    schedule: Schedule  # the lr factor LambdaLR applies: its end moves with a time budget
    tokenizer: Tokenizer
    batches: Prefetcher  # ((epoch, batch index), this rank's micro-batches), read ahead
    state: RunState
    checkpointer: Checkpointer
    metrics: TrainingMetrics
    validator: Validator
    probe: Probe
    budget: TimeBudget
    stopping: Stopping

    def close(self) -> None:
        """Stop the batch reader and close the logs."""
        self.batches.close()
        self.metrics.metrics_log.close()


def check_inputs(cfg: TrainConfig) -> None:
    """Every input the run reads, checked before DeepSpeed starts (its op build and process group
    take seconds to minutes): the shards against their index and against the vocabulary, the
    validation shards, the probe's data, the model to start from, the DeepSpeed config, and then
    every token id of the shards against the vocabulary's size; and that `out` is none of them."""
    inputs = ("data", "vocab", "valid_data", "probe_data", "init_from", "deepspeed_config")
    check_output_not_input(("out", cfg.out), [(name, getattr(cfg, name) or None) for name in inputs])
    shards = PairShards(cfg.data)
    tokenizer = Tokenizer.load(cfg.vocab)
    shards.check_vocabulary(tokenizer, cfg.vocab)
    valid = PairShards(cfg.valid_data) if cfg.valid_data else None
    if valid is not None:
        valid.check_vocabulary(tokenizer, cfg.vocab)
    if cfg.probe_every:
        if not cfg.probe_data:
            raise ValueError(
                f"probe_every={cfg.probe_every} needs probe_data (a directory holding tatoeba/ and "
                f"flores200/devtest/); set it, or probe_every=0"
            )
        if not Path(cfg.probe_data).is_dir():
            raise FileNotFoundError(f"probe_data={cfg.probe_data} is not a directory")
    # the model's config and attention path on this machine's accelerator (the dtype only matters to "auto")
    model_cfg = config_from_preset(
        cfg.model, vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages), **cfg.model_overrides
    )
    attention_path(model_cfg.attention, accelerator_device(), torch.float32)
    if cfg.init_from:
        if not Path(cfg.init_from).is_dir():
            raise FileNotFoundError(f"init_from={cfg.init_from} is not a model directory")
        check_model_directory(cfg.init_from)  # whole: its weights its config's model, its vocabulary its own
    deepspeed_config(cfg)
    # last, as the one pass over the data: every id a piece of the vocabulary, not an IndexError mid-run
    for data in filter(None, (shards, valid)):
        data.check_token_ids(tokenizer.vocab_size, cfg.vocab)


@contextlib.contextmanager
def run_directory_lock(out: Path, start_distributed: Callable[[], None]):
    """Rank 0 holds out/.lock (ems.locks) for the block, then `start_distributed` (init_distributed)
    starts torch.distributed. The lock comes first: a process group starts native threads (gloo's, its
    store's), and a process that raises with them alive can abort at exit ("terminate called without an
    active exception", status -6) instead of exiting 2. A run directory another live trainer holds is
    refused with one line naming the holder: a world of one refuses before anything has started; the
    ranks of a launched world learn of rank 0's refusal over the process group, destroyed before they raise."""
    import torch.distributed as dist

    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    with contextlib.ExitStack() as held:
        refusal = [None]
        if rank == 0:
            try:
                held.enter_context(exclusive(out, "training run"))
            except DirectoryInUse as error:
                if world_size == 1:
                    raise
                refusal = [str(error)]
        start_distributed()
        dist.broadcast_object_list(refusal, src=0)
        if refusal[0] is not None:
            dist.destroy_process_group()
            raise DirectoryInUse(refusal[0])
        yield


def teacher_targets(
    cfg: TrainConfig, model_cfg: EMSConfig, data: str, shards: PairShards, rank: int
) -> TeacherTargets | None:
    """The teacher vectors of `shards` (data/teacher/<slug>/, written by `data_prep teacher`), checked
    to cover every source sentence; None when the run does not distil. A missing store or a
    distill weight without a teacher (or the reverse) is an error saying what to run or set."""
    if bool(cfg.teacher) != bool(model_cfg.distill_weight):
        raise ValueError(
            "distillation needs both teacher=<encoder spec> and model_overrides.distill_weight > 0; got "
            f"teacher={cfg.teacher!r}, distill_weight={model_cfg.distill_weight}"
        )
    if not cfg.teacher:
        return None
    directory = teacher_store_dir(data, cfg.teacher)
    if not (directory / STORE_FILE).is_file():
        raise FileNotFoundError(
            f"no vectors of teacher {cfg.teacher} for {data} ({directory}): run "
            f"`python -m data_prep teacher --shards {data} --in CORPUS --teacher {cfg.teacher}` first"
        )
    targets = TeacherTargets(TeacherStore(directory), shards.languages)
    without = targets.check_covers(shards, data)
    if without and rank == 0:
        print(
            f"{without} of {len(shards)} pairs of {data} have no side in the teacher's languages "
            f"({', '.join(targets.store.languages)}): they train without the distillation term",
            flush=True,
        )
    return targets


def build_model(
    cfg: TrainConfig, shards: PairShards, tokenizer: Tokenizer, rank: int
) -> tuple[EMSModel, TeacherTargets | None]:
    """The model of cfg.model with its overrides, seeded, its output matched to the teacher's
    dimension when distilling, started from cfg.init_from when set; and the teacher's vectors
    of the training shards (None without distillation)."""
    torch.manual_seed(cfg.seed)
    model_cfg = config_from_preset(
        cfg.model, vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages), **cfg.model_overrides
    )
    teacher = teacher_targets(cfg, model_cfg, cfg.data, shards, rank)
    if teacher is not None and model_cfg.d_sentence != teacher.store.dim:
        if "d_output" in cfg.model_overrides:
            raise ValueError(
                f"model_overrides.d_output={model_cfg.d_output}, but the teacher {cfg.teacher} gives "
                f"{teacher.store.dim}-d vectors"
            )
        model_cfg = dataclasses.replace(model_cfg, d_output=teacher.store.dim)
    model = EMSModel(model_cfg, cfg.global_negatives)
    if cfg.init_from:
        report = initialize_from(model.encoder, tokenizer, cfg.init_from)
        if rank == 0:
            print(f"encoder initialised from {cfg.init_from}: {report}", flush=True)
    return model, teacher


def data_fingerprint(shards: PairShards) -> dict:
    """What identifies the shards' content (not their path: run folders move between machines)."""
    return {key: shards.index.get(key) for key in ("languages", "vocab_sha1", "n_pairs", "n_tokens")}


def build_order(cfg: TrainConfig, shards: PairShards, global_batch: int, max_len: int) -> BatchOrder:
    """The run's BatchOrder: length bucketing, optional temperature sampling, and duplicates spread
    apart (TrainConfig.spread_duplicates)."""
    return BatchOrder(
        shards.lengths,  # memory-mapped lengths.npy
        global_batch,
        seed=cfg.seed,
        bucket_batches=cfg.bucket_batches,
        groups=shards.language_pair_ranges()
        if cfg.pair_sampling_temperature is not None or cfg.pair_sampling_floor is not None or cfg.one_pair_batches
        else None,
        pair_sampling_temperature=cfg.pair_sampling_temperature,
        pair_sampling_floor=cfg.pair_sampling_floor,
        one_pair_batches=cfg.one_pair_batches,
        content_ids=shards.content_ids if cfg.spread_duplicates else None,
        padding_budget=cfg.padding_budget,
        max_len=max_len,
    )


def validation_set(cfg: TrainConfig, model_cfg: EMSConfig, rank: int) -> ValidationSet | None:
    """The validation shards, the run's sample of them (drawn and stored by rank 0 at a run's
    start, read back by every rank) and their teacher vectors; None without valid_data."""
    import torch.distributed as dist

    if not cfg.valid_data:
        return None
    shards = PairShards(cfg.valid_data)
    teacher = teacher_targets(cfg, model_cfg, cfg.valid_data, shards, rank)
    if rank == 0:
        validation_sample(Path(cfg.out), shards, cfg.valid_pairs, cfg.seed, write=True)
    dist.barrier()
    return ValidationSet(
        shards, validation_sample(Path(cfg.out), shards, cfg.valid_pairs, cfg.seed, write=False), teacher
    )


def retrieval_probe(cfg: TrainConfig, tokenizer: Tokenizer) -> RetrievalProbe:
    """The retrieval probe of the vocabulary's languages from cfg.probe_data (an error when it has none)."""
    from ems.training.retrieval_probe import RetrievalProbe

    retrieval = RetrievalProbe(cfg.probe_data, tokenizer, cfg.probe_sentences)
    if not retrieval:
        raise ValueError(
            f"probe_data={cfg.probe_data} has no Tatoeba or FLORES-200 devtest file for the languages "
            f"of {cfg.vocab}; set probe_every=0 or point probe_data at the data directory"
        )
    return retrieval


def setup(cfg: TrainConfig, stop_request: StopRequest) -> Run:
    """Data, model, DeepSpeed engine, resume, validation sample, probe, logs (torch.distributed
    initialised, the run directory locked)."""
    import torch.distributed as dist

    ds_config = deepspeed_config(cfg)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    accumulation = ds_config["gradient_accumulation_steps"] = gradient_accumulation(cfg, ds_config, world_size)
    layout = BatchLayout(world_size, accumulation, cfg.batch_size)
    out = Path(cfg.out)
    shards = PairShards(cfg.data)
    tokenizer = Tokenizer.load(cfg.vocab)
    model, teacher = build_model(cfg, shards, tokenizer, rank)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        for exported in ("model", "model-init"):  # a re-export a kill cut short (the run's lock is held)
            recover_replaced(out / exported)
        write_run_metadata(out, run_metadata(sys.argv))
        if cfg.export_init:
            with staged_directory(out / "model-init", "model export", replace=True) as staging:
                export_encoder(model.encoder, tokenizer, staging)

    order = build_order(cfg, shards, layout.global_batch, model.cfg.max_len)
    effective = effective_schedule(cfg, layout.global_batch)
    max_steps = planned_steps(cfg, order)
    schedule = build_schedule(cfg, effective.warmup_steps, max_steps)
    bf16 = use_bf16(cfg.autocast, rank)
    engine_autocast(ds_config, bf16)
    engine = build_engine(cfg, model, ds_config, effective.lr, schedule)
    clip_norm = clip_in_the_loop(engine)
    if engine.device.type == "cpu":
        keep_freed_host_memory()
    # Dropout RNG: one stream per rank, independent of how much DeepSpeed's setup drew (it
    # differs between ZeRO stages). Saved and restored per rank with every checkpoint.
    seed_rngs(np.random.SeedSequence([cfg.seed, rank]))
    autocast = autocast_context(bf16, engine.device)
    compiled = compile_enabled(cfg.compile, engine.device)
    forward = torch.compile(engine.module) if compiled else engine
    varlen = attention_path(model.cfg.attention, engine.device, torch.bfloat16 if bf16 else torch.float32) == "varlen"
    packer = model.encoder.packer(varlen=varlen, static_shapes=compiled)

    fixed = {"deepspeed": optimizer_layout(ds_config), "data": data_fingerprint(shards)}
    if teacher is not None:
        fixed["teacher"] = teacher.store.meta["identity"]
    checkpointer = Checkpointer(out / "checkpoints", engine, rank, layout, cfg, fixed)
    state, changes = resume(checkpointer, schedule, max_steps)  # or a wsd branch's start (cfg.branch_from)
    if rank == 0:
        record_config(cfg, out, state.step, changes)
        print(effective.describe(cfg, state.max_steps, world_size, accumulation), flush=True)
    batches = Prefetcher(
        iterate_batches(
            shards,
            order,
            model.cfg.max_len,
            start=state.position,
            rank=rank,
            world_size=world_size,
            accumulation=accumulation,
            teacher=teacher,
            packer=packer,
            batch_vocabulary=model.cfg.xtr_vocabulary == "batch",
        ),
        prefetch_depth(cfg.prefetch_batches, engine.device),
        pin_memory=engine.device.type == "cuda",
    )
    valid = validation_set(cfg, model.cfg, rank)
    retrieval = retrieval_probe(cfg, tokenizer) if cfg.probe_every and rank == 0 else None
    metrics_log = MetricsLog(out, rank, state.step)
    return Run(
        cfg=cfg,
        out=out,
        rank=rank,
        layout=layout,
        engine=engine,
        autocast=autocast,
        forward=forward,
        clip_norm=clip_norm,
        schedule=schedule,
        tokenizer=tokenizer,
        batches=batches,
        state=state,
        checkpointer=checkpointer,
        metrics=TrainingMetrics(metrics_log, cfg.log_every, engine, world_size, compiled),
        validator=Validator(valid, cfg.valid_every, engine, cfg.batch_size, autocast, metrics_log),
        probe=Probe(retrieval, cfg.probe_every, engine, rank, metrics_log),
        budget=TimeBudget(
            cfg.time_budget_minutes,
            state.step + 5,
            cfg.budget_probe_steps,
            rank,
            world_size,
            engine.device,
            warmup_steps=effective.warmup_steps,
        ),
        stopping=Stopping(stop_request, out, rank, world_size, engine.device, cfg.stop_at_step, cfg.max_minutes),
    )
