"""The GPU acceptance run: a lent GPU gives a whole report in one command of at most 9 minutes.

    # on the CPU machine, once: the data stage, packed to travel (benchmarks/gpu_prepared.py)
    python -m benchmarks.gpu_acceptance prepare --out runs/gpu_data --wheels
    # on the GPU machine (runs/gpu_data carried; docs/getting-started.md, "GPU machines"): checks, MFU
    # probe, training, evaluation, report
    python3 -m pip install -q --no-index --no-deps --target /tmp/site runs/gpu_data/wheels/*.whl
    PYTHONPATH=/tmp/site:$PWD python3 -m benchmarks.gpu_acceptance run --data runs/gpu_data --work /tmp/ga \
        --report-dir DIR
    # the same path, tiny, on CPU (CI: tests/test_gpu_acceptance.py, on a prepared slice)
    python -m benchmarks.gpu_acceptance run --data PREPARED --work /tmp/smoke --smoke

`prepare` runs the all-language recipe's data stage (configs/data/multilingual.yaml: every Tatoeba
Challenge and TICO-19 language, evaluation sentences removed, 64k SentencePiece, shards) here and keeps
what the GPU run reads in --out, checked against --max-mib (60: the device tool carries 64 MiB with the
working tree), with a manifest; --wheels adds the Python packages the GPU image lacks (deepspeed,
faiss-cpu, sacremoses, ...: PYTHONPATH on the GPU machine). jieba, MeCab and OpenCC are too big to
carry: their answers for the evaluation sentences travel as a table (benchmarks/segmenters/).

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
               ems.model.PRESETS that trains usefully, i.e. >= USEFUL_STEPS (2000) optimizer steps of
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
import dataclasses
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import torch

from benchmarks import gpu_report
from benchmarks.gpu_prepared import (
    DATA_CONFIG,
    DEFAULT_LIMIT_MIB,
    SEGMENTATION,
    Prepared,
    open_prepared,
    prepare,
    unpack,
)
from ems.cli import UserError, add_debug_option, one_line, run_main

REPO_ROOT = Path(__file__).resolve().parents[1]

STAGES = ("environment", "mfu", "train", "evaluate", "report")
TRAIN_CONFIG = REPO_ROOT / "configs" / "train" / "gpu.yaml"
STANDINS = REPO_ROOT / "benchmarks" / "segmenters"
SEGMENTER_PACKAGES = ("jieba", "fugashi", "unidic_lite", "opencc")
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
USEFUL_STEPS = 2000  # GPU: >= 2M pairs (~5 passes over the ~417k-pair corpus) and a warm-up of 10% of them
WARMUP_SHARE = 0.1  # of the predicted steps, when the profile fits the schedule to them
FLOPS_BATCHES = 4  # random batches of the shards that each preset's FLOPs per pair are averaged over
MIN_TASK_SECONDS = 10.0  # an evaluation task starts only with this much of the stage left


@dataclass(frozen=True)
class Profile:
    """What the GPU run and the CPU smoke run do differently."""

    name: str
    mfu_preset: str
    mfu_pairs: int  # the probe's batch; the presets are timed on the train config's batch_size
    mfu_variants: tuple[str, ...]  # "eager" (in this process) and/or "compiled" (torch.compile, a child process)
    mfu_timing: tuple[int, int]  # warm-up steps, timed steps (their median is reported), the presets' too
    matmul_size: int  # n of the n x n matmul that measures the peak rate
    presets: tuple[str, ...]  # the candidates, smallest first (the order they are timed in)
    model_overrides: dict  # over each candidate's shape (the probe's too), before the train config's
    useful_steps: int  # the fewest optimizer steps a preset must get in the loop's minutes
    fallback_preset: str  # when no preset's step was timed
    fit_schedule: bool  # warm-up, validation and logging intervals from the predicted steps
    train_overrides: dict  # over configs/train/gpu.yaml
    suite: Path
    eval_languages: tuple[str, ...] | None  # None: every language; else the trained ones and these
    eval_max_sentences: int | None
    tokenizer_workers: int  # at most; never more than the CPUs less two
    batch_tokens: int  # padded tokens per forward pass of the evaluation's encoding
    caps: dict[str, float] = field(default_factory=dict)  # minutes: environment, mfu, evaluate, report
    train_margin_minutes: float = 0.0  # training's set-up and finish (validation, checkpoint, export)
    min_train_minutes: float = 0.0  # what training should get: less is said in the report
    # the training loop (ems.training.train, compiled where TrainConfig.compile says) of each of these presets
    # at each of these batches, timed in the mfu stage (gpu_loop_overhead.measure): pairs/s, MFU, recompiles
    loop_presets: tuple[str, ...] = ()
    loop_pairs: tuple[int, ...] = ()
    loop_steps: tuple[int, int, int] = (0, 0, 0)  # steps, log window, windows skipped as start-up


CAPS = {"environment": 1.0, "mfu": 2.0, "evaluate": 3.0, "report": 0.25}
GPU_CAPS = {**CAPS, "mfu": 4.5}  # the loop timings: two presets at three batches
TINY = {"d_model": 32, "n_heads": 2, "d_ffn": 64, "d_lang": 16, "dropout": 0.0}
GPU = Profile(
    name="gpu",
    mfu_preset="ems-paper",
    mfu_pairs=1024,
    mfu_variants=("eager", "compiled"),
    mfu_timing=(3, 5),
    matmul_size=8192,
    presets=("tiny", "small", "base", "medium", "ems-paper"),
    model_overrides={},
    useful_steps=USEFUL_STEPS,
    fallback_preset="base",
    fit_schedule=True,
    train_overrides={},
    suite=REPO_ROOT / "configs" / "eval" / "suite_gpu.yaml",
    eval_languages=None,
    eval_max_sentences=None,
    tokenizer_workers=8,
    batch_tokens=32768,
    caps=GPU_CAPS,
    train_margin_minutes=0.75,
    min_train_minutes=2.0,
    loop_presets=("medium", "ems-paper"),
    loop_pairs=(1024, 2048, 4096),
    loop_steps=(40, 10, 1),
)
SMOKE = Profile(
    name="smoke",
    mfu_preset="tiny",
    mfu_pairs=8,
    mfu_variants=("eager",),
    mfu_timing=(1, 1),
    matmul_size=256,
    presets=("tiny",),
    model_overrides=TINY,
    useful_steps=10,
    fallback_preset="tiny",
    fit_schedule=False,
    train_overrides={
        "model_overrides": TINY,
        "batch_size": 32,
        "bucket_batches": 50,
        "lr": 3.0e-3,
        "lr_scaling": "none",
        "warmup_samples": None,
        "warmup_steps": 2,
        "max_steps": 10,
        "budget_probe_steps": 2,
        "autocast": "none",
        "log_every": 2,
        "save_every": 5,
        "valid_every": 5,
        "valid_pairs": 64,
    },
    suite=REPO_ROOT / "configs" / "eval" / "suite_gpu_smoke.yaml",
    eval_languages=("xh",),
    eval_max_sentences=200,
    tokenizer_workers=0,
    batch_tokens=2048,
    caps=CAPS,
    loop_presets=("tiny",),
    loop_pairs=(8, 16),
    loop_steps=(6, 2, 1),
)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- time ----------------------------------------------------------------------------------------


class OutOfTime(BaseException):
    """A stage's time cap passed (SIGALRM). A BaseException: no `except Exception` on the way swallows it."""


