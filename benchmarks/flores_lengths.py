"""How many FLORES-200 devtest sentences a max_len cuts, per trained language of a vocabulary.

    python -m benchmarks.flores_lengths --vocab runs/ml/data/vocab [--data-dir ../shared/data]
                                        [--max-len 64 128 160 192 256] [--out DIR]

Each language of the vocabulary that FLORES-200 has is tokenized as an encoder would (its own
pre-tokenizer, then SentencePiece); prints per language the sentences, median / 99th percentile /
longest length in tokens and the share longer than each --max-len, then the smallest of those
max_len values that keeps >= 99% of the sentences of every language whole. Real text is longer than
Tatoeba's: this is what a preset's max_len has to cover. Writes flores_lengths.{md,json} to --out.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from benchmarks.report_files import give_result
from ems.languages import flores_file
from ems.text import Tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]

COVERAGE = 0.99


def language_lengths(tokenizer: Tokenizer, split_dir: Path) -> tuple[dict[str, np.ndarray], list[str]]:
    """({language: token length of each FLORES sentence}, languages without a FLORES file)."""
    lengths, missing = {}, []
    for lang in [*tokenizer.languages]:
        path = flores_file(split_dir, lang, "devtest")
        if path is None:
            missing.append(lang)
            continue
        sentences = path.read_text(encoding="utf-8").splitlines()
        lengths[lang] = np.array([len(ids) for ids in tokenizer.encode(sentences, lang)])
    return lengths, missing


def summary(lengths: dict[str, np.ndarray], max_lens: list[int]) -> dict:
    rows = {
        lang: {
            "n": int(len(n)),
            "median": float(np.median(n)),
            "p99": float(np.percentile(n, 99)),
            "max": int(n.max()),
            "over": {str(m): float((n > m).mean()) for m in max_lens},
        }
        for lang, n in sorted(lengths.items())
    }
    covering = [m for m in max_lens if all(row["over"][str(m)] <= 1 - COVERAGE for row in rows.values())]
    worst = {str(m): max(rows, key=lambda lang: rows[lang]["over"][str(m)]) for m in max_lens}
    return {"languages": rows, "smallest_covering": min(covering) if covering else None, "worst": worst}


def markdown(result: dict, max_lens: list[int]) -> str:
    rows = result["languages"]
    lines = [
        "| language | sentences | median | p99 | longest | " + " | ".join(f"> {m}" for m in max_lens) + " |",
        "|:--|--:|--:|--:|--:|" + "--:|" * len(max_lens),
    ]
    for lang, row in rows.items():
        over = " | ".join(f"{100 * row['over'][str(m)]:.1f}%" for m in max_lens)
        lines.append(f"| {lang} | {row['n']} | {row['median']:.0f} | {row['p99']:.0f} | {row['max']} | {over} |")
    share = {m: np.mean([row["over"][str(m)] for row in rows.values()]) if rows else float("nan") for m in max_lens}
    lines.append(
        f"| **mean over {len(rows)} languages** | | | | | "
        + " | ".join(f"**{100 * share[m]:.1f}%**" for m in max_lens)
        + " |"
    )
    lines += [
        "",
        f"Smallest max_len keeping >= {100 * COVERAGE:.0f}% of every language's sentences whole: "
        f"{result['smallest_covering']} (worst language per max_len: "
        + ", ".join(f"{m}: {lang}" for m, lang in result["worst"].items())
        + ")",
    ]
    if result.get("missing"):
        lines.append(f"No FLORES-200 file: {', '.join(result['missing'])}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=Path, required=True, help="a vocabulary directory (data_prep vocab)")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("EMS_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    )
    parser.add_argument("--max-len", type=int, nargs="+", default=[64, 128, 160, 192, 256])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    tokenizer = Tokenizer.load(args.vocab)
    lengths, missing = language_lengths(tokenizer, args.data_dir / "flores200" / "devtest")
    result = {**summary(lengths, args.max_len), "missing": missing, "vocab": str(args.vocab)}
    give_result(markdown(result, args.max_len), result, args.out, "flores_lengths")
    return result


if __name__ == "__main__":
    main()
