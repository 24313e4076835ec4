"""English-X pairs from OLDI Seed v2.0 (NLLB-Seed): 6,193 professionally translated English Wikipedia
sentences, `root/seed/<code>_<Script>` (no extension; ISO 639-3 and ISO 15924) each line-aligned with
`root/seed/eng_Latn`. `seed/metadata.tsv` and `seed/README.md` are not read; any other entry of
`seed/` not so named (`ita_latn`, `fur_Latn.txt`) is not read either, and is reported
(`skipped_files`). An empty `eng_Latn` is refused: nothing could be paired with it.

Each language file becomes the corpus file `nllb_seed-<code>_<Script>` of pairs keyed by
ems.languages.corpus_language: FLORES-200's key of the same language and script (`mni_Beng` -> `mni`,
`pbt_Arab` -> `ps`, `ace_Latn` -> `ace`, `ace_Arab` -> `ace_Arab`, `kas_Deva` -> `ks_Deva`). Licence:
CC-BY-SA 4.0 (the release's LICENSE), for every file.

Lines are read with ems.corpus.read_parallel: empty and invalid UTF-8 lines are counted and skipped,
and so is a line holding a line-break character (`line_break`). Nothing is deduplicated or checked
for alignment here: the clean stage does both (its alignment check, data_prep.alignment, removes the
misaligned stretch of `mni_Beng`).
"""

from __future__ import annotations

import re
from pathlib import Path

from data_prep.multiparallel import LanguageChoice, finish_report, write_pairs
from data_prep.opus_mt_testsets import count_lines
from ems.corpus import CorpusError, ReadReport, has_line_break, inside_folder, read_parallel
from ems.languages import UnknownLanguageError, corpus_language

CORPUS = "nllb_seed"
ENGLISH_FILE = "eng_Latn"
LICENCE = "CC-BY-SA 4.0"
FILE_NAME = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")
NOT_LANGUAGE_FILES = ("metadata.tsv", "README.md")  # the release's own files beside the language files
MISNAMED = "not named <code>_<Script> (e.g. fra_Latn, no extension): not read"
EXPECTED = "the Seed release: seed/eng_Latn and seed/<code>_<Script> files line-aligned with it"


def build_nllb_seed_corpus(
    root: str | Path, out_root: str | Path, languages: list[str] | None = None, merge: dict[str, str] | None = None
) -> dict:
    """Import the Seed release at `root` (see the module docstring) into `out_root`; `languages`
    (None: all) and `merge` as data_prep.multiparallel.LanguageChoice reads them. Returns the report
    (data_prep.multiparallel), also written to `out_root/import_report.json`.

    Raises FileNotFoundError without `root/seed/eng_Latn`, CorpusError when it is empty, when no language
    file is there or a file's line count differs from English's (every file checked before anything is written),
    OutsideRootError for a file that a symlink leads out of `root`, UnknownLanguageError for a tag of
    `languages` or `merge` that names no language. A file whose code names no language, or whose
    name is no code, is skipped and reported (`skipped_files`)."""
    root, out_root = Path(root), Path(out_root)
    choice = LanguageChoice(languages, merge)
    english = root / "seed" / ENGLISH_FILE
    if not english.is_file():
        raise FileNotFoundError(f"{english} not found: expected {EXPECTED}")
    inside_folder(root, english)
    entries = sorted(p.name for p in english.parent.iterdir() if p.name not in (ENGLISH_FILE, *NOT_LANGUAGE_FILES))
    misnamed = [name for name in entries if not FILE_NAME.fullmatch(name)]
    paths = [english.parent / name for name in entries if FILE_NAME.fullmatch(name)]
    if not paths:
        also = f" ({MISNAMED}: {', '.join(misnamed)})" if misnamed else ""
        raise CorpusError(f"{english.parent} holds no language file{also}: expected {EXPECTED}")
    english_lines = count_lines(english)
    if not english_lines:
        raise CorpusError(f"{english} is empty: expected {EXPECTED}")
    report: dict = {"format": CORPUS, "root": str(root), **choice.report(), "files": {}, "skipped_files": {}}
    report["skipped_files"].update(dict.fromkeys(misnamed, MISNAMED))
    chosen: list[tuple[Path, str]] = []
    for path in paths:
        inside_folder(root, path)
        if (lines := count_lines(path)) != english_lines:
            raise CorpusError(f"{path} has {lines} lines, {english} {english_lines}: the files must be line-aligned")
        try:
            language = choice.key(corpus_language(path.name))
        except UnknownLanguageError:
            report["skipped_files"][path.name] = "its code names no language"
            continue
        if choice.keeps(language):
            chosen.append((path, language))
    for path, language in chosen:
        report["files"][path.name] = _import_file(english, path, language, out_root)
    return finish_report(report, out_root)


def _import_file(english: Path, path: Path, language: str, out_root: Path) -> dict:
    read, line_breaks = ReadReport(), 0

    def pairs():
        nonlocal line_breaks
        for pair in read_parallel(english, path, read):
            if has_line_break(pair[0]) or has_line_break(pair[1]):
                line_breaks += 1
            else:
                yield pair

    corpus = f"{CORPUS}-{path.name}"
    kept = write_pairs(out_root, corpus, language, pairs())
    skipped = {"empty": read.skipped_empty, "invalid_utf8": read.skipped_invalid_utf8, "line_break": line_breaks}
    return {
        "corpus": corpus,
        "language": language,
        "script": path.name.split("_")[1],
        "licence": LICENCE,
        "lines_read": read.read,
        "kept": kept,
        "skipped": {reason: count for reason, count in skipped.items() if count},
    }
