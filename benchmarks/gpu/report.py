"""The GPU acceptance run's report (benchmarks/gpu/acceptance.py): report.json and report.md.

In: the run's context (its stages' records and outputs, the prepared data's manifest, the run's
metrics.jsonl, each evaluation task's results.json). Out: one JSON document (settings, each stage's
status, cap and seconds, environment, MFU, data, the preset's choice, training figures, the learning
curve, evaluation by task and by language group, what was cut) and its markdown. Written after every
stage, so a killed run leaves what it did.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path

REPORT_JSON, REPORT_MD = "report.json", "report.md"
CURVE_KEYS = {
    "train": ("loss", "xtr", "contrastive", "lr", "tokens_per_s", "real_token_ratio", "data_wait_fraction"),
    "valid": ("valid_loss", "valid_xtr", "valid_contrastive"),
    "probe": ("probe_tatoeba", "probe_flores"),
}
FINISHED = ("done", "cut", "failed")


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in its directory and os.replace."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, value) -> None:
    write_atomically(path, json.dumps(value, indent=1, ensure_ascii=False) + "\n")


def _fmt(value, spec: str = ".3f") -> str:
    if value is None:
        return ""
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _or_error(describe: Callable[[dict], str]) -> Callable[[dict], str]:
    """`describe`, except for figures of a stage that failed ({"error"}): "error: " and its message."""

    @functools.wraps(describe)
    def described(figures: dict) -> str:
        return f"error: {figures['error']}" if "error" in figures else describe(figures)

    return described


@_or_error
def describe_step(figures: dict) -> str:
    return (
        f"{figures['s_per_step']:.4f} s/step, {figures['tokens_per_s']:.0f} tokens/s, {figures['tflops']:.3g} TFLOP/s, "
        f"{figures['ratio_to_matmul']:.3f} of the matmul rate, MFU {_fmt(figures['mfu'])}"
    )


@_or_error
def describe_loop(figures: dict) -> str:
    """A training loop's timing from the mfu stage (loop_overhead.measure's figures, or {"error"})."""
    loop = figures["loop"]
    return (
        f"{loop['s_per_step']:.4f} s/step, {loop['pairs_per_s']:.0f} pairs/s, MFU {_fmt(loop['mfu'])}, "
        f"loop / bare {figures['loop_over_bare_s_per_step']:.2f}, compiled graphs {figures['compiled_graphs']}"
    )


@_or_error
def describe_preset_step(timing: dict) -> str:
    """A preset's timing from the mfu stage ({"s_per_step", "pairs"} or {"error"}) in a few words."""
    return f"{timing['s_per_step']:.4f} s/step on {timing['pairs']} pairs"


# -- the figures ---------------------------------------------------------------------------------


def learning_curve(run_dir: Path) -> list[dict]:
    """The run's metrics.jsonl, one row per step: its training, validation and probe figures."""
    from eval.curves import read_metrics

    if not (run_dir / "metrics.jsonl").is_file():
        return []
    rows: dict[int, dict] = {}
    for kind, records in read_metrics(run_dir).items():
        for record in records:
            rows.setdefault(record["step"], {"step": record["step"]}).update(
                {key: record[key] for key in CURVE_KEYS[kind] if key in record}
            )
    return [rows[step] for step in sorted(rows)]


def training_figures(train: dict, curve: list[dict], mfu: dict) -> dict:
    """Steps, minutes, throughput, model FLOP rate and first/last validation loss of the training stage."""
    if train.get("steps") is None:
        return {}
    config, choice = train["config"], train["choice"]
    logged = [row for row in curve if "tokens_per_s" in row]
    valid = [row["valid_loss"] for row in curve if "valid_loss" in row]
    per_pair = next((row["gflop_per_pair"] for row in choice["candidates"] if row["preset"] == config["model"]), None)
    pairs = train["steps"] * config["batch_size"]
    tflops = None if per_pair is None else pairs * per_pair / 1e3 / train["seconds"]
    peak = mfu.get("peak_tflops")
    return {
        "preset": config["model"],
        "steps": train["steps"],
        "max_steps": train["max_steps"],
        "ended": "schedule's end" if train["steps"] >= train["max_steps"] else "stopped early (max_minutes)",
        "seconds": train["seconds"],
        "time_budget_minutes": config["time_budget_minutes"],
        "max_minutes": config["max_minutes"],
        "batch_size": config["batch_size"],
        "pairs_per_s": pairs / train["seconds"],
        "tokens_per_s": statistics.median(row["tokens_per_s"] for row in logged) if logged else None,
        "data_wait_fraction": statistics.fmean(row["data_wait_fraction"] for row in logged) if logged else None,
        "model_tflops_with_setup": tflops,
        "mfu_with_setup": None if tflops is None or not peak else tflops / peak,
        "valid_loss": [valid[0], valid[-1]] if valid else None,
        # graphs compiled by the loop's last record (None: an eager loop, TrainConfig.compile)
        "compiled_graphs": next((row["compiled_graphs"] for row in reversed(logged) if "compiled_graphs" in row), None),
    }


