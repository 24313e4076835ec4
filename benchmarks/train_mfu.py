"""Model-FLOPs utilisation of the full EMS training step against the machine's matmul peak.

    python -m benchmarks.train_mfu                    # ems-paper shapes, 152 pairs, CPU (~13 min on 2 AVX2 cores
                                                      #   in fp32; ~2 min on 2 cores with AMX bf16)
    python -m benchmarks.train_mfu --quick            # tiny shapes: a smoke test in seconds
    python -m benchmarks.train_mfu --device cuda      # + MFU against the GPU's bf16 peak and the full-run projection
    python -m benchmarks.train_mfu --profile          # + torch.profiler table of one EMS step

One run prints, on one machine:
1. the dense matmul rate of fp32 and bf16 (torch.matmul of two n x n matrices, median of timed calls);
2. the full EMS training step (both sides through the encoder, XTR head with its vocabulary
   projection and loss, contrastive head and loss, backward, AdamW step) in the faster of fp32
   and bf16 autocast (bf16 on a GPU), on one batch of pairs with realistic lengths (log-normal,
   mean --mean-length tokens, bucketed by `ems.training.batch_order.BatchOrder` as in training): s/step, real
   tokens/s, achieved model FLOP/s and its ratio to that dtype's matmul peak. A CPU without
   bf16 units (AVX2-only) emulates bf16 ~50x slower than fp32: its bf16 rate is then taken on a
   512^3 product and the step runs in fp32;
3. the same for a plain `torch.nn.TransformerEncoder` stack of the encoder's size (batch_first,
   norm_first, GELU) in the same dtype on the same padded token batch (its input: fixed hidden
   states; its loss: the masked mean of its outputs), forward + backward + AdamW: the reference;
4. the batch's non-pad token ratio; on a GPU, MFU against its bf16 peak (--peak-tflops, or the
   table PEAK_BF16_TFLOPS) and the projected time of the full run on one 8-GPU node.

Model FLOPs (`ems.flops.step_flops`, formula there) count real work only: non-pad tokens, each
sentence's own length; the reference counts the encoder and attention terms only. FLOPs spent on
padding are not counted either: the printed "padded" figure says how much more the hardware computes.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks.bare_step import bare_step, median_seconds, step_context
from ems.configs import yaml_value
from ems.flops import encoder_flops, step_flops
from ems.model_config import EMSConfig, config_from_preset
from ems.text import PAD_ID
from ems.training.batch_order import BatchOrder
from ems.training.config import TrainConfig
from ems.training.runtime import adamw as adamw_optimizer

# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity), matched in order against the device name.
PEAK_BF16_TFLOPS = [
    ("H100 PCIe", 756.0),
    ("H100", 989.0),  # SXM
    ("H200", 989.0),
    ("A100", 312.0),
    ("V100", 125.0),  # fp16 tensor cores: V100 has no bf16 units, so bf16 runs far below this
]
FULL_RUN_TOKENS = 2e10  # 143M pairs x 3 epochs, both sides
NODE_GPUS = 8
EMULATION_PROBE_SIZE = 512  # n of the first, small product of a low-precision dtype
EMULATED_BELOW = 0.1  # a dtype this much slower than fp32 there is taken as emulated

QUICK_SHAPES = dict(preset="tiny", overrides=dict(vocab_size=2000, n_languages=8), pairs=16, matmul_size=512)


def sample_pair_lengths(
    n: int, mean_length: float, max_len: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Log-normal sentence lengths (sigma 0.5, given mean), the translation's within ~15% of its source's."""
    sigma = 0.5
    src = rng.lognormal(np.log(mean_length) - sigma**2 / 2, sigma, n)
    tgt = src * rng.lognormal(0.0, 0.15, n)
    clip = lambda x: np.clip(np.rint(x), 2, max_len).astype(np.int64)  # noqa: E731
    return clip(src), clip(tgt)


