"""Held-out split of an aligned-pair corpus: a few test pairs per language pair that training
never sees, not even as one side of another pair.

In: a corpus root in the ems.corpus layout. Out: `heldout_out/<l1>-<l2>/heldout.{l1,l2}`
(`per_pair` pairs drawn at random, seeded), `train_out/<l1>-<l2>/<name>.{l1,l2}` (every other
pair, file names kept) and `heldout_out/split_report.json`.

Sentences are compared in their data_prep.clean.normalize form (NFKC, whitespace, lowercase),
through a 64-bit hash of it: the held-out pairs of a language pair have distinct sides, and a
training pair of ANY language pair that holds a sentence of any held-out pair, on either side, is
dropped: in English-centric data the English side of a held-out de-en pair often comes with
French in en-fr too (23.5% of the demo's held-out pairs did), and a model trained on it has seen
that sentence. Each language pair is read three times (hashes to draw, hashes to drop, the
split), so memory holds 16 bytes per pair of one language pair and the held-out pairs.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from dataclasses import replace
from itertools import groupby
from pathlib import Path

import numpy as np

from data_prep.clean import normalize, text_hash
from ems.corpus import (
    ParallelFiles,
    ReadReport,
    check_no_other_files,
    corpus_of,
    list_parallel,
    read_parallel,
    write_parallel,
)

REPORT_FILE = "split_report.json"
HELDOUT_NAME = "heldout"


DRAWS = ("random", "pivot")


def split_heldout(
    corpus_root: str | Path,
    train_out: str | Path,
    heldout_out: str | Path,
    per_pair: int,
    seed: int = 0,
    draw: str = "random",
    pivot: str = "en",
    by_corpus: bool = False,
) -> dict:
    """Split every language pair of `corpus_root` (all its files, in list_parallel order) into
    `per_pair` held-out pairs and training pairs; returns the report written to
    `heldout_out/split_report.json`:

    {"seed", "per_pair", "pairs": [{"pair", "read", "heldout", "train",
    "removed_overlapping_heldout", "too_small_for_heldout", "skipped_empty",
    "skipped_invalid_utf8"}, ...], "too_small_for_heldout": [pair, ...]}.

    A language pair with fewer than 2 * per_pair readable pairs keeps them all in training and
    is listed in `too_small_for_heldout`. When duplicates leave fewer than `per_pair` distinct
    candidates, `heldout` is smaller than `per_pair`.

    `draw` "random": each language pair's held-out pairs are drawn at random, depending only on
    `seed` and the pair's name and data. "pivot": a coordinated draw for multi-parallel data: the
    pairs whose `pivot`-language side has the smallest seeded hash are held out, so language pairs
    that share pivot sentences (TICO-19 translates the same 2100 English sentences into every
    language) hold out the same ones, and far fewer training pairs share a side with a held-out
    pair (a pair without the pivot language is drawn at random).

    `by_corpus`: `per_pair` pairs are drawn from each corpus of a language pair (its files grouped by
    ems.corpus.corpus_of; a corpus with fewer than 2 * per_pair pairs of the language pair keeps them
    all), and each entry gets `by_corpus` {corpus: {"read", "heldout"}}. With the pivot draw, every
    language of a multi-parallel corpus (NLLB-Seed, the Bible) then holds out the same English
    sentences of that corpus, whatever other corpora the language has (drawn over all its pairs, a
    language with a second corpus would hold out other ones). Raises ValueError for per_pair < 1, an
    unknown draw or an output that is the input.
    """
    corpus_root, train_out, heldout_out = Path(corpus_root), Path(train_out), Path(heldout_out)
    if per_pair < 1:
        raise ValueError(f"per_pair must be at least 1, got {per_pair}")
    if draw not in DRAWS:
        raise ValueError(f"draw must be one of {', '.join(DRAWS)}, got {draw!r}")
    if corpus_root.resolve() in (train_out.resolve(), heldout_out.resolve()):
        raise ValueError(f"the outputs must differ from the corpus root {corpus_root}")
    report: dict = {"seed": seed, "per_pair": per_pair, "draw": draw, "pairs": [], "too_small_for_heldout": []}
    language_pairs = [
        (pair, list(files)) for pair, files in groupby(list_parallel(corpus_root), key=lambda f: f"{f.l1}-{f.l2}")
    ]
    # a file pair in an output folder that this split would not write would be read as its output
    inputs = [files for _, pair_files in language_pairs for files in pair_files]
    check_no_other_files(train_out, inputs, corpus_root)
    check_no_other_files(heldout_out, [replace(files, name=HELDOUT_NAME) for files in inputs], corpus_root)
    drawn, groups, heldout_hashes = {}, {}, []
    for pair, files in language_pairs:
        hashes_l1, hashes_l2, file_of = _side_hashes(files)
        drawn[pair] = np.zeros(len(hashes_l1), dtype=bool)
        # the pairs of each corpus (without by_corpus: one group of them all)
        corpus_of_file = np.array([corpus_of(f.name) if by_corpus else "" for f in files])
        groups[pair] = {name: np.flatnonzero(corpus_of_file[file_of] == name) for name in dict.fromkeys(corpus_of_file)}
        for name, rows in groups[pair].items():
            if len(rows) >= 2 * per_pair:
                l1, l2 = hashes_l1[rows], hashes_l2[rows]
                pivot_side = {files[0].l1: l1, files[0].l2: l2}.get(pivot) if draw == "pivot" else None
                order = (
                    np.random.default_rng([seed, *f"{pair}{name}".encode()]).permutation(len(rows))
                    if pivot_side is None
                    else np.argsort(_mix(pivot_side ^ np.uint64(seed)), kind="stable")
                )
                # a side another corpus's held-out pairs already have is not drawn again
                fresh = ~np.isin(l1, hashes_l1[drawn[pair]]) & ~np.isin(l2, hashes_l2[drawn[pair]])
                drawn[pair][rows[_draw_heldout(l1, l2, per_pair, order[fresh[order]])]] = True
        heldout_hashes += [hashes_l1[drawn[pair]], hashes_l2[drawn[pair]]]
    heldout_sentences = np.unique(np.concatenate(heldout_hashes)) if heldout_hashes else np.zeros(0, dtype=np.uint64)
    for pair, files in language_pairs:
        entry = _split_language_pair(pair, files, train_out, heldout_out, drawn[pair], heldout_sentences, per_pair)
        if by_corpus:
            entry["by_corpus"] = {
                name: {"read": len(rows), "heldout": int(drawn[pair][rows].sum())}
                for name, rows in groups[pair].items()
            }
            entry["too_small_for_heldout"] = not drawn[pair].any()
        report["pairs"].append(entry)
        if entry["too_small_for_heldout"]:
            report["too_small_for_heldout"].append(pair)
    heldout_out.mkdir(parents=True, exist_ok=True)
    (heldout_out / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _side_hashes(files: list[ParallelFiles]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both sides' hashes of every readable pair of `files`, in order, and the index of each pair's file."""
    hashes_l1, hashes_l2, file_of = array("Q"), array("Q"), array("l")
    for index, f in enumerate(files):
        for text_l1, text_l2 in read_parallel(f.path_l1, f.path_l2):
            hashes_l1.append(text_hash(normalize(text_l1)))
            hashes_l2.append(text_hash(normalize(text_l2)))
            file_of.append(index)
    return np.frombuffer(hashes_l1, dtype=np.uint64), np.frombuffer(hashes_l2, dtype=np.uint64), np.asarray(file_of)


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 values: a seeded hash order that is the same in every pair."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _draw_heldout(hashes_l1: np.ndarray, hashes_l2: np.ndarray, per_pair: int, order: np.ndarray) -> np.ndarray:
    """Indices of up to `per_pair` pairs, taken in `order`, whose sides are distinct among them."""
    chosen, seen_l1, seen_l2 = [], set(), set()
    for index in order:
        if hashes_l1[index] not in seen_l1 and hashes_l2[index] not in seen_l2:
            chosen.append(index)
            seen_l1.add(hashes_l1[index])
            seen_l2.add(hashes_l2[index])
            if len(chosen) == per_pair:
                break
    return np.array(chosen, dtype=np.int64)


