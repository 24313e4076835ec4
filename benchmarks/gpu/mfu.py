"""The GPU acceptance run's mfu stage: the training step of the profile's probe preset, eager and
torch.compile'd (s/step, tokens/s, TFLOP/s, MFU), the eager step of every candidate preset (what the train
stage chooses from), and the training loop of the loop presets at the loop batches.
"""

from __future__ import annotations

import time

import torch

from benchmarks.gpu import report as gpu_report
from benchmarks.gpu.profiles import TRAIN_CONFIG
from benchmarks.gpu.stage import Context, OutOfTime
from benchmarks.gpu.step import batch_flops, model_config, probe_batch, shards_of, step_seconds, step_seconds_in_child
from ems.cli import one_line


def step_figures(flops: float, tokens: int, seconds: float, matmul_flops: float, peak_tflops: float | None) -> dict:
    achieved = float(flops / seconds)
    return {
        "s_per_step": seconds,
        "tokens_per_s": tokens / seconds,
        "tflops": achieved / 1e12,
        "ratio_to_matmul": achieved / matmul_flops,
        "mfu": None if peak_tflops is None else achieved / (1e12 * peak_tflops),
    }


def time_presets(ctx: Context, overrides: dict, pairs: int, dtype: str, output: dict) -> None:
    """The eager training step of each of profile.presets (`overrides` over its shape), smallest first, on
    `pairs` random training pairs (probe_batch's, cut at its max_len), timed as the probe's: output[preset]
    = {"s_per_step", "pairs"}, or {"error"} for one that fails (out of memory: a finding, the next is timed).
    OutOfTime (the stage's cap) marks the preset being timed and those after it cut, and is raised on."""
    profile, shards = ctx.profile, shards_of(ctx.train_data)
    for index, name in enumerate(profile.presets):
        try:
            cfg = model_config(name, overrides, shards)
            batch = probe_batch(cfg, shards, pairs)
            seconds = step_seconds(cfg, batch, ctx.device, False, dtype, *profile.mfu_timing)
        except OutOfTime as cut:
            output.update({rest: {"error": f"cut: {cut}"} for rest in profile.presets[index:]})
            raise
        except Exception as error:  # out of memory: a finding of the run, not a crash
            output[name] = {"error": f"{type(error).__name__}: {one_line(error)}"}
        else:
            output[name] = {"s_per_step": seconds, "pairs": len(batch["src"])}
        print(f"{name}: {gpu_report.describe_preset_step(output[name])}", flush=True)


def stage_mfu(ctx: Context, output: dict) -> None:
    """output: the probe step's shapes, batch, FLOPs, matmul rate, and per variant its figures (or error);
    output["presets"]: each candidate preset's eager s/step on the train config's batch (time_presets),
    timed after the eager probe and before the compiled one, which gets what is left of the cap."""
    from benchmarks import train_mfu
    from ems.configs import load_config
    from ems.training.config import TrainConfig

    profile, device = ctx.profile, torch.device(ctx.device)
    dtype = "bf16" if device.type == "cuda" else "fp32"
    train_config = load_config(TrainConfig, TRAIN_CONFIG, values=profile.train_overrides)
    overrides = {**profile.model_overrides, **train_config.model_overrides}
    shards = shards_of(ctx.train_data)
    cfg = model_config(profile.mfu_preset, overrides, shards)
    matmul = train_mfu.matmul_rate(
        torch.bfloat16 if dtype == "bf16" else torch.float32, profile.matmul_size, device, repeats=5
    )
    batch = probe_batch(cfg, shards, profile.mfu_pairs)
    tokens = int(train_mfu.real_lengths(batch["src"]).sum() + train_mfu.real_lengths(batch["tgt"]).sum())
    flops, peak = batch_flops(cfg, batch), train_mfu.known_peak_tflops(device)
    output.update(
        preset=profile.mfu_preset,
        overrides=overrides,
        shapes={
            k: getattr(cfg, k) for k in ("d_model", "n_layers", "d_ffn", "vocab_size", "max_len", "xtr_vocabulary")
        },
        pairs=len(batch["src"]),
        real_tokens=tokens,
        gflop_per_step=flops / 1e9,
        step_dtype=dtype,
        matmul_tflops=matmul / 1e12,
        peak_tflops=peak,
        variants={},
        presets={},
    )
    request = {
        "train_data": str(ctx.train_data),
        "preset": profile.mfu_preset,
        "overrides": overrides,
        "pairs": profile.mfu_pairs,
        "device": ctx.device,
        "dtype": dtype,
        "timing": list(profile.mfu_timing),
        "work": str(ctx.work),
    }
    cap_end = time.monotonic() + 60 * ctx.stages["mfu"]["cap_minutes"]

    def time_variant(variant: str) -> None:
        try:
            if variant == "eager":
                seconds = step_seconds(cfg, batch, ctx.device, False, dtype, *profile.mfu_timing)
            else:  # a compiler can take minutes: a child process, killed at the cap
                seconds = step_seconds_in_child(
                    {**request, "variant": variant}, (cap_end - time.monotonic()) / 60 - 0.05
                )
        except OutOfTime as cut:
            output["variants"][variant] = {"error": f"cut: {cut}"}
            if variant == "eager":
                raise
        except Exception as error:  # out of memory, a compiler failure: findings of the run, not crashes
            output["variants"][variant] = {"error": f"{type(error).__name__}: {one_line(error)}"}
        else:
            output["variants"][variant] = step_figures(flops, tokens, seconds, matmul, peak)
        print(f"{variant}: {gpu_report.describe_step(output['variants'][variant])}", flush=True)

    # the eager probe, the presets (the train stage's choice needs them), then the compiled probe in what is left
    if "eager" in profile.mfu_variants:
        time_variant("eager")
    time_presets(ctx, overrides, train_config.batch_size, dtype, output["presets"])
    for variant in profile.mfu_variants:
        if variant != "eager":
            time_variant(variant)
    eager, compiled = (output["variants"].get(name, {}) for name in ("eager", "compiled"))
    if "s_per_step" in eager and "s_per_step" in compiled:
        output["compile_speedup"] = eager["s_per_step"] / compiled["s_per_step"]
    time_loops(ctx, output.setdefault("loops", []))


def time_loops(ctx: Context, output: list) -> None:
    """The training loop of each profile.loop_presets at each profile.loop_pairs (loop_overhead.measure:
    the loop and the bare step, pairs/s, MFU, loop / bare, graphs compiled), appended to `output` as each ends;
    one that fails is a finding ({"error"}); the stage's cap marks the rest cut."""
    from benchmarks.gpu.loop_overhead import LoopTiming, measure

    profile = ctx.profile
    timing = LoopTiming(*profile.loop_steps, overrides=(), device=ctx.device, work=ctx.work / "loops")
    runs = [(preset, pairs) for preset in profile.loop_presets for pairs in profile.loop_pairs]
    for index, (preset, pairs) in enumerate(runs):
        try:
            figures = measure({"train": ctx.train_data, "eval": ctx.eval_data}, preset, pairs, timing)
        except OutOfTime as cut:
            output.extend({"preset": p, "pairs": n, "error": f"cut: {cut}"} for p, n in runs[index:])
            raise
        except Exception as error:  # out of memory, a compiler failure: findings of the run, not crashes
            figures = {"preset": preset, "pairs": pairs, "error": f"{type(error).__name__}: {one_line(error)}"}
        output.append(figures)
        print(f"loop {preset} x {pairs}: {gpu_report.describe_loop(figures)}", flush=True)
