"""Streaming cleaning of an aligned corpus, one language pair at a time.

In: a corpus root in the aligned-pair layout (ems.corpus), `CleanSettings`, and the
evaluation sentences to keep out of training (`load_eval_sentences`). Out: the same layout
under another root with, per pair: Unicode NFKC, whitespace collapsed, lowercase; pairs
dropped for control characters, empty or too short/long sides, an abnormal length ratio,
being a duplicate of an earlier pair of the same language pair (all its corpora), or sharing
a side with an evaluation set; in the corpora `alignment_check` names, also pairs that
data_prep.alignment flags as misaligned (`misaligned`, and the stretches they form). `clean_report.json`
gives per file: read, kept, dropped by reason. Memory is bounded by 8 bytes per distinct kept pair of
one language pair, and 24 bytes per pair of the file being checked for alignment.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import unicodedata
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np

from data_prep.alignment import flagged_pairs, stretches
from data_prep.pretokenize import MARKER_FILE
from ems.artifacts import write_json
from ems.configs import ConfigError, out_of_range
from ems.corpus import (
    CorpusError,
    ParallelFiles,
    ReadReport,
    check_no_other_files,
    corpus_of,
    list_parallel,
    read_parallel,
    write_parallel,
)
from ems.languages import ENGLISH
from ems.text import to_simplified

REPORT_FILE = "clean_report.json"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0/C1 controls except tab and newline
_SPACES = re.compile(r"\s+")
RATIO_SAMPLE = 10_000  # pairs at the start of a file that estimate its typical length ratio


class EvalSetError(FileNotFoundError):
    """An evaluation set the user asked to exclude is not where it should be."""


@dataclass(frozen=True)
class CleanSettings:
    """Filters of the clean stage: the `clean` section of a data-prep config (data_prep.config)."""

    lowercase: bool = True
    min_chars: int = 1
    max_chars: int = 500
    max_length_ratio: float = 3.0  # relative to the file's median length ratio
    max_line_bytes: int = 100_000  # longer raw lines are skipped while reading, never held in memory
    eval_sets: tuple[str, ...] = ()  # names in EVAL_SETS
    # corpora (ems.corpus.corpus_of a file's name: nllb_seed, ebible) of one-to-one translations whose
    # files get the misalignment check of data_prep.alignment
    alignment_check: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = [
            *out_of_range("min_chars", self.min_chars, 0),
            *out_of_range("max_chars", self.max_chars, max(1, self.min_chars)),
            *out_of_range("max_length_ratio", self.max_length_ratio, 1),
            *out_of_range("max_line_bytes", self.max_line_bytes, 1),
        ]
        unknown = sorted(set(self.eval_sets) - set(EVAL_SETS))
        if unknown:
            problems.append(f"eval_sets names unknown evaluation set(s) {unknown}; known: {sorted(EVAL_SETS)}")
        object.__setattr__(self, "eval_sets", tuple(self.eval_sets))
        object.__setattr__(self, "alignment_check", tuple(self.alignment_check))
        if problems:
            raise ConfigError("CleanSettings", problems)


def normalize(text: str, lowercase: bool = True) -> str:
    """NFKC, whitespace runs -> one space, stripped, optionally lowercased."""
    text = _SPACES.sub(" ", unicodedata.normalize("NFKC", text)).strip()
    return text.lower() if lowercase else text


_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def overlap_key(text: str) -> str:
    """The form in which a normalized sentence is compared with the evaluation sets: text with Han
    characters in simplified script (`ems.text.to_simplified`), so a traditional-script training
    sentence matches its simplified evaluation twin and vice versa; other text unchanged."""
    return to_simplified(text) if _HAN.search(text) else text


def text_hash(text: str) -> int:
    """64-bit hash of a text (blake2b), the key of deduplication and evaluation-set lookups."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class HashSet:
    """A set of 64-bit hashes in sorted numpy arrays: 8 bytes per member, not ~70 as a Python set.

    New members go to a small sorted array that is merged into the large one when it grows
    past `merge_at`, so an insert costs O(merge_at), not O(size).
    """

    def __init__(self, members: Iterable[int] = (), merge_at: int = 1 << 20):
        self.large = np.unique(np.fromiter(members, dtype=np.uint64))
        self.small = np.empty(0, dtype=np.uint64)
        self.merge_at = merge_at

    def __len__(self) -> int:
        return len(self.large) + len(self.small)

    @staticmethod
    def _in(sorted_array: np.ndarray, values: np.ndarray) -> np.ndarray:
        positions = np.searchsorted(sorted_array, values).clip(max=max(len(sorted_array) - 1, 0))
        return sorted_array[positions] == values if len(sorted_array) else np.zeros(len(values), dtype=bool)

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Boolean mask: which of `values` are members."""
        return self._in(self.large, values) | self._in(self.small, values)

    def add_new(self, values: np.ndarray) -> np.ndarray:
        """Add `values`; returns the mask of those that were new (a repeat within `values` is not)."""
        first = np.zeros(len(values), dtype=bool)
        first[np.unique(values, return_index=True)[1]] = True
        new = first & ~self.contains(values)
        added = np.sort(values[new])
        self.small = np.insert(self.small, np.searchsorted(self.small, added), added)
        if len(self.small) >= self.merge_at:
            self.large = np.insert(self.large, np.searchsorted(self.large, self.small), self.small)
            self.small = np.empty(0, dtype=np.uint64)
        return new


# Where each evaluation set lies under the data directory, and how to get its sentences from a line.
def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8-sig", errors="replace") as file:  # -sig: no BOM in the first line
        yield from (line.rstrip("\n") for line in file)


def _tsv_columns(*names: str) -> Callable[[Path], Iterator[str]]:
    def read(path: Path) -> Iterator[str]:
        lines = _lines(path)
        header = next(lines, "").split("\t")
        wanted = [header.index(name) for name in names if name in header]
        if len(wanted) != len(names):
            raise EvalSetError(f"{path}: expected the columns {list(names)}, found {header}")
        for line in lines:
            fields = line.split("\t")
            yield from (fields[i] for i in wanted if i < len(fields))

    return read


def _columns(*indices: int) -> Callable[[Path], Iterator[str]]:
    def read(path: Path) -> Iterator[str]:
        for line in _lines(path):
            fields = line.split("\t")
            yield from (fields[i] for i in indices if i < len(fields))

    return read


def _after_first_tab(path: Path) -> Iterator[str]:
    for line in _lines(path):
        yield line.partition("\t")[2]


@dataclass(frozen=True)
class EvalSet:
    """An evaluation set: file patterns under the data directory and a sentence reader."""

    patterns: tuple[str, ...]
    read: Callable[[Path], Iterator[str]]


EVAL_SETS: dict[str, EvalSet] = {
    "tatoeba": EvalSet(("tatoeba/tatoeba.*-eng.*",), _lines),
    "flores": EvalSet(("flores200/dev/*.dev", "flores200/devtest/*.devtest"), _lines),
    "sib200": EvalSet(("sib200/*/*.tsv",), _tsv_columns("text")),
    "qe": EvalSet(("mlqe/*/*.tsv",), _tsv_columns("original", "translation")),
    "sts": EvalSet(("sts2017/*.tsv",), _columns(0, 1)),
    "bucc": EvalSet(("bucc2018/*-en.*.[a-z][a-z]", "bucc2018/*/*-en.*.[a-z][a-z]"), _after_first_tab),
    "mldoc": EvalSet(("mldoc/*", "mldoc/*/*"), _after_first_tab),
}


def load_eval_sentences(data_dir: str | Path, names: Iterable[str], lowercase: bool = True) -> tuple[HashSet, dict]:
    """Hashes of every normalized sentence of the named evaluation sets, and a count per set.

    Raises EvalSetError for an unknown set name or a set with no file under `data_dir`.
    """
    data_dir = Path(data_dir)
    hashes: list[int] = []
    counts = {}
    for name in names:
        if name not in EVAL_SETS:
            raise EvalSetError(f"unknown evaluation set {name!r}; known: {sorted(EVAL_SETS)}")
        spec = EVAL_SETS[name]
        paths = sorted({p for pattern in spec.patterns for p in data_dir.glob(pattern) if p.is_file()})
        if not paths:
            raise EvalSetError(
                f"evaluation set {name!r} not found: no file matches {list(spec.patterns)} under {data_dir} "
                f"(point --data-dir at the directory that holds it, or drop it from clean.eval_sets)"
            )
        before = len(hashes)
        hashes += [
            text_hash(overlap_key(key))
            for path in paths
            for text in spec.read(path)
            if (key := normalize(text, lowercase))
        ]
        counts[name] = {"files": len(paths), "sentences": len(hashes) - before}
    return HashSet(hashes), counts


def _median_ratio(path_l1: Path, path_l2: Path, settings: CleanSettings) -> float:
    lengths = [
        len(normalize(a, False)) / max(len(normalize(b, False)), 1)
        for a, b in islice(read_parallel(path_l1, path_l2, max_line_bytes=settings.max_line_bytes), RATIO_SAMPLE)
    ]
    return statistics.median(lengths) if lengths else 1.0


def _drop_reason(a: str, b: str, raw_a: str, raw_b: str, median_ratio: float, settings: CleanSettings) -> str | None:
    if _CONTROL.search(raw_a) or _CONTROL.search(raw_b):
        return "control_characters"
    if not a or not b:
        return "empty_after_normalization"
    if min(len(a), len(b)) < settings.min_chars:
        return "too_short"
    if max(len(a), len(b)) > settings.max_chars:
        return "too_long"
    ratio = len(a) / len(b) / median_ratio
    if max(ratio, 1 / ratio) > settings.max_length_ratio:
        return "length_ratio"
    return None


def _side_hashes(text: str) -> tuple[int, int]:
    """(hash of the text, hash of its overlap_key) without hashing twice when they are the same."""
    own, key = text_hash(text), overlap_key(text)
    return own, own if key == text else text_hash(key)


def _alignment_flags(files: ParallelFiles, settings: CleanSettings) -> tuple[np.ndarray, np.ndarray]:
    """(the mask of misaligned pairs, data_prep.alignment.flagged_pairs, and each pair's line number),
    over the pairs read_parallel yields, sides compared in their normalized form."""
    read, hashes, lines = ReadReport(), array("Q"), array("q")
    for a, b in read_parallel(files.path_l1, files.path_l2, read, max_line_bytes=settings.max_line_bytes):
        hashes.extend((text_hash(normalize(a, settings.lowercase)), text_hash(normalize(b, settings.lowercase))))
        lines.append(read.read)  # counted before the pair is yielded: its line number
    sides = np.frombuffer(hashes, dtype=np.uint64).reshape(-1, 2)
    return flagged_pairs(sides[:, 0], sides[:, 1], files.l1, files.l2, ENGLISH), np.frombuffer(lines, dtype=np.int64)


def clean_pair_files(
    files: ParallelFiles,
    out_root: Path,
    settings: CleanSettings,
    eval_hashes: HashSet,
    seen: HashSet,
    batch: int = 10_000,
) -> dict:
    """Clean one file pair into `out_root`, updating `seen` (pair hashes); returns its report entry."""
    read = ReadReport()
    dropped: Counter = Counter()
    kept = Counter()
    median_ratio = _median_ratio(files.path_l1, files.path_l2, settings)
    checked = corpus_of(files.name) in settings.alignment_check
    misaligned, lines = _alignment_flags(files, settings) if checked else (None, None)

    def kept_pairs() -> Iterator[tuple[str, str]]:
        pairs = read_parallel(files.path_l1, files.path_l2, read, max_line_bytes=settings.max_line_bytes)
        index = 0  # of the pair among those read_parallel yields, as in _alignment_flags
        while chunk := list(islice(pairs, batch)):
            candidates = []
            for raw_a, raw_b in chunk:
                index += 1
                if misaligned is not None and misaligned[index - 1]:
                    dropped["misaligned"] += 1
                    continue
                a, b = normalize(raw_a, settings.lowercase), normalize(raw_b, settings.lowercase)
                reason = _drop_reason(a, b, raw_a, raw_b, median_ratio, settings)
                if reason:
                    dropped[reason] += 1
                else:
                    candidates.append((a, b))
            hashes = np.array([_side_hashes(a) + _side_hashes(b) for a, b in candidates], dtype=np.uint64).reshape(
                -1, 4
            )
            side_hashes = hashes[:, [0, 2]]
            in_eval = eval_hashes.contains(hashes[:, 1]) | eval_hashes.contains(hashes[:, 3])
            dropped["in_eval_set"] += int(in_eval.sum())
            # The pair hash combines both side hashes; (a, b) and (b, a) stay distinct.
            pair_hashes = side_hashes[:, 0] * np.uint64(0x9E3779B97F4A7C15) ^ side_hashes[:, 1]
            new = np.zeros(len(candidates), dtype=bool)
            new[~in_eval] = seen.add_new(pair_hashes[~in_eval])
            dropped["duplicate"] += int((~in_eval & ~new).sum())
            kept["pairs"] += int(new.sum())
            yield from (pair for pair, keep in zip(candidates, new) if keep)

    write_parallel(out_root, files.name, files.l1, files.l2, kept_pairs())
    dropped.update(
        {"invalid_utf8": read.skipped_invalid_utf8, "empty": read.skipped_empty, "huge_line": read.skipped_too_long}
    )
    entry = {
        "name": files.name,
        "read": read.read,
        "kept": kept["pairs"],
        "dropped": {reason: count for reason, count in sorted(dropped.items()) if count},
        "median_length_ratio": round(median_ratio, 4),
    }
    if checked:
        entry["misaligned_stretches"] = stretches(lines, misaligned)
    return entry


def clean_language_pair(
    corpus_root: str | Path, out_root: str | Path, pair: str, settings: CleanSettings, eval_hashes: HashSet
) -> dict:
    """Clean every file of one language pair ("de-en"), deduplicating across them; returns its report.

    A file that cannot be read (unequal line counts, a missing side) is reported with the
    reason and written nothing; the others go on.
    """
    files_of_pair = list_parallel(corpus_root, [pair])
    if not files_of_pair:
        raise CorpusError(f"{corpus_root} has no files for the pair {pair}")
    seen = HashSet()
    entries = []
    for files in files_of_pair:
        try:
            entries.append(clean_pair_files(files, Path(out_root), settings, eval_hashes, seen))
        except CorpusError as error:
            entries.append({"name": files.name, "failed": str(error)})
    return {"pair": pair, "files": entries}


def clean_corpus(
    corpus_root: str | Path,
    out_root: str | Path,
    settings: CleanSettings,
    eval_hashes: HashSet,
    eval_counts: dict | None = None,
    pairs: list[str] | None = None,
) -> dict:
    """Clean the named pairs (all pairs when None) and write `clean_report.json`; returns the report."""
    out_root = Path(out_root)
    name = REPORT_FILE if pairs is None else f"clean_report.{'_'.join(pairs)}.json"
    if (out_root / MARKER_FILE).exists():
        raise CorpusError(
            f"{out_root / MARKER_FILE} says {out_root} is pretokenized, but clean writes untokenized text there: "
            "remove it, or choose an empty output folder"
        )
    inputs = list_parallel(corpus_root, pairs)
    check_no_other_files(out_root, inputs, corpus_root, pairs)
    if pairs is None:
        pairs = sorted({f"{f.l1}-{f.l2}" for f in inputs})
    report = {
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(settings).items()},
        "eval_sets": eval_counts or {},
        "pairs": [clean_language_pair(corpus_root, out_root, pair, settings, eval_hashes) for pair in pairs],
    }
    write_json(out_root / name, report)  # whole: pretokenize tasks of other pairs may be reading it
    return report


def failed_files(report: dict) -> list[str]:
    """'pair/name: reason' for every file the clean stage could not read."""
    return [f"{p['pair']}/{f['name']}: {f['failed']}" for p in report["pairs"] for f in p["files"] if "failed" in f]


def unresolved_failures(corpus_root: str | Path, pairs: list[str] | None = None) -> list[str]:
    """The files the clean stage last failed on in its output `corpus_root` (of `pairs` only, when
    given) (failed_files over its clean_report*.json; a newer report of a pair, a rerun with --pair,
    supersedes an older one)."""
    latest: dict[str, dict] = {}
    for path in sorted(Path(corpus_root).glob("clean_report*.json"), key=lambda p: p.stat().st_mtime):
        for pair in json.loads(path.read_text(encoding="utf-8"))["pairs"]:
            if pairs is None or pair["pair"] in pairs:
                latest[pair["pair"]] = pair
    return failed_files({"pairs": list(latest.values())})


def check_clean_succeeded(corpus_root: str | Path, allow_failed: bool, pairs: list[str] | None = None) -> None:
    """CorpusError if the clean stage failed on files of `corpus_root` (of `pairs` only, when given: a
    pair task reads its own) (a stage after it would otherwise go on without them and exit 0), unless
    `allow_failed`."""
    failures = unresolved_failures(corpus_root, pairs)
    if failures and not allow_failed:
        more = f" and {len(failures) - 3} more" if len(failures) > 3 else ""
        raise CorpusError(
            f"{corpus_root}: the clean stage failed on {'; '.join(failures[:3])}{more}; rerun clean "
            f"(--pair for those pairs), or pass --allow-failed to go on without them"
        )
