"""Readers for zero-shot cross-lingual classification data -> ClassificationTask.

Three formats (`read_task(format, directory, ...)`, keyed by READERS):

    sib200       DIR/<flores code>/{train,dev,test}.tsv (columns index_id, category, text) and
                 DIR/<flores code>/labels.txt; one sentence per document. FLORES codes (deu_Latn)
                 become canonical codes (de) with `sib200_language_code`.
    mldoc        the files the MLDoc generator writes: DIR/<language>.train.<N>, DIR/<language>.dev,
                 DIR/<language>.test, lines "LABEL<TAB>document", labels CCAT/ECAT/GCAT/MCAT,
                 <language> an English name (english, german, ...).
    webis_cls10  the Amazon reviews of webis-cls-10: DIR/<de|en|fr|jp>/<category>/{train,test}.review,
                 <item> ... <rating>N.0</rating> ... <text>...</text> ... </item> records; positive if
                 rating > 3, negative if < 3 (the corpus has no rating 3). It has no dev split: a fixed
                 `dev_fraction` of the training reviews (seeded shuffle) is held out as dev.

Sentences: an MLDoc line or a review text is one document of several sentences. It is split with
`split_sentences`: after . ! ? followed by whitespace, and after 。！？ (no space needed); pieces are
stripped and empty ones dropped. LASER embedded each MLDoc line whole, as a single "sentence"; pass
`split=False` (config `reader: {split: false}`) to do the same. The document embedding is the mean of
its sentences' embeddings (eval.evaluators.classification).

Bad input: a missing directory or training file raises MissingDataError naming it and where the data
comes from; a test file that is missing or bad (not UTF-8, no document left) costs only its language,
recorded in `task.data_errors` ({lang: reason}, eval.faults); a malformed line/record, an empty text or
an unknown label is skipped and counted in `task.skipped` ({reason: ["<file>: <count> of <lines>"]});
a training split with no document left raises ValueError.
"""

from __future__ import annotations

import html
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.languages import ENGLISH, FLORES_FILES
from eval.evaluators.items import score_items
from eval.evaluators.retrieval import read_lines, read_text

SPLITS = ("train", "dev", "test")
SIB200_SOURCE = "https://github.com/dadelani/sib-200 (data/annotated/)"
MLDOC_SOURCE = (
    "Reuters RCV1 (English) and RCV2 (other languages) from NIST (https://trec.nist.gov/data/reuters/reuters.html, "
    "licence needed), turned into MLDoc files by the scripts of https://github.com/facebookresearch/MLDoc"
)
WEBIS_CLS10_SOURCE = "https://zenodo.org/record/3251672 (webis-cls-10, cls-acl10-unprocessed.tar.gz)"

MALFORMED = "malformed line (no tab)"
EMPTY_TEXT = "empty text"
UNKNOWN_LABEL = "unknown label"
NEUTRAL_RATING = "rating 3 (neither positive nor negative)"
BAD_RECORD = "record without a numeric <rating> or a <text>"


@dataclass
class Document:
    """One example: its sentences (at least one, none empty) and its label."""

    sentences: list[str]
    label: str


@dataclass
class ClassificationTask:
    """Zero-shot data: train and dev documents in `train_language`; test documents per language
    (the train language's own test set, if any, gives the in-language score)."""

    name: str
    labels: list[str]
    train_language: str
    train: list[Document]
    dev: list[Document]
    test: dict[str, list[Document]]
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> items, for the report
    data_errors: dict[str, str] = field(default_factory=dict)  # test language -> why it could not be read


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def split_sentences(text: str, split: bool = True) -> list[str]:
    """Non-empty stripped sentences of `text` (see the module docstring); [text] if not `split`."""
    pieces = _SENTENCE_END.split(text) if split else [text]
    return [piece.strip() for piece in pieces if piece.strip()]


def _count_skip(skipped: dict, reason: str, where: str, count: int, total: int) -> None:
    if count:
        skipped.setdefault(reason, []).append(f"{where}: {count} of {total}")


def _cap(documents: list[Document], max_documents: int | None) -> list[Document]:
    return documents if max_documents is None else documents[:max_documents]


