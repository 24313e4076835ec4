"""FLORES-200 files (multi-parallel: line i of every file is one sentence) and English-X pairs from them.

In: a FLORES-200 split directory (`devtest/` holding `eng.devtest`, `deu.devtest`,
`cmn_Hans.devtest`, ...) and canonical language codes. Out: aligned pair files
`out_root/<l1>-<l2>/flores200.{l1,l2}` (the ems.corpus layout) and a report. Every reader of
FLORES files, here and in eval/, finds them with ems.languages.flores_file.

FLORES sentences are also the sentences of SIB-200 and of the FLORES mining task: a model
trained on them must not be scored on those.
"""

from __future__ import annotations

from pathlib import Path

from ems.corpus import ReadReport, read_parallel, write_parallel
from ems.languages import ENGLISH, flores_file

CORPUS_NAME = "flores200"


def build_flores_corpus(split_dir: str | Path, out_root: str | Path, languages: list[str]) -> dict:
    """Write en-X FLORES pairs for each language that FLORES has; returns
    {"pairs": {lang: n}, "not_in_flores": [...], "read": [ReadReport dicts]}."""
    split_dir = Path(split_dir)
    english = flores_file(split_dir, ENGLISH)
    if english is None:
        raise FileNotFoundError(f"{split_dir} has no eng.* file: not a FLORES-200 split directory")
    report: dict = {"pairs": {}, "not_in_flores": [], "read": []}
    for lang in sorted(set(languages) - {ENGLISH}):
        path = flores_file(split_dir, lang)
        if path is None:
            report["not_in_flores"].append(lang)
            continue
        read = ReadReport()
        pairs = list(read_parallel(english, path, read))
        write_parallel(out_root, CORPUS_NAME, "en", lang, pairs)
        report["pairs"][lang] = len(pairs)
        report["read"].append(read.to_dict())
    return report