@dataclass
class Clock:
    """The command's minutes (--total-minutes), counted from its start."""

    minutes: float
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return (time.monotonic() - self.started) / 60

    def left(self) -> float:
        return self.minutes - self.elapsed()


@contextmanager
def time_cap(minutes: float):
    """OutOfTime raised in this (the main) thread once `minutes` have passed; at once if none are left."""
    if minutes <= 0:
        raise OutOfTime("no time left")

    def fire(signum, frame):
        raise OutOfTime(f"over its cap of {minutes:.2f} min")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, minutes * 60)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- the run's context ---------------------------------------------------------------------------


@dataclass
class Context:
    """Everything a stage reads and writes."""

    work: Path
    report_dirs: list[Path]
    device: str
    profile: Profile
    clock: Clock
    prepared: Prepared
    train_data: Path  # the unpacked vocab/, shards/, corpus/
    eval_data: Path  # the unpacked evaluation sets
    settings: dict
    segmenters: dict
    stages: dict = field(default_factory=dict)  # stage -> {"status", "cap_minutes", "seconds", "output", ...}

    @property
    def run_dir(self) -> Path:
        return self.work / "run"

    @property
    def eval_dir(self) -> Path:
        return self.work / "eval"

    def output(self, stage: str) -> dict:
        return self.stages.get(stage, {}).get("output", {})

    def reserve(self, after: str) -> float:
        """Minutes the stages after `after` keep for themselves: their caps, and training's minimum."""
        later = STAGES[STAGES.index(after) + 1 :]
        caps = {**self.profile.caps, "train": self.profile.min_train_minutes}
        return sum(caps.get(stage, 0.0) for stage in later)


