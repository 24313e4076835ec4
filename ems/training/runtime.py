"""The run's distributed and numeric runtime: the process group (a world of one without a
launcher), the DeepSpeed config and engine (AdamW over parameter groups, the lr schedule), the
batch layout that keeps a global batch, bf16 autocast, per-rank RNG seeds and the all-reduces
that give every rank the same answer.

In: a TrainConfig, the model, the launcher's environment; out: the engine, its BatchLayout and
autocast context.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ems.configs import merge
from ems.precision import bf16_is_fast
from ems.training.checkpoint import load_only_tensors
from ems.training.config import TrainConfig, resolve

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

# DeepSpeed config keys that follow the process count and batch settings, not the optimizer's layout
BATCH_LAYOUT_KEYS = ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu", "train_batch_size")
# The DeepSpeed config key set from TrainConfig.autocast (itself fixed on resume; see engine_autocast)
AUTOCAST_KEY = "torch_autocast"


@dataclass(frozen=True)
class BatchLayout:
    """How a global batch (pairs per optimizer step) is made: processes x micro-batches each
    accumulates x pairs per micro-batch."""

    world_size: int
    accumulation: int
    batch_size: int

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size * self.accumulation


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
        added = {
            key: value
            for key, value in (
                ("RANK", "0"),
                ("LOCAL_RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", str(_free_port())),
            )
            if key not in os.environ
        }
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


def deepspeed_config(cfg: TrainConfig) -> dict:
    """The DeepSpeed config file merged with `deepspeed_overrides`, micro-batch set from batch_size;
    a clear error for a precision this machine's accelerator cannot run."""
    from deepspeed.accelerator import get_accelerator

    ds_config = merge(json.loads(resolve(cfg.deepspeed_config).read_text()), cfg.deepspeed_overrides)
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


def gradient_accumulation(cfg: TrainConfig, ds_config: dict, world_size: int) -> int:
    """Micro-batches per optimizer step: global_batch_size / (world_size x batch_size) when the
    config sets a global batch (ValueError unless it divides), else the DeepSpeed config's."""
    if cfg.global_batch_size is None:
        return int(ds_config.get("gradient_accumulation_steps", 1))
    per_micro_step = world_size * cfg.batch_size
    if cfg.global_batch_size % per_micro_step:
        raise ValueError(
            f"global_batch_size={cfg.global_batch_size} is not a multiple of {world_size} processes x "
            f"batch_size {cfg.batch_size} = {per_micro_step} pairs; set a batch_size that divides it"
        )
    return cfg.global_batch_size // per_micro_step


def optimizer_layout(ds_config: dict) -> dict:
    """The DeepSpeed config without BATCH_LAYOUT_KEYS and AUTOCAST_KEY: what may not change on resume."""
    return {key: value for key, value in ds_config.items() if key not in (*BATCH_LAYOUT_KEYS, AUTOCAST_KEY)}


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only, not on biases, LayerNorms or embeddings."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.dim() == 2 and "emb" not in name else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


ADAMW_IMPLEMENTATIONS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}


def adamw(groups: list[dict], lr: float, cfg: TrainConfig, implementation: str = "fused") -> torch.optim.AdamW:
    """The trainer's AdamW over parameter `groups` (parameter_groups) at `lr`, with cfg's betas and eps. fused:
    one kernel over all parameters, where the for-loop default loops over tensors (docs/results/throughput.md);
    the other implementations are for benchmarks comparing them."""
    betas = (0.9, cfg.adam_beta2)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=cfg.adam_eps, **ADAMW_IMPLEMENTATIONS[implementation])


def build_engine(
    cfg: TrainConfig, model: torch.nn.Module, ds_config: dict, lr: float, schedule: Callable[[int], float]
) -> DeepSpeedEngine:
    """The DeepSpeed engine of `model`: AdamW at peak `lr` with `schedule` (step -> lr factor, e.g.
    ems.training.schedule.LinearSchedule) as its lr factor, the
    engine's checkpoint loader restricted to tensors (ems.training.checkpoint.load_only_tensors)."""
    import deepspeed
    import torch.distributed as dist

    optimizer = adamw(parameter_groups(model, cfg.weight_decay), lr, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    try:
        engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config
        )
    except AssertionError as error:  # DeepSpeed checks its config with asserts
        raise ValueError(
            f"DeepSpeed rejects the config ({cfg.deepspeed_config} with deepspeed_overrides): {error}"
        ) from None
    load_only_tensors(engine)
    # One process, ZeRO 0, a plain torch optimizer: DeepSpeed's gradient all-reduce would still flatten
    # every gradient into one buffer, divide it by 1 and copy it back: an exact no-op that costs step time
    # (docs/results/throughput.md, "the one-process gradient all-reduce skipped").
    # ZeRO's and DeepSpeed's fp16/bf16 optimizers keep it: their reduction does their gradient bookkeeping.
    if dist.get_world_size() == 1 and not engine.zero_optimization() and type(engine.optimizer) is type(optimizer):
        engine.enable_backward_allreduce = False
    return engine


