"""Published Tatoeba figures (LASER, SBERT-distill, EMS, LaBSE: QUOTED from the EMS paper's Tables 4 and
5, per language) averaged over the language groups of OUR training corpus, so they sit beside the
grouped tables of models trained here. Nothing is measured.

    python -m ems.apps.studies.quoted_reference_rows --train-data runs/multilingual/shards/train
           [--quoted docs/results/multilingual/quoted_tatoeba.tsv] [--out FILE.md]

The groups are eval.language_groups' (≥10k pairs, 1k–10k, <1k, unseen: the training pairs of each
language in --train-data). The quoted models were trained on other data (LASER 223M pairs, LaBSE 6B,
EMS 143M from OPUS), so a group says which of OUR languages the average is over, not how much data
those models had.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from ems.run_metadata import REPO_ROOT
from eval.language_groups import ALL, GROUPS, group_of, training_pairs

QUOTED = REPO_ROOT / "docs" / "results" / "multilingual" / "quoted_tatoeba.tsv"
MODELS = ("LASER", "SBERT-distill", "EMS", "LaBSE")


def read_quoted(path: Path) -> dict[str, dict[str, float]]:
    """{canonical language: {model: P@1}} of the quoted table (its `#` lines are comments)."""
    with open(path, encoding="utf-8") as file:
        rows = csv.DictReader((line for line in file if not line.startswith("#")), delimiter="\t")
        return {row["language"]: {model: float(row[model]) for model in MODELS} for row in rows}


def grouped_quotes(quoted: dict[str, dict[str, float]], pairs: dict[str, int]) -> dict[str, dict]:
    """{group: {"n": languages, model: mean P@1}} over our groups and "all"."""
    table = {}
    for group in (*GROUPS, ALL):
        languages = [lang for lang in quoted if group in (ALL, group_of(pairs.get(lang, 0)))]
        if languages:
            table[group] = {"n": len(languages)} | {
                model: sum(quoted[lang][model] for lang in languages) / len(languages) for model in MODELS
            }
    return table


def markdown(table: dict[str, dict]) -> str:
    lines = [
        "Tatoeba P@1 (%), QUOTED from the EMS paper (Tables 4 and 5; not measured here), averaged over the "
        "groups of this corpus's languages:",
        "",
        "| group (this corpus) | languages | " + " | ".join(MODELS) + " |",
        "|:--|--:|" + "--:|" * len(MODELS),
    ]
    for group, row in table.items():
        lines.append(f"| {group} | {row['n']} | " + " | ".join(f"{row[m]:.1f}" for m in MODELS) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-data", type=Path, required=True, help="the training shards (their index.json)")
    parser.add_argument("--quoted", type=Path, default=QUOTED)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    text = markdown(grouped_quotes(read_quoted(args.quoted), training_pairs(args.train_data)))
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return text


if __name__ == "__main__":
    main()