def write_report(ctx: Context) -> None:
    """report.json and report.md of what is done so far, in --work and every --report-dir."""
    report = gpu_report.build_report(ctx)
    markdown = gpu_report.report_markdown(report)
    for directory in ctx.report_dirs:
        directory.mkdir(parents=True, exist_ok=True)
        gpu_report.write_json(directory / gpu_report.REPORT_JSON, report)
        gpu_report.write_atomically(directory / gpu_report.REPORT_MD, markdown)


def run_stage(ctx: Context, stage: str, cap: float, function) -> None:
    """`function(ctx, output)` under a time cap of `cap` minutes: done, cut (OutOfTime) or failed (an
    error: a finding of the run, reported; the next stage still runs). The report is written after."""
    record = ctx.stages.setdefault(stage, {})
    record.update(status="running", cap_minutes=round(cap, 2), started=now(), output={})
    print(
        f"\n=== {stage} (cap {cap:.2f} min; {ctx.clock.left():.2f} of {ctx.clock.minutes:g} min left) ===", flush=True
    )
    started = time.monotonic()
    try:
        with time_cap(cap):
            function(ctx, record["output"])
        record["status"] = "done"
    except OutOfTime as cut:
        record.update(status="cut", why=str(cut))
    except Exception as error:  # any failure is a finding of the run: reported beside the others
        record.update(status="failed", why=f"{type(error).__name__}: {one_line(error)}")
    record["seconds"] = round(time.monotonic() - started, 1)
    if record["status"] != "done":
        print(f"{stage}: {record['status']}: {record['why']}", flush=True)
    write_report(ctx)


# -- environment ---------------------------------------------------------------------------------


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


# -- mfu -----------------------------------------------------------------------------------------


def shards_of(train_data: Path):
    from ems.shards import PairShards

    return PairShards(train_data / "shards" / "train")


def model_config(preset: str, overrides: dict, shards):
    """The preset with `overrides` and the shards' vocabulary and languages."""
    from ems.model import config_from_preset

    return config_from_preset(
        preset, **{**overrides, "vocab_size": shards.index["vocab_size"], "n_languages": len(shards.languages)}
    )


def probe_batch(cfg, shards, pairs: int) -> dict:
    """`pairs` random training pairs (seeded) as a batch, cut at the model's max_len."""
    from benchmarks.presets_table import batch_tensors, sample_batches

    (chosen,) = sample_batches(shards, min(pairs, len(shards)), 1, seed=0)
    return batch_tensors(shards, chosen, cfg.max_len)


def batch_flops(cfg, batch: dict) -> float:
    """Model FLOPs of one training step on `batch` (ems.flops; the XTR softmax as cfg says)."""
    from ems.flops import step_flops
    from ems.text import PAD_ID

    lengths = [(batch[side] != PAD_ID).sum(dim=1).numpy() for side in ("src", "tgt")]
    tokens = torch.cat([batch["src"].flatten(), batch["tgt"].flatten()])
    candidates = int(torch.unique(tokens).numel() - 1) if cfg.xtr_vocabulary == "batch" else None
    return float(step_flops(cfg, *lengths, xtr_candidates=candidates).total)


def step_seconds(cfg, batch: dict, device: str, compiled: bool, dtype: str, warmup: int, repeats: int) -> float:
    """Median seconds of one EMS training step (ems.training.bare_step: model, fused AdamW, autocast)."""
    from ems.training.bare_step import bare_step, median_seconds

    step = bare_step(cfg, batch, torch.device(device), "fused", compile=compiled, dtype=dtype)
    try:
        return median_seconds(step, torch.device(device), warmup, repeats)
    finally:
        del step
        torch._dynamo.reset()
        if device == "cuda":
            torch.cuda.empty_cache()