def _split_language_pair(
    pair: str,
    files: list[ParallelFiles],
    train_out: Path,
    heldout_out: Path,
    is_heldout: np.ndarray,
    heldout_sentences: np.ndarray,
    per_pair: int,
) -> dict:
    """Write one language pair's held-out pairs (`is_heldout`) and its training pairs, less those
    holding a sentence whose hash is in `heldout_sentences` (sorted); returns its report entry."""
    hashes_l1, hashes_l2, _ = _side_hashes(files)
    too_small = len(hashes_l1) < 2 * per_pair
    removed = (np.isin(hashes_l1, heldout_sentences) | np.isin(hashes_l2, heldout_sentences)) & ~is_heldout
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
    else:  # too small now: an earlier split's held-out pairs of this pair are not this split's
        for lang in (files[0].l1, files[0].l2):
            (heldout_out / pair / f"{HELDOUT_NAME}.{lang}").unlink(missing_ok=True)
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


def cap_pairs(root: str | Path, max_pairs: int, seed: int = 0) -> dict[str, dict[str, int]]:
    """Keep at most `max_pairs` pairs per language pair of the corpus at `root` (in place): a
    seeded random sample, in corpus order, drawn over the pair's files together. Returns
    {language pair: {"pairs": before, "kept": after}}."""
    if max_pairs < 1:
        raise ValueError(f"max_pairs must be at least 1, got {max_pairs}")
    by_pair: dict[str, list[ParallelFiles]] = {}
    for files in list_parallel(root):
        by_pair.setdefault(f"{files.l1}-{files.l2}", []).append(files)
    report = {}
    for name, all_files in by_pair.items():
        contents = [list(read_parallel(f.path_l1, f.path_l2)) for f in all_files]
        total = sum(map(len, contents))
        report[name] = {"pairs": total, "kept": min(total, max_pairs)}
        if total <= max_pairs:
            continue
        keep = np.zeros(total, dtype=bool)
        keep[np.random.default_rng([seed, total]).choice(total, max_pairs, replace=False)] = True
        start = 0
        for files, pairs in zip(all_files, contents):
            kept = [pair for pair, k in zip(pairs, keep[start : start + len(pairs)]) if k]
            start += len(pairs)
            write_parallel(root, files.name, files.l1, files.l2, kept)
    return report


