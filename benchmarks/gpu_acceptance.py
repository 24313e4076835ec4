"""The GPU acceptance run: the first command to run when a GPU machine is available.

    python benchmarks/gpu_acceptance.py --work runs/gpu_acceptance        # on the GPU machine: rerun it until it prints
                                                                          #   the report (~40 min in 9-min pieces)
    python benchmarks/gpu_acceptance.py --work runs/gpu_acceptance --stop-after environment   # the checks alone
    python benchmarks/gpu_acceptance.py --work /tmp/smoke --smoke         # every stage, tiny, on CPU (about a minute)

Data: --data-dir or $EMS_DATA_DIR, the directory holding tatoeba_challenge/, tatoeba/, flores200/,
sib200/, mlqe/ and sts2017/ (../shared/data/PROVENANCE.md). Everything is written under --work.

Stages, in order:
  1. environment  torch; CUDA (device, capability); NCCL (a one-process group through MASTER_ADDR/PORT,
                  an all_reduce, destroyed); bf16; flash attention through SDPA on bf16 tensors; faiss's
                  GPUs. Each check: ok / failed (its message) / skipped (no GPU) / not installed.
  2. mfu          the ems-paper training step (benchmarks/train_mfu.py) on 1024 pairs of realistic lengths,
                  eager and torch.compile'd, bf16 autocast: s/step, tokens/s, TFLOP/s, the ratio to the
                  measured bf16 matmul rate and the MFU against the GPU's bf16 peak.
  3. data         the Tatoeba Challenge pairs of every language with >= --min-pairs pairs (counted on
                  import, before cleaning), through the demo's stages (ems.demo.prepare_data): import,
                  clean with every evaluation sentence removed, held-out split, SentencePiece, shards.
  4. train        ems.train.train with configs/train/gpu.yaml: the ems-paper model, bf16, temperature 5,
                  1024 pairs a step; its schedule fitted to the minutes --total-minutes leaves.
  5. evaluate     eval.run_all, task by task, on configs/eval/suite_gpu.yaml (Tatoeba, xSIM on FLORES-200
                  devtest, SIB-200) for every language of each task: the trained ones, and apart the
                  ones the model never saw (encoded with the preprocessing their script suggests).
  6. report       report.json and report.md in --work: every stage's figures, the learning curve.

Pieces and resume. The GPU machine kills a command after 10 minutes, so one invocation does what
fits in --max-minutes (default 9) and exits 0 naming what is left; the same command again goes on
(--work DIR/state.json: settings, invocations, and per stage its runs, seconds, finish time and
output; written atomically after every stage, evaluation task and training piece). A stage starts
only if the minutes it needs (Profile.minutes) fit in what is left of the piece; the first stage
of an invocation always starts (a fresh piece is the most it can get). Training stops itself in
time (TrainConfig.max_minutes: checkpoint, validate, export, exit) and the next invocation resumes
it from its checkpoint in --work/run. Its schedule is fitted once, in its first piece
(TrainConfig.time_budget_minutes), to what --total-minutes (default 40) leaves after the minutes
already spent, the evaluation's and each piece's set-up. A stage killed half way starts again (the
data stage from scratch, training from its last checkpoint, the evaluation at its first task not
recorded). Once every stage is done, the command prints the report.

--smoke runs the same code tiny on CPU: the tiny model for the MFU step, 3 languages with 300
training pairs each, a 10-step training run of a d=32 model in fp32, and the suite on those
languages and one untrained one, with SIB-200 cut to one seed and a 5-epoch MLP
(configs/eval/suite_gpu_smoke.yaml). Its numbers test the wiring, not a model. --stop-after STAGE
ends an invocation after that stage; --stop-at-step N ends its training at step N (checkpointed).

Errors (ems.cli): without --smoke and without a CUDA device, with a missing data directory, or
with a --work made under other settings: one line `error: ...`, status 2, before anything slow.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from ems.cli import UserError, add_debug_option, one_line, run_main  # noqa: E402

STAGES = ("environment", "mfu", "data", "train", "evaluate", "report")
STATE_FILE = "state.json"
REPORT_JSON, REPORT_MD = "report.json", "report.md"
TRAIN_CONFIG = REPO_ROOT / "configs" / "train" / "gpu.yaml"
REQUIRED_DATA = ("tatoeba_challenge", "tatoeba", "flores200/devtest", "sib200", "mlqe", "sts2017")
MEAN_LENGTH = 27.0  # mean tokens per sentence of the MFU batch (train_mfu's default)
MIN_TRAIN_MINUTES = 1.0  # the least training time budget, whatever the stages before took
ENCODE_BATCH = 256


@dataclass(frozen=True)
class Profile:
    """What the GPU run and the CPU smoke run do differently."""

    name: str
    mfu_preset: str
    mfu_overrides: dict
    mfu_pairs: int
    mfu_variants: tuple[str, ...]  # "eager" and/or "compiled" (torch.compile)
    mfu_timing: tuple[int, int]  # warm-up steps, timed steps (their median is reported)
    matmul_size: int  # n of the n x n matmul that measures the peak rate
    languages: tuple[str, ...] | None  # None: every language with >= --min-pairs pairs; else those of these
    data: dict  # ems.demo.DemoDataConfig keys besides languages
    train_overrides: dict  # over configs/train/gpu.yaml
    suite: Path
    untrained_eval_languages: tuple[str, ...] | None  # None: every language of each task; else the trained + these
    eval_max_sentences: int | None  # eval.run_all's max_sentences (None: every sentence)
    minutes: dict[str, float]  # minutes a stage (evaluate: one task) needs to start in a piece
    train_margin_minutes: float  # per training piece outside TrainConfig.max_minutes: set-up, validation, export


GPU = Profile(
    name="gpu",
    mfu_preset="ems-paper",
    mfu_overrides={},
    mfu_pairs=1024,
    mfu_variants=("eager", "compiled"),
    mfu_timing=(3, 10),
    matmul_size=8192,
    languages=None,
    data={"heldout_per_pair": 200, "vocab_size": 32000},
    train_overrides={},
    suite=REPO_ROOT / "configs" / "eval" / "suite_gpu.yaml",
    untrained_eval_languages=None,
    eval_max_sentences=None,
    minutes={"environment": 1.0, "mfu": 5.0, "data": 4.0, "train": 3.0, "evaluate": 3.0, "report": 0.5},
    train_margin_minutes=1.5,
)
SMOKE = Profile(
    name="smoke",
    mfu_preset="tiny",
    mfu_overrides={"vocab_size": 2000, "n_languages": 8},
    mfu_pairs=8,
    mfu_variants=("eager",),
    mfu_timing=(1, 1),
    matmul_size=256,
    languages=("is", "lt", "vi"),
    data={"heldout_per_pair": 30, "max_train_pairs": 300, "vocab_size": 800},
    train_overrides={
        "model": "tiny",
        "model_overrides": {"d_model": 32, "n_heads": 2, "d_ffn": 64, "dropout": 0.0},
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
        "probe_every": 5,
        "probe_sentences": 20,
    },
    suite=REPO_ROOT / "configs" / "eval" / "suite_gpu_smoke.yaml",
    untrained_eval_languages=("nl",),
    eval_max_sentences=200,
    minutes={stage: 0.0 for stage in STAGES},
    train_margin_minutes=0.0,
)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fmt(value, spec: str = ".3f") -> str:
    return "" if value is None else format(value, spec) if isinstance(value, (int, float)) else str(value)


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in its directory and os.replace."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, value) -> None:
    write_atomically(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")


@dataclass
class Piece:
    """This invocation's time: --max-minutes from its start."""

    minutes: float
    started: float = field(default_factory=time.monotonic)
    began: bool = False  # whether a stage has started in this invocation

    def left(self) -> float:
        return self.minutes - (time.monotonic() - self.started) / 60

    def may_start(self, needs: float) -> bool:
        """Whether work that needs `needs` minutes starts now: the first of an invocation always
        does, later work only when it fits in what is left."""
        start = not self.began or self.left() >= needs
        self.began |= start
        return start


