"""The data-prep plan read from a YAML file (see configs/data/ems62.yaml).

In: a YAML file with `languages`, `pivot` (or explicit `pairs`), `opus_codes`, `corpora`
and optional `clean` / `vocab` / `binarize` sections. Out: a `PrepConfig` of plain
dataclasses; every error names the file and the offending key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from data_prep.corpus import pair_dir_name

_LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}$")


class ConfigError(ValueError):
    """The data-prep config is malformed; the message names the file and the key."""


@dataclass(frozen=True)
class CorpusSpec:
    """One OPUS corpus and how much of it to take per language pair."""

    name: str
    release: str
    max_pairs: int | None = None  # per language pair; None: all
    max_pairs_for: dict[str, int] = field(default_factory=dict)  # per-pair overrides, {"en-ru": 5000000}
    only_uncovered: bool = False  # take it only for pairs that no other corpus has

    def __post_init__(self) -> None:
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


@dataclass(frozen=True)
class VocabSettings:
    """SentencePiece training (see data_prep.vocab.train_vocab)."""

    vocab_size: int = 8000  # every piece: pad, unk and the <2xx> tokens included
    temperature: float = 0.5  # language sampling q_l ∝ n_l^temperature
    max_sentences: int = 2_000_000
    character_coverage: float = 0.9995


@dataclass(frozen=True)
class PrepConfig:
    """Languages, language pairs, OPUS corpora and stage settings of one data-prep run."""

    languages: list[str]
    pairs: list[tuple[str, str]]  # (l1, l2) in alphabetical order
    corpora: list[CorpusSpec]
    opus_codes: dict[str, list[str]]  # project code -> the OPUS codes read into it
    clean: CleanSettings = CleanSettings()
    vocab: VocabSettings = VocabSettings()

    def opus_codes_of(self, lang: str) -> list[str]:
        return self.opus_codes.get(lang, [lang])

    def pair_names(self) -> list[str]:
        return [f"{l1}-{l2}" for l1, l2 in self.pairs]


def _build(cls, values: object, where: str):
    if values is None:
        return cls()
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(values).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    if "eval_sets" in values:
        values = {**values, "eval_sets": tuple(values["eval_sets"])}
    try:
        return cls(**values)
    except (ConfigError, TypeError) as error:  # TypeError: a required key is missing
        raise ConfigError(f"{where}: {error}") from None


def _check_language(code: object, where: str) -> str:
    if not isinstance(code, str) or not _LANGUAGE_CODE.match(code):
        raise ConfigError(f"{where}: unknown language code {code!r}: expected 2-3 lowercase letters (ISO 639)")
    return code


def parse_config(raw: dict, where: str) -> PrepConfig:
    """A YAML mapping -> PrepConfig; `where` (the file name) prefixes every error."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    allowed = {"languages", "pivot", "pairs", "corpora", "opus_codes", "clean", "vocab"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(allowed)}")
    languages = [_check_language(code, f"{where}: languages") for code in raw.get("languages") or []]
    if len(set(languages)) != len(languages):
        raise ConfigError(f"{where}: languages lists a code twice")
    if "pairs" in raw:
        pairs = []
        for pair in raw["pairs"]:
            l1, _, l2 = str(pair).partition("-")
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
    for l1, l2 in pairs:
        pair_dir_name(l1, l2)
    corpora = [_build(CorpusSpec, spec, f"{where}: corpora[{i}]") for i, spec in enumerate(raw.get("corpora") or [])]
    for spec in corpora:
        for pair in spec.max_pairs_for:
            if pair not in {f"{l1}-{l2}" for l1, l2 in pairs}:
                raise ConfigError(f"{where}: {spec.name}.max_pairs_for names {pair!r}, not one of the pairs")
    opus_codes = {}
    for lang, codes in (raw.get("opus_codes") or {}).items():
        if lang not in languages:
            raise ConfigError(f"{where}: opus_codes names {lang!r}, which is not in languages")
        opus_codes[lang] = [str(code) for code in codes]
    return PrepConfig(
        languages=languages,
        pairs=sorted(set(pairs)),
        corpora=corpora,
        opus_codes=opus_codes,
        clean=_build(CleanSettings, raw.get("clean"), f"{where}: clean"),
        vocab=_build(VocabSettings, raw.get("vocab"), f"{where}: vocab"),
    )


def load_config(path: str | Path) -> PrepConfig:
    """Read and check a data-prep YAML file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"data-prep config {path} not found")
    return parse_config(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))