def heldout_of_corpus(heldout_root: str | Path, out: str | Path, corpus: str) -> dict[str, int]:
    """The held-out pairs that one corpus (ems.corpus.corpus_of: `tico19`) gave to a split made with
    `by_corpus` (its split_report.json), written to out/<pair>/<corpus>.<l1|l2> (the held-out layout):
    e.g. the held-out TICO-19 pairs as a test set of their own. A pair's held-out file holds its corpora's
    held-out pairs one corpus after another, in the order of the report's `by_corpus` (the order its files
    were read in). Returns {language pair: pairs}; ValueError for a split without by_corpus or no held-out
    pair of `corpus`."""
    heldout_root = Path(heldout_root)
    report = json.loads((heldout_root / REPORT_FILE).read_text(encoding="utf-8"))
    written: dict[str, int] = {}
    for entry in report["pairs"]:
        if "by_corpus" not in entry:
            raise ValueError(f"{heldout_root / REPORT_FILE} was not split by corpus (split_heldout's by_corpus)")
        before, count = 0, 0
        for name, counts in entry["by_corpus"].items():
            if name == corpus:
                count = counts["heldout"]
                break
            before += counts["heldout"]
        if not count:
            continue
        l1, l2 = entry["pair"].split("-", 1)
        pair_dir = heldout_root / entry["pair"]
        pairs = list(read_parallel(pair_dir / f"{HELDOUT_NAME}.{l1}", pair_dir / f"{HELDOUT_NAME}.{l2}"))
        if len(pairs) != entry["heldout"]:
            raise ValueError(f"{pair_dir} holds {len(pairs)} held-out pairs, its split report {entry['heldout']}")
        write_parallel(out, corpus, l1, l2, pairs[before : before + count])
        written[entry["pair"]] = count
    if not written:
        raise ValueError(f"{heldout_root} has no held-out pair of the corpus {corpus!r}")
    return written
