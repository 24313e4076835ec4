"""Per-corpus caps and weights of a training split, so that one large corpus of one domain (31k Bible
verses in a language) neither swamps that language's other text nor crowds out the other languages.

In: a corpus root (a training split, changed in place), {corpus: CorpusMix} and a seed. In each
language pair, the pairs of each corpus named (its files: ems.corpus.corpus_of) are capped to
`max_pairs` (a seeded sample, drawn over the corpus's files of the pair together), then weighted:
weight 2 writes every pair twice, 0.5 a seeded half of them, 1.5 every pair once and a seeded half
again. The trainer draws pairs in proportion to the pairs there are (configs/train/multilingual.yaml:
`pair_sampling_temperature: null`), so a corpus's weight is how often its pairs are drawn against the rest; under
temperature sampling it also raises or lowers its languages' share. Out: {language pair: {corpus:
{"pairs": before, "capped": after the cap, "written": after the weight}}}. The held-out split comes
first (data_prep.split), so every setting is scored on the same held-out pairs.

The weight's bounds. Above 0: weight 0 is refused (drop the corpus from `corpora` to leave it out),
and a weight so small that a language pair's share of its capped pairs rounds to none writes one pair
there, rounded up rather than refused: one weight serves languages of very different sizes (0.01 of
a Bible's 31k verses is 310, of 40 verses none), and a weight above 0 means the corpus is in. At most
MAX_WEIGHT: the output is weight x the corpus, with no bound that the corpus sets (a huge weight
writes until the disk is full), so a larger weight is refused when the config loads; a pair repeated
that often is memorised, and a small corpus's languages are better drawn more often by temperature
sampling (TrainConfig.pair_sampling_temperature).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.configs import ConfigError, out_of_range
from ems.corpus import ParallelFiles, corpus_of, list_parallel, read_parallel, write_parallel

MAX_WEIGHT = 100  # the most copies of a pair a weight writes (see the module docstring)


@dataclass(frozen=True)
class CorpusMix:
    """The cap and weight of one corpus: a `corpus_mix` entry of a data config."""

    max_pairs: int | None = None  # per language pair (None: all)
    # in (0, MAX_WEIGHT]: the pairs' multiplicity after the cap, at least one pair of each language pair
    # that has any (see the module docstring)
    weight: float = 1.0

    def __post_init__(self) -> None:
        problems = [
            *([] if self.max_pairs is None else out_of_range("max_pairs", self.max_pairs, 1)),
            *out_of_range("weight", self.weight, 0, MAX_WEIGHT),
        ]
        if self.weight == 0:
            problems.append("weight must be above 0 (to leave a corpus out, drop it from corpora)")
        if problems:
            raise ConfigError("CorpusMix", problems)


def mix_corpora(root: str | Path, mix: dict[str, CorpusMix], seed: int = 0) -> dict[str, dict[str, dict[str, int]]]:
    """Cap and weight the corpora `mix` names in the corpus at `root`, in place (see the module
    docstring); returns the report. A file left without pairs is removed."""
    by_pair: defaultdict[str, defaultdict[str, list[ParallelFiles]]] = defaultdict(lambda: defaultdict(list))
    for files in list_parallel(root):
        if corpus_of(files.name) in mix:
            by_pair[f"{files.l1}-{files.l2}"][corpus_of(files.name)].append(files)
    report: dict[str, dict[str, dict[str, int]]] = {}
    for pair, corpora in by_pair.items():
        for corpus, all_files in corpora.items():
            settings = mix[corpus]
            contents = [list(read_parallel(f.path_l1, f.path_l2)) for f in all_files]
            total = sum(map(len, contents))
            rng = np.random.default_rng([seed, *f"{pair} {corpus}".encode()])
            copies = np.ones(total, dtype=np.int64)
            if settings.max_pairs is not None and total > settings.max_pairs:
                copies[:] = 0
                copies[rng.choice(total, settings.max_pairs, replace=False)] = 1
            capped = int(copies.sum())
            whole, fraction = divmod(settings.weight, 1)
            extra = np.zeros(total, dtype=np.int64)
            drawn = max(round(fraction * capped), 1 if whole == 0 and capped else 0)  # never none (docstring)
            extra[rng.choice(np.flatnonzero(copies), drawn, replace=False)] = 1
            copies = copies * int(whole) + extra
            start = 0
            for files, pairs in zip(all_files, contents):
                counts = copies[start : start + len(pairs)]
                start += len(pairs)
                if counts.sum():
                    write_parallel(root, files.name, files.l1, files.l2, _repeated(pairs, counts))
                else:
                    files.path_l1.unlink()
                    files.path_l2.unlink()
            report.setdefault(pair, {})[corpus] = {"pairs": total, "capped": capped, "written": int(copies.sum())}
    return report


def _repeated(pairs: list[tuple[str, str]], counts: np.ndarray):
    for pair, count in zip(pairs, counts):
        for _ in range(count):
            yield pair


def rounded_up(settings: CorpusMix, counts: dict[str, int]) -> bool:
    """Whether a weight below 1 wrote one pair of a language pair (`counts`, a report entry) where its share
    of the capped pairs rounded to none (see the module docstring)."""
    return settings.weight < 1 and counts["capped"] > 0 and round(settings.weight * counts["capped"]) == 0