def realistic_batch(cfg: EMSConfig, pairs: int, mean_length: float, seed: int = 0) -> dict[str, torch.Tensor]:
    """A typical training batch of `pairs` pairs: lengths from `sample_pair_lengths`, cut into
    batches by `BatchOrder` (sorted within 50-batch windows, as training does); of those, the
    batch whose mean length is closest to the mean of all. Random non-special token ids."""
    rng = np.random.default_rng(seed)
    pool = pairs * BatchOrder.bucket_batches
    src_len, tgt_len = sample_pair_lengths(pool, mean_length, cfg.max_len, rng)
    pair_mean = (src_len + tgt_len) / 2
    batches = BatchOrder(np.maximum(src_len, tgt_len), pairs, seed=seed).epoch(0)
    chosen = min(batches, key=lambda b: abs(pair_mean[b].mean() - pair_mean.mean()))
    first_token = cfg.n_languages + 2  # after pad, unk and the language tokens
    sides = []
    for lengths in (src_len[chosen], tgt_len[chosen]):
        ids = torch.from_numpy(rng.integers(first_token, cfg.vocab_size, (pairs, int(lengths.max()))))
        sides.append(ids.masked_fill(torch.arange(ids.shape[1]) >= torch.from_numpy(lengths)[:, None], PAD_ID))
    langs = torch.from_numpy(rng.integers(0, cfg.n_languages, (2, pairs)))
    return {"src": sides[0], "tgt": sides[1], "src_lang": langs[0], "tgt_lang": langs[1]}


def real_lengths(tokens: torch.Tensor) -> np.ndarray:
    return (tokens != PAD_ID).sum(dim=1).numpy()


def matmul_rate(dtype: torch.dtype, n: int, device: torch.device, repeats: int) -> float:
    """FLOP/s of an n x n @ n x n matmul in `dtype` (median of `repeats` timed calls after a warm-up)."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=gen).to(dtype)
    b = torch.randn(n, n, device=device, generator=gen).to(dtype)
    return 2.0 * n**3 / median_seconds(lambda: torch.matmul(a, b), device, warmup=2, repeats=repeats)


class ReferenceEncoder(nn.Module):
    """Stock nn.TransformerEncoder of the EMS encoder's size; (x, pad mask) -> masked mean of outputs."""

    def __init__(self, cfg: EMSConfig):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            cfg.d_model,
            cfg.n_heads,
            cfg.d_ffn,
            dropout=cfg.dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.stack = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        out = self.stack(x, src_key_padding_mask=pad)
        return (out * keep).sum(dim=1) / keep.sum(dim=1)


def reference_step_fn(
    cfg: EMSConfig, tokens: torch.Tensor, device: torch.device, adamw: str, compile: bool = False, dtype: str = "bf16"
):
    torch.manual_seed(0)
    model = ReferenceEncoder(cfg).to(device).train()
    optimizer = adamw_optimizer([{"params": list(model.parameters())}], 1e-4, TrainConfig(), adamw)
    model = torch.compile(model) if compile else model
    pad = (tokens == PAD_ID).to(device)
    x = torch.randn(*tokens.shape, cfg.d_model, device=device)

    def step() -> None:
        with step_context(device, dtype):
            loss = model(x, pad).float().square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def known_peak_tflops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)


