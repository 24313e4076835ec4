"""Which columns of a Hugging Face dataset hold the two texts, their languages and the score.

In: the first batch of a dataset's rows (a dict of column lists), its declared features, the CorpusSpec
(`columns`, `languages`, `min_score`) and the source's `:config`; out: a Layout, whose `rows` gives each
row of a batch as (language tag a, language tag b, text a, text b, score).

Column layouts, recognised in this order (`columns` names them instead: roles translation, source,
target, source_language, target_language, score):
- `translation`: a dict {language: text} per row (OPUS-100, opus_books, WMT): its two languages, the
  two that `languages` picks, or, when the dicts hold more (or JSON rows each their own), each
  row's two non-null ones (a row with more or fewer: `not_two_texts`).
- `english` / `non_english` (sentence-transformers' parallel-sentences-*): English and the other
  language of the config name (`en-de`) or of `languages`.
- `src` / `tgt`, `src` / `trg`, `source` / `target`, `sentence1` / `sentence2`: the languages
  `languages` gives, else each row's language columns (`src_lang` / `tgt_lang`, `lang1` / `lang2`,
  ...), else the config name's pair in its order (`de-en`: source de, target en).
- a score column (`laser_score`, `score`): `min_score` keeps the pairs scoring at least that.
Language codes go through ems.languages (`deu_Latn`, `zho_Hans`, `pt-br` and pair names such as
`en-de` or `eng_Latn-deu_Latn` all work). A named column the dataset lacks, no recognisable
layout, a language code that names no language, a text column that holds no text or `min_score`
without a score column is one HFImportError naming what the dataset has, raised on its first rows.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from data_prep.config import CorpusSpec
from data_prep.hf.errors import HFImportError
from ems.corpus import pair_dir_name
from ems.languages import ENGLISH, UnknownLanguageError, canonical_language, split_language_pair

TEXT_COLUMNS = (
    ("translation",),
    ("english", "non_english"),
    ("src", "tgt"),
    ("src", "trg"),
    ("source", "target"),
    ("sentence1", "sentence2"),
)
LANGUAGE_COLUMNS = (
    ("src_lang", "tgt_lang"),
    ("src_lang", "trg_lang"),
    ("source_lang", "target_lang"),
    ("src_language", "tgt_language"),
    ("source_language", "target_language"),
    ("lang1", "lang2"),
)
SCORE_COLUMNS = ("laser_score", "score")
NOT_TWO_TEXTS = "<not two texts>"  # the tags of a translation dict without exactly two texts (no language)


@dataclass(frozen=True)
class Layout:
    """Where a dataset's rows keep the two texts, their languages and the score."""

    name: str  # e.g. "english/non_english", for the report
    columns: dict[str, str]  # role -> column
    languages: tuple[str, str] | None = None  # canonical codes of the two sides, when fixed
    translation_keys: tuple[str, str] | None = None  # the translation dict's keys of the two sides, when fixed

    @property
    def pair(self) -> str | None:
        return None if self.languages is None else pair_dir_name(*self.languages)

    def rows(self, batch: dict) -> Iterator[tuple]:
        """(tag a, tag b, text a, text b, score) of each row of a batch (a dict of column lists)."""
        score_column = self.columns.get("score")
        if "translation" in self.columns:
            dicts = batch[self.columns["translation"]]
            scores = batch[score_column] if score_column else itertools.repeat(None)
            if self.translation_keys is not None:
                key_a, key_b = self.translation_keys
                tag_a, tag_b = self.languages
                for texts, score in zip(dicts, scores):
                    texts = texts if isinstance(texts, dict) else {}  # a JSON row's null, list or text: no texts
                    yield tag_a, tag_b, texts.get(key_a), texts.get(key_b), score
                return
            for texts, score in zip(dicts, scores):  # each row's own keys (JSON dicts, or more than two)
                texts = texts if isinstance(texts, dict) else {}
                present = sorted(key for key, text in texts.items() if text is not None)
                if self.languages is not None:  # the two asked for; a row lacking one counts as `null`
                    by_language = {language_or_none(key): key for key in present}
                    key_a, key_b = (by_language.get(code) for code in self.languages)
                    yield (
                        *self.languages,
                        texts.get(key_a) if key_a else None,
                        texts.get(key_b) if key_b else None,
                        score,
                    )
                elif len(present) == 2:
                    yield present[0], present[1], texts[present[0]], texts[present[1]], score
                else:
                    yield NOT_TWO_TEXTS, NOT_TWO_TEXTS, None, None, score
            return
        n = len(batch[self.columns["source"]])
        if self.languages is not None:
            tags_a, tags_b = itertools.repeat(self.languages[0], n), itertools.repeat(self.languages[1], n)
        else:  # a missing or non-text tag (a mixed JSON column) counts under its repr, e.g. "None"
            tags_a, tags_b = (
                [tag if isinstance(tag, str) else repr(tag) for tag in batch[self.columns[role]]]
                for role in ("source_language", "target_language")
            )
        scores = batch[score_column] if score_column else itertools.repeat(None, n)
        yield from zip(tags_a, tags_b, batch[self.columns["source"]], batch[self.columns["target"]], scores)