def step_seconds_in_child(request: dict, minutes: float) -> float:
    """`step_seconds` of `request` (the step-time subcommand's arguments) in a child process, killed with
    its process group after `minutes`: OutOfTime then, RuntimeError with its last line if it fails."""
    result = Path(request["work"]) / f"step_{request['variant']}.json"
    result.unlink(missing_ok=True)
    command = [sys.executable, "-m", "benchmarks.gpu_acceptance", "step-time", "--request", json.dumps(request)]
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = child.communicate(timeout=max(1.0, minutes * 60))
    except (subprocess.TimeoutExpired, OutOfTime):
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise OutOfTime(f"{request['variant']} step cut after {minutes:.2f} min") from None
    if child.returncode != 0 or not result.is_file():
        lines = [line for line in output.splitlines() if line.strip()] or ["no output"]
        raise RuntimeError(f"the {request['variant']} step exited with {child.returncode}: {lines[-1]}")
    return json.loads(result.read_text())["seconds"]


def step_time_main(request: dict) -> int:
    """The step-time subcommand: one variant's median step seconds into WORK/step_<variant>.json."""
    shards = shards_of(Path(request["train_data"]))
    cfg = model_config(request["preset"], request["overrides"], shards)
    batch = probe_batch(cfg, shards, request["pairs"])
    seconds = step_seconds(
        cfg, batch, request["device"], request["variant"] == "compiled", request["dtype"], *request["timing"]
    )
    gpu_report.write_json(Path(request["work"]) / f"step_{request['variant']}.json", {"seconds": seconds})
    return 0


def step_figures(flops: float, tokens: int, seconds: float, matmul_flops: float, peak_tflops: float | None) -> dict:
    achieved = float(flops / seconds)
    return {
        "s_per_step": seconds,
        "tokens_per_s": tokens / seconds,
        "tflops": achieved / 1e12,
        "ratio_to_matmul": achieved / matmul_flops,
        "mfu": None if peak_tflops is None else achieved / (1e12 * peak_tflops),
    }


def time_presets(ctx: Context, overrides: dict, pairs: int, dtype: str, output: dict) -> None:
    """The eager training step of each of profile.presets (`overrides` over its shape), smallest first, on
    `pairs` random training pairs (probe_batch's, cut at its max_len), timed as the probe's: output[preset]
    = {"s_per_step", "pairs"}, or {"error"} for one that fails (out of memory: a finding, the next is timed).
    OutOfTime (the stage's cap) marks the preset being timed and those after it cut, and is raised on."""
    profile, shards = ctx.profile, shards_of(ctx.train_data)
    for index, name in enumerate(profile.presets):
        try:
            cfg = model_config(name, overrides, shards)
            batch = probe_batch(cfg, shards, pairs)
            seconds = step_seconds(cfg, batch, ctx.device, False, dtype, *profile.mfu_timing)
        except OutOfTime as cut:
            output.update({rest: {"error": f"cut: {cut}"} for rest in profile.presets[index:]})
            raise
        except Exception as error:  # out of memory: a finding of the run, not a crash
            output[name] = {"error": f"{type(error).__name__}: {one_line(error)}"}
        else:
            output[name] = {"s_per_step": seconds, "pairs": len(batch["src"])}
        print(f"{name}: {gpu_report.describe_preset_step(output[name])}", flush=True)


