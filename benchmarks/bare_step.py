"""The training step without its loop: what benchmarks time against the loop (and what the loop must stay close
to).

In: a model config, a collated batch (ems.training.batches.collate, on the host), the device, the AdamW
implementation, whether to compile and the precision. Out: a function that runs one step — the batch packed on
the host as the trainer's reading thread packs it (EncoderNetwork.packer: static shapes when compiled, no groups
where attention runs varlen), the forward of both sides and both losses under autocast, backward, the trainer's
AdamW (ems.training.runtime.adamw), on a CPU the trainer's allocator setting — and reads nothing back to the host.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable

import torch

from ems.model import EMSModel, attention_path
from ems.model_config import EMSConfig
from ems.training.batches import packed, to_device
from ems.training.config import TrainConfig
from ems.training.runtime import adamw, keep_freed_host_memory, parameter_groups

PRECISIONS = {"bf16": torch.bfloat16, "fp32": torch.float32}


def step_context(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    """bf16 autocast for a "bf16" step, nothing for "fp32"."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()


def bare_step(
    cfg: EMSConfig,
    batch: dict,
    device: torch.device,
    implementation: str = "fused",
    compile: bool = False,
    dtype: str = "bf16",
) -> Callable[[], None]:
    """One EMS training step on `batch`, as a function (see the module docstring); seeded model, lr 1e-4."""
    if device.type == "cpu":
        keep_freed_host_memory()  # as the trainer does
    torch.manual_seed(0)
    model = EMSModel(cfg).to(device).train()
    optimizer = adamw(parameter_groups(model, TrainConfig.weight_decay), 1e-4, TrainConfig(), implementation)
    varlen = attention_path(cfg.attention, device, PRECISIONS[dtype]) == "varlen"
    packer = model.encoder.packer(varlen, static_shapes=compile)
    batch = to_device(packed(batch, packer, cfg.xtr_vocabulary == "batch"), device)
    forward = torch.compile(model) if compile else model

    def step() -> None:
        with step_context(device, dtype):
            loss = forward(**batch)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def median_seconds(fn: Callable[[], None], device: torch.device, warmup: int, repeats: int) -> float:
    """Median wall seconds of `repeats` calls of `fn` after `warmup` untimed ones, the device synchronised around
    each timed call (a GPU's queued work counted in it)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
