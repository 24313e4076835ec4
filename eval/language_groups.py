"""Per-language evaluation results split into groups by how much training data each language had.

In: a results.json of eval.run_all (eval.results) and the shard directory a model trained on (its
index.json counts the pairs of each language pair: ems.shards.language_pair_counts). Out:
`grouped_results` -> one row per (task, language) of the per-language tasks, {task, type, language,
canonical, group, training_pairs, score}, and `write_grouped` -> OUT/per_language.csv (one row per
language, one column per task), OUT/by_group.md (each task's average per group, and Tatoeba over its
112 languages) and OUT/p_at_1_vs_pairs.png (Tatoeba and FLORES P@1 against training pairs).

Scores (SCORES): Tatoeba and FLORES-200 bitext: P@1 (%), mean of both directions; xSIM: error rate
(%) xx→en, LASER's number (lower is better); classification (SIB-200): accuracy (%). Other task
types are left out.

Groups (GROUPS, `group_of`): "≥10k pairs" (10,000 or more), "1k–10k" (1,000 to 9,999), "<1k" (1
to 999) and "unseen" (none: zero-shot). A language's pairs are those of every language pair it is a
side of (English, the pivot, has them all). Rows meet pairs by canonical code
(ems.languages.canonical_language): a Tatoeba row is keyed `de`, a FLORES row `de` or a variety key
(`zh-Hant`, `ace-Arab`, `twi`), an xSIM row by its file's key (ems.languages.flores_language), a
SIB-200 row `zh-hant`; a variety counts the pairs of its canonical language (zh, ace, ak). Language
keys are written with BCP 47 casing (`zh-Hant`), so SIB's `zh-hant` and FLORES's `zh-Hant` are one
row of per_language.csv.

    python -m eval.language_groups RESULTS_JSON --train-data SHARDS_DIR --out DIR
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from ems.cli import MissingDataError, add_debug_option, run_main  # noqa: E402
from ems.languages import (  # noqa: E402
    TATOEBA_LANGUAGES,
    UnknownLanguageError,
    canonical_language,
    flores_language,
)
from ems.shards import language_pair_counts, read_index  # noqa: E402
from eval.chart import save_figure  # noqa: E402
from eval.results import RESULTS_FILE, read_results  # noqa: E402

GROUPS = ("≥10k pairs", "1k–10k", "<1k", "unseen")
ALL = "all"
LARGE, SMALL = 10_000, 1_000  # the lower bounds of "≥10k pairs" and "1k–10k"
# task type -> (the row's score, its label)
SCORES = {
    "tatoeba": ("mean", "P@1 (%)"),
    "flores": ("mean", "P@1 (%)"),
    "xsim": ("xx2en", "xSIM error (%) xx→en, lower is better"),
    "classification": ("accuracy", "accuracy (%)"),
}
P_AT_1_TYPES = ("tatoeba", "flores")  # the plot's tasks
CSV_FILE, MARKDOWN_FILE, PLOT_FILE = "per_language.csv", "by_group.md", "p_at_1_vs_pairs.png"
CSV_KEY_COLUMNS = ("language", "canonical", "group", "training_pairs")  # per_language.csv: then one column per task


def training_pairs(shards_dir: str | Path) -> dict[str, int]:
    """{canonical code: training pairs} of a shard directory: each language pair's pairs (its
    index.json, ems.shards.language_pair_counts) counted for both of its languages. FileNotFoundError
    without an index.json, ValueError for one that is not JSON."""
    pairs: dict[str, int] = {}
    for sides, n in language_pair_counts(read_index(shards_dir)).items():
        for lang in sides:
            pairs[lang] = pairs.get(lang, 0) + n
    return _by_canonical(pairs)


def group_of(pairs: int | None) -> str:
    """The group of a language trained on `pairs` pairs (None: absent from the training data)."""
    if pairs is None or pairs == 0:
        return "unseen"
    if pairs < 0:
        raise ValueError(f"a number of training pairs cannot be negative, got {pairs}")
    return GROUPS[0] if pairs >= LARGE else GROUPS[1] if pairs >= SMALL else GROUPS[2]


def language_key(key: str) -> str:
    """A result row's language key in BCP 47 casing: language lowercase, script titled, region
    uppercase (`zh-hant` -> `zh-Hant`, `ar-latn` -> `ar-Latn`, `de` -> `de`)."""
    first, *rest = key.split("-")
    return "-".join([first.lower(), *(part.title() if len(part) == 4 else part.upper() for part in rest)])


def grouped_results(results_json_path: str | Path, pairs_by_language: Mapping[str, int]) -> list[dict]:
    """One row per (task, language) of the results file's Tatoeba, FLORES, xSIM and classification
    tasks that ran: {"task", "type", "language" (language_key), "canonical", "group",
    "training_pairs", "score"} (SCORES says which score), in the file's order. `pairs_by_language`
    ({code: pairs}, e.g. `training_pairs(...)`) is read by canonical code. MissingDataError for a
    missing file; ValueError for a file that is no results file or has none of these tasks."""
    path = Path(results_json_path)
    if not (path / RESULTS_FILE if path.is_dir() else path).is_file():
        raise MissingDataError(f"no results file {path} (eval.run_all writes OUT/{RESULTS_FILE})")
    pairs = _by_canonical(pairs_by_language)
    rows = []
    results = read_results(path)
    for name, result in results.items():
        if result.type not in SCORES or not result.ran or not result.languages:
            continue
        score_key = SCORES[result.type][0]
        seen = set()
        for key, row in result.languages.items():
            if result.type == "xsim":  # keyed by file stem; the FLORES key (results before it: from the stem)
                key = row.get("language") or flores_language(key)
            language = language_key(key)
            try:
                canonical = canonical_language(language)
            except UnknownLanguageError as error:
                raise ValueError(f"{path}: task {name}: row {key!r} is not a language ({error})") from None
            if language in seen:
                raise ValueError(f"{path}: task {name} has more than one row for the language {language}")
            seen.add(language)
            n = pairs.get(canonical, 0)
            rows.append(
                {
                    "task": name,
                    "type": result.type,
                    "language": language,
                    "canonical": canonical,
                    "group": group_of(n),
                    "training_pairs": n,
                    "score": float(row[score_key]),
                }
            )
    if not rows:
        kinds = ", ".join(sorted(SCORES))
        raise ValueError(f"{path}: no per-language results of a {kinds} task ({len(results)} task(s) in it)")
    return rows


def write_grouped(
    rows: list[dict], out_dir: str | Path, pairs_by_language: Mapping[str, int] | None = None
) -> list[Path]:
    """Write per_language.csv, by_group.md and p_at_1_vs_pairs.png of `grouped_results` rows into
    `out_dir`; returns their paths. With `pairs_by_language`, by_group.md's Tatoeba table also
    counts the Tatoeba languages of each group that were not evaluated."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        _write_csv(rows, out_dir / CSV_FILE),
        _write_markdown(rows, out_dir / MARKDOWN_FILE, pairs_by_language),
        _write_plot(rows, out_dir / PLOT_FILE),
    ]


