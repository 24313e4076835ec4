"""FLORES-200 files (multi-parallel: line i of every file is one sentence) and English-X pairs from them.

In: a FLORES-200 split directory (`devtest/` holding `eng.devtest`, `deu.devtest`,
`cmn_Hans.devtest`, ...) and canonical language codes. Out: `flores_file`, where a language's
file is (every reader of FLORES files, here and in eval/, finds them with it), and aligned pair
files `out_root/<l1>-<l2>/flores200.{l1,l2}` (the data_prep.corpus layout) with a report.

FLORES sentences are also the sentences of SIB-200 and of the FLORES mining task: a model
trained on them must not be scored on those.
"""

from __future__ import annotations

from pathlib import Path

from data_prep.corpus import ReadReport, read_parallel, write_parallel
from ems.languages import ENGLISH

CORPUS_NAME = "flores200"

# canonical code -> FLORES-200 file stem (ISO 639-3, with the script where FLORES has several)
FLORES_FILES = {
    "af": "afr", "ar": "ara", "az": "azj", "be": "bel", "bg": "bul", "bn": "ben", "ca": "cat", "ckb": "ckb",
    "cs": "ces", "cy": "cym", "da": "dan", "de": "deu", "el": "ell", "en": "eng", "eo": "epo", "es": "spa",
    "et": "est", "eu": "eus", "fa": "pes", "fi": "fin", "fr": "fra", "ga": "gle", "gd": "gla", "gl": "glg",
    "he": "heb", "hi": "hin", "hr": "hrv", "hu": "hun", "hy": "hye", "id": "ind", "is": "isl", "it": "ita",
    "ja": "jpn", "ka": "kat", "ko": "kor", "ky": "kir", "lt": "lit", "lv": "lvs", "mi": "mri", "mk": "mkd",
    "ml": "mal", "mn": "khk", "mr": "mar", "ms": "zsm", "nb": "nob", "ne": "npi", "nl": "nld", "nn": "nno",
    "pl": "pol", "pt": "por", "ro": "ron", "ru": "rus", "sk": "slk", "sl": "slv", "sq": "als", "sr": "srp_Cyrl",
    "si": "sin", "sv": "swe", "sw": "swh", "tg": "tgk", "th": "tha", "tr": "tur", "ug": "uig", "uk": "ukr", "vi": "vie",
    "zh": "cmn_Hans",
}


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


def flores_file(split_dir: str | Path, lang: str, split: str | None = None) -> Path | None:
    """The file of canonical code `lang` in a FLORES-200 split directory (`flores200/devtest`):
    `<stem>.<split>` with the stem FLORES_FILES gives, any split suffix when `split` is None (the
    first in name order); None when FLORES_FILES has no stem for `lang` or the file is not there.
    The one finder of FLORES files (data_prep and eval)."""
    stem = FLORES_FILES.get(lang)
    if stem is None:
        return None
    return next((path for path in sorted(Path(split_dir).glob(f"{stem}.{split or '*'}")) if path.is_file()), None)