def _nonempty(documents: list[Document], where: str) -> list[Document]:
    if not documents:
        raise ValueError(f"{where}: no usable document (see the skipped counts)")
    return documents


# ---------------------------------------------------------------- SIB-200

# ISO 639-3 -> ISO 639-1 for the SIB-200 languages that have one (checked against pycountry's ISO 639-3 table),
# but Twi's `tw` (see MACROLANGUAGE_MEMBERS).
ISO639_1 = {
    "afr": "af",
    "aka": "ak",
    "amh": "am",
    "asm": "as",
    "bak": "ba",
    "bam": "bm",
    "bel": "be",
    "ben": "bn",
    "bod": "bo",
    "bos": "bs",
    "bul": "bg",
    "cat": "ca",
    "ces": "cs",
    "cym": "cy",
    "dan": "da",
    "deu": "de",
    "dzo": "dz",
    "ell": "el",
    "eng": "en",
    "epo": "eo",
    "est": "et",
    "eus": "eu",
    "ewe": "ee",
    "fao": "fo",
    "fij": "fj",
    "fin": "fi",
    "fra": "fr",
    "gla": "gd",
    "gle": "ga",
    "glg": "gl",
    "grn": "gn",
    "guj": "gu",
    "hat": "ht",
    "hau": "ha",
    "heb": "he",
    "hin": "hi",
    "hrv": "hr",
    "hun": "hu",
    "hye": "hy",
    "ibo": "ig",
    "ind": "id",
    "isl": "is",
    "ita": "it",
    "jav": "jv",
    "jpn": "ja",
    "kan": "kn",
    "kas": "ks",
    "kat": "ka",
    "kaz": "kk",
    "khm": "km",
    "kik": "ki",
    "kin": "rw",
    "kir": "ky",
    "kon": "kg",
    "kor": "ko",
    "lao": "lo",
    "lim": "li",
    "lin": "ln",
    "lit": "lt",
    "ltz": "lb",
    "lug": "lg",
    "mal": "ml",
    "mar": "mr",
    "mkd": "mk",
    "mlt": "mt",
    "mri": "mi",
    "mya": "my",
    "nld": "nl",
    "nno": "nn",
    "nob": "nb",
    "nya": "ny",
    "oci": "oc",
    "pan": "pa",
    "pol": "pl",
    "por": "pt",
    "ron": "ro",
    "run": "rn",
    "rus": "ru",
    "sag": "sg",
    "san": "sa",
    "sin": "si",
    "slk": "sk",
    "slv": "sl",
    "smo": "sm",
    "sna": "sn",
    "snd": "sd",
    "som": "so",
    "sot": "st",
    "spa": "es",
    "srd": "sc",
    "srp": "sr",
    "ssw": "ss",
    "sun": "su",
    "swe": "sv",
    "tam": "ta",
    "tat": "tt",
    "tel": "te",
    "tgk": "tg",
    "tgl": "tl",
    "tha": "th",
    "tir": "ti",
    "tsn": "tn",
    "tso": "ts",
    "tuk": "tk",
    "tur": "tr",
    "uig": "ug",
    "ukr": "uk",
    "urd": "ur",
    "vie": "vi",
    "wol": "wo",
    "xho": "xh",
    "yor": "yo",
    "zho": "zh",
    "zul": "zu",
}

# Individual languages that FLORES/SIB uses for a macrolanguage with an ISO 639-1 code (as in
# ems.languages, `swh` -> `sw`): those FLORES_FILES already maps (als, azj, khk, lvs, npi, pes,
# swh, zsm), plus the rest of SIB's. Other members (prs, azb, the Arabic dialects) keep their own code,
# and so do Twi (twi, a member of Akan: `ak` is aka's) and Nigerian Fulfulde (fuv, TICO-19's key): a SIB key
# is the FLORES-200 key of the same sentences (ems.languages.flores_language), so tables join on it.
MACROLANGUAGE_MEMBERS = {
    **{stem: lang for lang, stem in FLORES_FILES.items() if len(stem) == 3 and stem not in ISO639_1},
    "arb": "ar",
    "ayr": "ay",
    "gaz": "om",
    "kmr": "ku",
    "knc": "kr",
    "ory": "or",
    "pbt": "ps",
    "plt": "mg",
    "quy": "qu",
    "uzn": "uz",
    "ydd": "yi",
}

