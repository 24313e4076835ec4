"""Markdown tables for evaluation results, and report.md.

The table functions take one task's flat result mapping (eval.results.TaskResult.to_dict) and a
title; each task type (eval.task) names the one that draws it. `task_markdown` picks it from the
result's type.
"""

from __future__ import annotations

from pathlib import Path

from eval.faults import DATA_ERRORS
from eval.results import RESULTS_FILE, TaskResult, write_results_json
from eval.task import task_type

REPORT_FILE = "report.md"
SCORE_KEYS = ("xx2en", "en2xx", "mean")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


COSINE_P_AT_1 = "P@1 (%) by cosine nearest neighbour in both directions; mean = their average."


def _duplicate_note(results: dict) -> list[str]:
    if not results.get("laser_duplicates") or not results["languages"]:
        return []
    changed = {lang: row["duplicate_hits"] for lang, row in results["languages"].items() if row.get("duplicate_hits")}
    listing = ", ".join(f"{lang} {count}" for lang, count in changed.items()) or "none"
    return [
        "",
        "LASER's duplicate rule on (a retrieved sentence identical to the gold one counts as correct); "
        f"retrievals it made correct, both directions: {listing}.",
    ]


def markdown_table(results: dict, title: str, description: str = COSINE_P_AT_1) -> str:
    """Markdown section for one task's results: a row per language (lang, n, xx→en, en→xx, mean),
    an average row, the skipped languages by reason and the languages whose data could not be read
    (eval.faults), after the `description` line. A result with an "error" key (a task that could
    not run) becomes a one-line note."""
    lines = [f"### {title}", ""]
    if "error" in results:
        return "\n".join(lines + [f"Not run: {results['error']}", ""])
    per_language = results["languages"]
    if per_language:
        lines += [
            description,
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
    lines += _duplicate_note(results) + _group_lines(results.get("groups") or {})
    return "\n".join(lines + _skipped_lines(results) + [""])


def _skipped_lines(results: dict) -> list[str]:
    lines = []
    for reason, codes in results.get("skipped", {}).items():
        lines += ["", f"Skipped, {reason} ({len(codes)}): {', '.join(codes)}"]
    errors = results.get(DATA_ERRORS) or {}
    if errors:
        lines += ["", f"Not run, bad or missing data ({len(errors)}):", ""]
        lines += [f"- {item}: {reason}" for item, reason in errors.items()]
    return lines


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _group_lines(groups: dict) -> list[str]:
    if not groups:
        return []
    lines = [
        "",
        "Averages by group (the paper's groupings); missing = group languages not evaluated.",
        "",
        _row(["group", "languages", "xx→en", "en→xx", "mean", "missing"]),
        _row([":--", "--:", "--:", "--:", "--:", "--:"]),
    ]
    for group, row in groups.items():
        lines.append(
            _row([group, str(row["n_languages"]), *(_score(row[key]) for key in SCORE_KEYS), str(len(row["missing"]))])
        )
    return lines


def bucc_table(results: dict, title: str) -> str:
    """Markdown section for a mining task: per language the threshold chosen on the training
    split and P/R/F1 (%) on training and test, then the averages and the skipped languages."""
    lines = [f"### {title}", ""]
    settings = results.get("settings", {})
    if settings:
        lines += [
            f"Margin {settings['margin']}, k = {settings['k']}, mode {settings['mode']}; threshold chosen "
            f"on `{settings['train_split']}`, applied to `{settings['test_split']}`.",
            "",
        ]
    if results["languages"]:
        lines += [
            _row(["lang", "threshold", "train P", "train R", "train F1", "test P", "test R", "test F1"]),
            _row([":--"] + ["--:"] * 7),
        ]
        for lang, row in results["languages"].items():
            test = row["test"] or {}
            cells = [_score(row["train"][key]) for key in ("precision", "recall", "f1")]
            cells += [_score(test.get(key)) for key in ("precision", "recall", "f1")]
            lines.append(_row([lang, f"{row['threshold']:.4f}", *cells]))
        average = results["average"]
        lines.append(
            _row(
                [
                    f"**average** ({average['n_languages']})",
                    "",
                    "",
                    "",
                    f"**{_score(average['train_f1'])}**",
                    "",
                    "",
                    f"**{_score(average['test_f1'])}**",
                ]
            )
        )
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


def bitext_table(results: dict, title: str) -> str:
    """Markdown section for a generic bitext task: the P@1 table with its scoring and source side."""
    settings = results["settings"]
    scoring = (
        "cosine"
        if settings["scoring"] == "cosine"
        else f"{settings['margin']} margin over k = {settings['k']} neighbours"
    )
    directions = "their average" if settings["directions"] == "both" else f"the {settings['directions']} score"
    description = (
        f"P@1 (%) by {scoring}; xx→en retrieves `{settings['source']}` lines for each language's lines, "
        f"en→xx the reverse; mean = {directions}."
    )
    return markdown_table(results, title, description)


def xsim_table(results: dict, title: str) -> str:
    """Markdown section for xSIM: per FLORES file the error rate (%) each way, their mean and xSIM++
    if run, then LASER's average (errors over all sentences) and the skipped languages."""
    lines = [f"### {title}", ""]
    settings = results["settings"]
    plus = results["average"] is not None and "xsimpp" in results["average"]
    lines += [
        f"xSIM error rate (%, lower is better): {settings['margin']} margin, k = {settings['k']}, "
        f"{'textual' if settings['textual'] else 'index'} comparison. xx→en is what LASER reports "
        f"(each sentence searched among the English ones); en→xx the reverse.",
        "",
    ]
    if results["languages"]:
        header = ["file", "lang", "n", "xx→en", "en→xx", "mean"] + (["xSIM++ xx→en"] if plus else [])
        lines += [_row(header), _row([":--", ":--"] + ["--:"] * (len(header) - 2))]
        for stem, row in results["languages"].items():
            cells = [stem, row["lang"], str(row["n"]), *(f"{row[key]:.2f}" for key in SCORE_KEYS)]
            lines.append(_row(cells + ([_score(row.get("xsimpp"))] if plus else [])))
        average = results["average"]
        cells = [
            f"**average** ({average['n_languages']})",
            "",
            str(average["n"]),
            *(f"**{average[key]:.2f}**" for key in SCORE_KEYS),
        ]
        lines.append(_row(cells + ([f"**{average['xsimpp']:.2f}**"] if plus else [])))
    else:
        lines.append("No language was evaluated.")
    return "\n".join(lines + _skipped_lines(results) + [""])


def classification_table(results: dict, title: str) -> str:
    """Markdown section for zero-shot classification: per test language the accuracy (%) as mean ±
    std over the seeds, the train language's own test set first, then the average over the others;
    with the xx2en direction, a second table of X→train-language rows and their average."""
    lines = [f"### {title}", ""]
    settings, train = results.get("settings", {}), results["train_language"]
    dev, forward = results.get("dev"), "en2xx" in settings.get("directions", ["en2xx"])
    if forward:
        lines += [
            f"{train}→X: MLP trained on `{train}` train, best epoch by `{train}` dev accuracy"
            + (f" ({dev['accuracy']:.1f} ± {dev['std']:.1f})" if dev else "")
            + f", tested on each language; accuracy (%) mean ± std over {len(settings.get('seeds', []))} seeds.",
            "",
        ]
    rows = [(f"{train} (in-language)", results["in_language"])] if results.get("in_language") else []
    rows += list(results["languages"].items())
    if rows:
        lines += [_row(["lang", "n", "accuracy"]), _row([":--", "--:", "--:"])]
        lines += [_row([lang, str(row["n"]), f"{row['accuracy']:.1f} ± {row['std']:.1f}"]) for lang, row in rows]
        if results.get("average"):
            average = results["average"]
            lines.append(
                _row([f"**average** ({average['n_languages']}, zero-shot)", "", f"**{average['accuracy']:.1f}**"])
            )
    elif forward:
        lines.append("No language was evaluated.")
    reverse = results.get("directions", {}).get("xx2en")
    if reverse is not None:
        lines += [
            "",
            f"X→{train}: MLP trained on each language X's train split, best epoch by X's dev accuracy, "
            f"tested on `{train}`; accuracy (%) mean ± std.",
            "",
        ]
        if reverse["languages"]:
            lines += [_row(["X", "dev", f"accuracy on {train}"]), _row([":--", "--:", "--:"])]
            lines += [
                _row([f"{lang}→{train}", f"{row['dev']['accuracy']:.1f}", f"{row['accuracy']:.1f} ± {row['std']:.1f}"])
                for lang, row in reverse["languages"].items()
            ]
            average = reverse["average"]
            lines.append(
                _row([f"**average** ({average['n_languages']}, X→{train})", "", f"**{average['accuracy']:.1f}**"])
            )
        else:
            lines.append(f"No language was evaluated X→{train}.")
    return "\n".join(lines + _skipped_lines(results) + [""])


def _corr(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


CORRELATION_CELLS = {
    "qe_pearson": ("Pearson r between cosine(source, MT) and z_mean", lambda c: _corr(c["pearson"])),
    "sts_correlation": (
        "Pearson r / Spearman ρ between cosine(sent1, sent2) and gold",
        lambda c: f"{_corr(c['pearson'])} / {_corr(c['spearman'])}",
    ),
}


def correlation_table(results: dict, title: str) -> str:
    """Markdown section for QE / STS: a row per pair, a column per view (raw embeddings, then each
    head's meaning view), an average row; – = undefined or head not applicable."""
    lines = [f"### {title}", ""]
    what, cell = CORRELATION_CELLS[results["metric"]]
    views = results["views"]
    if results["languages"]:
        training = results.get("head_training") or {}
        lines += [
            f"{what}; columns: raw embeddings and each head's meaning view"
            + (f" (heads trained on FLORES en-X pairs: {', '.join(training['languages'])})" if len(views) > 1 else "")
            + ".",
            "",
            _row(["pair", "n", *views]),
            _row([":--", "--:", *["--:"] * len(views)]),
        ]
        for pair, row in results["languages"].items():
            lines.append(_row([pair, str(row["n"]), *(cell(row[view]) if row.get(view) else "–" for view in views)]))
        average = results["average"]
        lines.append(
            _row([f"**average** ({average['n_languages']})", "", *(f"**{cell(average[view])}**" for view in views)])
        )
        skipped_rows = {
            pair: row["skipped_rows"] for pair, row in results["languages"].items() if row.get("skipped_rows")
        }
        lines += (
            [""] + [f"Skipped rows in {pair}: {counts}" for pair, counts in skipped_rows.items()]
            if skipped_rows
            else []
        )
    else:
        lines.append("No pair was evaluated.")
    return "\n".join(lines + _skipped_lines(results) + [""])


def language_id_table(results: dict, title: str) -> str:
    """Markdown section for language neutrality: linear language-ID probe accuracy (%) per view,
    chance level, the PCA plot's path."""
    lines = [f"### {title}", ""]
    blocks = results["lines"]
    lines += [
        f"Linear language-ID probe over {len(results['languages_probed'])} languages "
        f"({', '.join(results['languages_probed'])}); FLORES lines {blocks['heads'][0]}–{blocks['heads'][1]} train the "
        f"heads, {blocks['probe_train'][0]}–{blocks['probe_train'][1]} the probe, "
        f"{blocks['probe_test'][0]}–{blocks['probe_test'][1]} test it. Chance: {results['chance']:.1f}%.",
        "",
        _row(["view", "LID accuracy (%)"]),
        _row([":--", "--:"]),
    ]
    lines += [_row([view, f"{accuracy:.1f}"]) for view, accuracy in results["views"].items()]
    if results.get("pca_plot"):
        lines += ["", f"PCA of raw / meaning / language embeddings: `{results['pca_plot']}`"]
    return "\n".join(lines + _skipped_lines(results) + [""])


def task_markdown(result: TaskResult, title: str) -> str:
    """Markdown section for one task result, drawn by its task type's table (a task that did
    not run: one line saying why)."""
    if not result.ran:
        return markdown_table(result.to_dict(), title)
    return task_type(result.type).table(result.to_dict(), title)


def report_markdown(results: dict[str, TaskResult]) -> str:
    """Markdown report for {task name: TaskResult}, one section per task."""
    return "\n".join(task_markdown(task_result, title=task) for task, task_result in results.items())


def write_results(results: dict[str, TaskResult], out_dir: Path) -> tuple[Path, Path]:
    """Write {task name: TaskResult} to out_dir/results.json (eval.results) and its markdown to
    out_dir/report.md, creating out_dir. Returns the two paths."""
    out_dir = Path(out_dir)
    json_path = write_results_json(results, out_dir / RESULTS_FILE)
    report_path = out_dir / REPORT_FILE
    report_path.write_text(report_markdown(results), encoding="utf-8")
    return json_path, report_path