def stage_mfu(ctx: Context, output: dict) -> None:
    """output: the probe step's shapes, batch, FLOPs, matmul rate, and per variant its figures (or error);
    output["presets"]: each candidate preset's eager s/step on the train config's batch (time_presets),
    timed after the eager probe and before the compiled one, which gets what is left of the cap."""
    from benchmarks import train_mfu
    from ems.configs import load_config
    from ems.training.config import TrainConfig

    profile, device = ctx.profile, torch.device(ctx.device)
    dtype = "bf16" if device.type == "cuda" else "fp32"
    train_config = load_config(TrainConfig, TRAIN_CONFIG, values=profile.train_overrides)
    overrides = {**profile.model_overrides, **train_config.model_overrides}
    shards = shards_of(ctx.train_data)
    cfg = model_config(profile.mfu_preset, overrides, shards)
    matmul = train_mfu.matmul_rate(
        torch.bfloat16 if dtype == "bf16" else torch.float32, profile.matmul_size, device, repeats=5
    )
    batch = probe_batch(cfg, shards, profile.mfu_pairs)
    tokens = int(train_mfu.real_lengths(batch["src"]).sum() + train_mfu.real_lengths(batch["tgt"]).sum())
    flops, peak = batch_flops(cfg, batch), train_mfu.known_peak_tflops(device)
    output.update(
        preset=profile.mfu_preset,
        overrides=overrides,
        shapes={
            k: getattr(cfg, k) for k in ("d_model", "n_layers", "d_ffn", "vocab_size", "max_len", "xtr_vocabulary")
        },
        pairs=len(batch["src"]),
        real_tokens=tokens,
        gflop_per_step=flops / 1e9,
        step_dtype=dtype,
        matmul_tflops=matmul / 1e12,
        peak_tflops=peak,
        variants={},
        presets={},
    )
    request = {
        "train_data": str(ctx.train_data),
        "preset": profile.mfu_preset,
        "overrides": overrides,
        "pairs": profile.mfu_pairs,
        "device": ctx.device,
        "dtype": dtype,
        "timing": list(profile.mfu_timing),
        "work": str(ctx.work),
    }
    cap_end = time.monotonic() + 60 * ctx.stages["mfu"]["cap_minutes"]

    def time_variant(variant: str) -> None:
        try:
            if variant == "eager":
                seconds = step_seconds(cfg, batch, ctx.device, False, dtype, *profile.mfu_timing)
            else:  # a compiler can take minutes: a child process, killed at the cap
                seconds = step_seconds_in_child(
                    {**request, "variant": variant}, (cap_end - time.monotonic()) / 60 - 0.05
                )
        except OutOfTime as cut:
            output["variants"][variant] = {"error": f"cut: {cut}"}
            if variant == "eager":
                raise
        except Exception as error:  # out of memory, a compiler failure: findings of the run, not crashes
            output["variants"][variant] = {"error": f"{type(error).__name__}: {one_line(error)}"}
        else:
            output["variants"][variant] = step_figures(flops, tokens, seconds, matmul, peak)
        print(f"{variant}: {gpu_report.describe_step(output['variants'][variant])}", flush=True)

    # the eager probe, the presets (the train stage's choice needs them), then the compiled probe in what is left
    if "eager" in profile.mfu_variants:
        time_variant("eager")
    time_presets(ctx, overrides, train_config.batch_size, dtype, output["presets"])
    for variant in profile.mfu_variants:
        if variant != "eager":
            time_variant(variant)
    eager, compiled = (output["variants"].get(name, {}) for name in ("eager", "compiled"))
    if "s_per_step" in eager and "s_per_step" in compiled:
        output["compile_speedup"] = eager["s_per_step"] / compiled["s_per_step"]
    time_loops(ctx, output.setdefault("loops", []))


def time_loops(ctx: Context, output: list) -> None:
    """The training loop of each profile.loop_presets at each profile.loop_pairs (gpu_loop_overhead.measure:
    the loop and the bare step, pairs/s, MFU, loop / bare, graphs compiled), appended to `output` as each ends;
    one that fails is a finding ({"error"}); the stage's cap marks the rest cut."""
    from benchmarks.gpu_loop_overhead import LoopTiming, measure

    profile = ctx.profile
    timing = LoopTiming(*profile.loop_steps, overrides=(), device=ctx.device, work=ctx.work / "loops")
    runs = [(preset, pairs) for preset in profile.loop_presets for pairs in profile.loop_pairs]
    for index, (preset, pairs) in enumerate(runs):
        try:
            figures = measure({"train": ctx.train_data, "eval": ctx.eval_data}, preset, pairs, timing)
        except OutOfTime as cut:
            output.extend({"preset": p, "pairs": n, "error": f"cut: {cut}"} for p, n in runs[index:])
            raise
        except Exception as error:  # out of memory, a compiler failure: findings of the run, not crashes
            figures = {"preset": preset, "pairs": pairs, "error": f"{type(error).__name__}: {one_line(error)}"}
        output.append(figures)
        print(f"loop {preset} x {pairs}: {gpu_report.describe_loop(figures)}", flush=True)


# -- train ---------------------------------------------------------------------------------------


