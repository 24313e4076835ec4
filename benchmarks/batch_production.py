"""Host-side cost of one training batch: the batch order's pair indices and their collation into tensors.

    python -m benchmarks.batch_production --data SHARDS [--config configs/train/gpu.yaml] [--set KEY=VALUE ...]
        [--batches 30] [--json OUT]

The trainer's own BatchOrder (ems.training.setup.build_order: the config's batch size, pair_sampling_temperature,
bucketing window, duplicate spreading) and collate (ems.training.batches.collate, the model preset's
max_len) on --data, one process, no model: mean milliseconds per global batch of each part, after one
warm-up batch (a mean: the order computes its pair sequence a block of batches at a time). This is
Python and NumPy work on the CPU that a GPU step waits for when the reading thread holds the
interpreter lock, so it matters most where the step itself is short (a GPU); compare it with the
step's seconds (benchmarks/train_mfu.py, benchmarks/gpu/mfu.py's probe).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from ems.configs import load_config
from ems.model_config import config_from_preset
from ems.shards import PairShards
from ems.training.batches import collate
from ems.training.config import TrainConfig
from ems.training.setup import build_order


def measure(cfg: TrainConfig, shards: PairShards, batches: int) -> dict:
    """Mean ms per global batch of the batch order and of collate, over `batches` batches after one."""
    max_len = config_from_preset(cfg.model, **cfg.model_overrides).max_len
    order = build_order(cfg, shards, cfg.batch_size, max_len)
    order_ms, collate_ms, real, slots = [], [], 0, 0
    for b in range(min(batches + 1, order.batches_per_epoch())):
        started = time.perf_counter()
        pairs = order.batch(0, b)
        ordered = time.perf_counter()
        batch = collate(shards, pairs, max_len)
        done = time.perf_counter()
        if b:
            order_ms.append(1000 * (ordered - started))
            collate_ms.append(1000 * (done - ordered))
            real += int((batch["src"] != 0).sum() + (batch["tgt"] != 0).sum())
            slots += batch["src"].numel() + batch["tgt"].numel()
    return {
        "batch_size": cfg.batch_size,
        "bucket_batches": cfg.bucket_batches,
        "pair_sampling_temperature": cfg.pair_sampling_temperature,
        "max_len": max_len,
        "batches": len(order_ms),
        "order_ms": statistics.mean(order_ms),
        "collate_ms": statistics.mean(collate_ms),
        "real_token_ratio": real / slots,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="training shards (a directory of ems.shards)")
    parser.add_argument("--config", type=Path, default=Path("configs/train/gpu.yaml"))
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override train config keys")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    cfg = load_config(TrainConfig, args.config, args.set)
    figures = measure(cfg, PairShards(args.data), args.batches)
    print(
        f"{figures['batches']} batches of {figures['batch_size']} pairs (bucket_batches {figures['bucket_batches']}, "
        f"pair sampling temperature {figures['pair_sampling_temperature']}, max_len {figures['max_len']}): "
        f"order {figures['order_ms']:.1f} ms, "
        f"collate {figures['collate_ms']:.1f} ms a batch (mean); real tokens {figures['real_token_ratio']:.3f}"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