def clip_in_the_loop(engine: DeepSpeedEngine) -> float | None:
    """Where DeepSpeed clips fp32 gradients itself (ZeRO 0, no fp16 or bf16 optimizer of its own): its max norm,
    and its clipping switched off, so that the loop clips (train_step: torch's foreach clip_grad_norm_, whose
    norm over every gradient is also the one the loop logs). DeepSpeed's would take a second norm, one call per
    parameter, then multiply each gradient (docs/results/throughput.md). None elsewhere: DeepSpeed clips."""
    max_norm = engine.gradient_clipping()
    own_optimizer = engine.fp16_enabled() or engine.bfloat16_enabled() or engine.zero_optimization()
    if not max_norm or own_optimizer or getattr(engine, "torch_autocast_z0_gradscaler", None) is not None:
        return None
    engine._config.gradient_clipping = 0.0
    return float(max_norm)


# glibc's mallopt parameters (malloc.h) and its ceiling on the mmap threshold of a 64-bit process
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MMAP_THRESHOLD_MAX = 32 << 20
MALLOC_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_host_memory() -> bool:
    """Have glibc's malloc keep the memory a CPU training step frees for the next step; whether it was set.

    A step allocates and frees tens of MB of activations and gradients. By default glibc serves blocks above a
    moving threshold with mmap and returns them with munmap, and hands the heap's free top back to the OS, so
    every step faults its pages in afresh (about 14,000 page faults a step on the demo; the step ~8% slower:
    docs/results/throughput.md#the-cpu-training-step). Here blocks up to 32 MB come from the heap, which is
    trimmed only past 2 GB free: the process keeps its peak. Nothing is set off glibc, or where the environment
    sets any of glibc's MALLOC_*_ variables (the user's choice stands)."""
    import ctypes
    import ctypes.util

    if any(name in os.environ for name in MALLOC_ENVIRONMENT):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    settings = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX), (M_TRIM_THRESHOLD, 2**31 - 1), (M_TOP_PAD, 256 << 20))
    return all(mallopt(parameter, value) == 1 for parameter, value in settings)


def accelerator_device() -> torch.device:
    """The device DeepSpeed's accelerator trains on (cuda, cpu, ...)."""
    from deepspeed.accelerator import get_accelerator

    return torch.device(get_accelerator().device_name())


def use_bf16(mode: str, rank: int) -> bool:
    """TrainConfig.autocast `mode` decided: "bf16", "none", or "auto": rank 0's bf16_is_fast on DeepSpeed's
    accelerator, one decision for all ranks."""
    import torch.distributed as dist

    device = accelerator_device()
    decision = [mode == "bf16" or (mode == "auto" and rank == 0 and bf16_is_fast(device))]
    dist.broadcast_object_list(decision, src=0)
    if mode == "auto" and rank == 0:
        print(
            f"autocast=auto: {'bf16' if decision[0] else 'fp32 (bf16 matmuls are slower than fp32 here)'} on {device}"
        )
    return decision[0]


def engine_autocast(ds_config: dict, bf16: bool) -> None:
    """Set the DeepSpeed config's torch_autocast section to the run's decision. DeepSpeed's engine runs
    its forward under that section and turns an enclosing torch.autocast off when the section does not
    enable it (so without it a bf16 run computes in fp32). No module is listed as safe for lower
    precision: gradients are reduced in fp32, as the fp32 weights are."""
    ds_config.pop(AUTOCAST_KEY, None)
    if bf16:
        ds_config[AUTOCAST_KEY] = {"enabled": True, "dtype": "bfloat16", "lower_precision_safe_modules": []}


def autocast_context(bf16: bool, device: torch.device) -> contextlib.AbstractContextManager:
    """The forward pass's autocast: bfloat16 on `device`, or none."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def compile_enabled(setting: bool | str, device: torch.device) -> bool:
    """TrainConfig.compile decided: true, false, or "auto": on CUDA (on CPU, inductor's compile takes minutes
    for a step that eager runs at the speed of its matmuls)."""
    return setting is True or (setting == "auto" and device.type == "cuda")


def compiled_graphs() -> int:
    """Graphs torch.compile has compiled in this process so far (each recompile is one more)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def seed_rngs(seed: np.random.SeedSequence) -> None:
    """Seed torch's, numpy's and Python's global RNGs (this process's dropout stream) from `seed`."""
    value = int(seed.generate_state(1)[0])
    torch.manual_seed(value)
    np.random.seed(value)
    random.seed(value)


def any_rank(world_size: int, device: torch.device, *flags: bool) -> list[bool]:
    """Whether each flag holds on any rank: one all-reduce, none in a world of one."""
    import torch.distributed as dist

    if world_size == 1:
        return list(flags)
    values = torch.tensor([float(flag) for flag in flags], device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return [bool(value) for value in values.tolist()]


def from_rank_0(value: int, world_size: int, device: torch.device) -> int:
    """Rank 0's `value` on every rank (a broadcast; none in a world of one)."""
    import torch.distributed as dist

    if world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return int(tensor)