def choose_preset(ctx: Context, base, loop_minutes: float) -> dict:
    """The largest of profile.presets that trains usefully (>= useful_steps optimizer steps of the config's
    batch in `loop_minutes`, at its eager s/step measured by the mfu stage), the smallest timed when none
    does, the fallback when none was timed; {"preset", "rule", "loop_minutes", "predicted_steps" (not for
    the fallback), "candidates": per preset its parameters, GFLOP/pair and s/step, steps, useful or error}."""
    from benchmarks.presets_table import flops_per_pair, sample_batches
    from ems.flops import encoder_parameters

    profile, shards = ctx.profile, shards_of(ctx.train_data)
    timed = ctx.output("mfu").get("presets", {})
    batches = sample_batches(shards, min(base.batch_size, len(shards)), FLOPS_BATCHES, seed=1)
    overrides = {**profile.model_overrides, **base.model_overrides}
    candidates = []
    for name in profile.presets:
        cfg = model_config(name, overrides, shards)
        per_pair = flops_per_pair(cfg, shards, batches, cfg.xtr_vocabulary == "batch")
        row = {"preset": name, "params": encoder_parameters(cfg)["total"], "gflop_per_pair": per_pair / 1e9}
        timing = timed.get(name, {"error": "not timed (the mfu stage ended before it)"})
        if "s_per_step" in timing:
            steps = int(60 * loop_minutes / timing["s_per_step"])
            row.update(s_per_step=timing["s_per_step"], predicted_steps=steps, useful=steps >= profile.useful_steps)
        else:
            row["error"] = timing["error"]
        candidates.append(row)
    measured = [row for row in candidates if "s_per_step" in row]
    if not measured:
        return {
            "preset": profile.fallback_preset,
            "rule": "no preset's step was timed: the fallback",
            "loop_minutes": loop_minutes,
            "candidates": candidates,
        }
    useful = [row for row in measured if row["useful"]]
    chosen = useful[-1] if useful else measured[0]
    rule = (
        f">= {profile.useful_steps} optimizer steps of {base.batch_size} pairs in {loop_minutes:.2f} min of training "
        f"loop, at each preset's eager s/step measured on {timed[chosen['preset']]['pairs']} random training pairs "
        "(the mfu stage)"
    )
    return {
        "preset": chosen["preset"],
        "rule": rule + ("" if useful else "; none does: the smallest timed"),
        "loop_minutes": loop_minutes,
        "predicted_steps": chosen["predicted_steps"],
        "candidates": candidates,
    }


