"""One EMS training step on the prepared training shards, timed: the GPU acceptance run's mfu stage and
benchmarks/gpu/loop_overhead.py measure with it.

In: the unpacked training data, a preset and overrides over its shape, a number of pairs, the device, dtype
and timing. Out: the model config (the shards' vocabulary and languages), a batch of random training pairs,
its FLOPs, and the step's median seconds, in this process or in a child process (`python -m
benchmarks.gpu.acceptance step-time`, killed at a cap: step_seconds_in_child; step_time_main is the child's
side).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks.gpu import report as gpu_report
from benchmarks.gpu.stage import OutOfTime


def shards_of(train_data: Path):
    from ems.shards import PairShards

    return PairShards(train_data / "shards" / "train")


def model_config(preset: str, overrides: dict, shards):
    """The preset with `overrides` and the shards' vocabulary and languages."""
    from ems.model_config import config_from_preset

    return config_from_preset(
        preset, **{**overrides, "vocab_size": shards.index["vocab_size"], "n_languages": len(shards.languages)}
    )


def probe_batch(cfg, shards, pairs: int) -> dict:
    """`pairs` random training pairs (seeded) as a batch, cut at the model's max_len."""
    from ems.flops import batch_tensors, sample_batches

    (chosen,) = sample_batches(shards, min(pairs, len(shards)), 1, seed=0)
    return batch_tensors(shards, chosen, cfg.max_len)


def batch_flops(cfg, batch: dict) -> float:
    """Model FLOPs of one training step on `batch` (ems.flops; the XTR softmax as cfg says)."""
    from ems.flops import step_flops
    from ems.text import PAD_ID

    lengths = [(batch[side] != PAD_ID).sum(dim=1).numpy() for side in ("src", "tgt")]
    tokens = torch.cat([batch["src"].flatten(), batch["tgt"].flatten()])
    candidates = int(torch.unique(tokens).numel() - 1) if cfg.xtr_vocabulary == "batch" else None
    return float(step_flops(cfg, *lengths, xtr_candidates=candidates).total)


def step_seconds(cfg, batch: dict, device: str, compiled: bool, dtype: str, warmup: int, repeats: int) -> float:
    """Median seconds of one EMS training step (benchmarks.bare_step: model, fused AdamW, autocast)."""
    from benchmarks.bare_step import bare_step, median_seconds

    step = bare_step(cfg, batch, torch.device(device), "fused", compile=compiled, dtype=dtype)
    try:
        return median_seconds(step, torch.device(device), warmup, repeats)
    finally:
        del step
        torch._dynamo.reset()
        if device == "cuda":
            torch.cuda.empty_cache()


def step_seconds_in_child(request: dict, minutes: float) -> float:
    """`step_seconds` of `request` (the step-time subcommand's arguments) in a child process, killed with
    its process group after `minutes`: OutOfTime then, RuntimeError with its last line if it fails."""
    result = Path(request["work"]) / f"step_{request['variant']}.json"
    result.unlink(missing_ok=True)
    command = [sys.executable, "-m", "benchmarks.gpu.acceptance", "step-time", "--request", json.dumps(request)]
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = child.communicate(timeout=max(1.0, minutes * 60))
    except (subprocess.TimeoutExpired, OutOfTime):
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise OutOfTime(f"{request['variant']} step cut after {minutes:.2f} min") from None
    if child.returncode != 0 or not result.is_file():
        lines = [line for line in output.splitlines() if line.strip()] or ["no output"]
        raise RuntimeError(f"the {request['variant']} step exited with {child.returncode}: {lines[-1]}")
    return json.loads(result.read_text())["seconds"]


def step_time_main(request: dict) -> int:
    """The step-time subcommand: one variant's median step seconds into WORK/step_<variant>.json."""
    shards = shards_of(Path(request["train_data"]))
    cfg = model_config(request["preset"], request["overrides"], shards)
    batch = probe_batch(cfg, shards, request["pairs"])
    seconds = step_seconds(
        cfg, batch, request["device"], request["variant"] == "compiled", request["dtype"], *request["timing"]
    )
    gpu_report.write_json(Path(request["work"]) / f"step_{request['variant']}.json", {"seconds": seconds})
    return 0
