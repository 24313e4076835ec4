"""The GPU acceptance run: a lent GPU gives a whole report in one command of at most 9 minutes.

    # on the CPU machine, once: the data stage, packed to travel (benchmarks/gpu/prepared.py)
    python -m benchmarks.gpu.acceptance prepare --out runs/gpu_data --wheels
    # on the GPU machine (runs/gpu_data carried; docs/getting-started.md, "GPU machines"): checks, MFU
    # probe, training, evaluation, report
    python3 -m pip install -q --no-index --no-deps --target /tmp/site runs/gpu_data/wheels/*.whl
    PYTHONPATH=/tmp/site:$PWD python3 -m benchmarks.gpu.acceptance run --data runs/gpu_data --work /tmp/ga \
        --report-dir DIR
    # the same path, tiny, on CPU (CI: tests/test_gpu_acceptance.py, on a prepared slice)
    python -m benchmarks.gpu.acceptance run --data PREPARED --work /tmp/smoke --smoke

`prepare` runs the all-language recipe's data stage (configs/data/multilingual.yaml: every Tatoeba
Challenge and TICO-19 language, evaluation sentences removed, 64k SentencePiece, shards) here and keeps
what the GPU run reads in --out, checked against --max-mib (60: the device tool carries 64 MiB with the
working tree), with a manifest; --wheels adds the Python packages the GPU image lacks (deepspeed,
faiss-cpu, sacremoses, ...: PYTHONPATH on the GPU machine). jieba, MeCab and OpenCC are too big to
carry: their answers for the evaluation sentences travel as a table (benchmarks/gpu/standins/).

`run` checks --data's manifest (one line and status 2 for a directory that is incomplete or too big),
unpacks it under --work and runs, each stage capped in time, all within --total-minutes (9.5):

  environment  (<= 1 min) torch; CUDA; NCCL (a one-process all_reduce); bf16; flash SDPA; faiss's GPUs;
               the packages the run imports; the segmenters (installed, or the recorded table)
  mfu          (<= 2 min) the ems-paper training step (train config's model overrides, the prepared
               vocabulary) on 1024 real training pairs, bf16 autocast, eager and torch.compile'd (the
               compiled one in a child process, killed at the cap): s/step, tokens/s, TFLOP/s, MFU. Between
               the two, the eager step of every candidate preset, smallest first (a cap cuts the largest), on
               random pairs of the train config's batch size: its measured s/step (or why not)
  train        (what is left less the evaluation's 3 minutes and the report's) ems.training.train on the carried
               shards with configs/train/gpu.yaml, bf16, eager (ems.training.train has no torch.compile path: the
               probe's compiled figure is what compiling would gain). The preset: the largest of
               ems.model_config.PRESETS that trains usefully, i.e. >= USEFUL_STEPS (2000) optimizer steps of
               the config's batch (1024 pairs: ~5 passes over the ~417k training pairs, 10% of them
               warm-up) in the loop's minutes at its s/step measured in the mfu stage (not FLOPs-scaled:
               on random batches, ~10% real tokens, attention over padding and per-step costs do not scale
               with FLOPs); FLOPs per pair (ems.flops, on the carried shards) are reported beside. The
               schedule ends on time (time_budget_minutes), the loop stops at max_minutes, warm-up,
               validation and logging follow the predicted steps.
  evaluate     (<= 3 min) eval.run_all task by task on configs/eval/suite_gpu.yaml (Tatoeba, xSIM on
               FLORES-200 devtest, SIB-200 with the small_64 MLP) on every language, the unseen ones zero-shot
               (`ems:DIR,unseen=neutral`), batched for the GPU, tokenised in worker processes
  report       report.json + report.md in --work (and --report-dir): environment, MFU, the preset's
               choice, steps, tokens/s, the learning curve (metrics.jsonl), scores by language group
               (eval.language_groups), and what was cut

report.json is rewritten after every stage, so a killed command leaves what it did. A stage over its cap
is cut (SIGALRM) and the next goes on: training stops itself in time (max_minutes) and is cut only as a
last resort; an evaluation task not started in time is listed as cut.

--smoke runs the same path tiny on CPU: the tiny model (d=32) for the probe and a 10-step training run,
fp32, and configs/eval/suite_gpu_smoke.yaml on the trained languages and one unseen one (xh), 200
sentences each. Its numbers test the wiring, not a model. --segmenters table forces the recorded
segmentation table (what the GPU machine uses) where jieba, MeCab and OpenCC are installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from benchmarks.gpu import report as gpu_report
from benchmarks.gpu.environment import stage_environment
from benchmarks.gpu.evaluate import stage_evaluate
from benchmarks.gpu.mfu import stage_mfu
from benchmarks.gpu.prepared import DATA_CONFIG, DEFAULT_LIMIT_MIB, SEGMENTATION, open_prepared, prepare, unpack
from benchmarks.gpu.profiles import GPU, SMOKE
from benchmarks.gpu.segmenters import segmenters
from benchmarks.gpu.stage import Clock, Context, now, run_stage, write_report
from benchmarks.gpu.step import step_time_main
from benchmarks.gpu.train import stage_train
from ems.cli import UserError, add_debug_option, run_main


def run_stages(ctx: Context) -> None:
    """Every stage in order, each capped so that the whole ends within the clock's minutes."""
    caps = ctx.profile.caps
    for stage, function in (("environment", stage_environment), ("mfu", stage_mfu)):
        run_stage(ctx, stage, min(caps[stage], ctx.clock.left() - ctx.reserve(stage)), function)
    train_cap = ctx.clock.left() - ctx.reserve("train")
    ctx.stages["train"] = {"loop_minutes": train_cap - ctx.profile.train_margin_minutes}
    if train_cap < ctx.profile.min_train_minutes:
        print(f"training gets {train_cap:.2f} min, under the {ctx.profile.min_train_minutes:g} wanted", flush=True)
    loop_minutes = ctx.stages["train"]["loop_minutes"]
    # the trainer stops itself at max_minutes; the cap (into half the evaluation's reserve) is the last resort
    run_stage(ctx, "train", train_cap + caps["evaluate"] / 2, stage_train)
    ctx.stages["train"].update(loop_minutes=round(loop_minutes, 3), train_cap_minutes=round(train_cap, 2))
    run_stage(ctx, "evaluate", min(caps["evaluate"], ctx.clock.left() - caps["report"]), stage_evaluate)
    started = time.monotonic()
    ctx.stages["report"] = {"status": "done", "output": {}}
    write_report(ctx)
    ctx.stages["report"]["seconds"] = round(time.monotonic() - started, 1)
    write_report(ctx)


