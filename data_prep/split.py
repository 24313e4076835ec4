"""Held-out split of an aligned-pair corpus: a few test pairs per language pair that training
never sees, not even as one side of another pair.

In: a corpus root in the data_prep.corpus layout. Out: `heldout_out/<l1>-<l2>/heldout.{l1,l2}`
(`per_pair` pairs drawn at random, seeded), `train_out/<l1>-<l2>/<name>.{l1,l2}` (every other
pair, file names kept) and `heldout_out/split_report.json`.

Sentences are compared in their data_prep.clean.normalize form (NFKC, whitespace, lowercase),
through a 64-bit hash of it: the held-out pairs of a language pair have distinct sides, and a
training pair whose l1 side equals a held-out l1 side, or whose l2 side equals a held-out l2
side, is dropped. Each language pair is read twice (hashes first, then the split), so memory
holds 16 bytes per pair of one language pair and the held-out pairs.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from itertools import groupby
from pathlib import Path

import numpy as np

from data_prep.clean import normalize, text_hash
from data_prep.corpus import ParallelFiles, ReadReport, list_parallel, read_parallel, write_parallel

REPORT_FILE = "split_report.json"
HELDOUT_NAME = "heldout"


def split_heldout(
    corpus_root: str | Path, train_out: str | Path, heldout_out: str | Path, per_pair: int, seed: int = 0
) -> dict:
    """Split every language pair of `corpus_root` (all its files, in list_parallel order) into
    `per_pair` held-out pairs and training pairs; returns the report written to
    `heldout_out/split_report.json`:

    {"seed", "per_pair", "pairs": [{"pair", "read", "heldout", "train",
    "removed_overlapping_heldout", "too_small_for_heldout", "skipped_empty",
    "skipped_invalid_utf8"}, ...], "too_small_for_heldout": [pair, ...]}.

    A language pair with fewer than 2 * per_pair readable pairs keeps them all in training and
    is listed in `too_small_for_heldout`. When duplicates leave fewer than `per_pair` distinct
    candidates, `heldout` is smaller than `per_pair`. The draw depends only on `seed` and the
    pair's name and data. Raises ValueError for per_pair < 1 or an output that is the input.
    """
    corpus_root, train_out, heldout_out = Path(corpus_root), Path(train_out), Path(heldout_out)
    if per_pair < 1:
        raise ValueError(f"per_pair must be at least 1, got {per_pair}")
    if corpus_root.resolve() in (train_out.resolve(), heldout_out.resolve()):
        raise ValueError(f"the outputs must differ from the corpus root {corpus_root}")
    report: dict = {"seed": seed, "per_pair": per_pair, "pairs": [], "too_small_for_heldout": []}
    for pair, files in groupby(list_parallel(corpus_root), key=lambda f: f"{f.l1}-{f.l2}"):
        entry = _split_language_pair(pair, list(files), train_out, heldout_out, per_pair, seed)
        report["pairs"].append(entry)
        if entry["too_small_for_heldout"]:
            report["too_small_for_heldout"].append(pair)
    heldout_out.mkdir(parents=True, exist_ok=True)
    (heldout_out / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _side_hashes(files: list[ParallelFiles]) -> tuple[np.ndarray, np.ndarray]:
    hashes_l1, hashes_l2 = array("Q"), array("Q")
    for f in files:
        for text_l1, text_l2 in read_parallel(f.path_l1, f.path_l2):
            hashes_l1.append(text_hash(normalize(text_l1)))
            hashes_l2.append(text_hash(normalize(text_l2)))
    return np.frombuffer(hashes_l1, dtype=np.uint64), np.frombuffer(hashes_l2, dtype=np.uint64)


def _draw_heldout(hashes_l1: np.ndarray, hashes_l2: np.ndarray, per_pair: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of up to `per_pair` pairs in random order whose sides are distinct among them."""
    chosen, seen_l1, seen_l2 = [], set(), set()
    for index in rng.permutation(len(hashes_l1)):
        if hashes_l1[index] not in seen_l1 and hashes_l2[index] not in seen_l2:
            chosen.append(index)
            seen_l1.add(hashes_l1[index])
            seen_l2.add(hashes_l2[index])
            if len(chosen) == per_pair:
                break
    return np.array(chosen, dtype=np.int64)


def _split_language_pair(
    pair: str, files: list[ParallelFiles], train_out: Path, heldout_out: Path, per_pair: int, seed: int
) -> dict:
    hashes_l1, hashes_l2 = _side_hashes(files)
    is_heldout = np.zeros(len(hashes_l1), dtype=bool)
    too_small = len(hashes_l1) < 2 * per_pair
    if not too_small:
        rng = np.random.default_rng([seed, *pair.encode()])
        is_heldout[_draw_heldout(hashes_l1, hashes_l2, per_pair, rng)] = True
    overlaps = np.isin(hashes_l1, hashes_l1[is_heldout]) | np.isin(hashes_l2, hashes_l2[is_heldout])
    removed = overlaps & ~is_heldout
    heldout_pairs: list[tuple[str, str]] = []
    reads = []
    line = 0  # index of the next readable pair of the language pair, as in _side_hashes

    def train_pairs(f: ParallelFiles, read: ReadReport) -> Iterator[tuple[str, str]]:
        nonlocal line
        for text_pair in read_parallel(f.path_l1, f.path_l2, read):
            if is_heldout[line]:
                heldout_pairs.append(text_pair)
            elif not removed[line]:
                yield text_pair
            line += 1

    for f in files:
        reads.append(ReadReport())
        write_parallel(train_out, f.name, f.l1, f.l2, train_pairs(f, reads[-1]))
    if heldout_pairs:
        write_parallel(heldout_out, HELDOUT_NAME, files[0].l1, files[0].l2, heldout_pairs)
    return {
        "pair": pair,
        "read": sum(r.read for r in reads),
        "heldout": len(heldout_pairs),
        "train": int((~is_heldout & ~removed).sum()),
        "removed_overlapping_heldout": int(removed.sum()),
        "too_small_for_heldout": too_small,
        "skipped_empty": sum(r.skipped_empty for r in reads),
        "skipped_invalid_utf8": sum(r.skipped_invalid_utf8 for r in reads),
    }