# A language SIB has in several scripts keeps the plain code for this script; the others (and
# every variant of a language not listed) get "<code>-<script>" in lowercase, e.g. zh-hant, ks-deva.
MAIN_SCRIPT = {"arb": "Arab", "zho": "Hans"}


def sib200_language_code(flores_code: str, scripts_of_language: int = 1) -> str:
    """Canonical code of a FLORES-200 code `xxx_Scrp` (deu_Latn -> de, arb_Arab -> ar, zho_Hant
    -> zh-hant when SIB has `scripts_of_language` > 1 scripts for zho)."""
    iso, sep, script = flores_code.partition("_")
    if not sep or len(iso) != 3 or not script:
        raise ValueError(f"not a FLORES-200 language code (xxx_Scrp): {flores_code!r}")
    code = MACROLANGUAGE_MEMBERS.get(iso) or ISO639_1.get(iso) or iso
    if scripts_of_language > 1 and MAIN_SCRIPT.get(iso) != script:
        return f"{code}-{script.lower()}"
    return code


def sib200_languages(directory: Path) -> dict[str, str]:
    """{canonical code: FLORES code} of the language directories under a SIB-200 data directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise MissingDataError(f"missing SIB-200 directory {directory}; get it from {SIB200_SOURCE}")
    names = sorted(p.name for p in directory.iterdir() if p.is_dir() and "_" in p.name)
    scripts = {}
    for name in names:
        scripts[name.split("_")[0]] = scripts.get(name.split("_")[0], 0) + 1
    return {sib200_language_code(name, scripts[name.split("_")[0]]): name for name in names}


def _read_sib200_split(path: Path, labels: list[str], skipped: dict, folder: Path) -> list[Document]:
    if not path.is_file():
        raise MissingDataError(f"missing SIB-200 file {path}; get it from {SIB200_SOURCE}")
    lines = read_lines(path, folder)
    if not lines or lines[0].split("\t") != ["index_id", "category", "text"]:
        raise ValueError(f"{path}: expected the header 'index_id<TAB>category<TAB>text'")
    documents, malformed, empty, unknown = [], 0, 0, 0
    for line in lines[1:]:
        cells = line.split("\t")
        if len(cells) != 3:
            malformed += 1
        elif cells[1] not in labels:
            unknown += 1
        elif not cells[2].strip():
            empty += 1
        else:
            documents.append(Document([cells[2].strip()], cells[1]))
    where, total = f"{path.parent.name}/{path.name}", len(lines) - 1
    _count_skip(skipped, "malformed line (not 3 columns)", where, malformed, total)
    _count_skip(skipped, UNKNOWN_LABEL, where, unknown, total)
    _count_skip(skipped, EMPTY_TEXT, where, empty, total)
    return _nonempty(documents, str(path))


def read_sib200(
    directory: Path,
    languages: list[str] | None,
    train_language: str = ENGLISH,
    max_documents: int | None = None,
    name: str = "sib200",
) -> ClassificationTask:
    """SIB-200: train/dev of `train_language`, test of each of `languages` (canonical codes; None =
    every language in `directory`) and of the train language. Codes SIB does not have are
    skipped under "not in SIB-200"; labels come from the train language's labels.txt."""
    available = sib200_languages(directory)
    if train_language not in available:
        raise MissingDataError(f"no SIB-200 directory for the train language {train_language!r} in {directory}")
    wanted = list(available) if languages is None else list(dict.fromkeys(languages))
    skipped: dict[str, list[str]] = {}
    missing = [lang for lang in wanted if lang not in available]
    if missing:
        skipped["not in SIB-200"] = missing
    train_dir = Path(directory) / available[train_language]
    labels_path = train_dir / "labels.txt"
    if not labels_path.is_file():
        raise MissingDataError(f"missing SIB-200 label list {labels_path}; get it from {SIB200_SOURCE}")
    labels = [line.strip() for line in read_lines(labels_path, directory) if line.strip()]

    def split(lang: str, split_name: str) -> list[Document]:
        path = Path(directory) / available[lang] / f"{split_name}.tsv"
        return _cap(_read_sib200_split(path, labels, skipped, directory), max_documents)

    test_languages = [train_language] + [lang for lang in wanted if lang in available and lang != train_language]
    train, dev = split(train_language, "train"), split(train_language, "dev")
    test = score_items(test_languages, lambda lang: split(lang, "test"))
    return ClassificationTask(name, labels, train_language, train, dev, test.rows, skipped, test.errors)