def profile_step(step, rows: int = 25) -> str:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        step()
    sort_by = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort_by, row_limit=rows)


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available here")
    cfg = config_from_preset(args.preset, **args.overrides)
    result: dict = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)",
        "shapes": {
            k: getattr(cfg, k)
            for k in ("d_model", "n_layers", "n_heads", "d_ffn", "vocab_size", "d_lang", "d_contrastive")
        },
        "preset": args.preset,
        "overrides": args.overrides,
        "compile": args.compile,
    }

    rates = {"fp32": matmul_rate(torch.float32, args.matmul_size, device, args.matmul_repeats)}
    result["matmul_size"] = {"fp32": args.matmul_size}
    for name, dtype in (("bf16", torch.bfloat16),) + ((("fp16", torch.float16),) if args.fp16 else ()):
        # A CPU without bf16/fp16 units emulates them ~50x slower than fp32: time those on a
        # small product (a 4096^3 one would take minutes) and never step in them.
        small = matmul_rate(dtype, EMULATION_PROBE_SIZE, device, 1)
        emulated = device.type == "cpu" and small < EMULATED_BELOW * rates["fp32"]
        rates[name] = small if emulated else matmul_rate(dtype, args.matmul_size, device, args.matmul_repeats)
        result["matmul_size"][name] = EMULATION_PROBE_SIZE if emulated else args.matmul_size
    result["matmul_gflops"] = {k: v / 1e9 for k, v in rates.items()}
    # the step runs in the fastest of fp32 and bf16 autocast (bf16 on GPUs: MFU is quoted against bf16)
    step_dtype = "bf16" if device.type == "cuda" or rates["bf16"] > rates["fp32"] else "fp32"
    result["step_dtype"] = step_dtype
    peak = rates[step_dtype]

    batch = realistic_batch(cfg, args.pairs, args.mean_length, seed=args.seed)
    src_len, tgt_len = real_lengths(batch["src"]), real_lengths(batch["tgt"])
    width = max(batch["src"].shape[1], batch["tgt"].shape[1])
    real_tokens = int(src_len.sum() + tgt_len.sum())
    flops = step_flops(cfg, src_len, tgt_len)
    padded = step_flops(cfg, np.full_like(src_len, width), np.full_like(tgt_len, width))
    result["batch"] = {
        "pairs": args.pairs,
        "sentences": 2 * args.pairs,
        "width": width,
        "real_tokens": real_tokens,
        "mean_length": real_tokens / (2 * args.pairs),
        "non_pad_ratio": real_tokens / (2 * args.pairs * width),
    }
    result["ems_flops"] = {**asdict(flops), "total": flops.total, "padded_total": padded.total}

    ems_step = bare_step(cfg, batch, device, args.adamw, args.compile, step_dtype)
    seconds = median_seconds(ems_step, device, args.warmup, args.steps)
    result["ems"] = _figures(flops.total, seconds, real_tokens, peak)
    if args.profile:
        result["ems_profile"] = profile_step(ems_step)
    del ems_step

    encoder_tokens = torch.cat(
        [nn.functional.pad(batch[k], (0, width - batch[k].shape[1]), value=PAD_ID) for k in ("src", "tgt")]
    )
    ref_flops = encoder_flops(cfg, np.concatenate([src_len, tgt_len])).total
    ref_step = reference_step_fn(cfg, encoder_tokens, device, args.adamw, args.compile, step_dtype)
    result["reference"] = _figures(
        ref_flops, median_seconds(ref_step, device, args.warmup, args.steps), real_tokens, peak
    )
    del ref_step

    result["ems_over_reference"] = result["ems"]["gflops"] / result["reference"]["gflops"]
    spec_peak = args.peak_tflops or known_peak_tflops(device)
    if spec_peak:
        result["peak_tflops"] = spec_peak
        result["ems"]["mfu"] = result["ems"]["gflops"] / (1e3 * spec_peak)
        result["reference"]["mfu"] = result["reference"]["gflops"] / (1e3 * spec_peak)
    if device.type == "cuda":
        result["full_run_hours_8gpu"] = FULL_RUN_TOKENS / (NODE_GPUS * result["ems"]["tokens_per_s"]) / 3600
    return result


def _figures(flops: float, seconds: float, tokens: int, peak: float) -> dict:
    return {
        "s_per_step": seconds,
        "tokens_per_s": tokens / seconds,
        "gflop_per_step": flops / 1e9,
        "gflops": flops / seconds / 1e9,
        "ratio_to_peak": flops / seconds / peak,
    }


