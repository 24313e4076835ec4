"""Training data for the heads: aligned sentence pairs -> `ParallelEmbeddings` from any encoder.

Sources: FLORES-200 (English paired with each requested language, files named by
ems.languages.FLORES_FILES) or a corpus root of Moses-format pair directories
(`<l1>-<l2>/<name>.<l1|l2>`, ems.corpus), e.g.
the shared Tatoeba Challenge and TICO-19 pairs imported and cleaned by `ems-prep import` and
`ems-prep clean` (which removes every sentence of an evaluation set). `capped` keeps a seeded
sample of at most N pairs per set.
Pairs are read with ems.corpus.read_parallel: a pair with an empty or non-UTF-8 side is
skipped and counted in the pair set's `read` report.

Heads must never be trained on test sentences. FLORES-200 devtest shares no sentences with the
WMT20 QE test sets (Wikipedia sentences of MLQE-PE) or STS2017 (image captions and news
headlines of SemEval-2017 Task 1), so heads trained on it can be scored on those. FLORES
sentences ARE the sentences of SIB-200 and of the FLORES mining/retrieval tasks: heads trained
on FLORES must not be scored on those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.corpus import ReadReport, list_parallel, read_parallel
from ems.encoder_kinds import embedding_key
from ems.heads.base import ParallelEmbeddings
from ems.languages import FLORES_FILES, flores_file

PIVOT = "en"


@dataclass
class SentencePairs:
    """Aligned sentences: x[i] (language x_lang) translates y[i] (language y_lang)."""

    x_lang: str
    y_lang: str
    x: list[str]
    y: list[str]
    source: str
    read: dict = field(default_factory=dict)  # ReadReport counts of the file pair


def flores_pairs(split_dir: Path, languages: list[str]) -> list[SentencePairs]:
    """English-X pairs (x = English) from a FLORES-200 split directory for every X in
    `languages` other than English. MissingDataError names every language without a file."""
    split_dir = Path(split_dir)
    english = flores_file(split_dir, PIVOT)
    others = sorted(set(languages) - {PIVOT})
    missing = [lang for lang in others if flores_file(split_dir, lang) is None]
    if english is None or missing:
        named = [f"{lang} ({FLORES_FILES.get(lang, 'no FLORES code known')})" for lang in missing]
        what = "eng.*" if english is None else ", ".join(named)
        raise MissingDataError(f"FLORES-200 directory {split_dir} lacks the files of: {what}")
    pair_sets = []
    for lang in others:
        report = ReadReport()
        pairs = list(read_parallel(english, flores_file(split_dir, lang), report))
        pair_sets.append(_pair_set(PIVOT, lang, pairs, f"flores200:{split_dir.name}", report))
    return pair_sets


def moses_pairs(root: Path, languages: list[str] | None = None) -> list[SentencePairs]:
    """Every aligned file pair under a corpus root (only pairs whose two languages are both in
    `languages`, when given). MissingDataError when nothing matches."""
    pair_sets = []
    for files in list_parallel(root):
        if languages is not None and not {files.l1, files.l2} <= set(languages):
            continue
        report = ReadReport()
        pairs = list(read_parallel(files.path_l1, files.path_l2, report))
        pair_sets.append(_pair_set(files.l1, files.l2, pairs, f"{files.l1}-{files.l2}/{files.name}", report))
    if not pair_sets:
        raise MissingDataError(
            f"no aligned file pairs{'' if languages is None else ' for ' + ','.join(languages)} under {root}"
        )
    return pair_sets


def pivot_pairs(root: Path, languages: list[str]) -> list[SentencePairs]:
    """English-X pairs (x = English) of a Moses-format corpus root for every X in `languages`
    other than English, one set per X (its files joined). MissingDataError names every language
    without a pair file."""
    pair_sets, missing = [], []
    for lang in sorted(set(languages) - {PIVOT}):
        try:
            files = moses_pairs(root, [PIVOT, lang])
        except MissingDataError:
            missing.append(lang)
            continue
        english, other = [], []
        for pairs in files:
            flipped = pairs.x_lang != PIVOT
            english += pairs.y if flipped else pairs.x
            other += pairs.x if flipped else pairs.y
        sources = ", ".join(pairs.source for pairs in files)
        pair_sets.append(
            SentencePairs(PIVOT, lang, english, other, sources, {pairs.source: pairs.read for pairs in files})
        )
    if missing:
        raise MissingDataError(f"corpus {root} has no {PIVOT}-X pair files for: {', '.join(missing)}")
    return pair_sets


def capped_rows(n_pairs: int, max_pairs: int | None, seed: int = 0) -> np.ndarray | None:
    """The rows `capped` keeps of a set of `n_pairs` pairs: a seeded sample of `max_pairs` in
    corpus order, or None (all rows) when max_pairs is None or not smaller than n_pairs."""
    if max_pairs is None:
        return None
    if max_pairs < 1:
        raise ValueError(f"max_pairs must be at least 1 or None, got {max_pairs}")
    if n_pairs <= max_pairs:
        return None
    return np.sort(np.random.default_rng(seed).choice(n_pairs, max_pairs, replace=False))


def capped(pair_sets: list[SentencePairs], max_pairs: int | None, seed: int = 0) -> list[SentencePairs]:
    """Each set cut to a seeded random sample of `max_pairs` pairs, kept in corpus order (a
    corpus's first lines all come from one of its files); None, or a set no larger: unchanged."""
    out = []
    for pairs in pair_sets:
        keep = capped_rows(len(pairs.x), max_pairs, seed)
        if keep is None:
            out.append(pairs)
            continue
        out.append(
            SentencePairs(
                pairs.x_lang,
                pairs.y_lang,
                [pairs.x[i] for i in keep],
                [pairs.y[i] for i in keep],
                f"{pairs.source} ({max_pairs} of {len(pairs.x)}, seed {seed})",
                pairs.read,
            )
        )
    return out


def _pair_set(x_lang: str, y_lang: str, pairs: list[tuple[str, str]], source: str, report: ReadReport) -> SentencePairs:
    return SentencePairs(x_lang, y_lang, [x for x, _ in pairs], [y for _, y in pairs], source, report.to_dict())


def encode_pairs(encoder, pair_sets: list[SentencePairs], rows: slice | None = None) -> ParallelEmbeddings:
    """Encode every pair set (each side once per distinct sentence list, so FLORES's shared
    English side is encoded once) and keep the pairs at positions `rows` of each set (None: all).
    Whole sets are encoded so that an embedding cache is shared by every `rows` selection."""
    if not pair_sets:
        raise ValueError("no sentence pairs to encode")
    languages = sorted({lang for pairs in pair_sets for lang in (pairs.x_lang, pairs.y_lang)})
    encoded: dict[str, np.ndarray] = {}

    def encode(sentences: list[str], lang: str) -> np.ndarray:
        key = embedding_key(sentences, lang)
        if key not in encoded:
            encoded[key] = np.asarray(encoder.encode(sentences, lang), dtype=np.float32)
        return encoded[key]

    parts = []
    for pairs in pair_sets:
        keep = slice(None) if rows is None else rows
        x, y = encode(pairs.x, pairs.x_lang)[keep], encode(pairs.y, pairs.y_lang)[keep]
        parts.append(
            (x, y, np.full(len(x), languages.index(pairs.x_lang)), np.full(len(y), languages.index(pairs.y_lang)))
        )
    x, y, x_lang, y_lang = (np.concatenate([part[i] for part in parts]) for i in range(4))
    return ParallelEmbeddings(x, y, x_lang.astype(np.int64), y_lang.astype(np.int64), languages)
