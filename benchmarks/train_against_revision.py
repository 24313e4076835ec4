"""The demo's training loop with an earlier git revision and with this checkout, alternating on one machine.

    python -m benchmarks.train_against_revision --demo runs/demo --baseline REV [--steps 200] [--rounds 3]
        [--config configs/train/demo.yaml] [--work /tmp/ems_against_revision] [--out FILE.json]

Each round trains the config for --steps steps (a fresh run each time: no probe, no checkpoint inside the
loop, one validation at the last step) with the baseline revision (checked out once as a git worktree under
--work, run as `python -m ems.training.train` from it, so that its own code and configs are used) and with
this checkout, in the order baseline, new in odd rounds and new, baseline in even ones; beside each loop, the
same tree's bare step (benchmarks.bare_step through `python -m benchmarks.gpu.acceptance step-time`: the
model, AdamW and one real batch of --pairs training pairs, no loop). Shared CPUs change speed by a third from
one minute to the next, so only side-by-side rounds compare.

Prints and writes (--out) per side and round: the loop's seconds per step (the logged windows after the first
two), the bare step's, loop / bare, the held-out loss at the last step; then the medians and new / baseline.
Both sides train on the same batches from the same initial weights, so their held-out losses agree to float
tolerance unless a change altered what a step computes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu.loop_overhead import loop_figures
from ems.cli import UserError, add_debug_option, run_main
from ems.configs import load_config
from ems.run_metadata import machine
from ems.training.config import REPO_ROOT, TrainConfig

SIDES = ("baseline", "new")
SKIP_WINDOWS = 2  # start-up: the batch order, the first allocations


def metrics_rows(metrics_file: Path) -> list[dict]:
    """The records of a run's metrics.jsonl."""
    return [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]


def loop_seconds_per_step(metrics_file: Path, skip_windows: int = SKIP_WINDOWS) -> float:
    """Seconds per step over a run's logged training windows (metrics.jsonl rows with "seconds") after the
    first `skip_windows` (benchmarks.gpu.loop_overhead.loop_figures)."""
    rows = metrics_rows(metrics_file)
    windows = sum("seconds" in row and "tokens_per_s" in row for row in rows)
    if windows <= skip_windows:
        raise UserError(f"{metrics_file}: {windows} logged windows, none after the first {skip_windows}")
    return loop_figures(rows, skip_windows)["s_per_step"]


def last_valid_loss(metrics_file: Path) -> float:
    """The held-out loss of a run's last validation record."""
    losses = [row["valid_loss"] for row in metrics_rows(metrics_file) if "valid_loss" in row]
    if not losses:
        raise UserError(f"{metrics_file}: no validation record")
    return losses[-1]


def baseline_tree(revision: str, work: Path) -> Path:
    """A worktree of `revision` under `work` (made once, reused while it stays at that commit)."""
    commit = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not commit:
        raise UserError(f"--baseline {revision}: no such commit in {REPO_ROOT}")
    tree = work / f"baseline-{commit[:12]}"
    if not (tree / "ems").is_dir():
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "--force", str(tree), commit],
            check=True,
            capture_output=True,
        )
    return tree


def run_child(command: list[str], cwd: Path, what: str) -> None:
    """`command` run from `cwd` (whose packages it imports first); UserError with its last line if it fails."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()] or ["no output"]
        raise UserError(f"{what} exited with {done.returncode}: {lines[-1]}")


def measure_side(tree: Path, args: argparse.Namespace, out: Path) -> dict:
    """One side's bare step and loop, trained from `tree`."""
    demo = args.demo.resolve()
    config = (tree / args.config).resolve()
    request = {
        "train_data": str(demo),
        "preset": "tiny",
        "overrides": load_config(TrainConfig, config).model_overrides,  # the bare step's model is the loop's
        "pairs": args.pairs,
        "device": "cpu",
        "variant": "eager",
        "dtype": "fp32",
        "timing": [3, 10],
        "work": str(out),
    }
    out.mkdir(parents=True, exist_ok=True)
    run_child(
        [sys.executable, "-m", "benchmarks.gpu.acceptance", "step-time", "--request", json.dumps(request)],
        tree,
        f"{tree.name}'s bare step",
    )
    bare = json.loads((out / "step_eager.json").read_text())["seconds"]
    values = {
        "data": demo / "shards" / "train",
        "vocab": demo / "vocab",
        "valid_data": demo / "shards" / "heldout",
        "out": out / "run",
        "max_steps": args.steps,
        "log_every": 20,
        "valid_every": args.steps,
        "save_every": 10 * args.steps,
        "probe_every": 0,
        "export_init": "false",
    }
    command = [sys.executable, "-m", "ems.training.train", "--config", str(config), "--set"]
    command += [f"{key}={value}" for key, value in values.items()]
    run_child(command, tree, f"{tree.name}'s training loop")
    loop = loop_seconds_per_step(out / "run" / "metrics.jsonl")
    return {
        "bare_s_per_step": bare,
        "loop_s_per_step": loop,
        "loop_over_bare": loop / bare,
        "valid_loss": last_valid_loss(out / "run" / "metrics.jsonl"),
    }


def summary(rounds: list[dict]) -> dict:
    """Medians over the rounds per side, and new over baseline (seconds per step; < 1: the new code is faster)."""
    medians = {
        side: {key: statistics.median(r[side][key] for r in rounds) for key in rounds[0][side]} for side in SIDES
    }
    return {
        "medians": medians,
        "new_over_baseline_loop": statistics.median(
            r["new"]["loop_s_per_step"] / r["baseline"]["loop_s_per_step"] for r in rounds
        ),
        "new_over_baseline_bare": statistics.median(
            r["new"]["bare_s_per_step"] / r["baseline"]["bare_s_per_step"] for r in rounds
        ),
        "valid_loss_difference": max(abs(r["new"]["valid_loss"] - r["baseline"]["valid_loss"]) for r in rounds),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, required=True, help="an ems-demo output directory (shards/, vocab/)")
    parser.add_argument("--baseline", required=True, help="the git revision to compare with")
    parser.add_argument("--config", default="configs/train/demo.yaml", help="each side's own copy of this file")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=256, help="the bare step's batch")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ems_against_revision"))
    parser.add_argument("--out", type=Path, default=None, help="also write the report here (JSON)")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    for needed in ("shards/train", "shards/heldout", "vocab"):
        if not (args.demo / needed).is_dir():
            raise UserError(f"--demo {args.demo}: no {needed}/ (an ems-demo output directory holds it)")
    if args.steps < 60 or args.rounds < 1:
        raise UserError("--steps must be at least 60 (three logged windows of 20) and --rounds at least 1")
    trees = {"baseline": baseline_tree(args.baseline, args.work.resolve()), "new": REPO_ROOT}
    rounds = []
    for number in range(args.rounds):
        order = SIDES if number % 2 == 0 else SIDES[::-1]
        row = {side: measure_side(trees[side], args, args.work.resolve() / f"round{number}" / side) for side in order}
        rounds.append(row)
        print(json.dumps({"round": number, **row}), flush=True)
    report = {"baseline": args.baseline, "steps": args.steps, "machine": machine(), "rounds": rounds, **summary(rounds)}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