def report(r: dict) -> str:
    s, b, f = r["shapes"], r["batch"], r["ems_flops"]
    rates = "   ".join(f"{k} {v:.1f} ({r['matmul_size'][k]}^3)" for k, v in r["matmul_gflops"].items())
    lines = [
        f"device: {r['device']}   preset {r['preset']}: d={s['d_model']} layers={s['n_layers']} heads={s['n_heads']} "
        f"ffn={s['d_ffn']} vocab={s['vocab_size']}",
        f"matmul peak, GFLOP/s: {rates}   (fastest: {max(r['matmul_gflops'], key=r['matmul_gflops'].get)})",
        f"batch: {b['pairs']} pairs = {b['sentences']} sentences x width {b['width']}, {b['real_tokens']} real tokens "
        f"(mean {b['mean_length']:.1f}), non-pad ratio {b['non_pad_ratio']:.3f}",
        f"EMS model FLOPs/step: {f['total'] / 1e9:.1f} G (encoder {f['encoder'] / 1e9:.1f}, attention "
        f"{f['attention'] / 1e9:.1f}, heads {f['heads'] / 1e9:.1f}); counting padding: {f['padded_total'] / 1e9:.1f} G",
        "",
        f"{r['step_dtype'] + ' step':<28}{'s/step':>9}{'tokens/s':>11}{'GFLOP/step':>12}{'GFLOP/s':>10}"
        f"{'/ ' + r['step_dtype'] + ' peak':>13}" + (f"{'MFU':>8}" if "peak_tflops" in r else ""),
    ]
    for name, key in (("EMS (full step)", "ems"), ("nn.TransformerEncoder ref", "reference")):
        x = r[key]
        lines.append(
            f"{name:<28}{x['s_per_step']:>9.3f}{x['tokens_per_s']:>11.0f}{x['gflop_per_step']:>12.1f}"
            f"{x['gflops']:>10.1f}{x['ratio_to_peak']:>13.3f}" + (f"{x['mfu']:>8.3f}" if "mfu" in x else "")
        )
    lines.append(
        f"EMS / reference achieved FLOP/s: {r['ems_over_reference']:.2f}x   (target: EMS ratio >= 0.6 on CPU, "
        "MFU >= 0.45 on GPU)"
    )
    if "peak_tflops" in r:
        lines.append(f"MFU against a bf16 peak of {r['peak_tflops']:g} TFLOP/s")
    if "full_run_hours_8gpu" in r:
        lines.append(
            f"projected full run ({FULL_RUN_TOKENS:.0e} tokens) on one {NODE_GPUS}-GPU node at this rate: "
            f"{r['full_run_hours_8gpu']:.2f} h (goal <= 2 h; assumes linear data-parallel scaling)"
        )
    if "ems_profile" in r:
        lines += ["", "EMS step profile:", r["ems_profile"]]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="ems-paper")
    parser.add_argument("--pairs", type=int, default=152, help="pairs per step (the paper: 152 per GPU)")
    parser.add_argument("--mean-length", type=float, default=27.0, help="mean tokens per sentence")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (median reported)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--matmul-size", type=int, default=None, help="n of the n x n matmuls (default 4096; 8192 on GPU)"
    )
    parser.add_argument("--matmul-repeats", type=int, default=5)
    parser.add_argument(
        "--fp16", action="store_true", help="also time fp16 matmul (about 1 GFLOP/s on CPUs without fp16 units)"
    )
    parser.add_argument(
        "--adamw",
        choices=("fused", "foreach", "for-loop"),
        default="fused",
        help="torch AdamW implementation (fused: 0.42 s/step at ems-paper size on 1 CPU core, "
        "for-loop, torch's CPU default: 2.66 s)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--model-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="EMSConfig overrides, e.g. attention=matmul dropout=0",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile both models (the first steps compile)")
    parser.add_argument(
        "--peak-tflops", type=float, default=None, help="bf16 peak for MFU (default: known GPUs' table)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print a torch.profiler table of one EMS step")
    parser.add_argument("--quick", action="store_true", help="tiny shapes and batch: a smoke test")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    args.overrides = {}
    for item in args.model_set:
        key, _, value = item.partition("=")
        args.overrides[key] = yaml_value(value)  # the project's YAML reading (a key twice refused)
    if args.quick:
        args.preset, args.pairs = QUICK_SHAPES["preset"], QUICK_SHAPES["pairs"]
        args.overrides = {**QUICK_SHAPES["overrides"], **args.overrides}
        args.matmul_size = args.matmul_size or QUICK_SHAPES["matmul_size"]
    args.matmul_size = args.matmul_size or (8192 if args.device.startswith("cuda") else 4096)
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    result = run(args)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps({k: v for k, v in result.items() if k != "ems_profile"}, indent=1))
    return result


if __name__ == "__main__":
    main()
