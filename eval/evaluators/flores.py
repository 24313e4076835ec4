"""FLORES-200 bitext retrieval: each language's 1012 devtest sentences (dev: 997) and the English
ones, scored like Tatoeba (bidirectional cosine P@1, see eval.evaluators.retrieval). FLORES is multi-parallel
news/wiki text from another source than Tatoeba, so it shows how a model trained on Tatoeba-like
sentences transfers to another domain.

Files: `<data_dir>/<stem>.<split>` as ems.languages.flores_file finds them (`deu`,
`cmn_Hans`, ...) and `eng.<split>`, line-aligned. Languages are keyed as ems.languages.flores_language
says: the canonical code (`de`, `zh`), a variety key where FLORES has several files of one
language (`zh-Hant`, `ace-Arab`, `ace-Latn`, `twi`). FLORES sentences are also SIB-200's: a model
trained on them must not be scored here.

In: an encoder, a FloresConfig (configs/eval/flores_bitext.yaml: the language keys, the split),
the split directory, optionally the run's language keys and a sentence cap. Out: P@1 per language
and their average, shaped as Tatoeba's (`evaluate_flores`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ems.cli import MissingDataError
from ems.languages import ENGLISH, FLORES_FILES, duplicate_flores_files, flores_file, flores_languages
from eval.evaluators.items import score_items
from eval.evaluators.retrieval import Bitext, check_max_sentences, evaluate_bitexts, read_aligned_files
from eval.task import Languages, TaskConfig

FLORES_SOURCE = "https://github.com/openlanguagedata/flores (FLORES-200)"
NOT_IN_FLORES = "no FLORES-200 file for the language"


@dataclass(kw_only=True)
class FloresConfig(TaskConfig):
    """configs/eval/flores_bitext.yaml: language keys (canonical codes, or FLORES variety keys such as
    `zh-Hant`: ems.languages.flores_language), or "all" (every file of the split directory but
    English), and the split (the files' suffix)."""

    languages: Languages
    split: str = "devtest"


def load_flores_pair(
    data_dir: Path, lang: str, split: str = "devtest", max_sentences: int | None = None
) -> tuple[list[str], list[str]]:
    """(xx sentences, English sentences) of one FLORES language, line-aligned (files found by
    ems.languages.flores_file); MissingDataError naming the expected file when it is not there."""
    paths = []
    for code in (lang, ENGLISH):
        path = flores_file(data_dir, code, split)
        if path is None:
            stem = FLORES_FILES.get(code)
            if stem is None:
                known = ", ".join(flores_languages(data_dir, split))
                raise MissingDataError(f"{NOT_IN_FLORES}: {code!r} (known: {known or 'none: no FLORES files there'})")
            raise MissingDataError(
                f"missing FLORES-200 file {Path(data_dir) / f'{stem}.{split}'}; "
                f"get the {split} split from {FLORES_SOURCE}"
            )
        paths.append(path)
    return read_aligned_files(*paths, max_sentences)


def evaluate_flores(
    encoder,
    config: FloresConfig,
    data_dir: Path,
    languages: list[str] | None = None,
    max_sentences: int | None = None,
    progress: bool = True,
) -> dict:
    """Bidirectional P@1 (%) per language of the split directory `data_dir`: `languages` (the
    run's keys, replacing the config's) or else the config's, the first `max_sentences` lines of
    each (None: all); the result shaped as
    eval.evaluators.tatoeba.evaluate_tatoeba's ("languages": {lang: {source, n, xx2en, en2xx,
    mean}}, "average", "skipped", "data_errors").
    A language FLORES-200 does not have is skipped, and with "all" so is one whose file is
    absent; a requested language whose file is missing or unreadable is a data error."""
    check_max_sentences(max_sentences)
    data_dir, split = Path(data_dir), config.split
    if flores_file(data_dir, ENGLISH, split) is None:
        raise MissingDataError(
            f"no FLORES-200 {split} split in {data_dir} (missing "
            f"{FLORES_FILES[ENGLISH]}.{split}); get it from {FLORES_SOURCE}"
        )
    every_file = languages is None and config.languages == "all"
    requested = languages if languages is not None else config.languages
    copies = duplicate_flores_files(data_dir, split) if every_file else {}
    if every_file:
        requested = [lang for lang in flores_languages(data_dir, split) if lang != ENGLISH]

    def absent(lang: str) -> str | None:  # a requested FLORES language without its file is a data error naming it
        if lang in copies:  # counted once, under the file it repeats
            return f"same text as {copies[lang].name}"
        missing = flores_file(data_dir, lang, split) is None
        return NOT_IN_FLORES if missing and (every_file or lang not in FLORES_FILES) else None

    def read(lang: str) -> Bitext:
        xx, en = load_flores_pair(data_dir, lang, split, max_sentences)
        return Bitext(lang=lang, source=flores_file(data_dir, lang, split).name, xx=xx, en=en)

    found = score_items(requested, read, skip=absent, desc=config.name)
    result = evaluate_bitexts(encoder, list(found.rows.values()), config.name, found.skipped, progress, found.errors)
    return {"task": result.pop("task"), "data_dir": str(data_dir), "max_sentences": max_sentences, **result}