def _tasks(rows: list[dict]) -> dict[str, str]:
    """{task: type} in the rows' order."""
    return {row["task"]: row["type"] for row in rows}


def _languages(rows: list[dict]) -> dict[str, dict]:
    """{language: its first row}, sorted by group, then most pairs first, then code."""
    first: dict[str, dict] = {}
    for row in rows:
        first.setdefault(row["language"], row)
    order = sorted(first.values(), key=lambda r: (GROUPS.index(r["group"]), -r["training_pairs"], r["language"]))
    return {row["language"]: row for row in order}


def _write_csv(rows: list[dict], path: Path) -> Path:
    tasks = _tasks(rows)
    scores = {(row["task"], row["language"]): row["score"] for row in rows}
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*CSV_KEY_COLUMNS, *tasks])
        for lang, row in _languages(rows).items():
            cells = [f"{scores[task, lang]:.2f}" if (task, lang) in scores else "" for task in tasks]
            writer.writerow([lang, row["canonical"], row["group"], row["training_pairs"], *cells])
    return path


def _mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.2f} ({len(values)})" if values else "–"


def _write_markdown(rows: list[dict], path: Path, pairs_by_language: Mapping[str, int] | None) -> Path:
    tasks, languages = _tasks(rows), _languages(rows)
    lines = [
        "# Results by training data of the language",
        "",
        f"Groups by the language's training pairs: {GROUPS[0]} ({LARGE:,} or more), {GROUPS[1]} ({SMALL:,} to "
        f"{LARGE - 1:,}), {GROUPS[2]} (1 to {SMALL - 1:,}), {GROUPS[3]} (none: zero-shot). A FLORES or SIB-200 "
        "variety (zh-Hant, ace-Arab) counts the pairs of its canonical language. Each cell: the task's average "
        "over the group's evaluated languages (their number in parentheses).",
        "",
        _row(["group", "languages", *(f"{task}: {SCORES[kind][1]}" for task, kind in tasks.items())]),
        _row([":--", "--:", *("--:" for _ in tasks)]),
    ]
    for group in (*GROUPS, ALL):
        members = [row for row in rows if group in (ALL, row["group"])]
        count = sum(1 for row in languages.values() if group in (ALL, row["group"]))
        cells = [_mean([row["score"] for row in members if row["task"] == task]) for task in tasks]
        lines.append(_row([f"**{group}**" if group == ALL else group, str(count), *cells]))
    for task, kind in tasks.items():
        if kind == "tatoeba":
            lines += ["", *_tatoeba_lines(task, [row for row in rows if row["task"] == task], pairs_by_language)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _tatoeba_lines(task: str, rows: list[dict], pairs_by_language: Mapping[str, int] | None) -> list[str]:
    """The Tatoeba task alone over LASER's 112 languages: per group, how many of them it has (with
    the pairs), how many were evaluated and their mean P@1."""
    codes = [lang for _, lang, _ in TATOEBA_LANGUAGES]
    header = ["group", "evaluated", "mean P@1 (%)"]
    if pairs_by_language is not None:
        pairs = _by_canonical(pairs_by_language)
        group_of_code = {code: group_of(pairs.get(code, 0)) for code in codes}
        header.insert(1, f"languages (of {len(codes)})")
    lines = [
        f"## {task}: Tatoeba over its {len(codes)} languages",
        "",
        f"{len(rows)} of the {len(codes)} languages evaluated.",
        "",
        _row(header),
        _row([":--", *("--:" for _ in header[1:])]),
    ]
    for group in (*GROUPS, ALL):
        members = [row["score"] for row in rows if group in (ALL, row["group"])]
        cells = [str(len(members)), f"{sum(members) / len(members):.2f}" if members else "–"]
        if pairs_by_language is not None:
            cells.insert(0, str(sum(1 for code in codes if group in (ALL, group_of_code[code]))))
        lines.append(_row([f"**{group}**" if group == ALL else group, *cells]))
    return lines


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _pairs_label(n: float) -> str:
    return f"{n / 1e6:g}M" if n >= 1e6 else f"{n / 1e3:g}k" if n >= 1e3 else f"{n:g}"


def _write_plot(rows: list[dict], path: Path) -> Path:
    """x: training pairs (log scale), unseen languages one decade left of the smallest seen decade
    (hollow markers, ticked "unseen"); y: P@1; one colour and marker per Tatoeba / FLORES task."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    tasks = [task for task, kind in _tasks(rows).items() if kind in P_AT_1_TYPES]
    seen = [row["training_pairs"] for row in rows if row["task"] in tasks and row["training_pairs"] > 0]
    low = 10 ** math.floor(math.log10(min(seen))) if seen else 100
    high = 10 ** math.ceil(math.log10(max(seen))) if seen else 100_000
    unseen_x = low / 10
    styles = [("tab:blue", "o"), ("tab:orange", "s"), ("tab:green", "^"), ("tab:red", "D"), ("tab:purple", "v")]
    for i, task in enumerate(tasks):
        colour, marker = styles[i % len(styles)]
        mine = [row for row in rows if row["task"] == task]
        trained = [row for row in mine if row["training_pairs"] > 0]
        zero = [row for row in mine if row["training_pairs"] == 0]
        ax.scatter(
            [row["training_pairs"] for row in trained],
            [row["score"] for row in trained],
            c=colour,
            marker=marker,
            s=22,
            alpha=0.8,
            label=f"{task} ({len(trained)} trained)",
        )
        if zero:
            shift = 10 ** (0.12 * (i - (len(tasks) - 1) / 2))  # the tasks' unseen columns side by side
            ax.scatter(
                [unseen_x * shift] * len(zero),
                [row["score"] for row in zero],
                facecolors="none",
                edgecolors=colour,
                marker=marker,
                s=22,
                label=f"{task} ({len(zero)} unseen)",
            )
    ax.set_xscale("log")
    ax.set_xlim(unseen_x / 10**0.5, high * 10**0.3)
    ax.axvline(unseen_x * 10**0.5, color="grey", linewidth=0.8)  # unseen | trained
    for bound in (SMALL, LARGE):
        if low < bound < high:
            ax.axvline(bound, color="grey", linewidth=0.6, linestyle=":")
    decades = [10**k for k in range(round(math.log10(low)), round(math.log10(high)) + 1)]
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks([unseen_x, *decades], ["unseen", *(_pairs_label(n) for n in decades)])
    ax.set_ylim(0, 100)
    ax.set_xlabel("training pairs of the language (log scale)")
    ax.set_ylabel("P@1 (%), mean of both directions")
    ax.set_title("P@1 against training pairs, one point per language")
    if tasks:
        ax.legend(fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "no Tatoeba or FLORES results", ha="center", transform=ax.transAxes)
    return save_figure(fig, path)


def _by_canonical(pairs_by_language: Mapping[str, int]) -> dict[str, int]:
    """{canonical code: pairs}, summing the codes of one language (a code that is no language stays)."""
    pairs: dict[str, int] = {}
    for lang, n in pairs_by_language.items():
        code = canonical_or_self(lang)
        pairs[code] = pairs.get(code, 0) + n
    return pairs


def canonical_or_self(lang: str) -> str:
    """The canonical code of a language code (ems.languages.canonical_language), or the code itself
    where it names no language."""
    try:
        return canonical_language(lang)
    except UnknownLanguageError:
        return lang


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.language_groups",
        description="Split per-language results (Tatoeba, FLORES-200, xSIM, SIB-200) by the training pairs "
        "of each language: per_language.csv, by_group.md and p_at_1_vs_pairs.png.",
    )
    parser.add_argument("results", type=Path, help="results.json of eval.run_all (or its directory)")
    parser.add_argument(
        "--train-data", type=Path, required=True, help="the shard directory the model trained on (its index.json)"
    )
    parser.add_argument("--out", type=Path, required=True, help="directory to write the three files into")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    pairs = training_pairs(args.train_data)
    rows = grouped_results(args.results, pairs)
    for path in write_grouped(rows, args.out, pairs):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