# ---------------------------------------------------------------- MLDoc

MLDOC_LABELS = ["CCAT", "ECAT", "GCAT", "MCAT"]
MLDOC_LANGUAGES = {
    "en": "english",
    "de": "german",
    "fr": "french",
    "es": "spanish",
    "it": "italian",
    "ru": "russian",
    "ja": "japanese",
    "zh": "chinese",
}


def _read_labelled_lines(path: Path, labels: list[str], split: bool, skipped: dict, folder: Path) -> list[Document]:
    if not path.is_file():
        raise MissingDataError(f"missing MLDoc file {path}; build it from {MLDOC_SOURCE}")
    documents, malformed, empty, unknown = [], 0, 0, 0
    lines = [line for line in read_lines(path, folder) if line.strip()]
    for line in lines:
        label, tab, text = line.partition("\t")
        sentences = split_sentences(text, split)
        if not tab:
            malformed += 1
        elif label.strip() not in labels:
            unknown += 1
        elif not sentences:
            empty += 1
        else:
            documents.append(Document(sentences, label.strip()))
    _count_skip(skipped, MALFORMED, path.name, malformed, len(lines))
    _count_skip(skipped, UNKNOWN_LABEL, path.name, unknown, len(lines))
    _count_skip(skipped, EMPTY_TEXT, path.name, empty, len(lines))
    return _nonempty(documents, str(path))


def read_mldoc(
    directory: Path,
    languages: list[str] | None,
    train_language: str = ENGLISH,
    max_documents: int | None = None,
    name: str = "mldoc",
    train_size: int = 1000,
    split: bool = True,
) -> ClassificationTask:
    """MLDoc: <train language>.train.<train_size> and .dev, <language>.test for each of `languages`
    (canonical codes, None = all eight) and the train language. A missing or bad test file is a
    data error of its language; missing training files raise MissingDataError."""
    directory = Path(directory)
    wanted = list(MLDOC_LANGUAGES) if languages is None else list(dict.fromkeys(languages))
    unknown = [lang for lang in [train_language, *wanted] if lang not in MLDOC_LANGUAGES]
    if train_language in unknown:
        raise ValueError(f"MLDoc has no language {train_language!r}; expected one of {', '.join(MLDOC_LANGUAGES)}")
    skipped: dict[str, list[str]] = {"not in MLDoc": unknown} if unknown else {}
    train_name = MLDOC_LANGUAGES[train_language]
    train_files = [directory / f"{train_name}.train.{train_size}", directory / f"{train_name}.dev"]
    absent = [str(path) for path in train_files if not path.is_file()]
    if absent:
        raise MissingDataError(f"missing MLDoc files {', '.join(absent)}; build them from {MLDOC_SOURCE}")

    def read(path: Path) -> list[Document]:
        return _cap(_read_labelled_lines(path, MLDOC_LABELS, split, skipped, directory), max_documents)

    train, dev = read(train_files[0]), read(train_files[1])
    test_languages = [train_language] + [lang for lang in wanted if lang in MLDOC_LANGUAGES and lang != train_language]
    test = score_items(test_languages, lambda lang: read(directory / f"{MLDOC_LANGUAGES[lang]}.test"))
    return ClassificationTask(name, MLDOC_LABELS, train_language, train, dev, test.rows, skipped, test.errors)


# ---------------------------------------------------------------- webis-cls-10 (Amazon reviews)

WEBIS_LABELS = ["negative", "positive"]
WEBIS_LANGUAGES = {"de": "de", "en": "en", "fr": "fr", "ja": "jp"}  # canonical code -> corpus directory
_ITEM = re.compile(r"<item>(.*?)</item>", re.DOTALL)
_RATING = re.compile(r"<rating>\s*([0-9.]+)\s*</rating>")
_TEXT = re.compile(r"<text>(.*?)</text>", re.DOTALL)


