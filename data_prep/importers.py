"""The one registry of corpus importers: every local corpus layout the project reads, under one key.
`ems-prep import --format KEY --in DIR` runs its importer on DIR; a recipe's data config names the key
in `corpora:` (data_prep.recipe.RecipeDataConfig) and the importer reads `--data-dir/KEY/`. Adding a corpus
source is one entry here: an importer `build(root, out_root, languages, merge) -> report` that writes
the aligned-pair layout (ems.corpus) and returns a report with `languages` {code: pairs} and `corpora`
{corpus file name: {"licence", "pairs": {code: pairs}}} (written to `out_root/import_report.json`),
and the one-line summary `ems-prep import` prints after the pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data_prep import ebible, multiparallel, nllb_seed, opus_mt_testsets


@dataclass(frozen=True)
class CorpusSource:
    """One corpus layout: its importer, the summary line of its report and what it reads (--help)."""

    build: Callable[[Path, Path, list[str] | None, dict[str, str] | None], dict]
    summary: Callable[[dict], str]
    what: str


CORPUS_SOURCES: dict[str, CorpusSource] = {
    "tatoeba_challenge": CorpusSource(
        opus_mt_testsets.build_tatoeba_challenge_corpus,
        opus_mt_testsets.summary,
        "the Tatoeba Translation Challenge test release (OPUS-MT-testsets), CC-BY 2.0 FR",
    ),
    "tico19": CorpusSource(
        opus_mt_testsets.build_tico19_corpus, opus_mt_testsets.summary, "TICO-19's test split (OPUS-MT-testsets), CC0"
    ),
    "nllb_seed": CorpusSource(
        nllb_seed.build_nllb_seed_corpus, multiparallel.summary, "OLDI Seed v2.0 (NLLB-Seed), CC-BY-SA 4.0"
    ),
    "ebible": CorpusSource(
        ebible.build_ebible_corpus, multiparallel.summary, "eBible translations, each with its own licence"
    ),
}


def unknown_source(name: str) -> str:
    """The problem with a corpus key that is not in the registry, naming the keys it has (and the
    key meant, for the dashed spelling of one: `tatoeba-challenge`)."""
    meant = name.replace("-", "_")
    hint = f" (the key is spelled {meant})" if meant in CORPUS_SOURCES else ""
    return f"unknown corpus {name!r}{hint}; known: {', '.join(CORPUS_SOURCES)}"
