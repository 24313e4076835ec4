"""Which float type a forward pass runs in, decided one way for training and for encoding.

In: a precision name (PRECISIONS) and a torch device; out: the torch.autocast dtype
(`autocast_dtype`; None: plain fp32). "auto" is bf16 where `bf16_is_fast` on that device, fp32
elsewhere: the trainer's `autocast: auto` (ems.training.runtime) and `ems.load(..., precision="auto")`
ask the same function. Weights stay fp32 either way; autocast runs the matmuls in the lower type.
"""

from __future__ import annotations

import functools
import time

import torch

from ems.cli import check_choice

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


def bf16_is_fast(device: str | torch.device) -> bool:
    """Whether bf16 matmuls beat fp32 on `device` (measured once per device and process). CUDA: the
    GPU supports bf16. CPU: timed on a 256^3 product, since CPUs with AMX or AVX512-BF16 run bf16
    several times faster than fp32 and AVX2-only CPUs emulate it tens of times slower (both seen
    on this project's machines)."""
    return _bf16_is_fast(str(torch.device(device)))


@functools.cache
def _bf16_is_fast(device: str) -> bool:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def seconds(dtype: torch.dtype) -> float:
        """The fastest of a few products: a pass the scheduler interrupts does not decide."""
        x, y = a.to(dtype), b.to(dtype)
        torch.matmul(x, y)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            torch.matmul(x, y)
            times.append(time.perf_counter() - start)
        return min(times)

    return seconds(torch.bfloat16) < seconds(torch.float32)


def autocast_dtype(precision: str, device: str | torch.device) -> torch.dtype | None:
    """The autocast dtype of `precision` (one of PRECISIONS; ValueError otherwise) on `device`:
    bfloat16, float16, or None for fp32; "auto" is bfloat16 where `bf16_is_fast`, else None."""
    check_choice("precision", precision, PRECISIONS)
    if precision == "auto":
        return torch.bfloat16 if bf16_is_fast(device) else None
    return _DTYPES[precision]


def precision_name(dtype: torch.dtype | None) -> str:
    """The PRECISIONS name of an `autocast_dtype` result."""
    return next(name for name, value in _DTYPES.items() if value == dtype)
