"""The one preprocessing path shared by data prep and inference.

raw text -> NFKC -> (Chinese: traditional -> simplified) -> lowercase -> word pre-tokenization
-> SentencePiece ids.

Pre-tokenization depends on the language (`pretokenize`): jieba for Chinese, MeCab
(fugashi + the UniDic-lite dictionary, both from PyPI) for Japanese, Moses (sacremoses) for
every other language.

`Tokenizer` bundles the SentencePiece model with the language list (one `<2xx>` token per
language) and the preprocessing settings, so a saved model directory carries everything
needed to turn text into the ids it was trained on: `spm.model` + `ems_tokenizer.json`
(`tokenizer.json` in directories written before the rename, still read; the new name keeps
clear of Hugging Face's fast-tokenizer file of that name).

`guess_language` picks a preprocessing for text whose language nobody gave (the exported
sentence-transformers and transformers models fall back to it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

import sentencepiece as spm
from sacremoses import MosesTokenizer

from ems.corpus import inside_folder
from ems.languages import resolve_language

PAD_ID = 0
UNK_ID = 1
FIRST_LANG_ID = 2  # <2xx> tokens follow pad and unk, in the order of Tokenizer.languages
TOKENIZER_FILE = "ems_tokenizer.json"
SPM_FILE = "spm.model"
# The key of TOKENIZER_FILE that records the SHA-1 of the spm.model saved with it.
SPM_SHA1_KEY = "spm_sha1"


def lang_token(lang: str) -> str:
    return f"<2{lang}>"


@cache
def _moses(lang: str) -> MosesTokenizer:
    return MosesTokenizer(lang=lang)


def moses_words(text: str, lang: str) -> str:
    """Moses tokenization; escape=False keeps the text readable (no &apos;)."""
    return _moses(lang).tokenize(text, escape=False, return_str=True)


@cache
def _jieba():
    import jieba

    jieba.setLogLevel(60)  # it logs its dictionary loading at INFO on every process start
    jieba.initialize()
    return jieba


def chinese_words(text: str, lang: str = "zh") -> str:
    """jieba word segmentation (Chinese, also Wu and Cantonese), words joined by spaces."""
    return " ".join(word for word in _jieba().cut(text) if not word.isspace())


@cache
def _mecab():
    import fugashi

    return fugashi.Tagger("-Owakati")  # finds the unidic-lite dictionary installed from PyPI


def japanese_words(text: str, lang: str = "ja") -> str:
    """MeCab (fugashi, UniDic-lite) word segmentation, words joined by spaces."""
    return _mecab().parse(text).strip()


@cache
def _opencc():
    import opencc

    return opencc.OpenCC("t2s")


def to_simplified(text: str) -> str:
    """Traditional -> simplified Chinese characters (OpenCC's t2s: characters and phrases);
    other text passes through unchanged."""
    return _opencc().convert(text)


# Chinese written in traditional characters (zh_TW, zh_HK corpora, Tatoeba's cmn) is merged into
# `zh` and converted to simplified, so both scripts share one vocabulary (the EMS paper merges them).
SIMPLIFIED_CHINESE = frozenset({"zh"})

# Languages whose words are not separated by spaces get a segmenter; all others use Moses.
SEGMENTERS = {"zh": chinese_words, "wuu": chinese_words, "yue": chinese_words, "ja": japanese_words}


def pretokenize(text: str, lang: str, segment_cjk: bool = True) -> str:
    """One sentence -> its words joined by single spaces, with the tokenizer for `lang`."""
    words = SEGMENTERS.get(lang, moses_words) if segment_cjk else moses_words
    return words(text, lang)


@dataclass(frozen=True)
class Preprocessing:
    """Text normalisation applied before SentencePiece, identically at train and encode time."""

    lowercase: bool = True
    moses: bool = True  # word pre-tokenization on/off (the name predates per-language tokenizers)
    segment_cjk: bool = True  # jieba/MeCab for zh/ja; False: Moses for all
    simplify_chinese: bool = True  # `to_simplified` for SIMPLIFIED_CHINESE; False: traditional characters kept

    def __call__(self, text: str, lang: str) -> str:
        text = unicodedata.normalize("NFKC", text).strip()
        if self.simplify_chinese and lang in SIMPLIFIED_CHINESE:
            text = to_simplified(text)
        if self.lowercase:
            text = text.lower()
        if self.moses:
            text = pretokenize(text, lang, self.segment_cjk)
        return text


KANA = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9d]")
HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Moses rules for text in no known language: no language-specific apostrophe rule or abbreviation
# list (sacremoses' behaviour for German, Russian and most other languages).
UNKNOWN_LANGUAGE = "und"


def guess_language(text: str, languages: list[str]) -> str:
    """The preprocessing language for `text` when its language is not given, from its script:
    `ja` for text with kana, `zh` for other text with Han characters (`ja` if the model has no `zh`),
    each only when it is one of `languages`; UNKNOWN_LANGUAGE (language-neutral Moses) otherwise."""
    if "ja" in languages and KANA.search(text):
        return "ja"
    if HAN.search(text):
        for lang in ("zh", "ja"):
            if lang in languages:
                return lang
    return UNKNOWN_LANGUAGE


_SURROGATE = re.compile("[\ud800-\udfff]")


def checked_sentences(sentences: list[str]) -> list[str]:
    """`sentences` as a list, or a TypeError unless it is a list (any iterable) of str; the error
    names the index of the first item that is not a str."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError("expected a list of sentences, not a single string")
    try:
        sentences = list(sentences)
    except TypeError:
        raise TypeError(f"expected a list of sentences (str), got {type(sentences).__name__}") from None
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentence {i} is {type(sentence).__name__}, not str: {sentence!r:.60}")
        if _SURROGATE.search(sentence):  # not encodable as UTF-8: SentencePiece would fail without saying where
            raise ValueError(
                f"sentence {i} holds a lone surrogate (text decoded with errors='surrogateescape' "
                f"or a broken UTF-16 pair): {sentence!r:.60}"
            )
    return sentences


def read_tokenizer_file(path: str | Path) -> tuple[list[str], Preprocessing, str]:
    """The language list, preprocessing and recorded spm.model SHA-1 of a TOKENIZER_FILE; ValueError
    naming the file for one that is not such a file (every preprocessing setting and the SHA-1 are
    required)."""
    path = Path(path)
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, nested too deep for the parser
        raise ValueError(f"{path}: not a tokenizer file ({' '.join(str(error).split())})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: not a tokenizer file (a JSON object with languages and preprocessing)")
    languages = meta.get("languages")
    if not isinstance(languages, list) or not all(isinstance(lang, str) and lang for lang in languages):
        raise ValueError(f"{path}: languages must be a list of language codes, got {languages!r:.80}")
    repeated = sorted({lang for lang in languages if languages.count(lang) > 1})
    if repeated:
        raise ValueError(f"{path}: languages lists {', '.join(repeated)} more than once")
    settings = meta.get("preprocessing")
    known = [f.name for f in dataclasses.fields(Preprocessing)]
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: preprocessing must be an object with the settings {', '.join(known)}")
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown preprocessing settings {', '.join(unknown)}; known: {', '.join(known)}")
    missing = [key for key in known if key not in settings]
    if missing:
        raise ValueError(f"{path}: preprocessing lacks the settings {', '.join(missing)}: build the vocabulary again")
    not_bool = sorted(key for key, value in settings.items() if not isinstance(value, bool))
    if not_bool:
        raise ValueError(f"{path}: preprocessing settings must be true or false: {', '.join(not_bool)}")
    recorded = meta.get(SPM_SHA1_KEY)
    if recorded is None:
        raise ValueError(f"{path}: no {SPM_SHA1_KEY} (the SHA-1 of its spm.model): build the vocabulary again")
    if not (isinstance(recorded, str) and re.fullmatch("[0-9a-f]{40}", recorded)):
        raise ValueError(f"{path}: {SPM_SHA1_KEY} must be the 40 hex digits of a SHA-1, got {recorded!r:.60}")
    return languages, Preprocessing(**settings), recorded


def read_sentencepiece(spm_file: str | Path) -> tuple[spm.SentencePieceProcessor, str]:
    """The SentencePiece model in `spm_file` and the SHA-1 of the file; ValueError naming the file for
    one that is no SentencePiece model (not SentencePiece's own "INTERNAL: ..." RuntimeError)."""
    data = Path(spm_file).read_bytes()
    try:
        sp = spm.SentencePieceProcessor(model_proto=data)
    except RuntimeError as error:
        raise ValueError(f"{spm_file}: not a SentencePiece model ({' '.join(str(error).split())})") from None
    return sp, hashlib.sha1(data).hexdigest()


def check_vocabulary(sp, spm_sha1: str, languages: list[str], recorded_sha1: str | None, where: str) -> None:
    """The checks that a SentencePiece model `sp` (loaded from `where`, its file's SHA-1 `spm_sha1`)
    and a language list belong together, made by Tokenizer and by the exported models' code alike:
    the file is the one the tokenizer file recorded (`recorded_sha1`; None: not read from a file); pad and
    unk are ids PAD_ID and UNK_ID; the language token of the i-th language is id FIRST_LANG_ID + i.
    ValueError naming `where` and the first check that fails."""
    if recorded_sha1 is not None and spm_sha1 != recorded_sha1:
        raise ValueError(
            f"{where}: not the file {TOKENIZER_FILE} was saved with (its SHA-1 is {spm_sha1}, {TOKENIZER_FILE} "
            f"records {recorded_sha1}); the vocabulary and the language list do not belong together"
        )
    for name, found, wanted in (("pad", sp.pad_id(), PAD_ID), ("unk", sp.unk_id(), UNK_ID)):
        if found != wanted:
            raise ValueError(f"{where}: {name} is id {found}, not {wanted}: not an EMS vocabulary")
    for i, lang in enumerate(languages):
        if sp.piece_to_id(lang_token(lang)) != FIRST_LANG_ID + i:
            raise ValueError(
                f"{where}: piece {lang_token(lang)} is not id {FIRST_LANG_ID + i}; "
                "the vocabulary and the language list do not belong together"
            )


@dataclass
class Tokenizer:
    """SentencePiece model + language list + preprocessing; `encode` maps raw text to ids."""

    spm_path: str
    languages: list[str]
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    # the SHA-1 of spm.model that the tokenizer file records (None: not loaded from a file, not checked)
    recorded_sha1: str | None = None

    def __post_init__(self) -> None:
        self.sp, sha1 = read_sentencepiece(self.spm_path)
        check_vocabulary(self.sp, sha1, self.languages, self.recorded_sha1, str(self.spm_path))

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    @property
    def sha1(self) -> str:
        """SHA-1 of the SentencePiece model file: its exact pieces, scores and normaliser (shards
        record it as vocab_sha1, and training refuses shards of another vocabulary)."""
        return hashlib.sha1(Path(self.spm_path).read_bytes()).hexdigest()

    def resolve_language(self, lang: str) -> str:
        """The entry of the language list that the tag `lang` names (`EN` -> `en`, `cmn` -> `zh`, see
        ems.languages.resolve_language); UnknownLanguageError (a ValueError) naming the list otherwise."""
        return resolve_language(lang, self.languages, owner="this vocabulary")

    def lang_index(self, lang: str) -> int:
        """Index of `lang` in the language list (the XTR language-embedding row)."""
        return self.languages.index(self.resolve_language(lang))

    def lang_token_id(self, lang: str) -> int:
        return FIRST_LANG_ID + self.lang_index(lang)

    def preprocess(self, sentences: list[str], lang: str) -> list[str]:
        """Raw sentences in `lang` (one of `languages`, or an alias of one) -> the text SentencePiece
        reads. TypeError unless `sentences` is a list of str; UnknownLanguageError for another `lang`."""
        lang = self.resolve_language(lang)
        return [self.preprocessing(s, lang) for s in checked_sentences(sentences)]

    def encode(self, sentences: list[str], lang: str) -> list[list[int]]:
        """Raw sentences in `lang` -> token ids (no language token; the encoder is language-agnostic);
        errors as for `preprocess`."""
        return self.sp.encode(self.preprocess(sentences, lang))

    def encode_guessed(self, sentences: list[str]) -> list[list[int]]:
        """Raw sentences of no listed language -> token ids, each sentence preprocessed in the language
        its script suggests (`guess_language`: zh/ja for Han/kana text where the vocabulary has them,
        language-neutral Moses, UNKNOWN_LANGUAGE, for all other text), as the exported models do
        when no language is given. TypeError unless `sentences` is a list of str."""
        return self.sp.encode(
            [self.preprocessing(s, guess_language(s, self.languages)) for s in checked_sentences(sentences)]
        )

    def save(self, directory: str | Path) -> None:
        """Write `spm.model` and TOKENIZER_FILE into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / SPM_FILE
        if Path(self.spm_path).resolve() != target.resolve():
            target.write_bytes(Path(self.spm_path).read_bytes())
        meta = {
            "languages": self.languages,
            "preprocessing": asdict(self.preprocessing),
            SPM_SHA1_KEY: hashlib.sha1(target.read_bytes()).hexdigest(),
        }
        (directory / TOKENIZER_FILE).write_text(json.dumps(meta, indent=2) + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        """The tokenizer saved in `directory` (TOKENIZER_FILE and SPM_FILE)."""
        directory = Path(directory)
        meta_path = directory / TOKENIZER_FILE
        if not meta_path.is_file() or not (directory / SPM_FILE).is_file():
            raise FileNotFoundError(f"{directory} has no {SPM_FILE} + {TOKENIZER_FILE}: not a vocabulary directory")
        for path in (meta_path, directory / SPM_FILE):
            inside_folder(directory, path, f"the vocabulary folder {directory}")
        languages, preprocessing, recorded_sha1 = read_tokenizer_file(meta_path)
        return cls(str(directory / SPM_FILE), languages, preprocessing, recorded_sha1)
