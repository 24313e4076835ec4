"""What the importers of multi-parallel corpora share (data_prep.nllb_seed, data_prep.ebible): each
non-English file of such a corpus translates one English file line by line and becomes one corpus file
`<corpus>-<file id>` of English-X pairs in `out_root/<en-xx>/`, keyed by its language and script
(ems.languages.corpus_language); `ems-prep import`'s `--languages` and `--merge` pick and fold those
keys; the report (`out_root/import_report.json`) names every file's language, script, licence and
counts.

Report keys every importer of the registry (data_prep.importers) writes: `languages` {code: pairs
written} and `corpora` {corpus file name: {"licence", "pairs": {code: pairs}}}; these importers add
`format`, `root`, `languages_selected`, `merge`, `files` {file id: {"corpus", "language", "script",
"licence", "lines_read", "kept", "skipped": {reason: lines}}} and `skipped_files` {file id: reason}.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from itertools import islice
from pathlib import Path

from data_prep.opus_mt_testsets import REPORT_FILE
from ems.corpus import ParallelWriter
from ems.languages import ENGLISH, corpus_language

SCRIPT_SAMPLE = 2000  # lines at the start of a file whose letters decide its script
_NO_SCRIPT = ("Zyyy", "Zinh", "Zzzz")  # common (digits, punctuation), inherited (combining marks), unknown


def text_script(lines: Iterable[str], sample: int = SCRIPT_SAMPLE) -> str | None:
    """The ISO 15924 script of most characters of the first `sample` lines that belong to one script
    (fontTools' copy of the Unicode Script property: `Latn`, `Beng`, `Hani`); None when none does."""
    from fontTools.unicodedata import script

    counts = Counter(s for line in islice(lines, sample) for s in map(script, line) if s not in _NO_SCRIPT)
    return counts.most_common(1)[0][0] if counts else None


class LanguageChoice:
    """`--languages` and `--merge` of an import, as corpus language keys: `languages` (None: all) the
    keys to keep, `merge` {key: key} folds applied before the choice; both take any tag that
    ems.languages.corpus_language reads (`mni`, `mni_Latn`, `kas_Deva`, `deu`).
    UnknownLanguageError for a tag that names no language."""

    def __init__(self, languages: Iterable[str] | None, merge: dict[str, str] | None) -> None:
        self.selected = None if languages is None else {corpus_language(code) for code in languages}
        self.folds = {corpus_language(source): corpus_language(target) for source, target in (merge or {}).items()}

    def key(self, language: str) -> str:
        """The key a file's language is written under, after the folds."""
        return self.folds.get(language, language)

    def keeps(self, key: str) -> bool:
        return self.selected is None or key in self.selected

    def report(self) -> dict:
        return {"languages_selected": None if self.selected is None else sorted(self.selected), "merge": self.folds}


def write_pairs(out_root: Path, corpus: str, language: str, pairs: Iterable[tuple[str, str]]) -> int:
    """Write (English, other) pairs as `out_root/<en-xx>/<corpus>.{en,xx}`; returns how many. No
    pair, no files (an empty corpus file would stand for a language it has no text of)."""
    writer = ParallelWriter(out_root, corpus, ENGLISH, language)
    try:
        for english, other in pairs:
            writer.write(english, other)
    except BaseException:
        writer.discard()
        raise
    if writer.count:
        writer.commit()
    else:
        writer.discard()
    return writer.count


def finish_report(report: dict, out_root: Path) -> dict:
    """Add `languages` and `corpora` (the registry's keys) from `report["files"]` and write the
    report to `out_root/import_report.json`; returns it."""
    written: Counter = Counter()
    corpora: dict[str, dict] = {}
    for entry in report["files"].values():
        if entry["kept"]:
            written[entry["language"]] += entry["kept"]
            corpora[entry["corpus"]] = {"licence": entry["licence"], "pairs": {entry["language"]: entry["kept"]}}
    report["languages"] = dict(sorted(written.items()))
    report["corpora"] = dict(sorted(corpora.items()))
    out_root.mkdir(parents=True, exist_ok=True)
    (out_root / REPORT_FILE).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report


def summary(report: dict) -> str:
    """The import's last line for `ems-prep import`: lines skipped by reason, files skipped."""
    skipped: Counter = Counter()
    for entry in report["files"].values():
        skipped.update(entry["skipped"])
    lines = ", ".join(f"{reason} {count}" for reason, count in sorted(skipped.items()))
    files = ", ".join(f"{name} ({why})" for name, why in report["skipped_files"].items())
    return f"skipped lines: {lines or 'none'} | skipped files: {files or 'none'}"
