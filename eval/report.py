"""Markdown tables and result files for evaluation results (see eval.retrieval.evaluate_bitexts for the shape)."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"
SCORE_KEYS = ("xx2en", "en2xx", "mean")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_table(results: dict, title: str) -> str:
    """Markdown section for one task's results: a row per language (lang, n, xx→en, en→xx, mean),
    an average row, and the skipped languages by reason. A result with an "error" key (a task
    that could not run) becomes a one-line note."""
    lines = [f"### {title}", ""]
    if "error" in results:
        return "\n".join(lines + [f"Not run: {results['error']}", ""])
    per_language = results["languages"]
    if per_language:
        lines += [
            "P@1 (%) by cosine nearest neighbour in both directions; mean = their average.",
            "",
            _row(["lang", "n", "xx→en", "en→xx", "mean"]),
            _row([":--", "--:", "--:", "--:", "--:"]),
        ]
        for lang, row in per_language.items():
            lines.append(_row([lang, str(row["n"]), *(f"{row[key]:.1f}" for key in SCORE_KEYS)]))
        average = results["average"]
        plural = "" if average["n_languages"] == 1 else "s"
        label = f"**average** ({average['n_languages']} language{plural})"
        lines.append(_row([label, str(average["n"]), *(f"**{average[key]:.1f}**" for key in SCORE_KEYS)]))
    else:
        lines.append("No language was evaluated.")
    lines += _group_lines(results.get("groups") or {})
    return "\n".join(lines + _skipped_lines(results) + [""])


def _skipped_lines(results: dict) -> list[str]:
    lines = []
    for reason, codes in results.get("skipped", {}).items():
        lines += ["", f"Skipped, {reason} ({len(codes)}): {', '.join(codes)}"]
    return lines


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _group_lines(groups: dict) -> list[str]:
    if not groups:
        return []
    lines = ["", "Averages by group (the paper's groupings); missing = group languages not evaluated.", "",
             _row(["group", "languages", "xx→en", "en→xx", "mean", "missing"]),
             _row([":--", "--:", "--:", "--:", "--:", "--:"])]  # fmt: skip
    for group, row in groups.items():
        lines.append(_row([group, str(row["n_languages"]), *(_score(row[key]) for key in SCORE_KEYS), str(len(row["missing"]))]))
    return lines


def bucc_table(results: dict, title: str) -> str:
    """Markdown section for a mining task: per language the threshold chosen on the training
    split and P/R/F1 (%) on training and test, then the averages and the skipped languages."""
    lines = [f"### {title}", ""]
    settings = results.get("settings", {})
    if settings:
        lines += [f"Margin {settings['margin']}, k = {settings['k']}, mode {settings['mode']}; threshold chosen "
                  f"on `{settings['train_split']}`, applied to `{settings['test_split']}`.", ""]  # fmt: skip
    if results["languages"]:
        lines += [_row(["lang", "threshold", "train P", "train R", "train F1", "test P", "test R", "test F1"]),
                  _row([":--"] + ["--:"] * 7)]  # fmt: skip
        for lang, row in results["languages"].items():
            test = row["test"] or {}
            cells = [_score(row["train"][key]) for key in ("precision", "recall", "f1")]
            cells += [_score(test.get(key)) for key in ("precision", "recall", "f1")]
            lines.append(_row([lang, f"{row['threshold']:.4f}", *cells]))
        average = results["average"]
        lines.append(_row([f"**average** ({average['n_languages']})", "", "", "", f"**{_score(average['train_f1'])}**",
                           "", "", f"**{_score(average['test_f1'])}**"]))  # fmt: skip
        notes = sorted({row["note"] for row in results["languages"].values() if "note" in row})
        lines += [""] + [f"Note: {note}" for note in notes] if notes else []
    else:
        lines.append("No language was evaluated.")
    return "\n".join(lines + _skipped_lines(results) + [""])


def retrieval_table(results: dict, title: str) -> str:
    """Markdown section for large-scale retrieval: per pair n queries, m candidates, margin P@1 (%)."""
    lines = [f"### {title}", ""]
    if results["languages"]:
        lines += [_row(["pair", "queries", "candidates", "P@1"]), _row([":--", "--:", "--:", "--:"])]
        for pair, row in results["languages"].items():
            lines.append(_row([pair, str(row["n_queries"]), str(row["n_candidates"]), f"{row['p_at_1']:.1f}"]))
        average = results["average"]
        lines.append(_row([f"**average** ({average['n_languages']})", "", "", f"**{average['p_at_1']:.1f}**"]))
    else:
        lines.append("No pair was evaluated.")
    return "\n".join(lines + _skipped_lines(results) + [""])


TABLES = {"p_at_1": markdown_table, "mining_f1": bucc_table, "retrieval_p_at_1": retrieval_table}


def task_markdown(results: dict, title: str) -> str:
    """Markdown section for one task result, in the table style of its metric."""
    if "error" in results:
        return markdown_table(results, title)
    return TABLES[results.get("metric", "p_at_1")](results, title)


def report_markdown(results: dict) -> str:
    """Markdown report for {task name: task result}, one section per task."""
    return "\n".join(task_markdown(task_result, title=task) for task, task_result in results.items())


def write_results(results: dict, out_dir: Path) -> tuple[Path, Path]:
    """Write `results` ({task name: task result}, or one task result) to out_dir/results.json and
    its markdown to out_dir/report.md, creating out_dir. Returns the two paths."""
    if "task" in results:
        results = {results["task"]: results}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, report_path = out_dir / RESULTS_FILE, out_dir / REPORT_FILE
    json_path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    report_path.write_text(report_markdown(results), encoding="utf-8")
    return json_path, report_path
