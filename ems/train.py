"""Train an EMS model with DeepSpeed.

    python -m ems.train --config configs/train/demo.yaml --set data=SHARDS vocab=VOCAB out=RUN
    deepspeed --num_gpus 1 --module ems.train --config ...      # same, through the launcher

Reads `data_prep binarize` shards; writes, under `out`:
    checkpoints/   DeepSpeed checkpoints (+ step, data position, RNG) for resuming
    tb/            TensorBoard scalars: loss/{total,xtr,contrastive}, lr, tokens_per_s
    model/         the inference export (`ems.load(out/model)`)
    train_config.yaml, metrics.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ems.configs import dump_config, load_config
from ems.data import BatchOrder, PairShards, collate, iterate_batches
from ems.encoder import export_encoder
from ems.model import EMSModel, config_from_preset
from ems.text import Tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class TrainConfig:
    data: str = ""  # shard directory written by `data_prep binarize`
    vocab: str = ""  # vocabulary directory (exported with the model)
    out: str = "runs/train"
    model: str = "tiny"  # preset name in ems.model.PRESETS
    model_overrides: dict = field(default_factory=dict)
    deepspeed_config: str = "configs/deepspeed/zero0.json"
    batch_size: int = 152  # pairs per process per step (the paper: 152 per GPU)
    lr: float = 3e-4
    warmup_steps: int = 10_000
    weight_decay: float = 1e-5
    max_steps: int = 100_000
    max_minutes: float | None = None  # stop early (and save) once this much wall time has passed
    stop_at_step: int | None = None  # end this invocation (and save) at this step; the schedule still runs to max_steps
    autocast: str = "none"  # "bf16": bfloat16 autocast for the forward pass; weights stay fp32
    seed: int = 0
    log_every: int = 10
    save_every: int = 1000
    export_init: bool = False  # also export the untrained encoder to out/model-init (a baseline)
    valid_data: str | None = None  # shard directory of held-out pairs: validation loss at start, every valid_every, end
    valid_every: int = 500
    valid_batches: int = 8


def lr_lambda(warmup_steps: int, max_steps: int):
    """Linear warm-up to the peak lr, then linear decay to zero at max_steps."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (max_steps - step) / max(1, max_steps - warmup_steps))

    return factor


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only, not on biases, LayerNorms or embeddings."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.dim() == 2 and "emb" not in name else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@torch.no_grad()
def validation_loss(engine, shards: PairShards, batch_size: int, n_batches: int, max_len: int, autocast) -> dict:
    """Mean losses over fixed batches of the first pairs of `shards`, dropout off. The batches
    never change, so the values are comparable across steps (the contrastive loss depends on
    the batch, hence fixed batch composition)."""
    n = min(len(shards), batch_size * n_batches)
    if n < 2:
        raise ValueError("validation data needs at least 2 pairs")
    engine.eval()
    totals, count = torch.zeros(3), 0
    for start in range(0, n, batch_size):
        indices = np.arange(start, min(start + batch_size, n))
        if len(indices) < 2:
            break
        batch = {k: v.to(engine.device) for k, v in collate(shards, indices, max_len).items()}
        with autocast:
            losses = engine(**batch)
        totals += torch.stack([losses["loss"], losses["xtr"], losses["contrastive"]]).float().cpu() * len(indices)
        count += len(indices)
    engine.train()
    loss, xtr, contrastive = (totals / count).tolist()
    return {"valid_loss": loss, "valid_xtr": xtr, "valid_contrastive": contrastive}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> None:
    """Initialise torch.distributed through DeepSpeed; a plain `python` run becomes a world of one."""
    import deepspeed

    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    deepspeed.init_distributed()


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def train(cfg: TrainConfig) -> dict:
    """Run (or resume) training; returns {"steps", "history": [per-logged-step metrics], "model_dir"}."""
    import deepspeed
    import torch.distributed as dist
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    if cfg.autocast not in ("none", "bf16"):
        raise ValueError(f"autocast must be 'none' or 'bf16', not {cfg.autocast!r}")
    init_distributed()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out = Path(cfg.out)
    shards = PairShards(cfg.data)
    tokenizer = Tokenizer.load(cfg.vocab)
    if shards.languages != tokenizer.languages or shards.index["vocab_size"] != tokenizer.vocab_size:
        raise ValueError(f"shards in {cfg.data} were not made with the vocabulary in {cfg.vocab}")

    torch.manual_seed(cfg.seed)
    model_cfg = config_from_preset(
        cfg.model, vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages), **cfg.model_overrides
    )
    model = EMSModel(model_cfg)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        dump_config(cfg, out / "train_config.yaml")
        if cfg.export_init:
            export_encoder(model.encoder, tokenizer, out / "model-init")

    ds_config = json.loads(_resolve(cfg.deepspeed_config).read_text())
    ds_config["train_micro_batch_size_per_gpu"] = cfg.batch_size
    ds_config.pop("train_batch_size", None)
    optimizer = torch.optim.AdamW(parameter_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.warmup_steps, cfg.max_steps))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)

    checkpoint_dir = out / "checkpoints"
    step, position = 0, (0, 0)
    if (checkpoint_dir / "latest").is_file():
        load_path, client_state = engine.load_checkpoint(str(checkpoint_dir))
        if load_path is not None:
            step, position = client_state["step"], tuple(client_state["data_position"])
            torch.set_rng_state(client_state["torch_rng"])
            if rank == 0:
                print(f"resumed from {load_path} at step {step}, data position {position}")

    def save() -> None:
        engine.save_checkpoint(
            str(checkpoint_dir), tag=f"step{step}",
            client_state={"step": step, "data_position": list(position), "torch_rng": torch.get_rng_state()},
        )

    order = BatchOrder(shards.pair_lengths(), cfg.batch_size * world_size, seed=cfg.seed)
    batches = iterate_batches(shards, order, model_cfg.max_len, start=position, rank=rank, world_size=world_size)
    autocast = (
        torch.autocast(engine.device.type, dtype=torch.bfloat16) if cfg.autocast == "bf16" else contextlib.nullcontext()
    )
    valid_shards = PairShards(cfg.valid_data) if cfg.valid_data else None
    writer = SummaryWriter(str(out / "tb")) if rank == 0 else None
    metrics_file = (out / "metrics.jsonl").open("a") if rank == 0 else None
    history: list[dict] = []
    started = time.time()
    window_tokens, window_steps, window_losses, window_start = 0, 0, torch.zeros(3), time.time()
    bar = tqdm(total=cfg.max_steps, initial=step, disable=rank != 0, desc="train", unit="step", mininterval=2.0)
    last_step = min(cfg.max_steps, cfg.stop_at_step or cfg.max_steps)

    def validate() -> None:
        if valid_shards is None:
            return
        record = {"step": step, **validation_loss(engine, valid_shards, cfg.batch_size, cfg.valid_batches, model_cfg.max_len, autocast)}
        history.append(record)
        if rank == 0:
            for key in ("loss", "xtr", "contrastive"):
                writer.add_scalar(f"valid/{key}", record[f"valid_{key}"], step)
            metrics_file.write(json.dumps(record) + "\n")

    if step == 0:
        validate()
    while step < last_step:
        if cfg.max_minutes is not None and time.time() - started > 60 * cfg.max_minutes:
            if rank == 0:
                print(f"stopping at step {step}: max_minutes={cfg.max_minutes} reached")
            break
        (epoch, batch_idx), batch = next(batches)
        batch = {k: v.to(engine.device) for k, v in batch.items()}
        with autocast:
            losses = engine(**batch)
        engine.backward(losses["loss"])
        losses = {k: v.detach() for k, v in losses.items()}
        engine.step()
        step += 1
        position = (epoch, batch_idx + 1)
        window_tokens += int((batch["src"] != model_cfg.pad_id).sum() + (batch["tgt"] != model_cfg.pad_id).sum())
        window_losses += torch.stack([losses["loss"], losses["xtr"], losses["contrastive"]]).float()
        window_steps += 1
        bar.update(1)
        if step % cfg.log_every == 0 or step == last_step:
            elapsed = time.time() - window_start
            loss, xtr, contrastive = (window_losses / window_steps).tolist()
            record = {
                "step": step, "epoch": epoch, "loss": loss, "xtr": xtr, "contrastive": contrastive,
                "lr": float(engine.get_lr()[0]), "tokens_per_s": window_tokens * world_size / max(elapsed, 1e-9),
            }
            if not all(math.isfinite(v) for v in (loss, xtr, contrastive)):
                raise FloatingPointError(f"non-finite loss at step {step}: {record}")
            history.append(record)
            window_tokens, window_steps, window_losses, window_start = 0, 0, torch.zeros(3), time.time()
            if rank == 0:
                for key in ("loss", "xtr", "contrastive"):
                    writer.add_scalar(f"loss/{'total' if key == 'loss' else key}", record[key], step)
                writer.add_scalar("lr", record["lr"], step)
                writer.add_scalar("tokens_per_s", record["tokens_per_s"], step)
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                bar.set_postfix(loss=f"{loss:.3f}", xtr=f"{xtr:.3f}", cntrs=f"{contrastive:.3f}")
        if step % cfg.save_every == 0:
            save()
        if step % cfg.valid_every == 0 and step != last_step:
            validate()
    bar.close()
    validate()
    save()
    model_dir = out / "model"
    if rank == 0:
        export_encoder(engine.module.encoder, tokenizer, model_dir)
        writer.close()
        metrics_file.close()
    dist.barrier()
    return {"steps": step, "history": history, "model_dir": str(model_dir)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML file of TrainConfig keys")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override config keys")
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # the deepspeed launcher adds it
    args = parser.parse_args(argv)
    cfg = load_config(TrainConfig, args.config, args.set)
    for key in ("data", "vocab"):
        if not getattr(cfg, key):
            parser.error(f"{key} is not set (in the config or with --set {key}=PATH)")
    result = train(cfg)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"trained {result['steps']} steps; model: {result['model_dir']}")


if __name__ == "__main__":
    main()