def read_webis_reviews(path: Path, split: bool, skipped: dict, folder: Path | None = None) -> list[Document]:
    """The reviews of one webis-cls-10 .review file of the data folder `folder` (read_text) as
    documents labelled negative/positive."""
    if not path.is_file():
        raise MissingDataError(f"missing webis-cls-10 file {path}; get it from {WEBIS_CLS10_SOURCE}")
    items = _ITEM.findall(read_text(path, folder=folder))
    documents, bad, neutral, empty = [], 0, 0, 0
    for item in items:
        rating, text = _RATING.search(item), _TEXT.search(item)
        try:
            stars = float(rating.group(1)) if rating else None
        except ValueError:
            stars = None
        sentences = split_sentences(html.unescape(text.group(1)), split) if text else []
        if stars is None or text is None:
            bad += 1
        elif stars == 3:
            neutral += 1
        elif not sentences:
            empty += 1
        else:
            documents.append(Document(sentences, "positive" if stars > 3 else "negative"))
    where = "/".join(path.parts[-3:])
    _count_skip(skipped, BAD_RECORD, where, bad, len(items))
    _count_skip(skipped, NEUTRAL_RATING, where, neutral, len(items))
    _count_skip(skipped, EMPTY_TEXT, where, empty, len(items))
    return _nonempty(documents, f"{path} (<item> records)")


def read_webis_cls10(
    directory: Path,
    languages: list[str] | None,
    train_language: str = ENGLISH,
    max_documents: int | None = None,
    name: str = "amazon",
    category: str = "books",
    dev_fraction: float = 0.1,
    split: bool = True,
) -> ClassificationTask:
    """webis-cls-10, one product category: train/dev from the train language's train.review (the
    dev part drawn with a fixed seed), test from each language's test.review."""
    directory = Path(directory)
    if train_language not in WEBIS_LANGUAGES:
        raise ValueError(
            f"webis-cls-10 has no language {train_language!r}; expected one of {', '.join(WEBIS_LANGUAGES)}"
        )
    if not 0 < dev_fraction < 1:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    wanted = list(WEBIS_LANGUAGES) if languages is None else list(dict.fromkeys(languages))
    unknown = [lang for lang in wanted if lang not in WEBIS_LANGUAGES]
    skipped: dict[str, list[str]] = {"not in webis-cls-10": unknown} if unknown else {}

    def path(lang: str, split_name: str) -> Path:
        return directory / WEBIS_LANGUAGES[lang] / category / f"{split_name}.review"

    reviews = read_webis_reviews(path(train_language, "train"), split, skipped, directory)
    order = np.random.default_rng(0).permutation(len(reviews))
    n_dev = max(1, round(dev_fraction * len(reviews)))
    dev = [reviews[i] for i in sorted(order[:n_dev])]
    train = [reviews[i] for i in sorted(order[n_dev:])]
    test_languages = [train_language] + [lang for lang in wanted if lang in WEBIS_LANGUAGES and lang != train_language]
    test = score_items(
        test_languages,
        lambda lang: _cap(read_webis_reviews(path(lang, "test"), split, skipped, directory), max_documents),
    )
    return ClassificationTask(
        name,
        WEBIS_LABELS,
        train_language,
        _cap(train, max_documents),
        _cap(dev, max_documents),
        test.rows,
        skipped,
        test.errors,
    )


READERS = {"sib200": read_sib200, "mldoc": read_mldoc, "webis_cls10": read_webis_cls10}


def read_task(
    format: str,
    directory: Path,
    languages: list[str] | None,
    train_language: str = ENGLISH,
    max_documents: int | None = None,
    name: str | None = None,
    **reader_settings,
) -> ClassificationTask:
    """The task in `directory` read by READERS[format] (format-specific settings as keywords)."""
    if format not in READERS:
        raise ValueError(f"unknown classification data format {format!r}; expected one of {', '.join(READERS)}")
    reader = READERS[format]
    accepted = set(list(inspect.signature(reader).parameters)[5:])
    if set(reader_settings) - accepted:
        raise ValueError(
            f"unknown reader settings {sorted(set(reader_settings) - accepted)} for format "
            f"{format!r}; expected some of {sorted(accepted)}"
        )
    return reader(directory, languages, train_language, max_documents, name or format, **reader_settings)