def task_summaries(tasks: dict) -> dict:
    """Per evaluation task: its status and, where results.json exists, its average and errors."""
    from eval.results import RESULTS_FILE, read_results

    summaries = {}
    for name, task in tasks.items():
        summary = dict(task)
        results = Path(task["results"]) / RESULTS_FILE
        if task["status"] == "done" and results.is_file():
            ((_, result),) = read_results(results).items()
            summary.update(
                type=result.type,
                metric=result.metric,
                error=result.error,
                average=result.average,
                languages=len(result.languages or {}),
                data_errors=len(result.data_errors),
            )
        summaries[name] = summary
    return summaries


def language_groups(tasks: dict, shards: Path, out: Path) -> dict:
    """The finished tasks' rows by training-data group (eval.language_groups): written to `out`
    (per_language.csv, by_group.md, p_at_1_vs_pairs.png); {"by_group_md", "means": {task: {group:
    {"mean", "n"}}}}, or {"error"} when no task has per-language rows."""
    from eval.language_groups import (
        ALL,
        GROUPS,
        MARKDOWN_FILE,
        grouped_results,
        training_pairs,
        write_grouped,
    )
    from eval.results import RESULTS_FILE

    pairs = training_pairs(shards)
    rows = []
    for task in tasks.values():
        results = Path(task["results"]) / RESULTS_FILE
        if task["status"] == "done" and results.is_file():
            try:
                rows += grouped_results(results, pairs)
            except ValueError:  # a task without per-language rows
                continue
    if not rows:
        return {"error": "no evaluation task finished with per-language results"}
    write_grouped(rows, out, pairs)
    means: dict[str, dict] = {}
    for task in dict.fromkeys(row["task"] for row in rows):
        for group in (*GROUPS, ALL):
            scores = [row["score"] for row in rows if row["task"] == task and group in (ALL, row["group"])]
            if scores:
                means.setdefault(task, {})[group] = {"mean": statistics.fmean(scores), "n": len(scores)}
    return {"by_group_md": str(out / MARKDOWN_FILE), "means": means}


def cuts(report: dict) -> list[str]:
    """What the run did not do in full, one line each."""
    lines = [
        f"{stage}: {record['status']}: {record.get('why', '')}"
        for stage, record in report["stages"].items()
        if record.get("status") in ("cut", "failed")
    ]
    for name, variant in report["mfu"].get("variants", {}).items():
        if "error" in variant:
            lines.append(f"mfu {name}: {variant['error']}")
    for name, timing in report["mfu"].get("presets", {}).items():
        if "error" in timing:
            lines.append(f"mfu preset {name}: {timing['error']}")
    for loop in report["mfu"].get("loops", []):
        if "error" in loop:
            lines.append(f"mfu loop {loop['preset']} x {loop['pairs']}: {loop['error']}")
    training = report["training"]
    if training and training["steps"] < training["max_steps"]:
        lines.append(f"training stopped at step {training['steps']} of its fitted {training['max_steps']}")
    train_stage = report["stages"].get("train", {})
    wanted = report["settings"].get("min_train_minutes", 0)
    if train_stage.get("train_cap_minutes") is not None and train_stage["train_cap_minutes"] < wanted:
        lines.append(f"training had {max(0.0, train_stage['train_cap_minutes']):.2f} min, under the {wanted:g} wanted")
    for name, task in report["evaluation"].get("tasks", {}).items():
        if task["status"] != "done":
            lines.append(f"evaluation {name}: {task['status']}{': ' + task['why'] if task.get('why') else ''}")
    return lines


