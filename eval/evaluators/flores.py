"""FLORES-200 bitext retrieval: each language's 1012 devtest sentences (dev: 997) and the English
ones, scored like Tatoeba (bidirectional cosine P@1, see eval.evaluators.retrieval). FLORES is multi-parallel
news/wiki text from another source than Tatoeba, so it shows how a model trained on Tatoeba-like
sentences transfers to another domain.

Files: `<data_dir>/<stem>.<split>` as ems.languages.flores_file finds them (`deu`,
`cmn_Hans`, ...) and `eng.<split>`, line-aligned. Languages are keyed as ems.languages.flores_language
says: the canonical code (`de`, `zh`), a variety key where FLORES has several files of one
language (`zh-Hant`, `ace-Arab`, `ace-Latn`, `twi`). FLORES sentences are also SIB-200's: a model
trained on them must not be scored here.

In: an encoder and a TaskRun: a FloresConfig (configs/eval/flores_bitext.yaml: the language keys,
the split), the split directory and the run's options (language filter, sentence cap). Out: P@1
per language and their average, shaped as Tatoeba's (`evaluate_flores`, the evaluator of the task
type `flores`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder, encoder_languages
from ems.languages import (
    ENGLISH,
    FLORES_FILES,
    canonical_language,
    covered_language,
    duplicate_flores_files,
    flores_file,
    flores_languages,
)
from eval.evaluators.items import score_items
from eval.evaluators.retrieval import MEAN_P_AT_1, Bitext, check_max_sentences, evaluate_bitexts, read_aligned_files
from eval.report import markdown_table
from eval.task import Languages, TaskConfig, TaskRun, TaskType, filtered_languages

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
    return read_aligned_files(*paths, max_sentences, data_dir)


def evaluate_flores(encoder: Encoder, task: TaskRun) -> dict:
    """Bidirectional P@1 (%) per language of the split directory `task.data_dir`: the config's
    languages that the run's language filter keeps (with "all" and a filter: the files whose
    canonical code it keeps, `zh` keeping `zh` and `zh-Hant`), the first `max_sentences` lines of
    each (None: all); the result shaped as
    eval.evaluators.tatoeba.evaluate_tatoeba's ("languages": {lang: {source, n, xx2en, en2xx,
    mean}}, "average", "skipped", "data_errors").
    A language FLORES-200 does not have is skipped, and with "all" and no filter so is one whose
    file is absent; a requested language whose file is missing or unreadable is a data error; the
    filter's languages that the config lacks are skipped (eval.task.NOT_IN_TASK)."""
    config, options = task.config, task.options
    data_dir, split, max_sentences = Path(task.data_dir), config.split, options.max_sentences
    check_max_sentences(max_sentences)
    if flores_file(data_dir, ENGLISH, split) is None:
        raise MissingDataError(
            f"no FLORES-200 {split} split in {data_dir} (missing "
            f"{FLORES_FILES[ENGLISH]}.{split}); get it from {FLORES_SOURCE}"
        )
    every_file, outside = config.languages == "all" and options.canonical is None, {}
    if every_file:
        requested = [lang for lang in flores_languages(data_dir, split) if lang != ENGLISH]
    elif config.languages == "all":
        requested = _filtered_keys(data_dir, split, options.canonical)
    else:
        requested, outside = filtered_languages(config.languages, options)
    copies = duplicate_flores_files(data_dir, split) if every_file else {}

    def absent(lang: str) -> str | None:  # a requested FLORES language without its file is a data error naming it
        if lang in copies:  # counted once, under the file it repeats
            return f"same text as {copies[lang].name}"
        missing = flores_file(data_dir, lang, split) is None
        return NOT_IN_FLORES if missing and (every_file or lang not in FLORES_FILES) else None

    covered = encoder_languages(encoder)

    def read(lang: str) -> Bitext:
        xx, en = load_flores_pair(data_dir, lang, split, max_sentences)
        # FLORES's variety keys (ace-Arab, ace-Latn, twi) encoded as the model's entry they name
        # (ace_Arab, ace, ak: ems.languages.resolve_language); kept as the row's key
        encode_as = covered_language(lang, covered) or lang  # itself when the encoder lacks it: reported uncovered
        return Bitext(lang=encode_as, source=flores_file(data_dir, lang, split).name, xx=xx, en=en, name=lang)

    found = score_items(requested, read, skip=absent, desc=config.name)
    result = evaluate_bitexts(
        encoder, list(found.rows.values()), config.name, found.skipped, options.progress, found.errors
    )
    result["skipped"].update(outside)
    return {"task": result.pop("task"), "data_dir": str(data_dir), "max_sentences": max_sentences, **result}


def _filtered_keys(data_dir: Path, split: str, canonical: list[str]) -> list[str]:
    """The directory's language keys whose canonical code the run's filter keeps (`zh` keeps `zh`
    and `zh-Hant`), then the filter's codes that no file has (reported as not in FLORES)."""
    keys = [key for key in flores_languages(data_dir, split) if key != ENGLISH]
    kept = [key for key in keys if canonical_language(key) in canonical]
    return kept + [lang for lang in canonical if lang not in {canonical_language(key) for key in keys}]


TASK = TaskType(metric="p_at_1", run=evaluate_flores, table=markdown_table, config=FloresConfig, headline=MEAN_P_AT_1)
