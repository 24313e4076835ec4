"""What the training loop adds to the bare training step, on the data and config of the GPU acceptance run.

    python -m benchmarks.gpu_loop_overhead --data runs/gpu_data --work /tmp/lo [--preset medium] [--steps 300] \
        [--set prefetch_batches=0 ...]
    python -m benchmarks.gpu_loop_overhead --data runs/gpu_data --work /tmp/lo --device cpu --preset tiny \
        --steps 12 --log-every 3                                           # wiring, on CPU

The bare step: `gpu_acceptance.step_seconds` (model, fused AdamW, autocast; no DeepSpeed, no data loading,
nothing read back to the host but the timing's synchronisation) on `--pairs` random training pairs, as the
acceptance run's mfu stage times each preset. The loop: `ems.training.train` on configs/train/gpu.yaml with
`--preset`, `--steps` steps, no validation or checkpoint inside the loop and the `--set` items (a variant of the
loop; the bare step is unchanged); its seconds per step and real
tokens per second (and the share of its time the loop waited for a batch) are the logged windows' after the
first `--skip-windows` (start-up). Prints one JSON object (also written to --out-dir): both, and loop / bare.
With --profile the loop runs under torch.profiler (which slows it): the operators by self CPU and self device
time go to --out-dir; give it ~20 --steps, as building its tables from 60 steps of `medium` took over two
minutes on an H200 (docs/results/gpu.md). With --cprofile it runs under cProfile instead: Python functions by
own and cumulative time (on Python 3.12 every thread's, the batch-reading one included; on earlier
versions the training thread's only).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import shutil
import sys
from pathlib import Path

import torch

from benchmarks.gpu_acceptance import TRAIN_CONFIG, model_config, probe_batch, shards_of, step_seconds
from benchmarks.gpu_prepared import open_prepared, unpack
from ems.apps.demo import data_paths
from ems.cli import add_debug_option, run_main
from ems.configs import load_config
from ems.text import PAD_ID
from ems.training.config import TrainConfig
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data", type=Path, required=True, help="the directory `python -m benchmarks.gpu_acceptance prepare` wrote"
    )
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--preset", default="medium")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--skip-windows", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=1024)
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
    load_config(TrainConfig, TRAIN_CONFIG, overrides=args.set)  # the --set items checked before the slow work
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: --device cpu for the wiring run")

    unpacked = unpack(open_prepared(args.data), args.work / "data")
    dtype = "bf16" if args.device == "cuda" else "fp32"
    shards = shards_of(unpacked["train"])
    cfg = model_config(args.preset, load_config(TrainConfig, TRAIN_CONFIG).model_overrides, shards)
    batch = probe_batch(cfg, shards, args.pairs)
    bare = step_seconds(cfg, batch, args.device, False, dtype, 3, 10)
    bare_tokens = int((batch["src"] != PAD_ID).sum() + (batch["tgt"] != PAD_ID).sum())

    values = {
        **data_paths(unpacked["train"], unpacked["eval"]),
        "model": args.preset,
        "out": str(args.work / "run"),
        "batch_size": args.pairs,
        "max_steps": args.steps,
        "warmup_steps": max(1, args.steps // 10),
        "log_every": args.log_every,
        "valid_every": 10 * args.steps,
        "valid_pairs": 256,
        "save_every": 10 * args.steps,
        "probe_every": 0,
        **({} if args.device == "cuda" else {"autocast": "none"}),
    }
    shutil.rmtree(args.work / "run", ignore_errors=True)  # a fresh run, never a resume of the last one
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    kind = "torch" if args.profile else "cprofile" if args.cprofile else None
    with profiled(kind, args.device, args.out_dir):
        result = train(load_config(TrainConfig, TRAIN_CONFIG, overrides=args.set, values=values))
    loop = loop_figures(result["history"], args.skip_windows)
    report = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "preset": args.preset,
        "pairs": args.pairs,
        "bare": {"s_per_step": bare, "tokens_per_s": bare_tokens / bare},
        "loop": loop,
        "loop_over_bare_s_per_step": loop["s_per_step"] / bare,
        "profiler": kind,
        "loop_overrides": args.set,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out_dir:
        (args.out_dir / "loop_overhead.json").write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(run_main(main))