def build_report(ctx) -> dict:
    """The report of what `ctx` (benchmarks.gpu.stage.Context) has done so far."""
    evaluate = ctx.stages.get("evaluate", {})
    evaluation = {key: value for key, value in ctx.output("evaluate").items() if key != "tasks"}
    evaluation["tasks"] = task_summaries(ctx.output("evaluate").get("tasks", {}))
    if evaluate.get("status") in FINISHED and "groups" not in evaluate["output"]:
        try:
            groups = language_groups(evaluation["tasks"], ctx.train_data / "shards" / "train", ctx.eval_dir / "groups")
        except Exception as error:  # the report is written whatever the grouping makes of the results
            groups = {"error": f"{type(error).__name__}: {error}"}
        evaluate["output"]["groups"] = groups
    evaluation["groups"] = evaluate.get("output", {}).get("groups")
    curve = learning_curve(ctx.run_dir)
    manifest = ctx.prepared.manifest
    report = {
        "settings": {**ctx.settings, "min_train_minutes": ctx.profile.min_train_minutes},
        "minutes": ctx.clock.elapsed(),
        "stages": {stage: {k: v for k, v in record.items() if k != "output"} for stage, record in ctx.stages.items()},
        "environment": ctx.output("environment"),
        "mfu": ctx.output("mfu"),
        "data": {key: manifest[key] for key in ("data_config", "corpus", "vocab", "train_pairs", "train_tokens")}
        | {"languages": len(manifest["languages"]), "prepared_mib": manifest["total_bytes"] / (1 << 20)},
        "preset_choice": ctx.output("train").get("choice"),
        "training": training_figures(ctx.output("train"), curve, ctx.output("mfu")),
        "learning_curve": curve,
        "evaluation": evaluation,
        "segmenters": ctx.segmenters,
    }
    report["cuts"] = cuts(report)
    return report


# -- markdown ------------------------------------------------------------------------------------


def stages_markdown(report: dict) -> list[str]:
    lines = ["| stage | status | cap (min) | seconds | note |", "|:--|:--|--:|--:|:--|"]
    for stage, record in report["stages"].items():
        lines.append(
            f"| {stage} | {record.get('status', '')} | {_fmt(record.get('cap_minutes'), '.2f')} | "
            f"{_fmt(record.get('seconds'), '.1f')} | {record.get('why', '')} |"
        )
    return lines


def environment_markdown(env: dict) -> list[str]:
    lines = ["## Environment", "", "| check | status | detail |", "|:--|:--|:--|"]
    return lines + [f"| {name} | {c['status']} | {c['detail']} |" for name, c in env.get("checks", {}).items()]


