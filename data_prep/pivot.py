"""Pairs of two non-English languages, made from the training pairs of multi-parallel corpora
(NLLB-Seed, the Bibles, TICO-19: the same English sentences translated into many languages) through
their shared English sentences, as LASER, LaBSE and EMS train on non-English pairs too.

In: a training split in the ems.corpus layout, changed in place, a PivotPairs (the `pivot_pairs`
entry of a data config) and a seed. The split must come from data_prep.split.split_heldout: it
holds no sentence of any held-out pair on either side, so no pivot pair can carry a held-out English
sentence's translation. For each corpus named, its English pairs (the files `<corpus>-<part>` of the
`en-xx` folders, ems.corpus.corpus_of) are grouped by their English side, compared in the
data_prep.clean.normalize form as the split compares sentences; a language with several translations
of one English sentence in the corpus gives one of them (seeded). For each English sentence with
translations in n >= 2 languages, min(per_sentence, n(n-1)/2) distinct language pairs among those n
are drawn (seeded), each one (xx, yy) pair of the two translations. Each language pair's pairs are
then capped to `max_pairs` (a seeded sample, in the order drawn) and written as
`<xx>-<yy>/<corpus>_pivot-en.{xx,yy}`: the corpus `<corpus>_pivot` to ems.corpus.corpus_of, so
corpus_mix, which names the imported corpora, leaves them as they are, and the recipe's
languages.json counts them apart from the English pairs.

Out: {corpus: {"english": English sentences with translations in 2 or more languages, "drawn":
pairs drawn, "written": pairs written (after the caps), "language_pairs": language pairs written}}.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np

from data_prep.clean import normalize
from ems.configs import ConfigError, out_of_range
from ems.corpus import corpus_of, list_parallel, read_parallel, write_parallel
from ems.languages import ENGLISH

PIVOT_SUFFIX = "_pivot"  # `<corpus>_pivot`: the corpus of the pairs made from `<corpus>`'s


@dataclass(frozen=True)
class PivotPairs:
    """The `pivot_pairs` entry of a data config (see the module docstring)."""

    corpora: list[str]  # corpora of the data config to pivot, each on its own
    per_sentence: int = 1  # language pairs drawn per shared English sentence
    max_pairs: int | None = None  # per corpus and language pair, a seeded sample (None: all)

    def __post_init__(self) -> None:
        problems = [
            *out_of_range("per_sentence", self.per_sentence, 1),
            *([] if self.max_pairs is None else out_of_range("max_pairs", self.max_pairs, 1)),
        ]
        if not self.corpora:
            problems.append("corpora must name at least one corpus")
        repeated = sorted({name for name in self.corpora if self.corpora.count(name) > 1})
        if repeated:
            problems.append(f"corpora names {', '.join(map(repr, repeated))} more than once")
        if problems:
            raise ConfigError("PivotPairs", problems)


def pivot_corpus(corpus: str) -> str:
    """The corpus name (ems.corpus.corpus_of) of the pairs pivoted from `corpus`'s: `nllb_seed_pivot`."""
    return corpus + PIVOT_SUFFIX


def add_pivot_pairs(root: str | Path, settings: PivotPairs, seed: int = 0) -> dict[str, dict[str, int]]:
    """Add the non-English pairs of `settings.corpora` to the training split at `root`, in place (see
    the module docstring); returns the report."""
    return {corpus: _pivot_one(Path(root), corpus, settings, seed) for corpus in settings.corpora}


def _pivot_one(root: Path, corpus: str, settings: PivotPairs, seed: int) -> dict[str, int]:
    """Draw, cap and write the pivot pairs of one corpus; returns its report entry."""
    # {normalised English: {language: [its translations]}}, in the order the English first appears
    translations: dict[str, defaultdict[str, list[str]]] = {}
    for files in list_parallel(root):
        if corpus_of(files.name) != corpus or ENGLISH not in (files.l1, files.l2):
            continue
        english_first = files.l1 == ENGLISH
        language = files.l2 if english_first else files.l1
        for text_l1, text_l2 in read_parallel(files.path_l1, files.path_l2):
            english, other = (text_l1, text_l2) if english_first else (text_l2, text_l1)
            translations.setdefault(normalize(english), defaultdict(list))[language].append(other)
    rng = np.random.default_rng([seed, *corpus.encode()])
    drawn: defaultdict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    shared = 0
    for by_language in translations.values():
        if len(by_language) < 2:
            continue
        shared += 1
        chosen = {
            lang: texts[int(rng.integers(len(texts)))] if len(texts) > 1 else texts[0]
            for lang, texts in sorted(by_language.items())
        }
        candidates = list(combinations(sorted(chosen), 2))
        for index in sorted(rng.choice(len(candidates), min(settings.per_sentence, len(candidates)), replace=False)):
            xx, yy = candidates[index]
            drawn[xx, yy].append((chosen[xx], chosen[yy]))
    name = f"{pivot_corpus(corpus)}-{ENGLISH}"
    written = 0
    for (xx, yy), pairs in sorted(drawn.items()):
        if settings.max_pairs is not None and len(pairs) > settings.max_pairs:
            cap_rng = np.random.default_rng([seed, *f"{xx}-{yy} {corpus}".encode()])
            pairs = [pairs[i] for i in sorted(cap_rng.choice(len(pairs), settings.max_pairs, replace=False))]
        write_parallel(root, name, xx, yy, pairs)
        written += len(pairs)
    return {
        "english": shared,
        "drawn": sum(map(len, drawn.values())),
        "written": written,
        "language_pairs": len(drawn),
    }
