"""Run an evaluation suite on one encoder: print the tables, write results.json, report.md and a chart.

    python -m eval.run_all (--model DIR | --encoder KIND[:PATH]) --data-dir DIR [--suite YAML]
                           [--heldout DIR] [--out DIR] [--cache-dir DIR] [--device DEV] [--task-dir NAME=DIR ...]
                           [--languages deu,fra] [--max-sentences N]

DIR is the data root: each task config (configs/eval/*.yaml) names its `data_subdir` under it,
which `--task-dir NAME=DIR` replaces for one task. Without --suite only Tatoeba runs (plus the
held-out pairs in --heldout, a directory of <l1>-<l2>/<name>.<l1|l2> aligned files). Encoder kinds
are listed in ems.encoder_kinds. `--debug` (or EMS_DEBUG=1) shows the traceback of an error.

Bad input costs as little as it can (eval.faults): a language (pair, track) whose file is missing,
not UTF-8 or misaligned is listed with the reason under "data_errors" of its task and the other
languages run; a task whose data directory or config is missing or broken is reported with the
files it needs and where to get them, and the other tasks run. results.json and report.md are
written in any case; the exit status is then 2 (eval.faults.NOT_RUN_EXIT_CODE) if anything
requested could not run, with one `error: ...` line naming what, else 0. A mistake on the command
line (a missing --model, --suite or encoder) is one `error: ...` line and status 2 before anything runs.
From Python, call `run_all(encoder, data_dir, heldout_dir, out_dir)` with any ems.encoder_kinds.Encoder.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from ems.cli import UserError, add_debug_option, one_line, run_main
from ems.configs import load_config
from ems.corpus import check_output_not_input
from ems.encoder import TruncationWarning
from ems.encoder_kinds import ENCODER_KINDS, Encoder, load_encoder
from ems.languages import TATOEBA_TEST_CODES, canonical_language, lang_to_tatoeba_code, tatoeba_code_to_lang
from eval.chart import CHART_FILE, write_chart
from eval.evaluators.items import NOT_COVERED
from eval.evaluators.retrieval import ENGLISH_NOT_COVERED
from eval.faults import DATA_FAULTS, NOT_RUN_EXIT_CODE, not_run, not_run_lines
from eval.report import task_markdown, write_results
from eval.results import RESULTS_FILE, TaskResult
from eval.task import RunOptions, TaskConfig, TaskRun, TaskType, read_task_config, task_type

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "eval" / "tatoeba.yaml"
DEFAULT_SUITE = DEFAULT_CONFIG.parent / "suite.yaml"


def split_language_filter(codes: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Codes in any form of the one language table (`deu`, `de`, `arb`, `zho_Hans`, `fra-CA`) ->
    (canonical codes, their Tatoeba codes, canonical codes that have no Tatoeba test set).
    UnknownLanguageError (naming the closest known codes) for a code that is no language."""
    canonical = [
        tatoeba_code_to_lang(code) if code in TATOEBA_TEST_CODES else canonical_language(code) for code in codes
    ]
    tatoeba = [lang_to_tatoeba_code(lang) for lang in canonical]
    without_set = [lang for lang, code in zip(canonical, tatoeba) if code not in TATOEBA_TEST_CODES]
    return canonical, [code for code in tatoeba if code in TATOEBA_TEST_CODES], without_set


@dataclass
class SuiteConfig:
    """A suite YAML (configs/eval/suite*.yaml): `tasks`, the task config files, relative to it."""

    tasks: list[str]

    def __post_init__(self):
        if not self.tasks:
            raise ValueError("tasks must list at least one task config")


def suite_task_configs(suite_path: Path) -> list[Path]:
    """Task config paths listed under `tasks:` in a suite YAML, relative to the suite file;
    FileNotFoundError, or one ConfigError naming the file for a malformed suite."""
    suite_path = Path(suite_path)
    if not suite_path.is_file():
        raise FileNotFoundError(f"missing suite config {suite_path}")
    return [suite_path.parent / name for name in load_config(SuiteConfig, suite_path).tasks]


def _not_run(name: str, type_name: str, exc: Exception) -> TaskResult:
    result = TaskResult.not_run(name, type_name, one_line(exc))
    print(*not_run_lines(name, result), file=sys.stderr, flush=True)
    return result