@functools.cache
def language_or_none(tag) -> str | None:
    """The canonical code of a language tag (ems.languages); None for one that names no language or is no str."""
    try:
        return canonical_language(tag) if isinstance(tag, str) else None
    except UnknownLanguageError:
        return None


def detect_layout(first: dict, features, spec: CorpusSpec, config: str | None, where: str) -> Layout:
    """The layout of a dataset whose first batch is `first` (see the module docstring); HFImportError
    naming the columns found when there is none, or a named column is missing or holds no text."""
    found = list(first)
    listing = f"its columns: {', '.join(found)}"
    columns = dict(spec.columns)
    missing = [f"{role}={column}" for role, column in columns.items() if column not in found]
    if missing:
        raise HFImportError(f"{where}: no column {', '.join(missing)}; {listing}")
    if "translation" in columns and ({"source", "target"} & columns.keys()):
        raise HFImportError(f"{where}: give the translation column or the source and target columns, not both")
    if ("source" in columns) != ("target" in columns):
        raise HFImportError(f"{where}: give both the source and the target column (columns source=A target=B)")
    layout_name = "columns given"
    if not ({"translation", "source"} & columns.keys()):
        for names in TEXT_COLUMNS:
            if all(column in found for column in names):
                roles = ("translation",) if len(names) == 1 else ("source", "target")
                columns.update(zip(roles, names))
                layout_name = "/".join(names)
                break
        else:
            raise HFImportError(
                f"{where}: no column layout recognised; {listing}. Expected translation, english/non_english, "
                "src/tgt (or trg), source/target or sentence1/sentence2; name yours with --columns source=A target=B "
                "(or translation=C), or columns: in the config"
            )
    if "score" not in columns:
        score = next((column for column in SCORE_COLUMNS if column in found), None)
        if score is not None:
            columns["score"] = score
    if spec.min_score is not None and "score" not in columns:
        raise HFImportError(f"{where}: min_score needs a score column ({' or '.join(SCORE_COLUMNS)}); {listing}")
    _check_types(features, columns, where)
    if "translation" in columns:
        return _translation_layout(first, features, columns, spec, layout_name, where)
    languages = spec.languages
    language_columns = [columns.get("source_language"), columns.get("target_language")]
    if any(language_columns) and not all(language_columns):
        raise HFImportError(f"{where}: give both language columns (source_language=A target_language=B)")
    if languages is None and not any(language_columns):
        present = next((names for names in LANGUAGE_COLUMNS if all(c in found for c in names)), None)
        if present is not None:
            columns["source_language"], columns["target_language"] = present
            language_columns = list(present)
    if languages is None and not any(language_columns):
        languages = _config_languages(config, layout_name, columns, where, listing)
    elif languages is not None:
        columns.pop("source_language", None)
        columns.pop("target_language", None)
    if languages is not None and layout_name == "english/non_english" and ENGLISH not in languages:
        raise HFImportError(f"{where}: english/non_english columns, but the languages {list(languages)} lack English")
    if languages is not None and layout_name == "english/non_english" and languages[0] != ENGLISH:
        languages = (languages[1], languages[0])
    return Layout(layout_name, columns, None if languages is None else tuple(languages))


