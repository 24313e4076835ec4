"""The GPU acceptance run's evaluate stage: eval.run_all on the trained model, task by task of the profile's
suite, a task started only while enough of the stage's cap is left.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.gpu.stage import Context, write_report

MIN_TASK_SECONDS = 10.0  # an evaluation task starts only with this much of the stage left


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
