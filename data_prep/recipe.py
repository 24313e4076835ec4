"""The recipes' data: a RecipeDataConfig (configs/data/*.yaml: demo*, multilingual*, distill) -> the
corpus, the vocabulary and the shards that `ems-demo`, the ablations (ems.apps.studies.ablation) and the
compute maps train on, in three stages (RECIPE_STAGES), each a function of (config, data dir, OUT):

    corpus    every corpus of `corpora` imported from --data-dir by its importer (data_prep.importers),
              cleaned (every evaluation sentence removed; the corpora of `alignment_check` checked for
              misaligned pairs), split into held-out and training pairs, the training pairs pivoted
              (`pivot_pairs`), capped and weighted per corpus (`corpus_mix`), into OUT/corpus/; the
              pairs of every language at every stage, with each corpus's licence, in
              OUT/corpus/languages.{json,md}
    vocab     SentencePiece on the training pairs -> OUT/vocab/
    binarize  the training and held-out pairs as token-id shards -> OUT/shards/{train,heldout}/

`ems-prep recipe --config configs/data/demo.yaml --out DIR` runs them (prepared_recipe_data: nothing
redone where DIR holds the data of this very config, PREPARED_FILE); ems.apps.demo runs the same
stages before training. Each stage prints one line per step; the lines are made by the *_summary
functions from what the step returned.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from data_prep.importers import CORPUS_SOURCES, unknown_source
from data_prep.mixing import CorpusMix, mix_corpora, rounded_up
from data_prep.opus_mt_testsets import REPORT_FILE as IMPORT_REPORT_FILE
from data_prep.opus_mt_testsets import count_lines
from data_prep.pivot import PivotPairs, add_pivot_pairs
from ems.cli import UserError
from ems.configs import ConfigError
from ems.corpus import corpus_of, list_parallel, read_parallel, write_parallel
from ems.languages import ENGLISH
from ems.text import Preprocessing

LANGUAGES_FILE = "languages.json"  # in OUT/corpus: pairs per language imported, after cleaning, held out, trained
PREPARED_FILE = "prepared.json"  # OUT/prepared.json: the data config the corpus, vocabulary and shards were made with


@dataclass
class RecipeDataConfig:
    """A recipe's data (configs/data/*.yaml; the OPUS / Hugging Face plans of `ems-prep all` are
    data_prep.config.PrepConfig, configs/prep/*.yaml)."""

    # language codes to train on, as the importers key them (canonical codes; nllb_seed and ebible add the
    # script where it is not the language's usual one: mni_Latn, ks_Deva); null: every language of the
    # corpora with at least min_pairs pairs
    languages: list[str] | None = field(default_factory=lambda: "de fr es ru zh it pt nl pl tr ja ar".split())
    # under --data-dir/<key>/, each a key of data_prep.importers.CORPUS_SOURCES: tatoeba_challenge (the
    # Tatoeba Translation Challenge release), tico19 (TICO-19), nllb_seed (OLDI Seed), ebible (eBible)
    corpora: list[str] = field(default_factory=lambda: ["tatoeba_challenge"])
    # corpora of one-to-one translations whose pairs the clean stage checks for misalignment
    # (data_prep.alignment: a non-English side repeated against different English sides)
    alignment_check: list[str] = field(default_factory=list)
    min_pairs: int = 1  # with languages: null, a language with fewer imported pairs (all corpora) is left out
    gettext_packages: list[str] = field(default_factory=list)  # also the UI strings of these wheels' catalogs
    eval_sets: list[str] = field(default_factory=lambda: ["tatoeba", "flores", "sib200", "qe", "sts"])
    heldout_per_pair: int = 500  # a language pair with fewer than twice this many pairs keeps all for training
    # "random": each language's held-out pairs drawn on their own; "pivot": the same English sentences
    # wherever languages share them (data_prep.split.split_heldout), for multi-parallel corpora (TICO-19)
    heldout_draw: str = "random"
    # draw heldout_per_pair pairs from each corpus of a language pair (with pivot: the same English
    # sentences of a multi-parallel corpus in every language), not from all its corpora together
    heldout_by_corpus: bool = False
    # {corpus: CorpusMix}: a cap per language pair (max_pairs) and a weight (repeats) of a corpus's
    # training pairs, applied after the held-out split (data_prep.mixing)
    corpus_mix: dict[str, CorpusMix] = field(default_factory=dict)
    # pairs of two non-English languages pivoted through the shared English sentences of multi-parallel
    # corpora's training pairs (data_prep.pivot; None: English pairs only)
    pivot_pairs: PivotPairs | None = None
    max_train_pairs: int | None = None  # per language pair, a seeded sample of the training split (None: all)
    vocab_size: int = 16000
    # The text SentencePiece is trained on and reads (ems.text.Preprocessing: NFKC, lowercase, and with
    # `moses` the per-language word pre-tokenizer: Moses, jieba for zh, MeCab for ja); saved with the
    # vocabulary, so encoding applies the same.
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    seed: int = 0

    def __post_init__(self) -> None:
        from data_prep.split import DRAWS

        problems = [unknown_source(name) for name in self.corpora if name not in CORPUS_SOURCES]
        for key, names in (
            ("alignment_check", self.alignment_check),
            ("corpus_mix", self.corpus_mix),
            ("pivot_pairs", self.pivot_pairs.corpora if self.pivot_pairs else []),
        ):
            outside = [name for name in names if name not in self.corpora]
            if outside:
                problems.append(f"{key} names {', '.join(map(repr, outside))}, not in corpora")
        if not self.corpora:
            problems.append("corpora must name at least one corpus")
        if self.heldout_draw not in DRAWS:
            problems.append(f"heldout_draw must be one of {', '.join(DRAWS)}, got {self.heldout_draw!r}")
        if self.min_pairs < 1:
            problems.append(f"min_pairs must be at least 1, got {self.min_pairs}")
        if self.languages is not None and not self.languages:
            problems.append("languages must list at least one language, or be null for every language")
        if self.gettext_packages and self.languages is None:
            problems.append("gettext_packages needs an explicit languages list")
        if problems:
            raise ConfigError("RecipeDataConfig", problems)


def import_corpora(cfg: RecipeDataConfig, data_dir: Path, raw: Path) -> tuple[list[str], dict]:
    """Every corpus of `cfg.corpora` under `data_dir`, imported into `raw` by its importer
    (data_prep.importers); returns (the languages kept, {"imported": {lang: pairs of all corpora},
    "by_corpus": {corpus: {lang: pairs}}, "licences": {lang: {corpus file: licence}}, "left_out":
    {lang: pairs} under min_pairs}). With `cfg.languages` null every language with at least
    `cfg.min_pairs` pairs is kept: the corpora are imported once to count, then again, each with its
    languages that are kept."""
    sources = {name: data_dir / name for name in cfg.corpora}
    missing = [str(path) for path in sources.values() if not path.is_dir()]
    if missing:
        raise FileNotFoundError(
            f"the recipe's corpora are expected at {', '.join(missing)} (see ../shared/data/PROVENANCE.md); "
            f"point --data-dir at the directory that holds {', '.join(f'{name}/' for name in cfg.corpora)}"
        )

    def run(languages: dict[str, list[str] | None]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, str]]]:
        """Import every corpus into `raw` (their file names differ), each report as
        import_report.<corpus>.json; returns ({corpus: {lang: pairs}}, {lang: {corpus file: licence}})."""
        shutil.rmtree(raw, ignore_errors=True)
        counts, licences = {}, {}
        for name, path in sources.items():
            report = CORPUS_SOURCES[name].build(path, raw, languages[name], None)
            (raw / IMPORT_REPORT_FILE).replace(raw / f"import_report.{name}.json")
            counts[name] = report["languages"]
            for corpus_file, entry in report["corpora"].items():
                for lang in entry["pairs"]:
                    licences.setdefault(lang, {})[corpus_file] = entry["licence"]
        return counts, licences

    by_corpus, licences = run(dict.fromkeys(sources, cfg.languages))
    empty = [name for name, counts in by_corpus.items() if not sum(counts.values())]
    if empty:  # a corpus the config names that gives nothing (empty or misnamed files) is no silent loss
        raise UserError(
            "no pair imported from "
            + ", ".join(f"{sources[name]} ({name}: see {raw / f'import_report.{name}.json'})" for name in empty)
            + (f" for the languages {', '.join(cfg.languages)}" if cfg.languages else "")
            + ": check its files, or drop it from corpora"
        )
    totals = Counter()
    for counts in by_corpus.values():
        totals.update(counts)
    left_out = {lang: n for lang, n in sorted(totals.items()) if cfg.languages is None and n < cfg.min_pairs}
    if left_out:
        by_corpus, licences = run({name: sorted(set(counts) - set(left_out)) for name, counts in by_corpus.items()})
        totals = Counter()
        for counts in by_corpus.values():
            totals.update(counts)
    imported = {"imported": dict(sorted(totals.items())), "by_corpus": by_corpus, "licences": licences}
    return sorted(totals), {**imported, "left_out": left_out}


def build_corpus(cfg: RecipeDataConfig, data_dir: Path, out: Path) -> dict:
    """The corpus stage: import, clean (evaluation sentences removed) and split the training corpus
    into out/corpus/{train,heldout}, then pivot, mix and cap its training pairs as `cfg` says; writes
    the pairs of each language at every stage to out/corpus/languages.{json,md} (LANGUAGES_FILE),
    prints one line per step and returns a summary (corpus_summary)."""
    from data_prep.split import cap_pairs, split_heldout

    corpus = out / "corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    languages, imported = import_corpora(cfg, data_dir, corpus / "raw")
    _say(import_summary(cfg, languages, imported))
    if cfg.gettext_packages:
        gettext = add_gettext_pairs(cfg, corpus / "raw")
        _say(f"added gettext pairs: {gettext}")
        for lang in gettext:
            imported["licences"].setdefault(lang, {})["gettext"] = f"each catalog's ({', '.join(cfg.gettext_packages)})"
    cleaned, eval_counts = clean_recipe_corpus(cfg, data_dir, corpus)
    _say(clean_summary(cfg, cleaned, eval_counts))
    if cfg.alignment_check:
        _say(misaligned_summary(cleaned, cfg.alignment_check))
    split = split_heldout(
        corpus / "clean",
        corpus / "train",
        corpus / "heldout",
        cfg.heldout_per_pair,
        cfg.seed,
        cfg.heldout_draw,
        by_corpus=cfg.heldout_by_corpus,
    )
    _say(split_summary(cfg, split))
    if cfg.pivot_pairs is not None:
        # From the whole training split, before the corpus_mix caps: they draw each language's pairs of a
        # corpus on its own (300 of Seed's 6k sentences, of a Bible's 31k verses), so after them an English
        # sentence would have translations in two languages by chance alone. The split already left out
        # every pair that shares a side with a held-out pair, so no English sentence pivoted is held out.
        _say(pivot_summary(cfg.pivot_pairs, add_pivot_pairs(corpus / "train", cfg.pivot_pairs, cfg.seed)))
    if cfg.corpus_mix:
        _say(mix_summary(cfg.corpus_mix, mix_corpora(corpus / "train", cfg.corpus_mix, cfg.seed)))
    if cfg.max_train_pairs is not None:
        _say(cap_summary(cfg.max_train_pairs, cap_pairs(corpus / "train", cfg.max_train_pairs, cfg.seed)))
    table = languages_table(languages, imported, kept_by_language(cleaned), split, corpus / "train")
    (corpus / LANGUAGES_FILE).write_text(
        json.dumps({"languages": table, "left_out": imported["left_out"], "by_corpus": imported["by_corpus"]}, indent=2)
        + "\n"
    )
    (corpus / LANGUAGES_FILE).with_suffix(".md").write_text(languages_markdown(table, imported["left_out"], cfg))
    return corpus_summary(languages, imported, cleaned, split, table)


def clean_recipe_corpus(cfg: RecipeDataConfig, data_dir: Path, corpus: Path) -> tuple[dict, dict]:
    """corpus/raw cleaned into corpus/clean with every sentence of cfg.eval_sets (under `data_dir`)
    removed and the corpora of cfg.alignment_check checked; returns (the clean report, {evaluation
    set: its counts})."""
    from data_prep.clean import CleanSettings, clean_corpus, load_eval_sentences

    settings = CleanSettings(eval_sets=tuple(cfg.eval_sets), alignment_check=tuple(cfg.alignment_check))
    eval_hashes, eval_counts = load_eval_sentences(data_dir, settings.eval_sets, settings.lowercase)
    return clean_corpus(corpus / "raw", corpus / "clean", settings, eval_hashes, eval_counts), eval_counts


def dropped_pairs(cleaned: dict) -> Counter:
    """{reason: pairs the clean stage dropped for it} of a clean report."""
    dropped = Counter()
    for pair in cleaned["pairs"]:
        for entry in pair["files"]:
            dropped.update(entry.get("dropped", {}))
    return dropped


def kept_by_language(cleaned: dict) -> Counter:
    """{non-English language: pairs the clean stage kept} of a clean report."""
    kept = Counter()
    for pair in cleaned["pairs"]:
        for entry in pair["files"]:
            kept[_non_english(pair["pair"])] += entry.get("kept", 0)
    return kept


def languages_table(languages: list[str], imported: dict, kept: Counter, split: dict, train: Path) -> dict[str, dict]:
    """{language: its pairs imported, after cleaning, held out and trained on (by corpus, with English
    and with other languages), and its corpora's licences}: the rows of LANGUAGES_FILE."""
    by_language = {_non_english(entry["pair"]): entry for entry in split["pairs"]}
    train_by_corpus, non_english_by_corpus = pairs_by_corpus(train)
    return {
        lang: {
            "imported": imported["imported"].get(lang, 0),
            "after_clean": kept.get(lang, 0),
            "heldout": by_language.get(lang, {}).get("heldout", 0),
            "train": sum(train_by_corpus.get(lang, {}).values()),
            "train_by_corpus": train_by_corpus.get(lang, {}),
            "train_non_english": sum(non_english_by_corpus.get(lang, {}).values()),
            "train_non_english_by_corpus": non_english_by_corpus.get(lang, {}),
            "licences": imported["licences"].get(lang, {}),
        }
        for lang in languages
    }


def corpus_summary(languages: list[str], imported: dict, cleaned: dict, split: dict, table: dict) -> dict:
    """What build_corpus returns (and PREPARED_FILE records): the languages, the pairs imported, left
    out, dropped by the clean stage, held out and trained on."""
    dropped = dropped_pairs(cleaned)
    return {
        "languages": languages,
        "imported": imported["imported"],
        "left_out": imported["left_out"],
        "removed_in_eval_set": dropped["in_eval_set"],
        "dropped": dict(dropped),
        "heldout_pairs": sum(entry["heldout"] for entry in split["pairs"]),
        "train_pairs": sum(row["train"] for row in table.values()),
        "non_english_pairs": sum(non_english_totals(table).values()),
        "removed_overlapping_heldout": sum(entry["removed_overlapping_heldout"] for entry in split["pairs"]),
    }


def _say(text: str) -> None:
    print(text, flush=True)


def import_summary(cfg: RecipeDataConfig, languages: list[str], imported: dict) -> str:
    """The pairs import_corpora imported per language, and the languages it left out (a second line)."""
    lines = [
        f"imported {sum(imported['imported'].values())} pairs in {len(languages)} languages from "
        f"{', '.join(cfg.corpora)}: " + ", ".join(f"{lang} {n}" for lang, n in imported["imported"].items())
    ]
    if imported["left_out"]:
        lines.append(
            f"left out {len(imported['left_out'])} languages with fewer than {cfg.min_pairs} pairs: "
            + ", ".join(f"{lang} {n}" for lang, n in imported["left_out"].items())
        )
    return "\n".join(lines)


def clean_summary(cfg: RecipeDataConfig, cleaned: dict, eval_counts: dict) -> str:
    """One line: the pairs the clean stage kept, and those it removed by reason."""
    dropped = dropped_pairs(cleaned)
    named = ("in_eval_set", "duplicate", "misaligned")
    return (
        f"clean: kept {sum(kept_by_language(cleaned).values())} pairs; removed {dropped['in_eval_set']} that share a "
        f"sentence with an evaluation set ({', '.join(cfg.eval_sets)}: "
        f"{sum(c['sentences'] for c in eval_counts.values())} sentences), {dropped['duplicate']} duplicates, "
        f"{dropped['misaligned']} misaligned, {sum(dropped.values()) - sum(dropped[reason] for reason in named)} by "
        "the other filters (corpus/clean/clean_report.json)"
    )


def split_summary(cfg: RecipeDataConfig, split: dict) -> str:
    """One line: the held-out and training pairs of data_prep.split.split_heldout's report."""
    heldout = sum(entry["heldout"] for entry in split["pairs"])
    removed = sum(entry["removed_overlapping_heldout"] for entry in split["pairs"])
    return (
        f"split: {heldout} held-out pairs (up to {cfg.heldout_per_pair} per language pair"
        f"{' and corpus' if cfg.heldout_by_corpus else ''}; none from the {len(split['too_small_for_heldout'])} "
        f"with fewer than {2 * cfg.heldout_per_pair}), {sum(entry['train'] for entry in split['pairs'])} training "
        f"pairs; {removed} training pairs that shared a side with a held-out pair removed"
    )


def pivot_summary(settings: PivotPairs, pivoted: dict[str, dict]) -> str:
    """One line: the non-English pairs data_prep.pivot.add_pivot_pairs wrote, per corpus."""
    return (
        f"pivot: non-English pairs through the English of {', '.join(pivoted)} (up to "
        f"{settings.per_sentence} per English sentence, at most {settings.max_pairs or 'all'} "
        "a language pair): "
        + "; ".join(
            f"{name} {entry['written']} pairs in {entry['language_pairs']} language pairs "
            f"({entry['drawn']} drawn from {entry['english']} English sentences in 2 or more languages)"
            for name, entry in pivoted.items()
        )
    )


def cap_summary(max_pairs: int, capped: dict[str, dict]) -> str:
    """One line: the training pairs data_prep.split.cap_pairs kept per language pair."""
    return f"cap: at most {max_pairs} training pairs per language pair: " + ", ".join(
        f"{name} {entry['kept']} of {entry['pairs']}" for name, entry in capped.items()
    )


def misaligned_summary(cleaned: dict, corpora: list[str]) -> str:
    """One line: the pairs the alignment check removed, per file that lost any (most first), with the
    stretches they form (data_prep.alignment)."""
    checked = [entry for pair in cleaned["pairs"] for entry in pair["files"] if "misaligned_stretches" in entry]
    losing = [entry for entry in checked if entry["dropped"].get("misaligned")]
    files = []
    for entry in sorted(losing, key=lambda entry: -entry["dropped"]["misaligned"]):
        stretches = ", ".join(f"{first}-{last}" for first, last, _ in entry["misaligned_stretches"])
        files.append(
            f"{entry['name']} {entry['dropped']['misaligned']} of {entry['read']}"
            + (f" (stretches at lines {stretches})" if stretches else "")
        )
    total = sum(entry["dropped"]["misaligned"] for entry in losing)
    return f"alignment check ({', '.join(corpora)}, {len(checked)} files): removed {total} misaligned pairs: " + (
        ", ".join(files) or "none"
    )


def pairs_by_corpus(root: Path) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """({non-English language: {corpus (ems.corpus.corpus_of): its pairs with English}}, {non-English
    language: {corpus: its pairs with another non-English language}}) of the corpus at `root`; a pair
    of two non-English languages counts for both."""
    english: dict[str, Counter] = {}
    other: dict[str, Counter] = {}
    for files in list_parallel(root):
        pairs = count_lines(files.path_l1)
        if ENGLISH in (files.l1, files.l2):
            language = _non_english(f"{files.l1}-{files.l2}")
            english.setdefault(language, Counter())[corpus_of(files.name)] += pairs
        else:
            for language in (files.l1, files.l2):
                other.setdefault(language, Counter())[corpus_of(files.name)] += pairs
    english_by_corpus, other_by_corpus = (
        {lang: dict(sorted(corpora.items())) for lang, corpora in counts.items()} for counts in (english, other)
    )
    return english_by_corpus, other_by_corpus


def languages_markdown(table: dict[str, dict], left_out: dict[str, int], cfg: RecipeDataConfig) -> str:
    """The pairs of each language at every stage as a markdown table, most training pairs first, with
    the corpora its pairs come from and their licences."""
    lines = [
        f"Pairs per language ({', '.join(cfg.corpora)}): imported, after cleaning (evaluation sentences, "
        f"duplicates and the other filters removed), held out (up to {cfg.heldout_per_pair}"
        f"{' per corpus' if cfg.heldout_by_corpus else ''}), trained on; the "
        "corpora of its pairs, each with its licence.",
        "",
        "| language | imported | after cleaning | held out | training | corpora (licence) |",
        "|:--|--:|--:|--:|--:|:--|",
    ]
    for lang, row in sorted(table.items(), key=lambda item: (-item[1]["train"], item[0])):
        corpora = "; ".join(
            f"{corpus} ({licence})"
            for corpus, licence in sorted({(corpus_of(name), licence) for name, licence in row["licences"].items()})
        )
        lines.append(
            f"| {lang} | {row['imported']} | {row['after_clean']} | {row['heldout']} | {row['train']} | {corpora} |"
        )
    totals = {key: sum(row[key] for row in table.values()) for key in ("imported", "after_clean", "heldout", "train")}
    lines.append(
        f"| **{len(table)} languages** | **{totals['imported']}** | **{totals['after_clean']}** | "
        f"**{totals['heldout']}** | **{totals['train']}** |"
    )
    pivoted = non_english_totals(table)
    if pivoted:
        lines += [
            "",
            f"Besides, {sum(pivoted.values())} pairs of two non-English languages (data_prep.pivot; each language's "
            "in languages.json, `train_non_english`): " + ", ".join(f"{name} {n}" for name, n in pivoted.items()),
        ]
    if left_out:
        lines += [
            "",
            f"Left out (fewer than {cfg.min_pairs} pairs): " + ", ".join(f"{k} {v}" for k, v in left_out.items()),
        ]
    return "\n".join(lines) + "\n"


def non_english_totals(table: dict[str, dict]) -> dict[str, int]:
    """{corpus: pairs of two non-English languages} of a languages.json table, whose rows count each
    such pair for both its languages."""
    totals: Counter = Counter()
    for row in table.values():
        totals.update(row["train_non_english_by_corpus"])
    return {name: n // 2 for name, n in sorted(totals.items())}


def mix_summary(mix: dict[str, CorpusMix], report: dict[str, dict[str, dict[str, int]]]) -> str:
    """One line of what `mix` ({corpus: CorpusMix}) did (`report`, data_prep.mixing.mix_corpora's): each
    corpus's cap and weight and the pairs it had and wrote, over how many language pairs (those where a
    weight rounded up to one pair counted), then each language whose pairs of a corpus changed."""
    totals = []
    for name, settings in mix.items():
        entries = [corpora[name] for corpora in report.values() if name in corpora]
        produced = (
            f"{sum(e['pairs'] for e in entries):,} -> {sum(e['written'] for e in entries):,} pairs in "
            f"{len(entries)} language pair{'' if len(entries) == 1 else 's'}"
            if entries
            else "none of its pairs in the training split"
        )
        if ones := sum(rounded_up(settings, e) for e in entries):
            produced += f" ({ones} of them given 1 pair, its share rounded up)"
        totals.append(
            f"{name} (at most {settings.max_pairs or 'all'} pairs a language pair, weight {settings.weight:g}): "
            f"{produced}"
        )
    changed = [
        f"{_non_english(pair)} {name} {counts['pairs']} -> {counts['written']}"
        for pair, corpora in report.items()
        for name, counts in corpora.items()
        if counts["written"] != counts["pairs"]
    ]
    return "mix: " + "; ".join(totals) + (": " + ", ".join(changed) if changed else "")


def _non_english(pair: str) -> str:
    """The non-English code of a language pair's name (`de-en`, `en-fr`)."""
    l1, l2 = pair.split("-", 1)
    return l2 if l1 == ENGLISH else l1


def add_gettext_pairs(cfg: RecipeDataConfig, raw: Path) -> dict[str, int]:
    """The gettext UI strings of cfg.gettext_packages for the recipe's languages, written to
    raw/<pair>/gettext.* (its own train/held-out split is undone: the recipe splits after cleaning)."""
    from data_prep.gettext_corpus import build_gettext_corpus

    scratch = raw.parent / "gettext"
    build_gettext_corpus(
        scratch, packages=cfg.gettext_packages, languages=cfg.languages, min_pairs=100, heldout_size=1, overwrite=True
    )
    counts = {}
    for files in list_parallel(scratch / "train"):
        held = scratch / "heldout" / files.path_l1.parent.name
        pairs = list(read_parallel(files.path_l1, files.path_l2))
        pairs += list(read_parallel(held / files.path_l1.name, held / files.path_l2.name))
        write_parallel(raw, "gettext", files.l1, files.l2, pairs)
        counts[files.l2 if files.l1 == "en" else files.l1] = len(pairs)
    shutil.rmtree(scratch)
    return counts


def train_recipe_vocab(cfg: RecipeDataConfig, data_dir: Path, out: Path) -> None:
    """The vocab stage: SentencePiece (cfg.vocab_size pieces, cfg.preprocessing) on out/corpus/train
    -> out/vocab."""
    from data_prep.vocab import train_vocab

    _say(f"SentencePiece (unigram, {cfg.vocab_size} pieces with the <2xx> tokens) on the training sentences ...")
    tokenizer = train_vocab(
        out / "corpus" / "train",
        out / "vocab",
        vocab_size=cfg.vocab_size,
        preprocessing=cfg.preprocessing,
        seed=cfg.seed,
    )
    _say(f"{tokenizer.vocab_size} pieces, {len(tokenizer.languages)} languages: {out / 'vocab'}")


def binarize_recipe(cfg: RecipeDataConfig, data_dir: Path, out: Path) -> None:
    """The binarize stage: out/corpus/{train,heldout} -> out/shards/{train,heldout} with out/vocab."""
    from data_prep.binarize import binarize

    index = binarize(out / "corpus" / "train", out / "vocab", out / "shards" / "train", workers=2)
    binarize(out / "corpus" / "heldout", out / "vocab", out / "shards" / "heldout")
    _say(f"{index['n_pairs']} training pairs, {index['n_tokens']} tokens")


# (name, what runs it), in order: each a function of (config, --data-dir, OUT)
RECIPE_STAGES = (("corpus", build_corpus), ("vocab", train_recipe_vocab), ("binarize", binarize_recipe))


def prepare_recipe_data(
    cfg: RecipeDataConfig, data_dir: Path, out: Path, start: Callable[[str], None] = lambda name: None
) -> dict:
    """Every stage of RECIPE_STAGES into `out` (corpus/, vocab/, shards/{train,heldout}), `start(name)`
    before each; records the config, `data_dir` and the corpus summary in out/PREPARED_FILE and
    returns that summary (build_corpus's)."""
    record = out / PREPARED_FILE
    record.unlink(missing_ok=True)
    results = {}
    for name, stage in RECIPE_STAGES:
        start(name)
        results[name] = stage(cfg, data_dir, out)
    record.write_text(json.dumps({**_prepared_with(cfg, data_dir), "corpus": results["corpus"]}, indent=2) + "\n")
    return results["corpus"]


def prepared_recipe_data(
    cfg: RecipeDataConfig, data_dir: Path, out: Path, start: Callable[[str], None] = lambda name: None
) -> dict:
    """prepare_recipe_data, unless `out` already holds the data of this very config and data
    directory (PREPARED_FILE): then the recorded corpus summary, and nothing is redone."""
    record = out / PREPARED_FILE
    wanted = _prepared_with(cfg, data_dir)
    if record.is_file() and (out / "shards" / "heldout" / "index.json").is_file():
        prepared = json.loads(record.read_text())
        if {key: prepared.get(key) for key in wanted} == wanted:
            _say(f"data prepared before with this config: {out} (corpus, vocab, shards)")
            return prepared["corpus"]
    return prepare_recipe_data(cfg, data_dir, out, start)


def _prepared_with(cfg: RecipeDataConfig, data_dir: Path) -> dict:
    return {"data_config": asdict(cfg), "data_dir": str(Path(data_dir).resolve())}


def trained_languages(prepared: Path) -> list[str]:
    """The non-English languages of the training split that prepare_recipe_data wrote under `prepared`."""
    from data_prep.vocab import corpus_languages

    return [lang for lang in corpus_languages(prepared / "corpus" / "train") if lang != ENGLISH]