def _config_languages(config: str | None, layout_name: str, columns: dict, where: str, listing: str) -> tuple:
    pair = split_language_pair(config) if config else None
    if pair is None or pair[0] == pair[1]:
        raise HFImportError(
            f"{where}: cannot tell the languages of the columns {columns['source']} and {columns['target']}: "
            f"no --languages (languages: in the config), no language columns "
            f"({', '.join('/'.join(names) for names in LANGUAGE_COLUMNS)}; {listing}) and "
            + (f"no language pair in the config name {config!r}" if config else "no config name")
            + " (such as en-de); give them as --languages SOURCE TARGET"
        )
    return pair


def _check_types(features, columns: dict, where: str) -> None:
    """HFImportError for a text column that holds no text or a score column that holds no numbers,
    where the dataset declares its features (a column of mixed JSON values has its rows checked)."""
    import datasets

    if not features:
        return
    for role, column in columns.items():
        feature = features.get(column)
        dtype = getattr(feature, "dtype", None)
        if isinstance(feature, datasets.Json):  # values of mixed types (JSON): each row is checked
            continue
        if role in ("source", "target", "source_language", "target_language"):
            if dtype not in ("string", "large_string"):
                raise HFImportError(f"{where}: the {role} column {column!r} holds {feature}, not text")
        elif role == "score" and not (dtype and re.fullmatch(r"u?int\d+|float\d+|double", dtype)):
            raise HFImportError(f"{where}: the score column {column!r} holds {feature}, not numbers")
        elif role == "translation" and not isinstance(feature, (dict, datasets.Translation)):
            raise HFImportError(f"{where}: the translation column {column!r} holds {feature}, not texts by language")


def _translation_layout(first: dict, features, columns: dict, spec: CorpusSpec, layout_name: str, where: str) -> Layout:
    """Fixed keys where the dataset declares two (a Translation feature, a struct), else each row's
    own: JSON dicts (datasets reads them as a Json feature, keys per row) or more than two languages."""
    import datasets

    column = columns["translation"]
    sample = next((value for value in first[column] if value is not None), None)
    if not isinstance(sample, dict):
        raise HFImportError(f"{where}: the translation column {column!r} holds {sample!r}, not texts by language")
    feature = features.get(column) if features else None
    keys = feature.languages if isinstance(feature, datasets.Translation) else feature
    keys = list(keys) if isinstance(keys, (list, dict)) else None
    if keys is None or (spec.languages is None and len(keys) > 2):
        return Layout(layout_name, columns, None if spec.languages is None else tuple(spec.languages))
    named = {key: language_or_none(key) for key in keys}
    unknown = [key for key, code in named.items() if code is None]
    if unknown:
        raise HFImportError(
            f"{where}: the translation column's key(s) {unknown} name no language (its keys: {', '.join(keys)})"
        )
    wanted = spec.languages or [named[key] for key in keys]
    chosen = [next((key for key in keys if named[key] == code), None) for code in wanted]
    if None in chosen or len(chosen) != 2:
        raise HFImportError(
            f"{where}: the translation column has the languages {', '.join(keys)}, not {' and '.join(wanted)}"
        )
    if len(set(wanted)) != 2:
        raise HFImportError(f"{where}: the translation column's keys {keys} name one language twice")
    return Layout(layout_name, columns, tuple(wanted), tuple(chosen))
