"""Per-corpus caps and weights of a training split, so that one large corpus of one domain (31k Bible
verses in a language) neither swamps that language's other text nor crowds out the other languages.

In: a corpus root (a training split, changed in place), {corpus: CorpusMix} and a seed. In each
language pair, the pairs of each corpus named (its files: ems.corpus.corpus_of) are capped to
`max_pairs` (a seeded sample, drawn over the corpus's files of the pair together), then weighted:
weight 2 writes every pair twice, 0.5 a seeded half of them, 1.5 every pair once and a seeded half
again. The trainer draws pairs in proportion to the pairs there are (configs/train/multilingual.yaml:
`temperature: null`), so a corpus's weight is how often its pairs are drawn against the rest; under
temperature sampling it also raises or lowers its languages' share. Out: {language pair: {corpus:
{"pairs": before, "capped": after the cap, "written": after the weight}}}. The held-out split comes
first (data_prep.split), so every setting is scored on the same held-out pairs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.configs import ConfigError, out_of_range
from ems.corpus import ParallelFiles, corpus_of, list_parallel, read_parallel, write_parallel


@dataclass(frozen=True)
class CorpusMix:
    """The cap and weight of one corpus: a `corpus_mix` entry of a data config."""

    max_pairs: int | None = None  # per language pair (None: all)
    weight: float = 1.0  # > 0: the pairs' multiplicity after the cap (see the module docstring)

    def __post_init__(self) -> None:
        problems = [
            *([] if self.max_pairs is None else out_of_range("max_pairs", self.max_pairs, 1)),
            *out_of_range("weight", self.weight, 0),
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
            extra[rng.choice(np.flatnonzero(copies), round(fraction * capped), replace=False)] = 1
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
