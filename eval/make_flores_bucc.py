"""Build a BUCC-style mining task from real data: FLORES-200 translation pairs hidden among
unrelated real sentences, in BUCC's layout (xx-en.{training,test}.{xx,en,gold}).

    python -m eval.make_flores_bucc --data-dir ../shared/data --out runs/flores_bucc \\
        --languages de fr ru zh [--gold 100 --tatoeba-distractors 200 --seed 0]

Per language, FLORES devtest lines 0-505 make the training split and 506-1011 the test split.
In each split `gold` lines appear on both sides (the gold pairs); of the remaining lines half
appear only in xx and half only in English (same-domain distractors without a translation on
the other side). Each side also gets `tatoeba_distractors` real Tatoeba sentences: xx ones from
the language's Tatoeba file, English ones from other languages' Tatoeba files, leaving out every
English sentence of the language's own Tatoeba file (which could translate an xx distractor).
Lines are shuffled and get BUCC-style ids; `build.json` records the parameters and counts.
A missing or bad input file is one `error: ...` line and exit status 2 (--debug or EMS_DEBUG=1: the
traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError, add_debug_option, run_main
from ems.languages import (
    ENGLISH,
    FLORES_FILES,
    TATOEBA_ENGLISH_CODE,
    TATOEBA_TEST_CODES,
    flores_file,
    lang_to_tatoeba_code,
)
from eval.evaluators.bucc import split_paths
from eval.evaluators.retrieval import read_lines

FLORES_LINES = 1012
SPLITS = {"training": range(0, 506), "test": range(506, FLORES_LINES)}


def devtest_file(flores_dir: Path, lang: str) -> Path:
    """The FLORES-200 devtest file of a canonical code (ems.languages.flores_file), or
    MissingDataError naming the file expected."""
    path = flores_file(flores_dir, lang, "devtest")
    if path is None:
        raise MissingDataError(
            f"no FLORES-200 devtest file for {lang!r}: expected "
            f"{flores_dir / f'{FLORES_FILES.get(lang, lang)}.devtest'} in {flores_dir}"
        )
    return path


def tatoeba_sentences(tatoeba_dir: Path, code: str, side: str) -> list[str]:
    """One side of a Tatoeba test set (`side` = code or "eng"), distinct non-empty lines in order."""
    path = tatoeba_dir / f"tatoeba.{code}-eng.{side}"
    return list(dict.fromkeys(line for line in read_lines(path) if line.strip()))


def _write_side(path: Path, prefix: str, sentences: list[str], rng: np.random.Generator) -> dict[int, str]:
    """Write shuffled "<id>\\t<sentence>" lines; returns {position in `sentences`: id}."""
    order = rng.permutation(len(sentences))
    ids = {}
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for number, position in enumerate(order, start=1):
            ids[int(position)] = f"{prefix}-{number:09d}"
            f.write(f"{ids[int(position)]}\t{sentences[position]}\n")
    return ids


def build_language(data_dir: Path, out: Path, lang: str, gold: int, tatoeba_distractors: int, seed: int) -> dict:
    """Write the training and test splits of one language; returns their counts."""
    flores_dir, tatoeba_dir = data_dir / "flores200" / "devtest", data_dir / "tatoeba"
    xx_lines, en_lines = read_lines(devtest_file(flores_dir, lang)), read_lines(devtest_file(flores_dir, ENGLISH))
    if len(xx_lines) != FLORES_LINES or len(en_lines) != FLORES_LINES:
        raise ValueError(
            f"FLORES devtest files must have {FLORES_LINES} lines, got {len(xx_lines)} and {len(en_lines)}"
        )
    code = lang_to_tatoeba_code(lang)
    if code not in TATOEBA_TEST_CODES:
        raise MissingDataError(f"{lang!r} has no Tatoeba test set to draw distractors from")
    own_english = set(tatoeba_sentences(tatoeba_dir, code, TATOEBA_ENGLISH_CODE))
    gold_english = set(en_lines)
    xx_pool = [s for s in tatoeba_sentences(tatoeba_dir, code, code) if s not in set(xx_lines)]
    en_pool = list(
        dict.fromkeys(
            s
            for other in TATOEBA_TEST_CODES
            if other != code
            for s in tatoeba_sentences(tatoeba_dir, other, TATOEBA_ENGLISH_CODE)
            if s not in own_english and s not in gold_english
        )
    )
    rng = np.random.default_rng(seed)
    xx_pool = [xx_pool[i] for i in rng.permutation(len(xx_pool))]
    en_pool = [en_pool[i] for i in rng.permutation(len(en_pool))]
    if len(xx_pool) < 2 * tatoeba_distractors or len(en_pool) < 2 * tatoeba_distractors:
        raise ValueError(
            f"{lang}: not enough Tatoeba sentences for {tatoeba_distractors} distractors per side and split"
        )
    counts = {}
    for split_number, (split, lines) in enumerate(SPLITS.items()):
        if not 0 < gold <= len(lines):
            raise ValueError(f"gold must be between 1 and {len(lines)}, got {gold}")
        # The same FLORES lines for every language (seeded by split only), so English sides overlap.
        shuffled = [lines[i] for i in np.random.default_rng([seed, split_number]).permutation(len(lines))]
        gold_lines, rest = shuffled[:gold], shuffled[gold:]
        xx_only, en_only = rest[: len(rest) // 2], rest[len(rest) // 2 :]
        extra = slice(split_number * tatoeba_distractors, (split_number + 1) * tatoeba_distractors)
        xx_side = [xx_lines[i] for i in gold_lines + xx_only] + xx_pool[extra]
        en_side = [en_lines[i] for i in gold_lines + en_only] + en_pool[extra]
        paths = split_paths(out, lang, split)
        xx_ids = _write_side(paths["xx"], lang, xx_side, rng)
        en_ids = _write_side(paths["en"], ENGLISH, en_side, rng)
        with open(paths["gold"], "w", encoding="utf-8", newline="\n") as f:
            f.writelines(f"{xx_ids[i]}\t{en_ids[i]}\n" for i in range(gold))
        counts[split] = {"xx": len(xx_side), "en": len(en_side), "gold": gold}
    return counts


def build_flores_bucc(
    data_dir: Path, out: Path, languages: list[str], gold: int = 100, tatoeba_distractors: int = 200, seed: int = 0
) -> dict:
    """Build the task for `languages` under `out`; returns and writes out/build.json."""
    data_dir, out = Path(data_dir), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    counts = {lang: build_language(data_dir, out, lang, gold, tatoeba_distractors, seed) for lang in languages}
    record = {
        "data_dir": str(data_dir),
        "gold": gold,
        "tatoeba_distractors": tatoeba_distractors,
        "seed": seed,
        "splits": {name: [r.start, r.stop] for name, r in SPLITS.items()},
        "counts": counts,
    }
    (out / "build.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(prog="python -m eval.make_flores_bucc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="data root holding flores200/ and tatoeba/")
    parser.add_argument("--out", type=Path, required=True, help="output directory (BUCC layout)")
    parser.add_argument("--languages", nargs="+", default=["de", "fr", "ru", "zh"])
    parser.add_argument("--gold", type=int, default=100, help="hidden FLORES pairs per split")
    parser.add_argument(
        "--tatoeba-distractors", type=int, default=200, help="extra Tatoeba sentences per side and split"
    )
    parser.add_argument("--seed", type=int, default=0)
    add_debug_option(parser)
    args = parser.parse_args(argv)
    record = build_flores_bucc(args.data_dir, args.out, args.languages, args.gold, args.tatoeba_distractors, args.seed)
    print(json.dumps(record["counts"]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
