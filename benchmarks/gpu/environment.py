"""The GPU acceptance run's environment stage: torch, CUDA, NCCL (a one-process all_reduce), bf16, flash
SDPA, faiss's GPUs, the packages the run imports, and the segmenters in use, each checked into
{"status", "detail"} (the GPU checks skipped on CPU).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import timedelta

import torch

from benchmarks.gpu.stage import Context
from ems.cli import one_line

RUN_PACKAGES = (
    "deepspeed",
    "faiss",
    "sentencepiece",
    "sacremoses",
    "langcodes",
    "safetensors",
    "scipy",
    "matplotlib",
    "yaml",
)
DISTRIBUTIONS = {"yaml": "pyyaml", "faiss": "faiss-cpu"}  # where the distribution's name is not the module's


def check(probe) -> dict:
    """{"status": "ok", "detail": probe()} or, if it raises, {"status": "failed", "detail": the error}."""
    try:
        return {"status": "ok", "detail": str(probe())}
    except Exception as error:
        return {"status": "failed", "detail": f"{type(error).__name__}: {one_line(error)}"}


def cuda_device() -> str:
    major, minor = torch.cuda.get_device_capability(0)
    return f"{torch.cuda.get_device_name(0)}, compute capability {major}.{minor}, CUDA {torch.version.cuda}"


def nccl_all_reduce() -> str:
    """A one-process NCCL group (env:// through MASTER_ADDR/MASTER_PORT), an all_reduce, destroyed."""
    import torch.distributed as dist

    from ems.training.runtime import world_of_one_unless_launched

    with world_of_one_unless_launched():
        dist.init_process_group("nccl", timeout=timedelta(seconds=60))
        try:
            tensor = torch.full((4,), 2.0, device="cuda")
            dist.all_reduce(tensor)
            torch.cuda.synchronize()
            return f"NCCL {torch.cuda.nccl.version()}: all_reduce over 1 rank gave {tensor.tolist()}"
        finally:
            dist.destroy_process_group()


def bf16_supported() -> str:
    if not torch.cuda.is_bf16_supported():
        raise RuntimeError("torch.cuda.is_bf16_supported() is False")
    return "torch.cuda.is_bf16_supported()"


def flash_attention() -> str:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = torch.randn(3, 8, 16, 256, 64, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    return f"scaled_dot_product_attention, FLASH_ATTENTION backend, bf16 {tuple(q.shape)} -> {tuple(out.shape)}"


def faiss_check() -> dict:
    try:
        import faiss
    except ImportError as error:
        return {"status": "not installed", "detail": one_line(error)}

    def gpus() -> str:
        if faiss.get_num_gpus() < 1:
            raise RuntimeError(f"faiss {faiss.__version__} sees no GPU (a CPU-only build?)")
        return f"faiss {faiss.__version__}: {faiss.get_num_gpus()} GPU(s)"

    return check(gpus)


def package_versions() -> str:
    """The run's imports and their versions; RuntimeError naming those missing."""
    from importlib.metadata import PackageNotFoundError, version

    found, missing = [], []
    for name in RUN_PACKAGES:
        if importlib.util.find_spec(name) is None:
            missing.append(name)
            continue
        try:
            found.append(f"{name} {version(DISTRIBUTIONS.get(name, name))}")
        except PackageNotFoundError:
            found.append(name)
    if missing:
        raise RuntimeError(
            f"not installed: {', '.join(missing)} (prepare --wheels, docs/getting-started.md); found {', '.join(found)}"
        )
    return ", ".join(found)


def stage_environment(ctx: Context, output: dict) -> None:
    """output["checks"]: {check: {"status", "detail"}}; the GPU checks are skipped on CPU."""
    checks = {
        "torch": check(lambda: f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"),
        "packages": check(package_versions),
        "segmenters": {"status": "ok", "detail": ctx.segmenters["detail"]},
    }
    gpu = {"cuda": cuda_device, "nccl": nccl_all_reduce, "bf16": bf16_supported, "sdpa_flash": flash_attention}
    if ctx.device == "cuda":
        checks.update({name: check(probe) for name, probe in gpu.items()}, faiss_gpu=faiss_check())
    else:
        why = "no GPU" if not torch.cuda.is_available() else "--device cpu"
        checks.update({name: {"status": "skipped", "detail": why} for name in [*gpu, "faiss_gpu"]})
    for name, result in checks.items():
        print(f"{name:<12}{result['status']:<15}{result['detail']}", flush=True)
    output["checks"] = checks
