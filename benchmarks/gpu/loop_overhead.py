"""What the training loop adds to the bare training step, per preset and batch size, on the data and config of
the GPU acceptance run: the figures that choose the GPU's preset and batch.

    python -m benchmarks.gpu.loop_overhead --data runs/gpu_data --work /tmp/lo --preset medium ems-paper \
        --pairs 1024 2048 4096 --steps 200 --out-dir DIR            # the GPU run: pairs/s, MFU, recompiles
    python -m benchmarks.gpu.loop_overhead --data runs/gpu_data --work /tmp/lo --device cpu --preset tiny \
        --steps 12 --log-every 3                                     # wiring, on CPU
    python -m benchmarks.gpu.loop_overhead --demo runs/demo --config configs/train/demo.yaml --device cpu \
        --preset tiny --pairs 256 --steps 300 --log-every 50 --work /tmp/lo   # the demo's loop on CPU (bf16 where fast)

The bare step: `benchmarks.gpu.step.step_seconds` (model, fused AdamW, autocast, compiled where the loop compiles:
TrainConfig.compile; the batch packed on the host as the loop packs it; no DeepSpeed, no data loading,
nothing read back to the host but the timing's synchronisation) on `--pairs` random training pairs. The loop:
`ems.training.train` on configs/train/gpu.yaml with each `--preset` and `--pairs`, `--steps` steps, no
validation or checkpoint inside the loop and the `--set` items (a variant of the loop; the bare step is
unchanged); its seconds per step and real tokens per second (and the share of its time the loop waited for a
batch) are the logged windows' after the first `--skip-windows` (start-up). Each run: both, pairs/s, MFU (on a
GPU whose peak is known), loop / bare, and the graphs a compiled loop compiled; one JSON line per run, the
whole report at the end (also written to --out-dir after every run). With --profile the loop runs under
torch.profiler (which slows it): the operators by self CPU and self device time go to --out-dir; give it ~20
--steps, as building its tables from 60 steps of `medium` took over two minutes on an H200
(docs/results/gpu.md). With --cprofile it runs under cProfile instead: Python functions by own and cumulative
time (on Python 3.12 every thread's, the batch-reading one included; on earlier versions the training
thread's only).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import io
import json
import pstats
import shutil
import sys
from pathlib import Path

import torch

from benchmarks.gpu.prepared import open_prepared, unpack
from benchmarks.gpu.profiles import TRAIN_CONFIG
from benchmarks.gpu.step import batch_flops, model_config, probe_batch, shards_of, step_seconds
from benchmarks.train_mfu import known_peak_tflops
from ems.apps.demo import data_paths
from ems.cli import add_debug_option, run_main
from ems.configs import load_config
from ems.precision import bf16_is_fast
from ems.text import PAD_ID
from ems.training.config import TrainConfig
from ems.training.runtime import compile_enabled
from ems.training.train import train


def loop_figures(history: list[dict], skip_windows: int) -> dict:
    """Seconds per step, real tokens per second and the share of the time spent waiting for batches over the
    logged training windows after the first `skip_windows` (validation records, which carry no "seconds",
    are not windows)."""
    windows = [record for record in history if "seconds" in record and "tokens_per_s" in record]
    if len(windows) <= skip_windows:
        raise SystemExit(f"{len(windows)} logged windows, none left after skipping {skip_windows}: more --steps")
    kept, before = windows[skip_windows:], windows[skip_windows - 1]["step"] if skip_windows else 0
    seconds = sum(record["seconds"] for record in kept)
    tokens = sum(record["tokens_per_s"] * record["seconds"] for record in kept)
    steps = kept[-1]["step"] - before
    waited = sum(record.get("data_wait_fraction", 0.0) * record["seconds"] for record in kept)
    return {
        "steps": steps,
        "s_per_step": seconds / steps,
        "tokens_per_s": tokens / seconds,
        "data_wait_fraction": waited / seconds,
    }


@contextlib.contextmanager
def profiled(kind: str | None, device: str, out_dir: Path | None):
    """The block under torch.profiler (CPU, and the device's activity on a GPU; `kind` "torch") or cProfile
    ("cprofile"), their tables written to `out_dir`; or nothing (None)."""
    if kind is None:
        yield
        return
    if kind == "cprofile":
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            yield
        finally:
            profiler.disable()
        for key in ("tottime", "cumtime"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(40)
            (out_dir / f"cprofile_{key}.txt").write_text(text.getvalue())
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device == "cuda" else [])]
    with profile(activities=activities) as profiler:
        yield
    for key in ("self_cpu_time_total", f"self_{device}_time_total"):
        table = profiler.key_averages().table(sort_by=key, row_limit=40)
        (out_dir / f"profile_{key}.txt").write_text(table + "\n")


@dataclasses.dataclass(frozen=True)
class LoopTiming:
    """How one loop is timed: its steps, log window, windows skipped as start-up, the training config's --set
    items, the device and the work directory (its run is WORK/run, fresh each time)."""

    steps: int
    log_every: int
    skip_windows: int
    overrides: tuple[str, ...]
    device: str
    work: Path
    profiler: str | None = None  # "torch" or "cprofile": the loop under it, its tables in `out_dir`
    out_dir: Path | None = None
    config: Path = TRAIN_CONFIG  # the training config the loop runs (and its model overrides the bare step's)
    cpu_bf16: bool = False  # on CPU: bf16 autocast where it is fast (ems.precision.bf16_is_fast), else fp32


def measure(unpacked: dict, preset: str, pairs: int, timing: LoopTiming) -> dict:
    """The bare step and the loop of `preset` at `pairs` pairs a step: s/step, pairs/s, tokens/s, MFU (on a GPU
    whose peak is known; model FLOPs of the probe batch, ems.flops), the loop over the bare step, and with a
    compiled step the graphs compiled in the loop (at most one per token-count bucket)."""
    train_config = load_config(TrainConfig, timing.config, overrides=list(timing.overrides))
    device = torch.device(timing.device)
    dtype = "bf16" if timing.device == "cuda" or (timing.cpu_bf16 and bf16_is_fast(device)) else "fp32"
    compiled = compile_enabled(train_config.compile, device)
    shards = shards_of(unpacked["train"])
    cfg = model_config(preset, train_config.model_overrides, shards)
    batch = probe_batch(cfg, shards, pairs)
    flops, peak = batch_flops(cfg, batch), known_peak_tflops(device)
    bare = step_seconds(cfg, batch, timing.device, compiled, dtype, 3, 10)
    bare_tokens = int((batch["src"] != PAD_ID).sum() + (batch["tgt"] != PAD_ID).sum())
    values = {
        **data_paths(unpacked["train"], unpacked["eval"]),
        "model": preset,
        "out": str(timing.work / "run"),
        "batch_size": pairs,
        "max_steps": timing.steps,
        "warmup_steps": max(1, timing.steps // 10),
        "log_every": timing.log_every,
        "valid_every": 10 * timing.steps,
        "valid_pairs": 256,
        "save_every": 10 * timing.steps,
        "probe_every": 0,
        **({} if timing.device == "cuda" else {"autocast": "none" if dtype == "fp32" else "bf16"}),
    }
    shutil.rmtree(timing.work / "run", ignore_errors=True)  # a fresh run, never a resume of the last one
    with profiled(timing.profiler, timing.device, timing.out_dir):
        result = train(load_config(TrainConfig, timing.config, overrides=list(timing.overrides), values=values))
    loop = loop_figures(result.history, timing.skip_windows)
    logged = [record for record in result.history if "compiled_graphs" in record]

    def rates(seconds: float) -> dict:
        return {
            "pairs_per_s": pairs / seconds,
            "mfu": None if peak is None else flops / seconds / (1e12 * peak),
        }

    return {
        "preset": preset,
        "pairs": pairs,
        "compiled": compiled,
        "bare": {"s_per_step": bare, "tokens_per_s": bare_tokens / bare, **rates(bare)},
        "loop": {**loop, **rates(loop["s_per_step"])},
        "loop_over_bare_s_per_step": loop["s_per_step"] / bare,
        "compiled_graphs": logged[-1]["compiled_graphs"] if logged else None,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu.loop_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", type=Path, help="the directory `python -m benchmarks.gpu.acceptance prepare` wrote")
    data.add_argument("--demo", type=Path, help="an ems-demo run directory (its shards/ and vocab/) instead")
    parser.add_argument("--config", type=Path, default=TRAIN_CONFIG, help="the training config (default: gpu.yaml)")
    parser.add_argument("--data-dir", type=Path, default=None, help="with --demo: the evaluation data (probe_data)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--preset", nargs="+", default=["medium"], help="one or more presets, each timed")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--skip-windows", type=int, default=2)
    parser.add_argument("--pairs", type=int, nargs="+", default=[1024], help="one or more batch sizes, each timed")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out-dir", type=Path, help="write loop_overhead.json (and the profile's tables) here")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="training config items for the loop")
    add_debug_option(parser)
    profile = parser.add_mutually_exclusive_group()
    profile.add_argument("--profile", action="store_true", help="the loop under torch.profiler")
    profile.add_argument("--cprofile", action="store_true", help="the loop under cProfile")
    args = parser.parse_args(argv)
    if (args.profile or args.cprofile) and args.out_dir is None:
        raise SystemExit("--profile and --cprofile write their tables to --out-dir: give one")
    if (args.profile or args.cprofile) and len(args.preset) * len(args.pairs) > 1:
        raise SystemExit("--profile and --cprofile profile one loop: give one --preset and one --pairs")
    load_config(TrainConfig, args.config, overrides=args.set)  # the --set items checked before the slow work
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: --device cpu for the wiring run")

    if args.demo is not None:
        unpacked = {"train": args.demo, "eval": args.data_dir or args.demo}
    else:
        unpacked = unpack(open_prepared(args.data), args.work / "data")
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    kind = "torch" if args.profile else "cprofile" if args.cprofile else None
    timing = LoopTiming(
        args.steps,
        args.log_every,
        args.skip_windows,
        tuple(args.set),
        args.device,
        args.work,
        kind,
        args.out_dir,
        args.config,
        cpu_bf16=args.demo is not None,
    )
    report = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "profiler": kind,
        "loop_overrides": args.set,
        "runs": [],
    }
    for preset in args.preset:
        for pairs in args.pairs:
            report["runs"].append(run := measure(unpacked, preset, pairs, timing))
            print(json.dumps(run), flush=True)
            if args.out_dir:  # after every run: a cut command keeps what it measured
                (args.out_dir / "loop_overhead.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
