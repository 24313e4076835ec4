"""Train an EMS model with DeepSpeed, on one process or many, resumable exactly.

    python -m ems.train --config configs/train/demo.yaml --set data=SHARDS vocab=VOCAB out=RUN
    deepspeed --num_gpus 4 --module ems.train --config ...      # 4 GPU processes through the launcher
    torchrun --nproc_per_node 4 -m ems.train --config ...       # the same through torchrun (also on CPU, gloo)

Reads `data_prep binarize` shards; writes, under `out`:
    checkpoints/   step<N>/ checkpoints (DeepSpeed model/optimizer/scheduler/loss-scaler state,
                   step, data position, every rank's RNG states, manifest.json) and `latest`;
                   see ems.checkpoint. A rerun with the same `out` resumes from the newest
                   checkpoint that verifies.
    tb/            TensorBoard: loss/{total,xtr,contrastive}, lr, grad_norm, overflow_steps (fp16), tokens_per_s,
                   real_token_ratio, valid/{total,xtr,contrastive}
    model/         the inference export (`ems.load(out/model)`)
    train_config.yaml, metrics.jsonl

Stopping: SIGUSR1 or SIGTERM (SLURM's pre-emption warning) on any rank, or a file named STOP in
`out`, makes every rank finish the current step, save a checkpoint and exit with status
PREEMPTED_EXIT_CODE (99; slurm/train.sh requeues the job on it). The STOP file is removed once
honoured, so the requeued run trains on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ems.checkpoint import partial_dir, publish, resumable_tag, rng_file, rng_state, set_rng_state, step_tag
from ems.configs import _merge, dump_config, load_config
from ems.data import BatchOrder, PairShards, collate, iterate_batches, real_and_padded_tokens, sub_batch
from ems.encoder import export_encoder
from ems.model import EMSModel, config_from_preset
from ems.text import Tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
PREEMPTED_EXIT_CODE = 99  # slurm/train.sh turns it into `scontrol requeue`
STOP_FILE = "STOP"  # in `out`: stop at the next step boundary, checkpoint, exit PREEMPTED_EXIT_CODE
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


@dataclass
class TrainConfig:
    data: str = ""  # shard directory written by `data_prep binarize`
    vocab: str = ""  # vocabulary directory (exported with the model)
    out: str = "runs/train"
    model: str = "tiny"  # preset name in ems.model.PRESETS
    model_overrides: dict = field(default_factory=dict)
    deepspeed_config: str = "configs/deepspeed/zero0.json"  # ZeRO stage, bf16/fp16, accumulation, clipping
    deepspeed_overrides: dict = field(default_factory=dict)  # merged into that file, e.g. {"gradient_accumulation_steps": 2}
    batch_size: int = 152  # pairs per process per micro-step (the paper: 152 per GPU)
    global_negatives: bool = False  # contrastive negatives from all ranks (the paper's code: each GPU's own batch)
    temperature: float | None = None  # sample language pairs with q ∝ (n/N)^(1/T) (the paper's code: off; T=5 when on)
    # Sort pairs by both sides' lengths within windows of this many global batches (>= 95% real
    # tokens at the paper's scale). On a small corpus a window that spans it all makes every batch
    # length-uniform and the same each epoch, and the contrastive loss stalls in short runs
    # (measured: 80 steps on 2k pairs, 6.18 vs 5.28-5.67 with 50): use ~50 there (configs/train/demo.yaml).
    bucket_batches: int = 1000
    lr: float = 3e-4
    warmup_steps: int = 10_000
    weight_decay: float = 1e-5
    max_steps: int = 100_000
    max_epochs: float | None = None  # if set, max_steps = this many passes over the data (depends on the global batch)
    max_minutes: float | None = None  # stop early (save, validate, export; exit 0) once this much wall time has passed
    # Fit the schedule to a wall-clock budget: after `budget_probe_steps` timed steps, max_steps
    # becomes the number of steps that fit in these minutes (never more than max_steps), so
    # warm-up and decay end on time on a fast or a slow machine. Kept across resumes.
    time_budget_minutes: float | None = None
    budget_probe_steps: int = 20
    stop_at_step: int | None = None  # end this invocation (and save) at this step; the schedule still runs to max_steps
    # "bf16": bfloat16 autocast for the forward pass, weights stay fp32; "auto": bf16 where it is
    # faster than fp32 (`bf16_is_fast`: GPUs, CPUs with AMX/AVX512-BF16; not AVX2-only CPUs,
    # which emulate it ~50x slower than fp32); "none": fp32
    autocast: str = "none"
    seed: int = 0
    log_every: int = 10
    save_every: int = 1000
    keep_checkpoints: int = 3  # the newest this many step<N>/ checkpoints are kept
    export_init: bool = False  # also export the untrained encoder to out/model-init (a baseline)
    valid_data: str | None = None  # shard directory of held-out pairs: validation loss at start, every valid_every, end
    valid_every: int = 500
    valid_batches: int = 8


@dataclass
class LinearSchedule:
    """lr factor: linear warm-up to the peak lr, then linear decay to zero at max_steps
    (mutable, for a schedule fitted to a time budget)."""

    warmup_steps: int
    max_steps: int

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        return max(0.0, (self.max_steps - step) / max(1, self.max_steps - self.warmup_steps))


def steps_within_budget(step: int, seconds_per_step: float, elapsed_minutes: float, budget_minutes: float) -> int:
    """The final step count of a run at `step` after `elapsed_minutes` that goes on at
    `seconds_per_step` and must end within `budget_minutes` (at least one more step)."""
    remaining = 60.0 * (budget_minutes - elapsed_minutes)
    return step + max(1, int(remaining / seconds_per_step))


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only, not on biases, LayerNorms or embeddings."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.dim() == 2 and "emb" not in name else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@torch.no_grad()
def validation_loss(engine, shards: PairShards, batch_size: int, n_batches: int, max_len: int, autocast) -> dict:
    """Mean losses over fixed global batches of the first pairs of `shards`, dropout off; each
    rank scores its share of each batch, as in training. The batches never change, so the
    values are comparable across steps (the contrastive loss depends on the batch)."""
    import torch.distributed as dist

    rank, world_size = dist.get_rank(), dist.get_world_size()
    global_batch = batch_size * world_size
    n = min(len(shards), global_batch * n_batches) // world_size * world_size
    if n < 2 * world_size:
        raise ValueError(f"validation data needs at least {2 * world_size} pairs, has {len(shards)}")
    engine.eval()
    totals = torch.zeros(4)
    for start in range(0, n, global_batch):
        indices = sub_batch(np.arange(start, min(start + global_batch, n)), 0, rank, world_size)
        batch = {k: v.to(engine.device) for k, v in collate(shards, indices, max_len).items()}
        with autocast:
            losses = engine(**batch)
        values = torch.stack([losses["loss"], losses["xtr"], losses["contrastive"]]).float().cpu()
        totals += torch.cat([values * len(indices), torch.tensor([len(indices)])])
    engine.train()
    totals = totals.to(engine.device)
    dist.all_reduce(totals)
    loss, xtr, contrastive = (totals[:3] / totals[3]).tolist()
    return {"valid_loss": loss, "valid_xtr": xtr, "valid_contrastive": contrastive}


def bf16_is_fast(device: torch.device) -> bool:
    """Whether bf16 matmuls beat fp32 here. CUDA: the GPU supports bf16. CPU: timed on a 256^3
    product, since CPUs with AMX or AVX512-BF16 run bf16 several times faster than fp32 and
    AVX2-only CPUs emulate it tens of times slower (both seen on this project's machines)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def seconds(dtype: torch.dtype) -> float:
        x, y = a.to(dtype), b.to(dtype)
        torch.matmul(x, y)
        start = time.perf_counter()
        for _ in range(3):
            torch.matmul(x, y)
        return time.perf_counter() - start

    return seconds(torch.bfloat16) < seconds(torch.float32)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> None:
    """Initialise torch.distributed through DeepSpeed (NCCL on GPUs, gloo on CPU); a plain
    `python` run becomes a world of one."""
    import deepspeed

    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    deepspeed.init_distributed()


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def deepspeed_config(cfg: TrainConfig) -> dict:
    """The DeepSpeed config file merged with `deepspeed_overrides`, micro-batch set from batch_size;
    a clear error for a precision this machine's accelerator cannot run."""
    from deepspeed.accelerator import get_accelerator

    ds_config = _merge(json.loads(_resolve(cfg.deepspeed_config).read_text()), cfg.deepspeed_overrides)
    ds_config["train_micro_batch_size_per_gpu"] = cfg.batch_size
    ds_config.pop("train_batch_size", None)
    accelerator = get_accelerator()
    for precision, supported in (("fp16", accelerator.is_fp16_supported), ("bf16", accelerator.is_bf16_supported)):
        if ds_config.get(precision, {}).get("enabled") and not supported():
            raise ValueError(
                f"{cfg.deepspeed_config} enables {precision}, which DeepSpeed's {accelerator._name} accelerator "
                f"does not support on this machine; use a config without it (e.g. configs/deepspeed/zero0.json, "
                f"or bf16) or run on a GPU"
            )
    return ds_config


class StopRequest:
    """Set by SIGUSR1/SIGTERM (the handler only sets a flag); restored handlers on close."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}

    def _handle(self, signum, frame) -> None:
        self.signal = signum

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _module_grad_norm(module: torch.nn.Module) -> float:
    """2-norm of the gradients held in the parameters' .grad."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else math.nan


def _keep_metrics_up_to(path: Path, step: int) -> None:
    """On resume: drop metrics.jsonl records after the checkpoint's step (and a half-written
    last line of a killed run), so every step appears once."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record["step"] <= step:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept))


def train(cfg: TrainConfig) -> dict:
    """Run (or resume) training; returns {"steps", "max_steps" (the schedule's end), "history": [per-logged-step metrics],
    "model_dir" (None when stopped), "preempted": whether a signal or STOP file ended it}."""
    import deepspeed
    import torch.distributed as dist
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    if cfg.autocast not in ("none", "bf16", "auto"):
        raise ValueError(f"autocast must be 'none', 'bf16' or 'auto', not {cfg.autocast!r}")
    ds_config = deepspeed_config(cfg)
    init_distributed()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    accumulation = int(ds_config.get("gradient_accumulation_steps", 1))
    global_batch = cfg.batch_size * world_size * accumulation
    out = Path(cfg.out)
    shards = PairShards(cfg.data)
    tokenizer = Tokenizer.load(cfg.vocab)
    if shards.languages != tokenizer.languages or shards.index["vocab_size"] != tokenizer.vocab_size:
        raise ValueError(f"shards in {cfg.data} were not made with the vocabulary in {cfg.vocab}")

    torch.manual_seed(cfg.seed)
    model_cfg = config_from_preset(
        cfg.model, vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages),
        **{"global_negatives": cfg.global_negatives, **cfg.model_overrides},
    )
    model = EMSModel(model_cfg)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        dump_config(cfg, out / "train_config.yaml")
        if cfg.export_init:
            export_encoder(model.encoder, tokenizer, out / "model-init")

    order = BatchOrder(
        np.minimum(shards.side_lengths(), model_cfg.max_len), global_batch, seed=cfg.seed, bucket_batches=cfg.bucket_batches,
        groups=shards.language_pair_groups(), temperature=cfg.temperature,
    )
    max_steps = cfg.max_steps if cfg.max_epochs is None else math.ceil(cfg.max_epochs * order.batches_per_epoch())
    optimizer = torch.optim.AdamW(parameter_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)
    schedule = LinearSchedule(cfg.warmup_steps, max_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    # Dropout RNG: one stream per rank, independent of how much DeepSpeed's setup drew (it
    # differs between ZeRO stages). Saved and restored per rank with every checkpoint.
    rank_seed = int(np.random.SeedSequence([cfg.seed, rank]).generate_state(1)[0])
    torch.manual_seed(rank_seed)
    np.random.seed(rank_seed)
    random.seed(rank_seed)

    checkpoint_dir = out / "checkpoints"
    step, position = 0, (0, 0)
    budget_fitted = False
    chosen = [resumable_tag(checkpoint_dir) if rank == 0 else None]
    dist.broadcast_object_list(chosen, src=0)
    if chosen[0] is not None:
        load_path, client_state = engine.load_checkpoint(str(checkpoint_dir), tag=chosen[0])
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint {checkpoint_dir / chosen[0]}")
        if client_state["global_batch"] != global_batch or client_state["world_size"] != world_size:
            raise ValueError(
                f"{load_path} was written by {client_state['world_size']} processes with a global batch of "
                f"{client_state['global_batch']} pairs; this run has {world_size} and {global_batch}: the data "
                "order would differ, so it cannot resume exactly (use the same process count and batch settings)"
            )
        step, position = client_state["step"], tuple(client_state["data_position"])
        # LambdaLR restores a callable schedule's fields from the checkpoint: set them from this
        # run's config instead, except a max_steps fitted to a time budget
        budget_fitted = bool(client_state.get("budget_fitted"))
        max_steps = client_state["max_steps"] if budget_fitted else max_steps
        schedule.warmup_steps, schedule.max_steps = cfg.warmup_steps, max_steps
        set_rng_state(json.loads(rng_file(checkpoint_dir / chosen[0], rank).read_text()))
        if rank == 0:
            _keep_metrics_up_to(out / "metrics.jsonl", step)
            print(f"resumed from {load_path} at step {step}, data position {position}")
    last_saved = step

    def save() -> None:
        tag = step_tag(step)
        staging = partial_dir(checkpoint_dir, tag)
        if rank == 0 and staging.exists():
            shutil.rmtree(staging)  # left by a crash during an earlier save of this step
        dist.barrier()
        client_state = {"step": step, "data_position": list(position), "world_size": world_size, "global_batch": global_batch,
                        "max_steps": max_steps, "budget_fitted": budget_fitted}
        engine.save_checkpoint(str(staging), tag=tag, client_state=client_state, save_latest=False)
        (staging / tag).mkdir(parents=True, exist_ok=True)
        rng_file(staging / tag, rank).write_text(json.dumps(rng_state()))
        dist.barrier()
        if rank == 0:
            publish(checkpoint_dir, tag, cfg.keep_checkpoints)
        dist.barrier()

    batches = iterate_batches(shards, order, model_cfg.max_len, start=position, rank=rank,
                              world_size=world_size, accumulation=accumulation)
    use_bf16 = [cfg.autocast == "bf16" or (cfg.autocast == "auto" and rank == 0 and bf16_is_fast(engine.device))]
    dist.broadcast_object_list(use_bf16, src=0)  # one decision for all ranks
    use_bf16 = use_bf16[0]
    if cfg.autocast == "auto" and rank == 0:
        print(f"autocast=auto: {'bf16' if use_bf16 else 'fp32 (bf16 matmuls are slower than fp32 here)'} on {engine.device}")
    autocast = torch.autocast(engine.device.type, dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()
    valid_shards = PairShards(cfg.valid_data) if cfg.valid_data else None
    writer = SummaryWriter(str(out / "tb"), purge_step=step + 1 if step else None) if rank == 0 else None
    metrics_file = (out / "metrics.jsonl").open("a") if rank == 0 else None
    history: list[dict] = []
    started = time.time()
    # summed over the log window: loss, xtr, contrastive, grad norm, real tokens, token slots, steps,
    # steps with a finite grad norm, steps skipped for fp16 overflow (an inf/nan norm: DeepSpeed's
    # loss scaler drops that update and lowers the scale)
    window, window_start = torch.zeros(9, dtype=torch.float64), time.time()
    bar = tqdm(total=max_steps, initial=step, disable=rank != 0, desc="train", unit="step", mininterval=2.0)
    last_step = min(max_steps, cfg.stop_at_step or max_steps)
    stop_request = StopRequest()
    # steps [probe_from, probe_from + budget_probe_steps) are timed to fit the schedule to the budget
    probe_from, probe_started = step + 5, None

    def fit_schedule_to_budget(seconds_per_step: float) -> None:
        nonlocal max_steps, last_step, budget_fitted
        elapsed = (time.time() - started) / 60
        # 5% more per step: validation and checkpoints take time the probe did not see
        fitted = min(max_steps, steps_within_budget(step, 1.05 * seconds_per_step, elapsed, cfg.time_budget_minutes))
        fitted = torch.tensor([fitted], dtype=torch.int64, device=engine.device)
        dist.broadcast(fitted, src=0)  # rank 0's timing decides for all
        max_steps = schedule.max_steps = int(fitted)
        last_step = min(max_steps, cfg.stop_at_step or max_steps)
        budget_fitted = True
        bar.total = max_steps
        if rank == 0:
            print(f"time budget {cfg.time_budget_minutes} min: {seconds_per_step:.3f} s/step, schedule fitted to "
                  f"{max_steps} steps", flush=True)

    def validate() -> None:
        if valid_shards is None:
            return
        record = {"step": step, **validation_loss(engine, valid_shards, cfg.batch_size, cfg.valid_batches, model_cfg.max_len, autocast)}
        history.append(record)
        if rank == 0:
            for key in ("loss", "xtr", "contrastive"):
                writer.add_scalar(f"valid/{'total' if key == 'loss' else key}", record[f"valid_{key}"], step)
            metrics_file.write(json.dumps(record) + "\n")

    def stop_flags() -> tuple[bool, bool]:
        """(pre-empted, out of time), the same on every rank (all_reduce MAX)."""
        flags = torch.tensor([
            stop_request.signal is not None or (rank == 0 and (out / STOP_FILE).exists()),
            rank == 0 and cfg.max_minutes is not None and time.time() - started > 60 * cfg.max_minutes,
        ], dtype=torch.float32, device=engine.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return bool(flags[0]), bool(flags[1])

    try:
        if step == 0:
            validate()
        preempted = False
        while step < last_step:
            preempted, out_of_time = stop_flags()
            if preempted or out_of_time:
                if rank == 0:
                    reason = f"signal {stop_request.signal} or {out / STOP_FILE}" if preempted else f"max_minutes={cfg.max_minutes}"
                    print(f"stopping at step {step}: {reason}", flush=True)
                break
            (epoch, batch_idx), micro_batches = next(batches)
            for micro_batch in micro_batches:
                window[4:6] += torch.tensor(real_and_padded_tokens(micro_batch), dtype=torch.float64)
                micro_batch = {k: v.to(engine.device) for k, v in micro_batch.items()}
                with autocast:
                    losses = engine(**micro_batch)
                engine.backward(losses["loss"])
                if engine.is_gradient_accumulation_boundary():
                    unclipped_norm = _module_grad_norm(engine.module)
                engine.step()
                window[:3] += torch.stack([losses["loss"].detach(), losses["xtr"], losses["contrastive"]]).double().cpu() / accumulation
            # DeepSpeed keeps the norm it clipped with, except under ZeRO 0 in fp32 (where the
            # gradients are whole in .grad, so the norm taken before the step is the same value)
            grad_norm = engine.get_global_grad_norm()
            grad_norm = float(grad_norm if grad_norm is not None else unclipped_norm)
            if math.isfinite(grad_norm):
                window[3] += grad_norm
                window[7] += 1
            else:
                window[8] += 1
            window[6] += 1
            step += 1
            position = (epoch, batch_idx + 1)
            bar.update(1)
            if cfg.time_budget_minutes and not budget_fitted:
                if step == probe_from:
                    probe_started = time.time()
                elif step == probe_from + cfg.budget_probe_steps and probe_started is not None:
                    fit_schedule_to_budget((time.time() - probe_started) / cfg.budget_probe_steps)
            if step % cfg.log_every == 0 or step == last_step:
                totals = window.to(engine.device)
                dist.all_reduce(totals)  # sums over ranks: mean losses and all tokens of the global batch
                loss, xtr, contrastive = (totals[:3] / totals[6]).tolist()
                elapsed = time.time() - window_start
                record = {
                    "step": step, "epoch": epoch, "loss": loss, "xtr": xtr, "contrastive": contrastive,
                    "lr": float(engine.get_lr()[0]), "grad_norm": float(window[3] / window[7]) if window[7] else math.nan,
                    "overflow_steps": int(window[8]),
                    "tokens_per_s": float(totals[4]) / max(elapsed, 1e-9), "real_token_ratio": float(totals[4] / totals[5]),
                }
                if not all(math.isfinite(v) for v in (loss, xtr, contrastive)):
                    raise FloatingPointError(f"non-finite loss at step {step}: {record}")
                history.append(record)
                window, window_start = torch.zeros_like(window), time.time()
                if rank == 0:
                    for key in ("loss", "xtr", "contrastive"):
                        writer.add_scalar(f"loss/{'total' if key == 'loss' else key}", record[key], step)
                    for key in ("lr", "grad_norm", "overflow_steps", "tokens_per_s", "real_token_ratio"):
                        writer.add_scalar(key, record[key], step)
                    metrics_file.write(json.dumps(record) + "\n")
                    metrics_file.flush()
                    bar.set_postfix(loss=f"{loss:.3f}", xtr=f"{xtr:.3f}", cntrs=f"{contrastive:.3f}")
            if step % cfg.save_every == 0:
                save()
                last_saved = step
            if step % cfg.valid_every == 0 and step != last_step:
                validate()
        bar.close()
        if preempted:
            if step != last_saved:
                save()
            if rank == 0:
                (out / STOP_FILE).unlink(missing_ok=True)
                print(f"checkpointed step {step}; exiting with status {PREEMPTED_EXIT_CODE} to be requeued", flush=True)
            return {"steps": step, "max_steps": max_steps, "history": history, "model_dir": None, "preempted": True}
        validate()
        if step != last_saved:
            save()
        model_dir = out / "model"
        if rank == 0:
            export_encoder(engine.module.encoder, tokenizer, model_dir)
        dist.barrier()
        return {"steps": step, "max_steps": max_steps, "history": history, "model_dir": str(model_dir), "preempted": False}
    finally:
        stop_request.close()
        if rank == 0:
            writer.close()
            metrics_file.close()


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
    if result["preempted"]:
        sys.exit(PREEMPTED_EXIT_CODE)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"trained {result['steps']} steps; model: {result['model_dir']}")


if __name__ == "__main__":
    main()
