"""Share of training wall time spent waiting for data, with batches read inside the step and
read ahead by ems.training.batches.Prefetcher: the real trainer, one process, on your shards.

    python -m benchmarks.data_wait --data SHARDS --vocab VOCAB [--config configs/train/demo.yaml]
        [--steps 60] [--skip 20] [--out /tmp/ems_data_wait]

Runs `ems.training.train.train` for --steps steps once per `prefetch_batches` setting (0, then 2), logging
every 20 steps, and prints per setting the mean `data_wait_fraction` and tokens/s of the log
records after step --skip (the first steps also build the batch order and warm up).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from ems.configs import load_config
from ems.training.config import TrainConfig
from ems.training.train import train


def measure(cfg: TrainConfig, skip: int) -> dict:
    """Mean data_wait_fraction and tokens/s of cfg's training records after step `skip`."""
    shutil.rmtree(cfg.out, ignore_errors=True)
    train(cfg)
    records = [json.loads(line) for line in (Path(cfg.out) / "metrics.jsonl").read_text().splitlines()]
    kept = [r for r in records if "data_wait_fraction" in r and r["step"] > skip]
    return {
        "prefetch_batches": cfg.prefetch_batches,
        "records": len(kept),
        "data_wait_fraction": sum(r["data_wait_fraction"] for r in kept) / len(kept),
        "tokens_per_s": sum(r["tokens_per_s"] for r in kept) / len(kept),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--vocab", required=True)
    parser.add_argument("--config", default="configs/train/demo.yaml")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--skip", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("/tmp/ems_data_wait"))
    args = parser.parse_args()
    for depth in (0, 2):
        cfg = load_config(
            TrainConfig,
            args.config,
            [
                f"data={args.data}",
                f"vocab={args.vocab}",
                f"out={args.out / f'prefetch{depth}'}",
                f"max_steps={args.steps}",
                "log_every=20",
                f"save_every={args.steps}",
                f"valid_every={args.steps}",
                "probe_every=0",
                "export_init=false",
                f"prefetch_batches={depth}",
            ],
        )
        result = measure(cfg, args.skip)
        print(
            f"prefetch_batches={depth}: data wait {100 * result['data_wait_fraction']:.2f}% of step time, "
            f"{result['tokens_per_s']:,.0f} tokens/s ({result['records']} log records after step {args.skip})",
            flush=True,
        )


if __name__ == "__main__":
    main()