def mfu_markdown(mfu: dict) -> list[str]:
    if "shapes" not in mfu:
        return ["## Training-step MFU", "", "not measured"]
    shapes = mfu["shapes"]
    lines = [
        "## Training-step MFU",
        "",
        f"{mfu['preset']} (d={shapes['d_model']}, {shapes['n_layers']} layers, ffn {shapes['d_ffn']}, vocabulary "
        f"{shapes['vocab_size']}, XTR softmax over the {shapes['xtr_vocabulary']} vocabulary), {mfu['pairs']} real "
        f"training pairs ({mfu['real_tokens']} tokens, {mfu['gflop_per_step']:.1f} GFLOP/step), {mfu['step_dtype']}; "
        f"measured {mfu['step_dtype']} matmul rate {mfu['matmul_tflops']:.3g} TFLOP/s; bf16 peak "
        f"{_fmt(mfu['peak_tflops'], 'g') or 'unknown'} TFLOP/s; compiled/eager speed-up "
        f"{_fmt(mfu.get('compile_speedup'), '.2f') or '-'}",
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
    if mfu.get("presets"):
        timings = "; ".join(f"{name} {describe_preset_step(t)}" for name, t in mfu["presets"].items())
        lines += ["", f"Each candidate preset's eager step on the train config's batch: {timings}"]
    if mfu.get("loops"):
        lines += [
            "",
            "The training loop (ems.training.train; compiled: TrainConfig.compile) against its bare step:",
            "",
            "| preset | pairs | compiled | loop s/step | pairs/s | MFU | loop / bare | compiled graphs |",
            "|:--|--:|:--|--:|--:|--:|--:|--:|",
        ]
        for loop in mfu["loops"]:
            if "error" in loop:
                lines.append(f"| {loop['preset']} | {loop['pairs']} | error: {loop['error']} ||||||")
                continue
            lines.append(
                f"| {loop['preset']} | {loop['pairs']} | {loop['compiled']} | {loop['loop']['s_per_step']:.4f} | "
                f"{loop['loop']['pairs_per_s']:.0f} | {_fmt(loop['loop']['mfu'])} | "
                f"{loop['loop_over_bare_s_per_step']:.2f} | {loop['compiled_graphs']} |"
            )
    return lines


def data_markdown(data: dict) -> list[str]:
    corpus, config = data["corpus"], data["data_config"]
    return [
        "## Data (prepared on CPU)",
        "",
        f"{data['languages']} languages ({', '.join(config['corpora'])}, >= {config['min_pairs']} pairs); "
        f"{corpus['removed_in_eval_set']} pairs sharing a sentence with an evaluation set removed; "
        f"{corpus['heldout_pairs']} held out; {data['train_pairs']} training pairs, {data['train_tokens']} tokens; "
        f"vocabulary {data['vocab']['size']} (sha1 {data['vocab']['sha1'][:12]}); "
        f"carried {data['prepared_mib']:.1f} MiB",
    ]


def choice_markdown(choice: dict | None) -> list[str]:
    if not choice:
        return []
    lines = [
        "## Preset",
        "",
        f"**{choice['preset']}**: the largest that trains usefully, {choice['rule']}.",
        "",
        "| preset | parameters | GFLOP/pair | measured s/step | predicted steps | useful |",
        "|:--|--:|--:|--:|--:|:--|",
    ]
    for row in choice["candidates"]:
        seconds = f"error: {row['error']}" if "error" in row else _fmt(row.get("s_per_step"), ".4f")
        lines.append(
            f"| {row['preset']} | {row['params'] / 1e6:.1f}M | {row['gflop_per_pair']:.3f} | {seconds} | "
            f"{_fmt(row.get('predicted_steps'), 'd')} | {_fmt(row.get('useful'))} |"
        )
    return lines


def training_markdown(figures: dict, curve: list[dict]) -> list[str]:
    if not figures:
        return ["## Training", "", "no training figures"]
    lines = [
        "## Training",
        "",
        f"{figures['preset']}: {figures['steps']} of {figures['max_steps']} steps ({figures['ended']}) in "
        f"{figures['seconds'] / 60:.2f} min with set-up (schedule fitted to {figures['time_budget_minutes']} min, loop "
        f"stopped at {figures['max_minutes']}); {figures['batch_size']} pairs/step, {figures['pairs_per_s']:.0f} "
        f"pairs/s with set-up, {_fmt(figures['tokens_per_s'], '.0f')} tokens/s in the loop (median), data wait "
        f"{_fmt(figures['data_wait_fraction'])}; model {_fmt(figures['model_tflops_with_setup'], '.3g')} TFLOP/s "
        f"with set-up (MFU {_fmt(figures['mfu_with_setup'])}); validation loss "
        f"{' -> '.join(_fmt(v) for v in figures['valid_loss'] or [])}; "
        f"compiled graphs: {figures['compiled_graphs'] or 'none (eager)'}",
        "",
        "| step | loss | xtr | contrastive | lr | tokens/s | valid loss | valid xtr | valid contrastive |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in curve:
        lines.append(
            f"| {row['step']} | {_fmt(row.get('loss'))} | {_fmt(row.get('xtr'))} | {_fmt(row.get('contrastive'))} | "
            f"{_fmt(row.get('lr'), '.2e')} | {_fmt(row.get('tokens_per_s'), '.0f')} | {_fmt(row.get('valid_loss'))} | "
            f"{_fmt(row.get('valid_xtr'))} | {_fmt(row.get('valid_contrastive'))} |"
        )
    return lines


def evaluation_markdown(evaluation: dict) -> list[str]:
    lines = ["## Evaluation", "", "| task | status | seconds | languages | average |", "|:--|:--|--:|--:|:--|"]
    for name, task in evaluation.get("tasks", {}).items():
        average = json.dumps(task.get("average")) if task.get("average") else task.get("error") or task.get("why", "")
        lines.append(
            f"| {name} | {task['status']} | {_fmt(task.get('seconds'), '.1f')} | {_fmt(task.get('languages'), 'd')} | "
            f"{average} |"
        )
    groups = evaluation.get("groups") or {}
    if "by_group_md" in groups and Path(groups["by_group_md"]).is_file():
        text = Path(groups["by_group_md"]).read_text(encoding="utf-8")
        lines += ["", *("#" + line if line.startswith("#") else line for line in text.splitlines())]
    elif "error" in groups:
        lines += ["", f"by group: {groups['error']}"]
    return lines


def report_markdown(report: dict) -> str:
    settings = report["settings"]
    lines = [
        f"# GPU acceptance ({settings['profile']}, {settings['device']})",
        "",
        f"{report['minutes']:.2f} of {settings['total_minutes']:g} min (unpacking {settings['unpack_seconds']} s); "
        f"segmenters: {report['segmenters']['detail']}",
        "",
        *stages_markdown(report),
        "",
        "Cut or failed: " + ("; ".join(report["cuts"]) if report["cuts"] else "nothing"),
        "",
        *environment_markdown(report["environment"]),
        "",
        *mfu_markdown(report["mfu"]),
        "",
        *data_markdown(report["data"]),
        "",
        *choice_markdown(report["preset_choice"]),
        "",
        *training_markdown(report["training"], report["learning_curve"]),
        "",
        *evaluation_markdown(report["evaluation"]),
    ]
    return "\n".join(lines) + "\n"
