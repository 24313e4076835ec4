"""The GPU acceptance run's train stage: the preset chosen from the mfu stage's timings (the largest that
trains usefully in the loop's minutes), and ems.training.train on the prepared shards with
configs/train/gpu.yaml, its schedule fitted to the clock.
"""

from __future__ import annotations

import dataclasses
import math
import time

from benchmarks.gpu.profiles import TRAIN_CONFIG
from benchmarks.gpu.stage import Context, write_report
from benchmarks.gpu.step import model_config, shards_of

WARMUP_SHARE = 0.1  # of the predicted steps, when the profile fits the schedule to them
FLOPS_BATCHES = 4  # random batches of the shards that each preset's FLOPs per pair are averaged over


def choose_preset(ctx: Context, base, loop_minutes: float) -> dict:
    """The largest of profile.presets that trains usefully (>= useful_steps optimizer steps of the config's
    batch in `loop_minutes`, at its eager s/step measured by the mfu stage), the smallest timed when none
    does, the fallback when none was timed; {"preset", "rule", "loop_minutes", "predicted_steps" (not for
    the fallback), "candidates": per preset its parameters, GFLOP/pair and s/step, steps, useful or error}."""
    from ems.flops import encoder_parameters, flops_per_pair, sample_batches

    profile, shards = ctx.profile, shards_of(ctx.train_data)
    timed = ctx.output("mfu").get("presets", {})
    batches = sample_batches(shards, min(base.batch_size, len(shards)), FLOPS_BATCHES, seed=1)
    overrides = {**profile.model_overrides, **base.model_overrides}
    candidates = []
    for name in profile.presets:
        cfg = model_config(name, overrides, shards)
        per_pair = flops_per_pair(cfg, shards, batches, cfg.xtr_vocabulary == "batch")
        row = {"preset": name, "params": encoder_parameters(cfg)["total"], "gflop_per_pair": per_pair / 1e9}
        timing = timed.get(name, {"error": "not timed (the mfu stage ended before it)"})
        if "s_per_step" in timing:
            steps = int(60 * loop_minutes / timing["s_per_step"])
            row.update(s_per_step=timing["s_per_step"], predicted_steps=steps, useful=steps >= profile.useful_steps)
        else:
            row["error"] = timing["error"]
        candidates.append(row)
    measured = [row for row in candidates if "s_per_step" in row]
    if not measured:
        return {
            "preset": profile.fallback_preset,
            "rule": "no preset's step was timed: the fallback",
            "loop_minutes": loop_minutes,
            "candidates": candidates,
        }
    useful = [row for row in measured if row["useful"]]
    chosen = useful[-1] if useful else measured[0]
    rule = (
        f">= {profile.useful_steps} optimizer steps of {base.batch_size} pairs in {loop_minutes:.2f} min of training "
        f"loop, at each preset's eager s/step measured on {timed[chosen['preset']]['pairs']} random training pairs "
        "(the mfu stage)"
    )
    return {
        "preset": chosen["preset"],
        "rule": rule + ("" if useful else "; none does: the smallest timed"),
        "loop_minutes": loop_minutes,
        "predicted_steps": chosen["predicted_steps"],
        "candidates": candidates,
    }


def train_values(ctx: Context, loop_minutes: float, choice: dict) -> dict:
    """TrainConfig values over configs/train/gpu.yaml: the profile's, the data, the clock's limits and,
    when the profile fits them, warm-up, logging and validation intervals from the predicted steps."""
    from ems.apps.demo import data_paths

    values = {
        **ctx.profile.train_overrides,
        **data_paths(ctx.train_data, ctx.eval_data),
        "model": choice["preset"],
        "out": str(ctx.run_dir),
        "time_budget_minutes": round(0.97 * loop_minutes, 3),
        "max_minutes": round(loop_minutes, 3),
        "probe_every": 0,
    }
    if ctx.profile.model_overrides:
        values["model_overrides"] = {**ctx.profile.model_overrides, **values.get("model_overrides", {})}
    steps = choice.get("predicted_steps")
    if ctx.profile.fit_schedule and steps:
        values.update(
            warmup_samples=None,
            warmup_steps=max(1, math.ceil(WARMUP_SHARE * steps)),
            log_every=max(1, steps // 50),
            valid_every=max(1, steps // 4),
        )
    return values


def stage_train(ctx: Context, output: dict) -> None:
    """ems.training.train into --work/run (fresh); out: the preset's choice, the config, steps, seconds, the model."""
    import shutil

    from ems.configs import load_config
    from ems.training.config import TrainConfig
    from ems.training.train import train

    loop_minutes = max(0.1, ctx.stages["train"]["loop_minutes"])
    base = load_config(TrainConfig, TRAIN_CONFIG, values=ctx.profile.train_overrides)
    choice = output["choice"] = choose_preset(ctx, base, loop_minutes)
    print(f"preset {choice['preset']} ({choice['rule']})", flush=True)
    cfg = load_config(TrainConfig, TRAIN_CONFIG, values=train_values(ctx, loop_minutes, choice))
    output["config"] = dataclasses.asdict(cfg)
    write_report(ctx)
    shutil.rmtree(ctx.run_dir, ignore_errors=True)
    started = time.monotonic()
    result = train(cfg)
    output.update(
        steps=result.steps,
        max_steps=result.max_steps,
        model_dir=result.model_dir,
        preempted=result.preempted,
        seconds=round(time.monotonic() - started, 1),
    )