def train_values(ctx: Context, loop_minutes: float, choice: dict) -> dict:
    """TrainConfig values over configs/train/gpu.yaml: the profile's, the data, the clock's limits and,
    when the profile fits them, warm-up, logging and validation intervals from the predicted steps."""
    from ems.apps.demo import data_paths

    values = {
        **ctx.profile.train_overrides,
        **data_paths(ctx.train_data, ctx.eval_data),
        "model": choice["preset"],
        "out": str(ctx.run_dir),
        "time_budget_minutes": round(0.97 * loop_minutes, 3),
        "max_minutes": round(loop_minutes, 3),
        "probe_every": 0,
    }
    if ctx.profile.model_overrides:
        values["model_overrides"] = {**ctx.profile.model_overrides, **values.get("model_overrides", {})}
    steps = choice.get("predicted_steps")
    if ctx.profile.fit_schedule and steps:
        values.update(
            warmup_samples=None,
            warmup_steps=max(1, math.ceil(WARMUP_SHARE * steps)),
            log_every=max(1, steps // 50),
            valid_every=max(1, steps // 4),
        )
    return values


def stage_train(ctx: Context, output: dict) -> None:
    """ems.training.train into --work/run (fresh); out: the preset's choice, the config, steps, seconds, the model."""
    import shutil

    from ems.configs import load_config
    from ems.training.config import TrainConfig
    from ems.training.train import train

    loop_minutes = max(0.1, ctx.stages["train"]["loop_minutes"])
    base = load_config(TrainConfig, TRAIN_CONFIG, values=ctx.profile.train_overrides)
    choice = output["choice"] = choose_preset(ctx, base, loop_minutes)
    print(f"preset {choice['preset']} ({choice['rule']})", flush=True)
    cfg = load_config(TrainConfig, TRAIN_CONFIG, values=train_values(ctx, loop_minutes, choice))
    output["config"] = dataclasses.asdict(cfg)
    write_report(ctx)
    shutil.rmtree(ctx.run_dir, ignore_errors=True)
    started = time.monotonic()
    result = train(cfg)
    output.update(
        steps=result.steps,
        max_steps=result.max_steps,
        model_dir=result.model_dir,
        preempted=result.preempted,
        seconds=round(time.monotonic() - started, 1),
    )


# -- evaluate ------------------------------------------------------------------------------------


def suite_tasks(suite: Path) -> list[Path]:
    from eval.run_all import suite_task_configs

    return suite_task_configs(suite)


def stage_evaluate(ctx: Context, output: dict) -> None:
    """eval.run_all on each task of the profile's suite, each into --work/eval/<task>; a task starts only
    with MIN_TASK_SECONDS of the cap left. output["tasks"][task]: its status and seconds."""
    from ems.encoder_kinds import load_encoder
    from eval.run_all import run_all

    model_dir = ctx.output("train").get("model_dir")
    if not model_dir:
        raise RuntimeError("no trained model (the train stage did not export one)")
    profile = ctx.profile
    spec = f"ems:{model_dir},unseen=neutral,batch_tokens={profile.batch_tokens}"
    encoder = load_encoder(spec, device=ctx.device)
    encoder.model.tokenizer_workers = min(profile.tokenizer_workers, max(0, (os.cpu_count() or 1) - 2))
    languages = (
        None if profile.eval_languages is None else [*ctx.prepared.manifest["languages"], *profile.eval_languages]
    )
    output.update(encoder=spec, languages=languages, tokenizer_workers=encoder.model.tokenizer_workers, tasks={})
    cap_end = time.monotonic() + 60 * ctx.stages["evaluate"]["cap_minutes"]
    try:
        for path in suite_tasks(profile.suite):
            task = output["tasks"][path.stem] = {"status": "not started", "results": str(ctx.eval_dir / path.stem)}
            if cap_end - time.monotonic() < MIN_TASK_SECONDS:
                task["why"] = f"less than {MIN_TASK_SECONDS:g} s of the stage's cap left"
                continue
            task["status"], started = "running", time.monotonic()
            run_all(
                encoder,
                ctx.eval_data,
                out_dir=ctx.eval_dir / path.stem,
                languages=languages,
                config_path=path,
                progress=False,
                max_sentences=profile.eval_max_sentences,
                print_tables=False,
            )
            task.update(status="done", seconds=round(time.monotonic() - started, 1))
            write_report(ctx)
    finally:
        for task in output["tasks"].values():
            if task["status"] == "running":
                task.update(status="cut", why="the stage's cap passed while it ran")
        encoder.model.close()


# -- segmenters ----------------------------------------------------------------------------------


@contextmanager
def segmenters(mode: str, table: Path):
    """Chinese and Japanese segmentation for the run: the installed jieba, MeCab and OpenCC ("installed"),
    or the stand-ins of benchmarks/segmenters answering from the prepared table ("table"; "auto": where
    any of them is missing). The stand-ins are loaded as the modules jieba, fugashi and opencc of this process
    and named first in the PYTHONPATH that spawned tokenizer workers inherit; ems.text's cached segmenters are
    dropped; all restored on exit. Yields
    {"mode", "detail"}."""
    import ems.text

    missing = [name for name in SEGMENTER_PACKAGES if importlib.util.find_spec(name) is None]
    if mode == "installed" or (mode == "auto" and not missing):
        yield {"mode": "installed", "detail": "the installed jieba, fugashi (unidic-lite) and opencc"}
        return
    names = ("jieba", "fugashi", "opencc", "_segmentation_table")
    saved_modules = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    saved_env = {key: os.environ.get(key) for key in ("PYTHONPATH", "EMS_SEGMENTATION_TABLE")}
    getters = (ems.text._jieba, ems.text._mecab, ems.text._opencc)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STANDINS), saved_env["PYTHONPATH"]]))
    os.environ["EMS_SEGMENTATION_TABLE"] = str(table)
    for name in ("_segmentation_table", "jieba", "fugashi", "opencc"):  # the table first: the others import it
        spec = importlib.util.spec_from_file_location(name, STANDINS / f"{name}.py")
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    for getter in getters:
        getter.cache_clear()
    why = f"missing: {', '.join(missing)}" if missing else "--segmenters table"
    try:
        yield {"mode": "table", "detail": f"the stand-ins of benchmarks/segmenters on {table.name} ({why})"}
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved_modules)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for getter in getters:
            getter.cache_clear()


# -- the command ---------------------------------------------------------------------------------


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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