@dataclass
class State:
    """--work/state.json: {"settings": what the run was started with, "invocations": [{"started",
    "seconds", "argv"}], "stages": {stage: {"runs", "seconds", "started_at", "finished_at" (None
    until done), "output"}}}."""

    path: Path
    doc: dict
    started: float = field(default_factory=time.monotonic)  # this invocation's start

    @classmethod
    def load(cls, work: Path, settings: dict) -> State:
        """The state in `work` (a new one if none); UserError when `work` was started with other settings."""
        path = work / STATE_FILE
        doc = (
            json.loads(path.read_text()) if path.is_file() else {"settings": settings, "invocations": [], "stages": {}}
        )
        changed = [
            f"{key}: {doc['settings'].get(key)} -> {value}"
            for key, value in settings.items()
            if doc["settings"].get(key) != value
        ]
        if changed:
            raise UserError(
                f"{work} holds a run started with other settings ({', '.join(changed)}): rerun it as it was "
                "started, or give another --work"
            )
        return cls(path, doc)

    def begin(self, argv: list[str]) -> None:
        """Count this invocation (its time from now on)."""
        self.started = time.monotonic()
        self.doc["invocations"].append({"started": now(), "seconds": 0.0, "argv": argv})

    def save(self) -> None:
        self.doc["invocations"][-1]["seconds"] = round(time.monotonic() - self.started, 1)
        write_json(self.path, self.doc)

    def minutes_used(self) -> float:
        """Minutes of every invocation so far, this one included."""
        self.doc["invocations"][-1]["seconds"] = round(time.monotonic() - self.started, 1)
        return sum(invocation["seconds"] for invocation in self.doc["invocations"]) / 60

    def done(self, stage: str) -> bool:
        return self.doc["stages"].get(stage, {}).get("finished_at") is not None

    def record(self, stage: str) -> dict:
        return self.doc["stages"].setdefault(
            stage, {"runs": 0, "seconds": 0.0, "started_at": now(), "finished_at": None, "output": {}}
        )

    def output(self, stage: str) -> dict:
        return self.doc["stages"][stage]["output"]


