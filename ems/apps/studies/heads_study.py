"""Choose the trained heads' settings on MLQE-PE dev, and measure the effect of training-set size.

    python -m ems.apps.studies.heads_study --encoder SPEC --data-dir DATA --pairs CORPUS [--cache-dir DIR]
                                     [--caps 1000,10000,all] [--out FILE.json]

For each head-training source (FLORES-200 devtest en-X pairs; the Moses-format corpus CORPUS,
e.g. the shared Tatoeba Challenge + TICO-19 pairs cleaned with configs/prep/heads.yaml, capped at
each of --caps pairs per language with data_prep's seeded sample) and each head setting (the
centering, ridge projection and reversible heads at their defaults; DREAM and MEAT over a grid of
learning rates), heads are trained per task exactly as eval.run_all does (the task's languages,
10% held out for early stopping, seed 0) and scored as Pearson r of the meaning view on:
  WMT20 QE dev (MLQE-PE `dev`, the selection split), WMT20 QE test20 (reported only), and every
  STS2017 track (reported only; STS2017 has no dev split, so STS heads use the setting chosen on
  QE dev).
Selection reads only the QE dev figures: for each head and source the learning rate with the best
dev average, and across sources the one with the best dev average. Test figures are printed beside
them and never compared. Averages are over the QE pairs every source has training pairs for (the
corpus has no Sinhala: si-en is left out of those averages) and, for FLORES, over all six too.
Embeddings come from the encoder's cache: the corpus is encoded whole once and every cap takes
its rows (the same rows `capped` keeps), so caps cost no extra encoding.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ems.encoder_kinds import load_encoder
from ems.heads import HEADS
from ems.run_metadata import REPO_ROOT
from eval.evaluators.correlation import RAW, evaluate_rated_pairs
from eval.evaluators.qe import read_qe_pairs
from eval.evaluators.sts import read_sts_tracks
from eval.parallel_data import capped_rows, encode_pairs, flores_pairs, pivot_pairs
from eval.task import read_task_config
from eval.train_head import train_head

STS_CONFIG = REPO_ROOT / "configs" / "eval" / "sts2017.yaml"
QE_PAIRS = ["en-de", "en-zh", "et-en", "ne-en", "ro-en", "si-en"]
LEARNING_RATES = {"dream": [3e-4, 1e-3, 3e-3], "meat": [1e-4, 3e-4, 1e-3]}


def head_settings(chosen: dict[str, float] | None = None) -> list[tuple[str, str, object]]:
    """(label, head name, hyperparameters or None for the defaults) for every setting compared:
    the grid, or with `chosen` ({head: learning rate chosen on QE dev}) only those."""
    settings = [
        ("centering", "centering", None),
        ("projection", "projection", None),
        ("reversible", "reversible", None),
    ]
    for name, rates in LEARNING_RATES.items():
        for rate in [chosen[name]] if chosen else rates:
            settings.append(
                (f"{name} lr={rate:g}", name, replace(HEADS[name].default_hyperparameters, learning_rate=rate))
            )
    return settings


def chosen_on_dev(rows: list[dict], source: str) -> dict[str, float] | None:
    """{head: the learning rate whose QE dev average (meaning view) is best} for `source`; None
    when there are no QE rows for it (then STS runs the whole grid and the summary picks)."""
    if not any(row["source"] == source and row["task"] == "qe" for row in rows):
        return None
    chosen = {}
    for name in LEARNING_RATES:
        candidates = [row for row in rows if row["source"] == source and row["task"] == "qe" and row["head"] == name]
        best = max(candidates, key=lambda row: row["dev_avg"][name])
        chosen[name] = best["learning_rate"]
    return chosen


def training_data(encoder, source: str, languages: list[str], flores_dir: Path, corpus: Path):
    """ParallelEmbeddings of the English-X pairs of `source` ("flores" or "corpus@N"/"corpus@all")
    for the languages of `languages` that the source has, and those languages."""
    if source == "flores":
        sets = flores_pairs(flores_dir, languages)
        return encode_pairs(encoder, sets), [s.y_lang for s in sets]
    cap = None if source.endswith("@all") else int(source.split("@")[1])
    have = [
        lang
        for lang in languages
        if lang != "en" and ((corpus / f"en-{lang}").is_dir() or (corpus / f"{lang}-en").is_dir())
    ]
    sets = pivot_pairs(corpus, have)
    data = encode_pairs(encoder, sets)  # the sets' rows one after another
    rows, offset = [], 0
    for pairs in sets:
        keep = capped_rows(len(pairs.x), cap, 0)
        rows.append(offset + (np.arange(len(pairs.x)) if keep is None else keep))
        offset += len(pairs.x)
    return data.subset(np.concatenate(rows)), [s.y_lang for s in sets]


def pearson_of(per_set: dict, view: str, names: list[str]) -> float | None:
    values = [per_set[name][view]["pearson"] for name in names if per_set[name].get(view)]
    return float(np.mean(values)) if len(values) == len(names) else None


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _table_head(title: str, text_columns: list[str], number_columns: list[str]) -> list[str]:
    """A Markdown table's title, a blank line, its header and the alignment line (text to the left,
    numbers to the right)."""
    return [
        title,
        "",
        "| " + " | ".join(text_columns + number_columns) + " |",
        "|" + ":--|" * len(text_columns) + "--:|" * len(number_columns),
    ]


def summary(rows: list[dict]) -> str:
    """Markdown: (1) every QE setting's dev and test averages per source, (2) per head the
    setting and source chosen on QE dev with its test figures per pair, (3) STS per source with
    the QE-dev-chosen learning rates."""
    qe = [row for row in rows if row["task"] == "qe"]
    sources = list(dict.fromkeys(row["source"] for row in rows))
    settings = list(dict.fromkeys(row["setting"] for row in qe))
    out = []
    if qe:
        out += _table_head(
            "QE meaning-view Pearson r, average over the 5 pairs without si-en: dev (selection) / test20 (reported)",
            ["setting"],
            sources,
        )
        raw = next(row for row in qe)
        out.insert(
            4,
            "| raw | "
            + " | ".join(f"{_cell(raw['dev_avg']['raw'])} / {_cell(raw['test_avg']['raw'])}" for _ in sources)
            + " |",
        )
        for setting in settings:
            cells = []
            for source in sources:
                row = next((r for r in qe if r["source"] == source and r["setting"] == setting), None)
                cells.append(
                    "–"
                    if row is None
                    else f"{_cell(row['dev_avg'][row['head']])} / {_cell(row['test_avg'][row['head']])}"
                )
            out.append(f"| {setting} | " + " | ".join(cells) + " |")
        pairs = list(raw["test"])
        out += [""] + _table_head(
            "Chosen on QE dev (best dev average over 5 pairs, any source and learning rate); test20 per pair:",
            ["view", "chosen"],
            ["dev avg5", *pairs, "test avg5", "test avg6"],
        )
        flores = next(row for row in qe if row["source"] == "flores")
        out.append(
            "| raw | – | "
            + _cell(raw["dev_avg"]["raw"])
            + " | "
            + " | ".join(_cell(raw["test"][p]["raw"]) for p in pairs)
            + f" | {_cell(raw['test_avg']['raw'])} | {_cell(flores['test_avg6']['raw'])} |"
        )
        for head in dict.fromkeys(row["head"] for row in qe):
            best = max((row for row in qe if row["head"] == head), key=lambda row: row["dev_avg"][head] or -1)
            six = _cell(best["test_avg6"][head]) if "test_avg6" in best else "–"
            out.append(
                f"| {head} | {best['setting']}, {best['source']} | {_cell(best['dev_avg'][head])} | "
                + " | ".join(_cell(best["test"][p][head]) for p in pairs)
                + f" | {_cell(best['test_avg'][head])} | {six} |"
            )
    sts = [row for row in rows if row["task"] == "sts"]
    if sts:
        tracks = list(sts[0]["test"])
        out += [""] + _table_head(
            "STS2017 Pearson r per track (heads with the QE-dev-chosen learning rate of each source):",
            ["source", "view"],
            [*tracks, "avg"],
        )
        for source in sources:
            chosen = chosen_on_dev(rows, source)
            source_rows = [
                row
                for row in sts
                if row["source"] == source
                and (chosen is None or row["head"] not in chosen or row["learning_rate"] == chosen[row["head"]])
            ]
            if not source_rows:
                continue
            first = source_rows[0]
            out.append(
                f"| {source} | raw | "
                + " | ".join(_cell(first["test"][t]["raw"]) for t in tracks)
                + f" | {_cell(first['test_avg']['raw'])} |"
            )
            for row in source_rows:
                out.append(
                    f"| {source} | {row['setting']} | "
                    + " | ".join(_cell(row["test"][t][row["head"]]) for t in tracks)
                    + f" | {_cell(row['test_avg'][row['head']])} |"
                )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--summary",
        type=Path,
        nargs="+",
        help="print the tables of finished studies' JSON files (rows joined) and exit",
    )
    parser.add_argument("--encoder")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--pairs", type=Path, help="Moses-format corpus root (configs/prep/heads.yaml)")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--caps", default="1000,10000,all")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tasks", default="qe,sts", help="which of qe, sts to run")
    parser.add_argument(
        "--continue-from",
        type=Path,
        help="a study JSON of the same encoder whose rows (e.g. the QE "
        "rows STS takes its learning rates from) are kept and not run again",
    )
    parser.add_argument(
        "--corpus-tasks", default="qe,sts", help="tasks that also train on the corpus caps (others: FLORES only)"
    )
    args = parser.parse_args()
    if args.summary:
        print(summary([row for path in args.summary for row in json.loads(path.read_text())["rows"]]), end="")
        return
    if not (args.encoder and args.data_dir and args.pairs):
        parser.error("--encoder, --data-dir and --pairs are required (unless --summary)")
    torch.set_num_threads(1)

    encoder = load_encoder(args.encoder, args.cache_dir)
    qe_dev, _ = read_qe_pairs(args.data_dir / "mlqe", QE_PAIRS, "dev")
    qe_test, _ = read_qe_pairs(args.data_dir / "mlqe", QE_PAIRS, "test20")
    tracks = read_task_config(STS_CONFIG)[0].tracks
    sts, _ = read_sts_tracks(args.data_dir / "sts2017", tracks)
    tasks = {
        "qe": (sorted({lang for p in QE_PAIRS for lang in p.split("-")}), {"dev": qe_dev, "test": qe_test}),
        "sts": (sorted({lang for t in tracks for lang in t.langs}), {"test": sts}),
    }
    sources = ["flores"] + [f"corpus@{cap}" for cap in args.caps.split(",")]
    rows = json.loads(args.continue_from.read_text())["rows"] if args.continue_from else []
    done = {(row["source"], row["task"], row["setting"]) for row in rows}
    tasks = {task: tasks[task] for task in args.tasks.split(",")}
    for source in sources:
        for task, (languages, splits) in tasks.items():
            if source != "flores" and task not in args.corpus_tasks.split(","):
                continue
            data, trained_languages = training_data(
                encoder, source, languages, args.data_dir / "flores200/devtest", args.pairs
            )
            for label, name, hyperparameters in head_settings(chosen_on_dev(rows, source) if task != "qe" else None):
                if (source, task, label) in done:
                    continue
                start = time.perf_counter()
                head, log = train_head(name, data, 0.1, 0, hyperparameters)
                scored = {split: evaluate_rated_pairs(encoder, sets, {name: head})[0] for split, sets in splits.items()}
                row = {
                    "source": source,
                    "task": task,
                    "setting": label,
                    "head": name,
                    "train_pairs": len(data),
                    "languages": trained_languages,
                    "best_epoch": log.get("best_epoch"),
                    "epochs": log.get("epochs"),
                    "seconds": round(time.perf_counter() - start, 1),
                    "learning_rate": getattr(head, "hyperparameters", None) and head.hyperparameters.learning_rate,
                }
                for split, per_set in scored.items():
                    covered = [
                        s for s in per_set if set(s.split(".")[-1].split("-")) - {"en"} <= set(trained_languages)
                    ]
                    row[split] = {s: {v: (per_set[s][v] or {}).get("pearson") for v in (RAW, name)} for s in per_set}
                    row[f"{split}_avg"] = {
                        v: pearson_of(per_set, v, [s for s in covered if s != "si-en"]) for v in (RAW, name)
                    }
                    if task == "qe" and source == "flores":
                        row[f"{split}_avg6"] = {v: pearson_of(per_set, v, list(per_set)) for v in (RAW, name)}
                rows.append(row)
                dev = row.get("dev_avg", {}).get(name)
                print(
                    f"{source:14} {task:4} {label:18} pairs {len(data):6} epochs {row['epochs']} "
                    f"dev {dev if dev is None else round(dev, 3)} "
                    f"test {round(row['test_avg'][name] or float('nan'), 3)} "
                    f"({row['seconds']} s)",
                    flush=True,
                )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"encoder": args.encoder, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
