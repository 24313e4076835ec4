"""Two encoders' per-language results side by side, by training-data group, on the languages both have.

In: two per_language.csv files of eval.language_groups (one row per language: its group and one
column per task) and a name for each. Out: a markdown table, one row per group (GROUPS, then all),
one column per task both files have: "first / second (n)", each the mean over the n languages of
the group that BOTH files score for that task. So an encoder scored on a sample of the languages
(a reference too slow to run on all of them) is compared with another on exactly that sample, never
against the other's average over more languages.

Both files must give a language the same group (the same training data): ValueError naming the
first language that differs. ValueError also when the files share no task, or a task no language.

Two models trained on different data (a corpus added, say): with `data_changed`, the languages with
more than MIN_GAIN (10%) more training pairs in the second file are "gaining" and listed one by one
(`gained_table`: their pairs and scores in both); the group means cover the other languages, grouped
by the first file, and a last row averages every language both score.

    python -m ems.apps.studies.compare_groups A/per_language.csv B/per_language.csv --names A B \
        [--data-changed] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

from ems.cli import MissingDataError, add_debug_option, run_main
from eval.language_groups import ALL, CSV_KEY_COLUMNS, GROUPS

EVERY = "every language"  # the data_changed table's last row: gaining languages included
# A language gains text when its pairs grow by more than this share: a corpus adds thousands, while a
# changed cleaning or held-out split moves a few pairs of a language no new corpus has.
MIN_GAIN = 0.1


@dataclass(frozen=True)
class PerLanguage:
    """A per_language.csv (its `path`): each language's group and training pairs, each task's
    {language: score}."""

    path: Path
    groups: dict[str, str]
    pairs: dict[str, int]
    scores: dict[str, dict[str, float]]


def read_per_language(path: str | Path) -> PerLanguage:
    """The rows of a per_language.csv (empty cells: not scored). MissingDataError for a missing
    file; ValueError for a file without its columns, an unknown group, or a score or pair count that
    is no number."""
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"no per-language file {path} (eval.language_groups writes OUT/per_language.csv)")
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [column for column in CSV_KEY_COLUMNS if column not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a per_language.csv of eval.language_groups (no column {missing[0]!r})")
        tasks = [column for column in reader.fieldnames if column not in CSV_KEY_COLUMNS]
        groups: dict[str, str] = {}
        pairs: dict[str, int] = {}
        scores: dict[str, dict[str, float]] = {task: {} for task in tasks}
        for line, row in enumerate(reader, start=2):
            if row["group"] not in GROUPS:
                raise ValueError(f"{path}:{line}: unknown group {row['group']!r} (one of {', '.join(GROUPS)})")
            groups[row["language"]] = row["group"]
            try:
                pairs[row["language"]] = int(row["training_pairs"])
            except ValueError:
                raise ValueError(
                    f"{path}:{line}: training_pairs {row['training_pairs']!r} is not a whole number"
                ) from None
            for task in tasks:
                if row[task]:
                    try:
                        scores[task][row["language"]] = float(row[task])
                    except ValueError:
                        raise ValueError(f"{path}:{line}: {task} score {row[task]!r} is not a number") from None
    return PerLanguage(path, groups, pairs, scores)


def _per_language(source: str | Path | PerLanguage) -> PerLanguage:
    """`source` read once: a PerLanguage as it is, a path through read_per_language."""
    return source if isinstance(source, PerLanguage) else read_per_language(source)


def gaining(a: PerLanguage, b: PerLanguage) -> dict[str, tuple[int, int]]:
    """{language: (its pairs in a, in b)} of the languages whose training pairs grow by more than
    MIN_GAIN from a to b (from none: any), by code."""
    return {
        language: (a.pairs[language], b.pairs[language])
        for language in sorted(a.pairs.keys() & b.pairs.keys())
        if b.pairs[language] > a.pairs[language] * (1 + MIN_GAIN)
    }


def _common_tasks(a: PerLanguage, b: PerLanguage) -> list[str]:
    tasks = [task for task in a.scores if task in b.scores]
    if not tasks:
        raise ValueError(f"{a.path} and {b.path} have no task in common")
    return tasks


def paired_means(
    first: str | Path | PerLanguage, second: str | Path | PerLanguage, data_changed: bool = False
) -> dict[str, dict[str, tuple[float, float, int]]]:
    """{task: {group or ALL: (first's mean, second's mean, languages)}} over the languages both
    files score for the task, for every task both files have (first's column order); a group with
    no such language is left out. With `data_changed`, the groups (the first file's) leave out the
    languages that gain pairs (`gaining`), and EVERY averages every language both score."""
    a, b = _per_language(first), _per_language(second)
    gained = gaining(a, b) if data_changed else {}
    if not data_changed:
        for language in sorted(a.groups.keys() & b.groups.keys()):
            if a.groups[language] != b.groups[language]:
                raise ValueError(
                    f"{language} is {a.groups[language]!r} in {a.path} but {b.groups[language]!r} in {b.path}: "
                    "the two were not grouped by the same training data (--data-changed compares such runs)"
                )
    table = {}
    for task in _common_tasks(a, b):
        common = a.scores[task].keys() & b.scores[task].keys()
        if not common:
            raise ValueError(f"no language has a {task} score in both {a.path} and {b.path}")
        table[task] = {}
        rows = [
            (group, [lang for lang in common if lang not in gained and group in (ALL, a.groups[lang])])
            for group in (*GROUPS, ALL)
        ]
        if data_changed:
            rows.append((EVERY, list(common)))
        for group, members in rows:
            if members:
                table[task][group] = (
                    sum(a.scores[task][language] for language in members) / len(members),
                    sum(b.scores[task][language] for language in members) / len(members),
                    len(members),
                )
    return table


def gained_table(
    first: str | Path | PerLanguage, second: str | Path | PerLanguage
) -> tuple[dict[str, tuple[int, int]], dict[str, dict[str, tuple[float, float]]]]:
    """The languages that gain text (`gaining`) from the first file to the second: ({language: (pairs
    in first, in second)}, {task: {language: (first's score, second's score)}}) for the tasks both
    files have and the languages both score for each."""
    a, b = _per_language(first), _per_language(second)
    gained = gaining(a, b)
    scores = {
        task: {
            language: (a.scores[task][language], b.scores[task][language])
            for language in gained
            if language in a.scores[task] and language in b.scores[task]
        }
        for task in _common_tasks(a, b)
    }
    return gained, scores


def markdown_table(table: dict[str, dict[str, tuple[float, float, int]]], names: tuple[str, str]) -> str:
    """The paired means as a markdown table: a row per group, a column per task."""
    lines = [
        f"Each cell: {names[0]} / {names[1]} (languages), the means over the languages of the group that both score.",
        "",
        "| group | " + " | ".join(table) + " |",
        "|:--|" + "--:|" * len(table),
    ]
    every = any(EVERY in by_group for by_group in table.values())
    for group in (*GROUPS, ALL, *((EVERY,) if every else ())):
        cells = [
            f"{table[task][group][0]:.1f} / {table[task][group][1]:.1f} ({table[task][group][2]})"
            if group in table[task]
            else "–"
            for task in table
        ]
        label = {ALL: "**all** (not gaining)" if every else "**all**", EVERY: f"**{EVERY}**"}.get(group, group)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def gained_markdown(
    gained: dict[str, tuple[int, int]], scores: dict[str, dict[str, tuple[float, float]]], names: tuple[str, str]
) -> str:
    """gained_table's languages as a markdown table: a row per language (its pairs, each task's two
    scores and the change), then the mean over the languages each task scores."""
    lines = [
        f"Languages with more than {MIN_GAIN:.0%} more training pairs in {names[1]} than in {names[0]}: "
        f"{len(gained)}. "
        f"Each cell: {names[0]} / {names[1]} (change).",
        "",
        "| language | training pairs | " + " | ".join(scores) + " |",
        "|:--|--:|" + "--:|" * len(scores),
    ]

    def cell(pair: tuple[float, float] | None) -> str:
        return "–" if pair is None else f"{pair[0]:.1f} / {pair[1]:.1f} ({pair[1] - pair[0]:+.1f})"

    for language, (before, after) in gained.items():
        cells = [cell(scores[task].get(language)) for task in scores]
        lines.append(f"| {language} | {before:,} → {after:,} | " + " | ".join(cells) + " |")
    means = []
    for by_language in scores.values():
        pairs = list(by_language.values())
        means.append(
            cell((sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs))) + f" [{len(pairs)}]"
            if pairs
            else "–"
        )
    lines.append("| **mean** [languages] | | " + " | ".join(means) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ems.apps.studies.compare_groups",
        description="Two per_language.csv files (eval.language_groups) side by side by group, "
        "each mean over the languages both score.",
    )
    parser.add_argument("first", type=Path, help="per_language.csv of the first encoder")
    parser.add_argument("second", type=Path, help="per_language.csv of the second encoder")
    parser.add_argument("--names", nargs=2, required=True, metavar=("FIRST", "SECOND"), help="their names")
    parser.add_argument(
        "--data-changed",
        action="store_true",
        help="the two trained on different data: list the languages with more pairs in the second one by one, "
        "group the others by the first's groups",
    )
    parser.add_argument("--out", type=Path, help="also write the table to this markdown file")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    names = tuple(args.names)
    first, second = read_per_language(args.first), read_per_language(args.second)
    text = markdown_table(paired_means(first, second, args.data_changed), names)
    if args.data_changed:
        gained = gained_markdown(*gained_table(first, second), names)
        others = f"## The other languages, by their group in {names[0]}"
        text = f"## Languages that gain training pairs\n\n{gained}\n{others}\n\n{text}"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