@dataclass
class Context:
    """Everything a stage reads: the settings, this invocation's piece and the state."""

    work: Path
    data_dir: Path
    device: str
    profile: Profile
    min_pairs: int
    total_minutes: float
    piece: Piece
    state: State
    stop_at_step: int | None = None

    @property
    def prepared(self) -> Path:
        return self.work / "data"

    @property
    def run_dir(self) -> Path:
        return self.work / "run"


# -- environment ---------------------------------------------------------------------------------


def check(probe) -> dict:
    """{"status": "ok", "detail": probe()} or, if it raises, {"status": "failed", "detail": the error}.
    Any exception: a failing check is a finding of the run, reported beside the others."""
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


def faiss_gpus(faiss) -> str:
    gpus = faiss.get_num_gpus()
    if gpus < 1:
        raise RuntimeError(f"faiss {faiss.__version__} sees no GPU (a CPU-only build?)")
    return f"faiss {faiss.__version__}: {gpus} GPU(s)"


def faiss_check() -> dict:
    try:
        import faiss
    except ImportError as error:
        return {"status": "not installed", "detail": one_line(error)}
    return check(lambda: faiss_gpus(faiss))


def stage_environment(ctx: Context, output: dict) -> bool:
    """output["checks"]: {check: {"status", "detail"}}; the GPU checks are skipped on CPU."""
    checks = {"torch": check(lambda: f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")}
    gpu = {"cuda": cuda_device, "nccl": nccl_all_reduce, "bf16": bf16_supported, "sdpa_flash": flash_attention}
    if ctx.device == "cuda":
        checks.update({name: check(probe) for name, probe in gpu.items()}, faiss_gpu=faiss_check())
    else:
        why = "no GPU" if not torch.cuda.is_available() else "--device cpu"
        checks.update({name: {"status": "skipped", "detail": why} for name in [*gpu, "faiss_gpu"]})
    for name, result in checks.items():
        print(f"{name:<12}{result['status']:<15}{result['detail']}", flush=True)
    output["checks"] = checks
    return True


# -- mfu -----------------------------------------------------------------------------------------


def load_train_mfu():
    """benchmarks/train_mfu.py as a module (registered in sys.modules: its dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location("train_mfu", REPO_ROOT / "benchmarks" / "train_mfu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_mfu"] = module
    spec.loader.exec_module(module)
    return module


def time_step(mfu, ctx: Context, cfg, batch: dict, variant: str, dtype: str) -> float:
    """Median seconds of one EMS training step (model, AdamW, batch as in train_mfu), freed after."""
    device = torch.device(ctx.device)
    warmup, steps = ctx.profile.mfu_timing
    step = mfu.ems_step_fn(cfg, batch, device, "fused", compile=variant == "compiled", dtype=dtype)
    try:
        return mfu.median_seconds(step, device, warmup, steps)
    finally:
        del step
        torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def step_figures(flops: float, tokens: int, seconds: float, matmul_flops: float, peak_tflops: float | None) -> dict:
    achieved = float(flops / seconds)
    return {
        "s_per_step": seconds,
        "tokens_per_s": tokens / seconds,
        "tflops": achieved / 1e12,
        "ratio_to_matmul": achieved / matmul_flops,
        "mfu": None if peak_tflops is None else achieved / (1e12 * peak_tflops),
    }


def describe_step(figures: dict) -> str:
    if "error" in figures:
        return f"error: {figures['error']}"
    return (
        f"{figures['s_per_step']:.4f} s/step, {figures['tokens_per_s']:.0f} tokens/s, {figures['tflops']:.3g} TFLOP/s, "
        f"{figures['ratio_to_matmul']:.3f} of the matmul rate, MFU {_fmt(figures['mfu'])}"
    )


def stage_mfu(ctx: Context, output: dict) -> bool:
    """output: the step's shapes, batch, FLOPs, matmul rate, and per variant its figures (or error)."""
    from ems.flops import step_flops
    from ems.model import config_from_preset

    mfu, profile, device = load_train_mfu(), ctx.profile, torch.device(ctx.device)
    dtype = "bf16" if device.type == "cuda" else "fp32"
    cfg = config_from_preset(profile.mfu_preset, **profile.mfu_overrides)
    matmul = mfu.matmul_rate(
        torch.bfloat16 if dtype == "bf16" else torch.float32, profile.matmul_size, device, repeats=5
    )
    batch = mfu.realistic_batch(cfg, profile.mfu_pairs, MEAN_LENGTH)
    tokens = int(mfu.real_lengths(batch["src"]).sum() + mfu.real_lengths(batch["tgt"]).sum())
    flops = step_flops(cfg, mfu.real_lengths(batch["src"]), mfu.real_lengths(batch["tgt"])).total
    peak = mfu.known_peak_tflops(device)
    output.update(
        preset=profile.mfu_preset,
        shapes={k: getattr(cfg, k) for k in ("d_model", "n_layers", "d_ffn", "vocab_size")},
        pairs=profile.mfu_pairs,
        real_tokens=tokens,
        gflop_per_step=float(flops) / 1e9,
        step_dtype=dtype,
        matmul_tflops=matmul / 1e12,
        peak_tflops=peak,
        variants={},
    )
    for variant in profile.mfu_variants:
        try:
            seconds = time_step(mfu, ctx, cfg, batch, variant, dtype)
        except Exception as error:  # out of memory, a compiler failure: findings of the run, not crashes
            output["variants"][variant] = {"error": f"{type(error).__name__}: {one_line(error)}"}
        else:
            output["variants"][variant] = step_figures(flops, tokens, seconds, matmul, peak)
        print(f"{variant}: {describe_step(output['variants'][variant])}", flush=True)
    return True


# -- data ----------------------------------------------------------------------------------------


def pairs_per_language(data_dir: Path) -> dict[str, int]:
    """{language: English pairs} of the Tatoeba Challenge release, as imported (before cleaning)."""
    from data_prep.opus_mt_testsets import build_tatoeba_challenge_corpus

    with tempfile.TemporaryDirectory() as scratch:
        report = build_tatoeba_challenge_corpus(data_dir / "tatoeba_challenge", scratch)
    return dict(sorted(report["languages"].items(), key=lambda item: -item[1]))


def chosen_languages(counts: dict[str, int], min_pairs: int, wanted: tuple[str, ...] | None) -> list[str]:
    """The languages with >= min_pairs pairs (of `wanted` only, when given); UserError if none."""
    enough = [lang for lang, n in counts.items() if n >= min_pairs]
    chosen = sorted(enough if wanted is None else [lang for lang in wanted if lang in enough])
    if not chosen:
        raise UserError(
            f"no language{' of ' + ', '.join(wanted) if wanted else ''} has >= {min_pairs} pairs in tatoeba_challenge/"
        )
    return chosen


def stage_data(ctx: Context, output: dict) -> bool:
    """Corpus, vocabulary and shards in --work/data (ems.demo.prepare_data); output: the languages and
    their pair counts, the corpus summary, the vocabulary and the shards' sizes."""
    from ems.demo import DemoDataConfig, Stages, prepare_data
    from ems.shards import PairShards
    from ems.text import Tokenizer

    counts = pairs_per_language(ctx.data_dir)
    languages = chosen_languages(counts, ctx.min_pairs, ctx.profile.languages)
    print(f"{len(languages)} languages with >= {ctx.min_pairs} pairs: {' '.join(languages)}", flush=True)
    shutil.rmtree(ctx.prepared, ignore_errors=True)
    stages = Stages()
    corpus = prepare_data(DemoDataConfig(languages=languages, **ctx.profile.data), ctx.data_dir, ctx.prepared, stages)
    shards = PairShards(ctx.prepared / "shards" / "train")
    output.update(
        min_pairs=ctx.min_pairs,
        pairs_imported=counts,
        languages=languages,
        corpus=corpus,
        vocab_size=Tokenizer.load(ctx.prepared / "vocab").vocab_size,
        train_pairs=len(shards),
        train_tokens=int(shards.index["n_tokens"]),
        seconds=stages.seconds,
    )
    return True


# -- train ---------------------------------------------------------------------------------------


def train_budget(ctx: Context) -> float:
    """Training minutes (time_budget_minutes) that --total-minutes leaves after what was spent, the
    evaluation and report, and a set-up margin for each piece training will take (at most
    --max-minutes less that margin of training each)."""
    n_tasks = len(suite_tasks(ctx.profile.suite))
    after = n_tasks * ctx.profile.minutes["evaluate"] + ctx.profile.minutes["report"]
    left = ctx.total_minutes - ctx.state.minutes_used() - after
    margin = ctx.profile.train_margin_minutes
    pieces = max(1, math.ceil(left / max(ctx.piece.minutes - margin, MIN_TRAIN_MINUTES)))
    return max(MIN_TRAIN_MINUTES, round(left - pieces * margin, 2))


def train_config(ctx: Context, budget: float, max_minutes: float):
    """configs/train/gpu.yaml with the profile's overrides, the data paths and the clock's limits."""
    from ems.configs import load_config
    from ems.demo import data_paths
    from ems.training.config import TrainConfig

    values = {
        **ctx.profile.train_overrides,
        **data_paths(ctx.prepared, ctx.data_dir),
        "out": str(ctx.run_dir),
        "time_budget_minutes": budget,
        "max_minutes": max_minutes,
        "stop_at_step": ctx.stop_at_step,
    }
    return load_config(TrainConfig, TRAIN_CONFIG, values=values)


def stage_train(ctx: Context, output: dict) -> bool:
    """One training piece into --work/run (resuming from its checkpoint); output: the budget, the
    config, each piece's steps and seconds, the steps and the model. Done at the schedule's end."""
    from ems.train import train

    max_minutes = max(0.25, ctx.piece.left() - ctx.profile.train_margin_minutes)
    output.setdefault("time_budget_minutes", train_budget(ctx))
    cfg = train_config(ctx, output["time_budget_minutes"], max_minutes)
    print(f"time budget {cfg.time_budget_minutes} min; this piece stops after {max_minutes:.2f} min", flush=True)
    first, started = output.get("steps", 0), time.monotonic()
    result = train(cfg)
    done = result["steps"] >= result["max_steps"] and not result["preempted"]
    stopped = (
        "schedule's end"
        if done
        else "signal or STOP file"
        if result["preempted"]
        else (
            f"stop_at_step={cfg.stop_at_step}"
            if result["steps"] == cfg.stop_at_step
            else f"max_minutes={max_minutes:.2f}"
        )
    )
    output.setdefault("pieces", []).append(
        {
            "from_step": first,
            "to_step": result["steps"],
            "stopped_by": stopped,
            "seconds": round(time.monotonic() - started, 1),
        }
    )
    output.update(
        config=dataclasses.asdict(cfg),
        steps=result["steps"],
        max_steps=result["max_steps"],
        model_dir=result["model_dir"],
    )
    return done


# -- evaluate ------------------------------------------------------------------------------------


class AnyLanguageEncoder:
    """A trained EMS model for any language: its own languages as `EMSEncoder.encode` does, any other
    with the preprocessing its script suggests (ems.text.guess_language, as the exported models do;
    the transformer takes no language token). `training_languages` are the model's (Tatoeba's seen /
    unseen groups)."""

    languages = None  # every language

    def __init__(self, model, batch_size: int = ENCODE_BATCH):
        self.model, self.batch_size = model, batch_size
        self.training_languages = list(model.languages)

    def encode(self, sentences: list[str], lang: str):
        from ems.encoder import embed_token_ids
        from ems.languages import UnknownLanguageError, resolve_language
        from ems.text import guess_language

        try:
            resolve_language(lang, self.training_languages)
        except UnknownLanguageError:
            tokenizer = self.model.tokenizer
            ids = tokenizer.sp.encode(
                [tokenizer.preprocessing(s, guess_language(s, tokenizer.languages)) for s in sentences]
            )
            if not all(ids):
                raise ValueError(f"a {lang} sentence has no tokens after preprocessing") from None
            return embed_token_ids(self.model.model, ids, self.batch_size, self.model.device)
        return self.model.encode(sentences, lang, batch_size=self.batch_size)


def suite_tasks(suite: Path) -> list[Path]:
    from eval.run_all import suite_task_configs

    return suite_task_configs(suite)


def task_summary(result, trained: set[str], results_dir: Path) -> dict:
    """One task's eval.results.TaskResult -> its average, per-row headline figure (eval.task's
    TaskType.headline) and their means over the trained and the untrained languages."""
    from eval.task import task_type

    summary = {
        "task": result.task,
        "type": result.type,
        "metric": result.metric,
        "error": result.error,
        "average": result.average,
        "skipped": result.skipped,
        "data_errors": result.data_errors,
        "results": str(results_dir),
    }
    if not result.ran or not result.languages:
        return summary
    kind = task_type(result.type)
    rows = {key: (row.get("lang", key), kind.headline(row)) for key, row in result.languages.items()}
    summary.update(headline=kind.headline_label, per_language={key: value for key, (_, value) in rows.items()})
    for group, seen in (("trained", True), ("untrained", False)):
        values = [value for lang, value in rows.values() if (lang in trained) == seen]
        summary[group] = {"n_languages": len(values), "mean": statistics.fmean(values) if values else None}
    return summary


def stage_evaluate(ctx: Context, output: dict) -> bool:
    """eval.run_all on each task of the profile's suite not yet recorded (output["tasks"][task]),
    saved after each; done when every task is recorded."""
    from ems.encoder import load
    from eval.run_all import run_all

    tasks, encoder = output.setdefault("tasks", {}), None
    extra = ctx.profile.untrained_eval_languages
    languages = output["languages_filter"] = None if extra is None else [*ctx.state.output("data")["languages"], *extra]
    for path in suite_tasks(ctx.profile.suite):
        if path.stem in tasks:
            continue
        if not ctx.piece.may_start(ctx.profile.minutes["evaluate"]):
            return False
        encoder = encoder or AnyLanguageEncoder(load(ctx.state.output("train")["model_dir"], ctx.device))
        out_dir = ctx.work / "eval" / path.stem
        started = time.monotonic()
        results = run_all(
            encoder,
            ctx.data_dir,
            out_dir=out_dir,
            languages=languages,
            config_path=path,
            progress=False,
            max_sentences=ctx.profile.eval_max_sentences,
        )
        (result,) = results.values()
        tasks[path.stem] = {
            **task_summary(result, set(encoder.training_languages), out_dir),
            "seconds": round(time.monotonic() - started, 1),
        }
        ctx.state.save()
    return True


# -- report --------------------------------------------------------------------------------------


CURVE_KEYS = {
    "train": ("loss", "xtr", "contrastive", "lr", "tokens_per_s", "real_token_ratio", "data_wait_fraction"),
    "valid": ("valid_loss", "valid_xtr", "valid_contrastive"),
    "probe": ("probe_tatoeba", "probe_flores"),
}


def learning_curve(run_dir: Path) -> list[dict]:
    """The run's metrics.jsonl, one row per step: its training, validation and probe figures."""
    from eval.curves import read_metrics

    rows: dict[int, dict] = {}
    for kind, records in read_metrics(run_dir).items():
        for record in records:
            rows.setdefault(record["step"], {"step": record["step"]}).update(
                {key: record[key] for key in CURVE_KEYS[kind] if key in record}
            )
    return [rows[step] for step in sorted(rows)]


def training_figures(train: dict, curve: list[dict]) -> dict:
    """Steps, minutes, throughput and first/last validation loss of the training stage."""
    seconds = sum(piece["seconds"] for piece in train["pieces"])
    logged = [row for row in curve if "tokens_per_s" in row]
    valid = [row["valid_loss"] for row in curve if "valid_loss" in row]
    return {
        "steps": train["steps"],
        "max_steps": train["max_steps"],
        "pieces": len(train["pieces"]),
        "minutes": seconds / 60,
        "time_budget_minutes": train["time_budget_minutes"],
        "batch_size": train["config"]["batch_size"],
        "pairs_per_s": train["steps"] * train["config"]["batch_size"] / seconds,
        "tokens_per_s": statistics.median(row["tokens_per_s"] for row in logged) if logged else None,
        "data_wait_fraction": statistics.fmean(row["data_wait_fraction"] for row in logged) if logged else None,
        "valid_loss": [valid[0], valid[-1]] if valid else None,
    }


def build_report(ctx: Context) -> dict:
    stages = ctx.state.doc["stages"]
    curve = learning_curve(ctx.run_dir)
    return {
        "settings": ctx.state.doc["settings"],
        "created": now(),
        "minutes": ctx.state.minutes_used(),
        "invocations": ctx.state.doc["invocations"],
        "stage_seconds": {stage: record["seconds"] for stage, record in stages.items()},
        "stages": {stage: stages[stage]["output"] for stage in STAGES if stage in stages},
        "training": training_figures(stages["train"]["output"], curve),
        "learning_curve": curve,
    }


def environment_markdown(env: dict) -> list[str]:
    lines = ["## Environment", "", "| check | status | detail |", "|:--|:--|:--|"]
    return lines + [f"| {name} | {c['status']} | {c['detail']} |" for name, c in env["checks"].items()]


def mfu_markdown(mfu: dict) -> list[str]:
    shapes = mfu["shapes"]
    lines = [
        "## Training-step MFU",
        "",
        f"{mfu['preset']} (d={shapes['d_model']}, {shapes['n_layers']} layers, ffn {shapes['d_ffn']}, vocabulary "
        f"{shapes['vocab_size']}), {mfu['pairs']} pairs ({mfu['real_tokens']} real tokens, {mfu['gflop_per_step']:.1f} "
        f"GFLOP/step), {mfu['step_dtype']}; measured {mfu['step_dtype']} matmul rate "
        f"{mfu['matmul_tflops']:.3g} TFLOP/s; "
        f"bf16 peak {_fmt(mfu['peak_tflops'], 'g') or 'unknown'} TFLOP/s",
        "",
        "| variant | s/step | tokens/s | TFLOP/s | / matmul rate | MFU |",
        "|:--|--:|--:|--:|--:|--:|",
    ]
    for name, v in mfu["variants"].items():
        lines.append(
            f"| {name} | error: {v['error']} |||||"
            if "error" in v
            else f"| {name} | {v['s_per_step']:.4f} | {v['tokens_per_s']:.0f} | {v['tflops']:.3g} | "
            f"{v['ratio_to_matmul']:.3f} | {_fmt(v['mfu'])} |"
        )
    return lines


def data_markdown(data: dict) -> list[str]:
    corpus = data["corpus"]
    return [
        "## Data",
        "",
        f"{len(data['languages'])} languages with >= {data['min_pairs']} Tatoeba Challenge pairs: "
        f"{' '.join(data['languages'])}",
        "",
        f"imported {sum(corpus['imported'].values())} pairs; removed {corpus['removed_in_eval_set']} "
        f"sharing a sentence with an evaluation set; {corpus['heldout_pairs']} held out; "
        f"{data['train_pairs']} training pairs, "
        f"{data['train_tokens']} tokens; vocabulary {data['vocab_size']}; seconds {json.dumps(data['seconds'])}",
    ]


def training_markdown(figures: dict, curve: list[dict]) -> list[str]:
    lines = [
        "## Training",
        "",
        f"{figures['steps']} of {figures['max_steps']} steps in {figures['pieces']} piece(s), "
        f"{figures['minutes']:.1f} min "
        f"(budget {figures['time_budget_minutes']} min of training loop); {figures['batch_size']} pairs/step, "
        f"{figures['pairs_per_s']:.0f} pairs/s with set-up, "
        f"{_fmt(figures['tokens_per_s'], '.0f')} tokens/s in the loop "
        f"(median), data wait {_fmt(figures['data_wait_fraction'])}; validation loss "
        f"{' -> '.join(_fmt(v) for v in figures['valid_loss'] or [])}",
        "",
        "| step | loss | xtr | contrastive | lr | tokens/s | valid loss | valid xtr | valid contrastive "
        "| probe tatoeba | probe flores |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in curve:
        lines.append(
            f"| {row['step']} | {_fmt(row.get('loss'))} | {_fmt(row.get('xtr'))} | {_fmt(row.get('contrastive'))} | "
            f"{_fmt(row.get('lr'), '.2e')} | {_fmt(row.get('tokens_per_s'), '.0f')} | {_fmt(row.get('valid_loss'))} | "
            f"{_fmt(row.get('valid_xtr'))} | {_fmt(row.get('valid_contrastive'))} | "
            f"{_fmt(row.get('probe_tatoeba'), '.1f')} | "
            f"{_fmt(row.get('probe_flores'), '.1f')} |"
        )
    return lines


def evaluation_markdown(evaluation: dict) -> list[str]:
    lines = [
        "## Evaluation",
        "",
        "| task | figure per language | trained: n | mean | untrained: n | mean |",
        "|:--|:--|--:|--:|--:|--:|",
    ]
    details = []
    for name, t in evaluation["tasks"].items():
        if t["error"] is not None or "per_language" not in t:
            lines.append(f"| {name} | not run: {t['error']} |||||")
            continue
        trained, untrained = t["trained"], t["untrained"]
        lines.append(
            f"| {name} | {t['headline']} | {trained['n_languages']} | {_fmt(trained['mean'], '.1f')} | "
            f"{untrained['n_languages']} | {_fmt(untrained['mean'], '.1f')} |"
        )
        details.append(f"- {name} ({t['results']}): " + ", ".join(f"{k} {v:.1f}" for k, v in t["per_language"].items()))
    return lines + [""] + details


def report_markdown(report: dict) -> str:
    stages = report["stages"]
    lines = [
        f"# GPU acceptance ({report['settings']['profile']}, {report['settings']['device']})",
        "",
        f"{report['minutes']:.1f} min in {len(report['invocations'])} invocation(s); stage seconds: "
        f"{json.dumps(report['stage_seconds'])}",
        "",
        *environment_markdown(stages["environment"]),
        "",
        *mfu_markdown(stages["mfu"]),
        "",
        *data_markdown(stages["data"]),
        "",
        *training_markdown(report["training"], report["learning_curve"]),
        "",
        *evaluation_markdown(stages["evaluate"]),
    ]
    return "\n".join(lines) + "\n"


def stage_report(ctx: Context, output: dict) -> bool:
    report = build_report(ctx)
    write_json(ctx.work / REPORT_JSON, report)
    write_atomically(ctx.work / REPORT_MD, report_markdown(report))
    output.update(json=str(ctx.work / REPORT_JSON), markdown=str(ctx.work / REPORT_MD))
    return True


STAGE_FUNCTIONS = {
    "environment": stage_environment,
    "mfu": stage_mfu,
    "data": stage_data,
    "train": stage_train,
    "evaluate": stage_evaluate,
    "report": stage_report,
}


# -- the command ---------------------------------------------------------------------------------


def run_stages(ctx: Context, stop_after: str | None) -> list[str]:
    """The stages not yet done, in order, as far as this piece (and --stop-after) goes; returns those left."""
    for stage in STAGES:
        if ctx.state.done(stage):
            continue
        if not ctx.piece.may_start(ctx.profile.minutes[stage]):
            break
        print(f"\n=== {stage} ({ctx.piece.left():.1f} of {ctx.piece.minutes:g} min left) ===", flush=True)
        record, started = ctx.state.record(stage), time.monotonic()
        record["runs"] += 1
        finished = STAGE_FUNCTIONS[stage](ctx, record["output"])
        record["seconds"] = round(record["seconds"] + time.monotonic() - started, 1)
        record["finished_at"] = now() if finished else None
        ctx.state.save()
        if not finished or stage == stop_after:
            break
    return [stage for stage in STAGES if not ctx.state.done(stage)]


def check_inputs(args: argparse.Namespace) -> None:
    """UserError for a run that cannot go anywhere: no GPU without --smoke, missing data, bad numbers."""
    if not args.smoke and args.device != "cuda":
        raise UserError("the acceptance run is a GPU run (--device cuda); --smoke runs its stages tiny on CPU")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError(
            f"no CUDA GPU here (torch {torch.__version__}, CUDA {torch.version.cuda or 'not built'}): "
            "run this on the GPU machine, or add --smoke for the tiny CPU run"
        )
    for name in ("max_minutes", "total_minutes", "min_pairs", "stop_at_step"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.data_dir is None:
        raise UserError("no data directory: give --data-dir or set EMS_DATA_DIR (see ../shared/data/PROVENANCE.md)")
    missing = [name for name in REQUIRED_DATA if not (args.data_dir / name).is_dir()]
    if missing:
        raise UserError(
            f"{args.data_dir} lacks {', '.join(f'{name}/' for name in missing)}: point --data-dir (or EMS_DATA_DIR) "
            "at the directory of ../shared/data/PROVENANCE.md"
        )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="state, data, run, evaluation and report (resumable)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get("EMS_DATA_DIR") or None,
        help="the shared data directory (default: $EMS_DATA_DIR)",
    )
    parser.add_argument(
        "--max-minutes", type=float, default=9.0, help="this invocation's time (the machine kills at 10)"
    )
    parser.add_argument("--total-minutes", type=float, default=40.0, help="all invocations together; fits the training")
    parser.add_argument(
        "--min-pairs", type=int, default=2000, help="train on the languages with this many pairs or more"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="every stage tiny, on CPU: a wiring test in about a minute"
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="where the checks, the MFU step and the evaluation run (default: cuda; cpu with --smoke); "
        "training runs on DeepSpeed's accelerator, the GPU when there is one",
    )
    parser.add_argument("--stop-after", choices=STAGES, default=None, help="end this invocation after this stage")
    parser.add_argument("--stop-at-step", type=int, default=None, help="end this invocation's training at this step")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    args.data_dir = None if args.data_dir is None else Path(args.data_dir).resolve()
    return args


def invocation(args: argparse.Namespace, profile: Profile, state: State, argv: list[str]) -> list[str]:
    """One piece: the stages not done yet, as far as it goes; returns the stages left."""
    state.begin(argv)
    ctx = Context(
        work=args.work,
        data_dir=args.data_dir,
        device=args.device,
        profile=profile,
        min_pairs=args.min_pairs,
        total_minutes=args.total_minutes,
        piece=Piece(args.max_minutes),
        state=state,
        stop_at_step=args.stop_at_step,
    )
    left = run_stages(ctx, args.stop_after)
    state.save()
    return left


def main(argv: list[str]) -> int:
    """0 after a piece (saying what is left) or with the report once every stage is done; user
    errors raise (ems.cli.run_main: one line, status 2)."""
    args = parse_args(argv)
    check_inputs(args)
    profile = SMOKE if args.smoke else GPU
    args.work.mkdir(parents=True, exist_ok=True)
    settings = {
        "profile": profile.name,
        "device": args.device,
        "data_dir": str(args.data_dir),
        "min_pairs": args.min_pairs,
    }
    state = State.load(args.work, settings)
    left = [stage for stage in STAGES if not state.done(stage)]
    if left:
        left = invocation(args, profile, state, argv)
    if left:
        done = [stage for stage in STAGES if stage not in left]
        print(
            f"\ndone: {', '.join(done) or 'nothing yet'}; left: {', '.join(left)}. Run the same command again "
            f"to go on ({args.work / STATE_FILE}).",
            flush=True,
        )
    else:
        print(
            "\n" + (args.work / REPORT_MD).read_text() + f"\n{args.work / REPORT_JSON}, {args.work / REPORT_MD}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
