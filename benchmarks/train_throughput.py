"""Training-step throughput of an EMS preset on this machine (forward + backward + AdamW step).

    python benchmarks/train_throughput.py [--preset tiny] [--batch 128] [--length 12] [--steps 10]

Prints, for fp32 and bf16 autocast: seconds per step, pairs/s, real tokens/s and the achieved
model FLOP/s (6 x parameters-touched-per-token x tokens, plus attention), so presets and
dtypes can be compared on one machine. Synthetic token ids; lengths as given.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from ems.model import EMSModel, config_from_preset


def step_flops(cfg, batch: int, length: int) -> float:
    """Forward+backward FLOPs of one training step (x3 the forward matmul FLOPs)."""
    d, f, layers = cfg.d_model, cfg.d_ffn, cfg.n_layers
    tokens = 2 * batch * length  # both sides of each pair
    per_token = layers * (2 * 4 * d * d + 2 * 2 * d * f + 2 * 2 * length * d)  # qkv+proj, ffn, attention
    heads = 2 * batch * 2 * ((cfg.d_lang + d) ** 2 + (cfg.d_lang + d) * cfg.vocab_size + d * d + d * cfg.d_contrastive)
    return 3 * (tokens * per_token + heads)


def run(preset: str, batch: int, length: int, steps: int, dtype: str, vocab: int, langs: int) -> dict:
    torch.manual_seed(0)
    cfg = config_from_preset(preset, vocab_size=vocab, n_languages=langs)
    model = EMSModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    src = torch.randint(2 + langs, vocab, (batch, length))
    tgt = torch.randint(2 + langs, vocab, (batch, length))
    lang = torch.randint(0, langs, (batch,))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()
    for i in range(steps + 2):
        if i == 2:  # two warm-up steps
            start = time.perf_counter()
        with autocast:
            loss = model(src, tgt, lang, lang)["loss"]
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    seconds = (time.perf_counter() - start) / steps
    return {
        "s_per_step": seconds,
        "pairs_per_s": batch / seconds,
        "tokens_per_s": 2 * batch * length / seconds,
        "gflops": step_flops(cfg, batch, length) / seconds / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--length", type=int, default=12)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--languages", type=int, default=71)
    args = parser.parse_args()
    print(f"preset={args.preset} batch={args.batch} length={args.length} threads={torch.get_num_threads()}")
    results = {}
    for dtype in ("fp32", "bf16"):
        results[dtype] = r = run(args.preset, args.batch, args.length, args.steps, dtype, args.vocab, args.languages)
        print(
            f"{dtype}: {r['s_per_step']:.3f} s/step  {r['pairs_per_s']:.0f} pairs/s  "
            f"{r['tokens_per_s']:.0f} tokens/s  {r['gflops']:.1f} GFLOP/s"
        )
    print(f"bf16 / fp32 speed-up: {results['fp32']['s_per_step'] / results['bf16']['s_per_step']:.2f}x")


if __name__ == "__main__":
    main()