def _run_task(results: dict[str, TaskResult], kind: TaskType, encoder: Encoder, task: TaskRun) -> None:
    """results[task.name] = the TaskResult of kind.run(encoder, task), or a not-run result if it
    raises a DATA_FAULTS error (bad or missing input); a bug is recorded too, then re-raised.
    What could not run goes to stderr. The encoder's TruncationWarnings (one per encode call)
    become one count per task: `truncated_sentences` and one line on stderr."""
    name, type_name = task.name, task.config["type"]  # the config's `type`: how results.json finds the type again
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        try:
            results[name] = TaskResult.from_dict(type_name, kind.run(encoder, task), kind.metric)
        except DATA_FAULTS as exc:
            results[name] = _not_run(name, type_name, exc)
        except Exception as exc:
            results[name] = TaskResult.not_run(name, type_name, f"crashed: {type(exc).__name__}: {one_line(exc)}")
            raise
        finally:
            truncated = sum(w.message.count for w in caught if isinstance(w.message, TruncationWarning))
            for other in (w for w in caught if not isinstance(w.message, TruncationWarning)):
                warnings.showwarning(other.message, other.category, other.filename, other.lineno)
    if truncated:
        results[name].truncated_sentences = truncated
        print(
            f"{name}: {truncated} sentence(s) longer than the model's max_len tokens were cut",
            file=sys.stderr,
            flush=True,
        )
    if results[name].ran:
        for line in not_run_lines(name, results[name]):
            print(line, file=sys.stderr, flush=True)


COVERAGE_REASONS = (NOT_COVERED, ENGLISH_NOT_COVERED)


def _fail_if_nothing_evaluated(result: TaskResult, filtered: bool) -> None:
    """A task that ran but evaluated no language gets an "error" naming why (each skip reason
    with its codes): an encoder that lacks every language of a task, or a config whose codes
    match no data, must not pass as an empty table. Not when --languages left the task nothing
    (`filtered`) and no language was skipped for want of coverage: that is the user's choice."""
    if not result.ran or result.languages is None or result.languages:
        return
    if filtered and not any(reason in result.skipped for reason in COVERAGE_REASONS):
        return
    reasons = (
        "; ".join(f"{reason}: {', '.join(map(str, codes))}" for reason, codes in result.skipped.items()) or "no data"
    )
    result.error = f"no language evaluated ({reasons})"
    print(*not_run_lines(result.task, result), file=sys.stderr, flush=True)


