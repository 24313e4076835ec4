"""The data-prep plan of `ems-prep all` and its stages (configs/prep/*.yaml, e.g. configs/prep/ems62.yaml;
a recipe's data config, configs/data/*.yaml, is data_prep.recipe.RecipeDataConfig), read with the
project's config loader:

    config = ems.configs.load_config(PrepConfig, "configs/prep/small.yaml", ["vocab.vocab_size=16000"])

In: a YAML file with `languages`, `pivot` (or explicit `pairs`), `opus_codes`, `corpora` (OPUS
corpora `{name, release}` and Hugging Face datasets `{hf: SOURCE}`, data_prep.hf) and
optional `clean` (data_prep.clean.CleanSettings) / `vocab` sections. Out: a `PrepConfig` of plain
dataclasses whose language codes are canonical (ems.languages) and whose `pairs` are every
language pair, "l1-l2" in alphabetical order. Every value's type and range is checked at load;
one ConfigError names the file and each key with a problem.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from data_prep.clean import CleanSettings
from ems.configs import ConfigError, out_of_range
from ems.corpus import CorpusError, pair_dir_name
from ems.languages import UnknownLanguageError, canonical_language, split_language_pair

# What a Hugging Face dataset's columns can be (--columns ROLE=COLUMN, `columns:` of an hf corpus):
# a dict of texts by language, or two text columns with optional per-row language columns, and a score.
HF_COLUMN_ROLES = ("translation", "source", "target", "source_language", "target_language", "score")
HF_SAMPLES = ("reservoir", "first")


def split_hf_source(source: str) -> tuple[str, str | None]:
    """A Hugging Face dataset source and its config name: `owner/name:en-de` -> ("owner/name",
    "en-de"), `data/talks:en-de` likewise; a path that exists as given keeps its colons, and a last
    part holding "/" is no config (`hf://datasets/owner/name`)."""
    path, colon, config = source.rpartition(":")
    if not colon or not path or "/" in config or Path(source).exists():
        return source, None
    return path, config or None


@dataclass(frozen=True)
class CorpusSpec:
    """One corpus and how much of it to take per language pair: an OPUS corpus (`name`, `release`)
    or a Hugging Face dataset (`hf`: a Hub id or a local path, `:config` after it; data_prep.hf,
    which documents the other hf keys)."""

    name: str = ""  # OPUS: the corpus; hf: the output files' name (default: the dataset's, with its config)
    release: str = ""  # OPUS only
    hf: str | None = None  # e.g. sentence-transformers/parallel-sentences-talks:en-de, data/nllb.parquet
    split: str | None = None  # hf: the split to read (default: train, or the only one)
    columns: dict[str, str] = field(default_factory=dict)  # hf: {role: column}, roles HF_COLUMN_ROLES
    languages: list[str] | None = None  # hf: the source and target columns' languages (loaded: canonical)
    min_score: float | None = None  # hf: keep pairs whose score column is at least this
    sample: str = "reservoir"  # hf, with a cap: a seeded uniform sample, or the first pairs (HF_SAMPLES)
    seed: int = 0  # hf: the sample's seed
    max_pairs: int | None = None  # per language pair; None: all
    max_pairs_for: dict[str, int] = field(default_factory=dict)  # per-pair overrides, {"en-ru": 5000000}
    only_uncovered: bool = False  # OPUS: take it only for pairs that no other corpus has

    def __post_init__(self) -> None:
        problems = []
        if self.hf is None:
            missing = [key for key in ("name", "release") if not getattr(self, key).strip()]
            if missing:
                problems.append(
                    f"an OPUS corpus needs a name and a release (a Hugging Face dataset: hf); missing: "
                    f"{', '.join(missing)}"
                )
            problems += [
                f"{key} applies to hf: corpora only"
                for key, default in (("split", None), ("columns", {}), ("languages", None), ("min_score", None))
                if getattr(self, key) != default
            ]
        else:
            problems += self._hf_problems()
        for where, cap in [
            ("max_pairs", self.max_pairs),
            *((f"max_pairs_for.{pair}", cap) for pair, cap in self.max_pairs_for.items()),
        ]:
            if cap is not None and cap < 1:
                problems.append(f"{where} must be a positive integer or absent, got {cap!r}")
        if problems:
            raise ConfigError("CorpusSpec", problems)

    def _hf_problems(self) -> list[str]:
        problems = []
        if not self.hf.strip():
            problems.append("hf must name a Hugging Face dataset (a Hub id or a local path)")
        if self.release or self.only_uncovered:
            problems.append(f"hf: {self.hf}: release and only_uncovered apply to OPUS corpora only")
        if self.name and ("/" in self.name or self.name.startswith(".")):
            problems.append(f"name {self.name!r} must be a file name (no '/', not starting with '.')")
        unknown = sorted(set(self.columns) - set(HF_COLUMN_ROLES))
        if unknown:
            problems.append(f"columns: unknown role(s) {unknown}; the roles: {', '.join(HF_COLUMN_ROLES)}")
        if self.split is not None and not self.split.strip():
            problems.append("split must be a split name such as train, or absent")
        if self.sample not in HF_SAMPLES:
            problems.append(f"sample must be one of {', '.join(HF_SAMPLES)}, got {self.sample!r}")
        if self.min_score is not None:
            problems += out_of_range("min_score", self.min_score)
        if self.languages is not None:
            codes = []
            for code in self.languages:
                try:
                    codes.append(canonical_language(code))
                except UnknownLanguageError as error:
                    problems.append(f"languages: {error}")
            if len(self.languages) != 2:
                problems.append(f"languages must name two languages (the source's, the target's), got {self.languages}")
            elif len(codes) == 2 and codes[0] == codes[1]:
                problems.append(f"languages {self.languages} name one language twice")
            elif len(codes) == 2:
                object.__setattr__(self, "languages", codes)
        return problems

    def cap(self, pair: str) -> int | None:
        """Most pairs to take for the language pair `pair` ("en-ru"); None: no limit."""
        return self.max_pairs_for.get(pair, self.max_pairs)

    def hf_pair(self) -> str | None:
        """The language pair ("de-en") an hf corpus gives, where known before reading it: from
        `languages`, else from its config name (`en-de`, `eng_Latn-deu_Latn`); None otherwise
        (its rows say, e.g. a language column)."""
        codes = self.languages
        if codes is None:
            config = split_hf_source(self.hf)[1]
            codes = split_language_pair(config) if config else None
        return None if codes is None or codes[0] == codes[1] else "-".join(sorted(codes))


@dataclass(frozen=True)
class VocabSettings:
    """SentencePiece training (see data_prep.vocab.train_vocab)."""

    vocab_size: int = 8000  # every piece: pad, unk and the <2xx> tokens included
    sampling_alpha: float = 0.5  # languages sampled with q_l ∝ n_l^sampling_alpha (XLM's α; 1: proportional)
    max_sentences: int = 2_000_000
    character_coverage: float = 0.9995

    def __post_init__(self) -> None:
        problems = [
            *out_of_range("vocab_size", self.vocab_size, 3),
            *out_of_range("sampling_alpha", self.sampling_alpha, 0, 1),
            *out_of_range("max_sentences", self.max_sentences, 1),
            *out_of_range("character_coverage", self.character_coverage, 0.98, 1),
        ]  # SentencePiece's own range
        if problems:
            raise ConfigError("VocabSettings", problems)


@dataclass(frozen=True)
class PrepConfig:
    """Languages, language pairs, corpora (OPUS and Hugging Face datasets) and stage settings of one data-prep run."""

    languages: list[str]  # any tag ems.languages knows (de, deu, DE, deu_Latn); loaded: canonical codes
    pivot: str | None = None  # pairs pivot-X for every other language X of `languages`
    pairs: list[str] | None = None  # or explicit pairs ("de-en"); loaded: every pair, "l1-l2" with l1 < l2
    corpora: list[CorpusSpec] = field(default_factory=list)
    opus_codes: dict[str, list[str]] = field(default_factory=dict)  # project code -> the OPUS codes read into it
    clean: CleanSettings = field(default_factory=CleanSettings)
    vocab: VocabSettings = field(default_factory=VocabSettings)

    def __post_init__(self) -> None:
        problems: list[str] = []

        def language(code: str, where: str) -> str | None:
            try:
                return canonical_language(code)
            except UnknownLanguageError as error:
                problems.append(f"{where}: unknown language code {code!r}: {error}")
                return None

        languages = [language(code, "languages") for code in self.languages]
        if len(set(languages)) != len(languages):
            problems.append("languages lists a code twice")
        known = set(languages) - {None}
        pairs = []
        if self.pairs is not None:
            for pair in self.pairs:
                l1, _, l2 = pair.partition("-")
                codes = [language(code, f"pair {pair!r}") for code in (l1, l2)]
                problems += [
                    f"pair {pair!r} uses {code!r}, which is not in languages"
                    for code in codes
                    if code and code not in known
                ]
                if all(codes):
                    pairs.append(tuple(sorted(codes)))
        elif self.pivot is not None:
            pivot = language(self.pivot, "pivot")
            if pivot and pivot not in known:
                problems.append(f"pivot {pivot!r} is not in languages")
            pairs = [tuple(sorted((pivot, lang))) for lang in languages if pivot and lang and lang != pivot]
        else:
            problems.append("give either `pivot` (pairs pivot-X) or an explicit `pairs` list")
        if not pairs and not problems:
            problems.append("no language pairs: languages needs the pivot and at least one other language")
        for l1, l2 in pairs:
            try:
                pair_dir_name(l1, l2)
            except CorpusError as error:
                problems.append(f"pairs: {error}")
        names = [f"{l1}-{l2}" for l1, l2 in sorted(set(pairs))]
        for i, spec in enumerate(self.corpora):
            problems += [
                f"corpora[{i}]: {spec.name or spec.hf}.max_pairs_for names {pair!r}, not one of the pairs"
                for pair in spec.max_pairs_for
                if pair not in names
            ]
            pair = spec.hf_pair() if spec.hf is not None else None
            if pair is not None and pair not in names:
                problems.append(f"corpora[{i}]: hf {spec.hf} gives the pair {pair}, not one of the pairs {names}")
        opus_codes = {}
        for lang, codes in self.opus_codes.items():
            code = language(lang, "opus_codes")
            if code and code not in known:
                problems.append(f"opus_codes names {code!r}, which is not in languages")
            if not codes or not all(codes):
                problems.append(f"opus_codes.{lang} must be a non-empty list of OPUS codes, got {codes!r}")
            opus_codes[code] = codes
        if self.vocab.vocab_size <= 2 + len(languages):
            problems.append(
                f"vocab: vocab_size {self.vocab.vocab_size} leaves no room for pieces: it counts pad, "
                f"unk and {len(languages)} language tokens too"
            )
        if problems:
            raise ConfigError("PrepConfig", problems)
        object.__setattr__(self, "languages", languages)
        object.__setattr__(self, "pairs", names)
        object.__setattr__(self, "opus_codes", opus_codes)

    @property
    def opus_corpora(self) -> list[CorpusSpec]:
        return [spec for spec in self.corpora if spec.hf is None]

    @property
    def hf_corpora(self) -> list[CorpusSpec]:
        return [spec for spec in self.corpora if spec.hf is not None]

    def opus_codes_of(self, lang: str) -> list[str]:
        return self.opus_codes.get(lang, [lang])

    def pair_names(self) -> list[str]:
        return list(self.pairs)

    def check_pair_folders(self, corpus_root: str | Path, pair_folders: Iterable[str], source: str | Path) -> None:
        """ConfigError naming every pair folder (e.g. "en-xx") of `corpus_root` with a language that
        `languages` lacks: a stage that reads a corpus with its config (the file `source`) stops
        there, not at binarize."""
        unknown = {
            folder: sorted(set(folder.split("-")) - set(self.languages))
            for folder in sorted(set(pair_folders))
            if set(folder.split("-")) - set(self.languages)
        }
        if unknown:
            listed = ", ".join(f"{folder} ({', '.join(codes)})" for folder, codes in unknown.items())
            raise ConfigError(
                str(corpus_root),
                [
                    f"pair folder(s) {listed} hold a language that {source} does not list under `languages`; add it "
                    f"there or move the folder out of {corpus_root}"
                ],
            )
