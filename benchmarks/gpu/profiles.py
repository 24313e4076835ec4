"""The GPU acceptance run's profiles: what the GPU run (GPU) and the CPU smoke run (SMOKE) do differently.

Profile holds a run's choices: the MFU probe's model and batch, the candidate presets and what makes one
useful, the training config's overrides (TRAIN_CONFIG: the config they go over), the evaluation suite and
languages, and each stage's time cap in minutes (CAPS, GPU_CAPS). TINY is the smoke run's model shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

TRAIN_CONFIG = REPO_ROOT / "configs" / "train" / "gpu.yaml"
USEFUL_STEPS = 2000  # GPU: >= 2M pairs (~5 passes over the ~417k-pair corpus) and a warm-up of 10% of them


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
    # at each of these batches, timed in the mfu stage (loop_overhead.measure): pairs/s, MFU, recompiles
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
