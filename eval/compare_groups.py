"""Two encoders' per-language results side by side, by training-data group, on the languages both have.

In: two per_language.csv files of eval.language_groups (one row per language: its group and one
column per task) and a name for each. Out: a markdown table, one row per group (GROUPS, then all),
one column per task both files have: "first / second (n)", each the mean over the n languages of
the group that BOTH files score for that task. So an encoder scored on a sample of the languages
(a reference too slow to run on all of them) is compared with another on exactly that sample, never
against the other's average over more languages.

Both files must give a language the same group (the same training data): ValueError naming the
first language that differs. ValueError also when the files share no task, or a task no language.

    python -m eval.compare_groups A/per_language.csv B/per_language.csv --names A B [--out FILE.md]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from ems.cli import MissingDataError, add_debug_option, run_main
from eval.language_groups import ALL, CSV_KEY_COLUMNS, GROUPS


def read_per_language(path: str | Path) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """({language: group}, {task: {language: score}}) of a per_language.csv (empty cells: not
    scored). MissingDataError for a missing file; ValueError for a file without its columns, an
    unknown group or a score that is no number."""
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
        scores: dict[str, dict[str, float]] = {task: {} for task in tasks}
        for line, row in enumerate(reader, start=2):
            if row["group"] not in GROUPS:
                raise ValueError(f"{path}:{line}: unknown group {row['group']!r} (one of {', '.join(GROUPS)})")
            groups[row["language"]] = row["group"]
            for task in tasks:
                if row[task]:
                    try:
                        scores[task][row["language"]] = float(row[task])
                    except ValueError:
                        raise ValueError(f"{path}:{line}: {task} score {row[task]!r} is not a number") from None
    return groups, scores


def paired_means(first: str | Path, second: str | Path) -> dict[str, dict[str, tuple[float, float, int]]]:
    """{task: {group or ALL: (first's mean, second's mean, languages)}} over the languages both
    files score for the task, for every task both files have (first's column order); a group with
    no such language is left out."""
    groups_a, scores_a = read_per_language(first)
    groups_b, scores_b = read_per_language(second)
    for language in groups_a.keys() & groups_b.keys():
        if groups_a[language] != groups_b[language]:
            raise ValueError(
                f"{language} is {groups_a[language]!r} in {first} but {groups_b[language]!r} in {second}: "
                "the two were not grouped by the same training data"
            )
    tasks = [task for task in scores_a if task in scores_b]
    if not tasks:
        raise ValueError(f"{first} and {second} have no task in common")
    table = {}
    for task in tasks:
        common = scores_a[task].keys() & scores_b[task].keys()
        if not common:
            raise ValueError(f"no language has a {task} score in both {first} and {second}")
        table[task] = {}
        for group in (*GROUPS, ALL):
            members = [language for language in common if group in (ALL, groups_a[language])]
            if members:
                table[task][group] = (
                    sum(scores_a[task][language] for language in members) / len(members),
                    sum(scores_b[task][language] for language in members) / len(members),
                    len(members),
                )
    return table


def markdown_table(table: dict[str, dict[str, tuple[float, float, int]]], names: tuple[str, str]) -> str:
    """The paired means as a markdown table: a row per group, a column per task."""
    lines = [
        f"Each cell: {names[0]} / {names[1]} (languages), the means over the languages of the group that both score.",
        "",
        "| group | " + " | ".join(table) + " |",
        "|:--|" + "--:|" * len(table),
    ]
    for group in (*GROUPS, ALL):
        cells = [
            f"{table[task][group][0]:.1f} / {table[task][group][1]:.1f} ({table[task][group][2]})"
            if group in table[task]
            else "–"
            for task in table
        ]
        lines.append(f"| {'**all**' if group == ALL else group} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.compare_groups",
        description="Two per_language.csv files (eval.language_groups) side by side by group, "
        "each mean over the languages both score.",
    )
    parser.add_argument("first", type=Path, help="per_language.csv of the first encoder")
    parser.add_argument("second", type=Path, help="per_language.csv of the second encoder")
    parser.add_argument("--names", nargs=2, required=True, metavar=("FIRST", "SECOND"), help="their names")
    parser.add_argument("--out", type=Path, help="also write the table to this markdown file")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    text = markdown_table(paired_means(args.first, args.second), tuple(args.names))
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