def check_run_inputs(args: argparse.Namespace) -> None:
    if not args.smoke and args.device != "cuda":
        raise UserError("the acceptance run is a GPU run (--device cuda); --smoke runs its stages tiny on CPU")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError(
            f"no CUDA GPU here (torch {torch.__version__}, CUDA {torch.version.cuda or 'not built'}): "
            "run this on the GPU machine, or add --smoke for the tiny CPU run"
        )
    if not args.total_minutes > 0:
        raise UserError(f"--total-minutes must be positive, got {args.total_minutes}")


def run_command(args: argparse.Namespace, clock: Clock) -> int:
    check_run_inputs(args)
    prepared = open_prepared(args.data, args.max_mib)
    profile = SMOKE if args.smoke else GPU
    args.work.mkdir(parents=True, exist_ok=True)
    unpacked = unpack(prepared, args.work / "data")
    report_dirs = list(dict.fromkeys([args.work, *([args.report_dir] if args.report_dir else [])]))
    settings = {
        "profile": profile.name,
        "device": args.device,
        "data": str(args.data),
        "total_minutes": args.total_minutes,
        "argv": args.argv,
        "started": now(),
        "unpack_seconds": round(60 * clock.elapsed(), 1),
    }
    with segmenters(args.segmenters, prepared.path / SEGMENTATION) as segmentation:
        ctx = Context(
            work=args.work,
            report_dirs=report_dirs,
            device=args.device,
            profile=profile,
            clock=clock,
            prepared=prepared,
            train_data=unpacked["train"],
            eval_data=unpacked["eval"],
            settings=settings,
            segmenters=segmentation,
        )
        run_stages(ctx)
    print("\n" + (args.work / gpu_report.REPORT_MD).read_text(), flush=True)
    print(f"{clock.elapsed():.2f} min; report: {', '.join(str(d / gpu_report.REPORT_MD) for d in report_dirs)}")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu.acceptance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_debug_option(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="the data stage on this (CPU) machine, packed to travel")
    prep.add_argument("--out", type=Path, required=True, help="the directory to carry (under runs/, git-ignored)")
    prep.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get("EMS_DATA_DIR") or None,
        help="the shared data directory (default: $EMS_DATA_DIR)",
    )
    prep.add_argument("--data-config", type=Path, default=DATA_CONFIG, help="default: configs/data/multilingual.yaml")
    prep.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override data config keys")
    prep.add_argument("--build", type=Path, default=None, help="the data stage's directory (default: OUT.build)")
    prep.add_argument("--xz-preset", type=int, default=6, choices=range(10), help="xz compression level (default 6)")
    prep.add_argument("--wheels", action="store_true", help="also the wheels of the packages the GPU image lacks")
    run = commands.add_parser("run", help="the acceptance run on the GPU machine (--smoke: tiny, on CPU)")
    run.add_argument("--data", type=Path, required=True, help="the directory `prepare` wrote (carried)")
    run.add_argument("--work", type=Path, required=True, help="unpacked data, run, evaluation and report")
    run.add_argument("--report-dir", type=Path, default=None, help="also write report.json and report.md here")
    run.add_argument("--total-minutes", type=float, default=9.5, help="the whole command's minutes (default 9.5)")
    run.add_argument("--smoke", action="store_true", help="every stage tiny, on CPU: a wiring test")
    run.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda; cpu with --smoke")
    run.add_argument(
        "--segmenters",
        choices=("auto", "table", "installed"),
        default="auto",
        help="jieba/MeCab/OpenCC: the installed packages, or the prepared table (auto: the table where one is missing)",
    )
    for sub in (prep, run):
        sub.add_argument("--max-mib", type=float, default=DEFAULT_LIMIT_MIB, help="the prepared directory's limit")
    step = commands.add_parser("step-time", help="(internal) one MFU variant in a child process")
    step.add_argument("--request", type=json.loads, required=True)
    args = parser.parse_args(argv)
    args.argv = list(argv)
    if args.command == "run":
        args.device = args.device or ("cpu" if args.smoke else "cuda")
    return args


def main(argv: list[str]) -> int:
    """prepare, run or step-time; user errors raise (ems.cli.run_main: one line, status 2)."""
    clock = Clock(9.0)
    args = parse_args(argv)
    if args.command == "prepare":
        if args.data_dir is None:
            raise UserError("no data directory: give --data-dir or set EMS_DATA_DIR (see ../shared/data/PROVENANCE.md)")
        if not args.max_mib > 0:
            raise UserError(f"--max-mib must be positive, got {args.max_mib}")
        prepare(
            args.out, args.data_dir, args.data_config, args.set, args.max_mib, args.xz_preset, args.wheels, args.build
        )
        return 0
    if args.command == "step-time":
        return step_time_main(args.request)
    clock.minutes = args.total_minutes
    return run_command(args, clock)


if __name__ == "__main__":
    sys.exit(run_main(main))