def run_all(
    encoder: Encoder,
    data_dir: Path,
    heldout_dir: Path | None = None,
    out_dir: Path | None = None,
    languages: list[str] | None = None,
    max_sentences: int | None = None,
    config_path: Path = DEFAULT_CONFIG,
    progress: bool = True,
    suite_path: Path | None = None,
    task_dirs: dict[str, Path] | None = None,
    print_tables: bool = True,
) -> dict:
    """Evaluate `encoder` on the tasks of `suite_path` (default: only the Tatoeba config
    `config_path`), each reading data_dir/<its data_subdir> or task_dirs[its name], and, if
    given, the held-out pairs in `heldout_dir`; print a markdown table per task.

    `languages` (Tatoeba or canonical codes) restricts every task; `max_sentences` caps the
    sentences per language (per side and split for BUCC; documents per split for classification,
    whose train language is always read). A language whose data is missing or bad is listed under
    its task's "data_errors"; a task whose data or config is missing or bad gets
    {"task", "error": message}; the rest still runs (eval.faults). Writes results.json, report.md
    and results.png to `out_dir` unless it is None, also when a task crashes (then re-raised);
    prints the tables unless `print_tables` is False. Returns {task name: eval.results.TaskResult}.
    """
    options = RunOptions(max_sentences=max_sentences, progress=progress, data_root=Path(data_dir), out_dir=out_dir)
    if languages is not None:
        options.canonical, options.tatoeba_codes, options.without_tatoeba = split_language_filter(languages)
    task_dirs = {name: Path(path) for name, path in (task_dirs or {}).items()}
    config_paths = suite_task_configs(suite_path) if suite_path is not None else [Path(config_path)]

    results: dict[str, TaskResult] = {}
    try:
        for path in config_paths:
            try:
                config, kind = read_task_config(path)
            except DATA_FAULTS as exc:
                results[path.stem] = _not_run(path.stem, "unknown", exc)
                continue
            task_dir = task_dirs.get(config.name, Path(data_dir) / config.data_subdir)
            _run_task(results, kind, encoder, TaskRun(config, task_dir, options))
            _fail_if_nothing_evaluated(results[config.name], filtered=options.canonical is not None)
        if heldout_dir is not None:
            heldout = TaskConfig(type="heldout", name="heldout", data_subdir=str(heldout_dir))
            _run_task(results, task_type("heldout"), encoder, TaskRun(heldout, Path(heldout_dir), options))
    finally:
        if print_tables:
            for name, task_result in results.items():
                print(task_markdown(task_result, title=name))
        if out_dir is not None:
            json_path, report_path = write_results(results, out_dir)
            chart = write_chart(results, Path(out_dir) / CHART_FILE)
            print(f"wrote {json_path}, {report_path}" + (f" and {chart}" if chart else ""))
    return results


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def task_dir_option(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {text!r}")
    return name, Path(path)


def add_task_dir_option(parser: argparse.ArgumentParser) -> None:
    """`--task-dir NAME=DIR`, repeatable: a list of (name, Path) in args.task_dir."""
    parser.add_argument(
        "--task-dir",
        type=task_dir_option,
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="read task NAME's data from DIR instead of DATA_DIR/<data_subdir>",
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: 0 if everything requested ran, NOT_RUN_EXIT_CODE (with one `error: ...`
    line) if a task or language could not; a usage error raises (run_main: one line, status 2)."""
    parser = argparse.ArgumentParser(prog="python -m eval.run_all", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", type=Path, help="model directory saved by this project (same as --encoder ems:DIR)")
    which.add_argument(
        "--encoder", help=f"KIND[:PATH][,key=value...], KIND one of {', '.join(ENCODER_KINDS)} (see ems.encoder_kinds)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get("EMS_DATA_DIR"),
        help="data root holding tatoeba/, flores200/, ... (default: $EMS_DATA_DIR)",
    )
    parser.add_argument("--suite", type=Path, help=f"suite config listing task configs (e.g. {DEFAULT_SUITE.name})")
    parser.add_argument("--heldout", type=Path, help="directory of <l1>-<l2>/<name>.<l1|l2> aligned test files")
    parser.add_argument(
        "--out", type=Path, help="where to write the results (default: MODEL/eval; required with --encoder)"
    )
    parser.add_argument("--cache-dir", type=Path, help="cache embeddings here, keyed by model and sentences")
    parser.add_argument(
        "--device", help="where the encoder runs: cpu (default), cuda, cuda:1, ... (as device= in the spec)"
    )
    add_task_dir_option(parser)
    parser.add_argument("--languages", help="comma-separated Tatoeba or canonical codes, e.g. deu,fra (default: all)")
    parser.add_argument("--max-sentences", type=positive_int, help="evaluate only the first N sentences per language")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="Tatoeba task config, when no --suite")
    add_debug_option(parser)
    args = parser.parse_args(argv)

    if args.data_dir is None:
        parser.error("--data-dir is required (or set EMS_DATA_DIR): the directory holding tatoeba/, flores200/, ...")
    args.data_dir = Path(args.data_dir)
    languages = None
    if args.languages is not None:
        languages = [code.strip() for code in args.languages.split(",") if code.strip()]
        if not languages:
            parser.error("--languages is empty")
    if args.encoder is not None and args.out is None:
        parser.error("--out is required with --encoder")
    if args.model is not None and not args.model.exists():
        raise UserError(f"model directory {args.model} does not exist")
    out = args.out or args.model / "eval"
    inputs = [("--data-dir", args.data_dir), ("--heldout", args.heldout), ("--model", args.model)]
    inputs += [("--suite", args.suite), ("--config", args.config)]
    check_output_not_input(("--out", out), inputs + [(f"--task-dir {name}", path) for name, path in args.task_dir])
    if args.suite is not None:
        suite_task_configs(args.suite)  # a missing or malformed suite file fails before the encoder loads
    spec = f"ems:{args.model}" if args.model is not None else args.encoder
    encoder = load_encoder(spec, args.cache_dir, args.device)
    results = run_all(
        encoder,
        args.data_dir,
        args.heldout,
        out,
        languages,
        args.max_sentences,
        args.config,
        suite_path=args.suite,
        task_dirs=dict(args.task_dir),
    )
    failed = not_run(results)
    if failed:
        named = ", ".join(failed[:10]) + (f" and {len(failed) - 10} more" if len(failed) > 10 else "")
        print(
            f"error: could not run {named}; the reasons are above and in {Path(out) / RESULTS_FILE}",
            file=sys.stderr,
            flush=True,
        )
        return NOT_RUN_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
