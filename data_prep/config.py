"""The data-prep plan read from a YAML file (see configs/data/ems62.yaml).

In: a YAML file with `languages`, `pivot` (or explicit `pairs`), `opus_codes`, `corpora`
and optional `clean` / `vocab` sections. Out: a `PrepConfig` of plain dataclasses. Every
value's type and range is checked at load; every error (ConfigError) names the file and the key.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from ems.corpus import CorpusError, pair_dir_name
from ems.languages import UnknownLanguageError, canonical_language



class ConfigError(ValueError):
    """The data-prep config is malformed; the message names the file and the key."""


def _check_field(owner: object, name: str, kind: str, low: float | None = None, high: float | None = None) -> None:
    """Raise ConfigError unless `owner.name` is of `kind` ("int", "number", "bool", "str") within [low, high]."""
    value = getattr(owner, name)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "number": is_number and math.isfinite(value),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str) and value.strip() != "",
    }[kind]
    if ok and low is not None and value < low or ok and high is not None and value > high:
        ok = False
    if not ok:
        described = {"int": "an integer", "number": "a finite number", "bool": "true or false",
                     "str": "a non-empty string (quote it in YAML)"}[kind]
        bounds = (f" from {low} to {high}" if low is not None and high is not None
                  else f" >= {low}" if low is not None else f" <= {high}" if high is not None else "")
        raise ConfigError(f"{name} must be {described}{bounds}, got {value!r}")


@dataclass(frozen=True)
class CorpusSpec:
    """One OPUS corpus and how much of it to take per language pair."""

    name: str
    release: str
    max_pairs: int | None = None  # per language pair; None: all
    max_pairs_for: dict[str, int] = field(default_factory=dict)  # per-pair overrides, {"en-ru": 5000000}
    only_uncovered: bool = False  # take it only for pairs that no other corpus has

    def __post_init__(self) -> None:
        _check_field(self, "name", "str")
        _check_field(self, "release", "str")
        _check_field(self, "only_uncovered", "bool")
        if not isinstance(self.max_pairs_for, dict):
            raise ConfigError(f"corpus {self.name}: max_pairs_for must be a mapping such as {{en-ru: 5000000}}, "
                              f"got {self.max_pairs_for!r}")
        for where, cap in [("max_pairs", self.max_pairs), *self.max_pairs_for.items()]:
            if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
                raise ConfigError(f"corpus {self.name}: {where} must be a positive integer or absent, got {cap!r}")

    def cap(self, pair: str) -> int | None:
        """Most pairs to take for the language pair `pair` ("en-ru"); None: no limit."""
        return self.max_pairs_for.get(pair, self.max_pairs)


@dataclass(frozen=True)
class CleanSettings:
    """Filters of the clean stage (see data_prep.clean)."""

    lowercase: bool = True
    min_chars: int = 1
    max_chars: int = 500
    max_length_ratio: float = 3.0  # relative to the file's median length ratio
    max_line_bytes: int = 100_000  # longer raw lines are skipped while reading, never held in memory
    eval_sets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_field(self, "lowercase", "bool")
        _check_field(self, "min_chars", "int", 0)
        _check_field(self, "max_chars", "int", max(1, self.min_chars))
        _check_field(self, "max_length_ratio", "number", 1)
        _check_field(self, "max_line_bytes", "int", 1)
        if not isinstance(self.eval_sets, (list, tuple)) or not all(isinstance(name, str) for name in self.eval_sets):
            raise ConfigError(f"eval_sets must be a list of evaluation set names, got {self.eval_sets!r}")
        from data_prep.clean import EVAL_SETS  # data_prep.clean imports this module

        unknown = sorted(set(self.eval_sets) - set(EVAL_SETS))
        if unknown:
            raise ConfigError(f"eval_sets names unknown evaluation set(s) {unknown}; known: {sorted(EVAL_SETS)}")
        object.__setattr__(self, "eval_sets", tuple(self.eval_sets))


@dataclass(frozen=True)
class VocabSettings:
    """SentencePiece training (see data_prep.vocab.train_vocab)."""

    vocab_size: int = 8000  # every piece: pad, unk and the <2xx> tokens included
    temperature: float = 0.5  # language sampling q_l ∝ n_l^temperature
    max_sentences: int = 2_000_000
    character_coverage: float = 0.9995

    def __post_init__(self) -> None:
        _check_field(self, "vocab_size", "int", 3)
        _check_field(self, "temperature", "number", 0, 1)
        _check_field(self, "max_sentences", "int", 1)
        _check_field(self, "character_coverage", "number", 0.98, 1)  # SentencePiece's own range


@dataclass(frozen=True)
class PrepConfig:
    """Languages, language pairs, OPUS corpora and stage settings of one data-prep run."""

    languages: list[str]
    pairs: list[tuple[str, str]]  # (l1, l2) in alphabetical order
    corpora: list[CorpusSpec]
    opus_codes: dict[str, list[str]]  # project code -> the OPUS codes read into it
    clean: CleanSettings = field(default_factory=CleanSettings)
    vocab: VocabSettings = field(default_factory=VocabSettings)
    source: str = "config"  # the file it was read from, for messages

    def opus_codes_of(self, lang: str) -> list[str]:
        return self.opus_codes.get(lang, [lang])

    def pair_names(self) -> list[str]:
        return [f"{l1}-{l2}" for l1, l2 in self.pairs]

    def check_pair_folders(self, corpus_root: str | Path, pair_folders: Iterable[str]) -> None:
        """ConfigError naming every pair folder (e.g. "en-xx") of `corpus_root` with a language that
        `languages` lacks: a stage that reads a corpus with its config stops there, not at binarize."""
        unknown = {
            folder: sorted(set(folder.split("-")) - set(self.languages))
            for folder in sorted(set(pair_folders)) if set(folder.split("-")) - set(self.languages)
        }
        if unknown:
            listed = ", ".join(f"{folder} ({', '.join(codes)})" for folder, codes in unknown.items())
            raise ConfigError(
                f"{corpus_root}: pair folder(s) {listed} hold a language that {self.source} does not list under "
                f"`languages`; add it there or move the folder out of {corpus_root}"
            )


def _build(cls, values: object, where: str):
    if values is None:
        return cls()
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(values).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**values)
    except (ConfigError, TypeError) as error:  # TypeError: a required key is missing
        raise ConfigError(f"{where}: {error}") from None


def _list(raw: dict, key: str, where: str) -> list:
    """raw[key] as a list ([] when absent); ConfigError naming the key for anything else."""
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {key} must be a list, got {value!r}")
    return value


def _check_language(code: object, where: str) -> str:
    """Any tag ems.languages knows (`de`, `deu`, `DE`, `deu_Latn`, `zho_Hans`) -> its canonical code;
    ConfigError naming the closest known codes otherwise."""
    if not isinstance(code, str):
        raise ConfigError(f"{where}: a language code must be a string, got {code!r} (quote `no`, `on`, ...)")
    try:
        return canonical_language(code)
    except UnknownLanguageError as error:
        raise ConfigError(f"{where}: unknown language code {code!r}: {error}") from None


def parse_config(raw: dict, where: str) -> PrepConfig:
    """A YAML mapping -> PrepConfig; `where` (the file name) prefixes every error."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    allowed = {"languages", "pivot", "pairs", "corpora", "opus_codes", "clean", "vocab"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(allowed)}")
    languages = [_check_language(code, f"{where}: languages") for code in _list(raw, "languages", where)]
    if len(set(languages)) != len(languages):
        raise ConfigError(f"{where}: languages lists a code twice")
    if "pairs" in raw:
        pairs = []
        for pair in _list(raw, "pairs", where):
            l1, _, l2 = str(pair).partition("-")
            l1, l2 = (_check_language(code, f"{where}: pair {pair!r}") for code in (l1, l2))
            for code in (l1, l2):
                if code not in languages:
                    raise ConfigError(f"{where}: pair {pair!r} uses {code!r}, which is not in languages")
            pairs.append(tuple(sorted((l1, l2))))
    elif "pivot" in raw:
        pivot = _check_language(raw["pivot"], f"{where}: pivot")
        if pivot not in languages:
            raise ConfigError(f"{where}: pivot {pivot!r} is not in languages")
        pairs = [tuple(sorted((pivot, lang))) for lang in languages if lang != pivot]
    else:
        raise ConfigError(f"{where}: give either `pivot` (pairs pivot-X) or an explicit `pairs` list")
    if not pairs:
        raise ConfigError(f"{where}: no language pairs: languages needs the pivot and at least one other language")
    for l1, l2 in pairs:
        try:
            pair_dir_name(l1, l2)
        except CorpusError as error:
            raise ConfigError(f"{where}: pairs: {error}") from None
    corpora = [_build(CorpusSpec, spec, f"{where}: corpora[{i}]") for i, spec in enumerate(_list(raw, "corpora", where))]
    for spec in corpora:
        for pair in spec.max_pairs_for:
            if pair not in {f"{l1}-{l2}" for l1, l2 in pairs}:
                raise ConfigError(f"{where}: {spec.name}.max_pairs_for names {pair!r}, not one of the pairs")
    opus_codes = {}
    raw_codes = raw.get("opus_codes") or {}
    if not isinstance(raw_codes, dict):
        raise ConfigError(f"{where}: opus_codes must be a mapping such as {{zh: [zh, zh_CN]}}, got {raw_codes!r}")
    for lang, codes in raw_codes.items():
        lang = _check_language(lang, f"{where}: opus_codes")
        if lang not in languages:
            raise ConfigError(f"{where}: opus_codes names {lang!r}, which is not in languages")
        if not isinstance(codes, list) or not codes or not all(isinstance(code, str) and code for code in codes):
            raise ConfigError(f"{where}: opus_codes.{lang} must be a list of OPUS codes (quote `no`, `on`, ... "
                              f"which YAML reads as booleans), got {codes!r}")
        opus_codes[lang] = codes
    vocab = _build(VocabSettings, raw.get("vocab"), f"{where}: vocab")
    if vocab.vocab_size <= 2 + len(languages):
        raise ConfigError(f"{where}: vocab: vocab_size {vocab.vocab_size} leaves no room for pieces: it counts pad, "
                          f"unk and {len(languages)} language tokens too")
    return PrepConfig(
        languages=languages,
        pairs=sorted(set(pairs)),
        corpora=corpora,
        opus_codes=opus_codes,
        clean=_build(CleanSettings, raw.get("clean"), f"{where}: clean"),
        vocab=vocab,
        source=where,
    )


def load_config(path: str | Path) -> PrepConfig:
    """Read and check a data-prep YAML file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"data-prep config {path} not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: not a readable YAML file: {error}") from None
    return parse_config(raw, str(path))
