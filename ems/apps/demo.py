"""The whole system, offline, on real human translations of real sentences:

    Tatoeba Translation Challenge pairs (12 languages, from --data-dir) -> clean (every sentence of
    every evaluation set removed) -> held-out split -> SentencePiece vocab -> shards -> EMS training
    through DeepSpeed (a fixed number of steps, with learning curves) -> Tatoeba, FLORES-200 and
    held-out retrieval of the untrained and the trained model, side by side.

    python -m ems.apps.demo [--out runs/demo] [--data-dir ../shared/data] [--set max_steps=300 ...]

The schedule is a number of steps, so the same machine type gives the same model whatever its
load; `--set time_budget_minutes=8` fits it to a wall-clock budget instead.

    python -m ems.apps.demo --recipe multilingual [--out runs/multilingual] [--set ...]

trains on every language of the Tatoeba Translation Challenge and TICO-19 (configs/data/multilingual.yaml,
configs/train/multilingual.yaml), resumes where it stopped (the data are kept when prepared with the
same config, training goes on from its checkpoints), and scores the model on every language of
Tatoeba, FLORES-200 (P@1 and xSIM) and SIB-200, those it never saw zero-shot, by training-data group.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ems.cli import UserError, add_debug_option, run_main
from ems.configs import ConfigError, load_config
from ems.languages import ENGLISH
from ems.text import Preprocessing
from ems.training.config import REPO_ROOT, TrainConfig
from ems.training.stopping import PREEMPTED_EXIT_CODE

DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEMO_SUITE = REPO_ROOT / "configs" / "eval" / "suite_demo.yaml"
MULTILINGUAL_SUITE = REPO_ROOT / "configs" / "eval" / "suite_multilingual.yaml"
PREPARED_FILE = "prepared.json"  # OUT/prepared.json: the data config the corpus, vocabulary and shards were made with
REPORT_FILE = "demo_report.md"
STAGES_FILE = "demo_stages.json"  # {"seconds": {stage: wall seconds}, "steps": training steps}
CHART_FILE = "demo_chart.png"
LANGUAGES_FILE = "languages.json"  # in OUT/corpus: pairs per language imported, after cleaning, held out, trained


# The corpora the demo's data stage reads from --data-dir (OPUS-MT-testsets layouts), and their importers.
CORPUS_IMPORTERS = {"tatoeba_challenge": "build_tatoeba_challenge_corpus", "tico19": "build_tico19_corpus"}


@dataclass
class DemoDataConfig:
    # canonical codes to train on; null: every language of the corpora with at least min_pairs pairs
    languages: list[str] | None = field(default_factory=lambda: "de fr es ru zh it pt nl pl tr ja ar".split())
    # under --data-dir: tatoeba_challenge (the Tatoeba Translation Challenge release), tico19 (TICO-19)
    corpora: list[str] = field(default_factory=lambda: ["tatoeba_challenge"])
    min_pairs: int = 1  # with languages: null, a language with fewer imported pairs (all corpora) is left out
    gettext_packages: list[str] = field(default_factory=list)  # also the UI strings of these wheels' catalogs
    eval_sets: list[str] = field(default_factory=lambda: ["tatoeba", "flores", "sib200", "qe", "sts"])
    heldout_per_pair: int = 500  # a language pair with fewer than twice this many pairs keeps all for training
    # "random": each language's held-out pairs drawn on their own; "pivot": the same English sentences
    # wherever languages share them (data_prep.split.split_heldout), for multi-parallel corpora (TICO-19)
    heldout_draw: str = "random"
    max_train_pairs: int | None = None  # per language pair, a seeded sample of the training split (None: all)
    vocab_size: int = 16000
    # The text SentencePiece is trained on and reads (ems.text.Preprocessing: NFKC, lowercase, and with
    # `moses` the per-language word pre-tokenizer: Moses, jieba for zh, MeCab for ja); saved with the
    # vocabulary, so encoding applies the same.
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    seed: int = 0

    def __post_init__(self) -> None:
        from data_prep.split import DRAWS

        problems = [f"unknown corpus {name!r}; known: {', '.join(CORPUS_IMPORTERS)}" for name in self.corpora]
        problems = [p for p, name in zip(problems, self.corpora) if name not in CORPUS_IMPORTERS]
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
            raise ConfigError("DemoDataConfig", problems)


class Stages:
    """Prints a header per stage and keeps its wall time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._current: tuple[str, float] | None = None

    def start(self, name: str) -> None:
        self.stop()
        self._current = name, time.time()
        print(f"\n== {name} ==", flush=True)

    def stop(self) -> None:
        if self._current is not None:
            name, started = self._current
            self.seconds[name] = round(time.time() - started, 1)
            self._current = None


def import_corpora(cfg: DemoDataConfig, data_dir: Path, raw: Path) -> tuple[list[str], dict]:
    """Every corpus of `cfg.corpora` under `data_dir`, imported into `raw` (one file per corpus
    folder, data_prep.opus_mt_testsets); returns (the languages kept, {"imported": {lang: pairs of
    all corpora}, "by_corpus": {corpus: {lang: pairs}}, "left_out": {lang: pairs} under min_pairs}).
    With `cfg.languages` null every language with at least `cfg.min_pairs` pairs is kept: the
    corpora are imported once to count, then again with that list."""
    from data_prep import opus_mt_testsets

    sources = {name: data_dir / name for name in cfg.corpora}
    missing = [str(path) for path in sources.values() if not path.is_dir()]
    if missing:
        raise FileNotFoundError(
            f"the demo's corpora are expected at {', '.join(missing)} (see ../shared/data/PROVENANCE.md); "
            f"point --data-dir at the directory that holds {', '.join(f'{name}/' for name in cfg.corpora)}"
        )

    def run(languages: list[str] | None) -> dict[str, dict[str, int]]:
        """Import every corpus into `raw` (their file names differ), each report as import_report.<corpus>.json."""
        shutil.rmtree(raw, ignore_errors=True)
        counts = {}
        for name, path in sources.items():
            counts[name] = getattr(opus_mt_testsets, CORPUS_IMPORTERS[name])(path, raw, languages)["languages"]
            (raw / opus_mt_testsets.REPORT_FILE).replace(raw / f"import_report.{name}.json")
        return counts

    by_corpus = run(cfg.languages)
    totals = Counter()
    for counts in by_corpus.values():
        totals.update(counts)
    left_out = {lang: n for lang, n in sorted(totals.items()) if cfg.languages is None and n < cfg.min_pairs}
    if left_out:
        by_corpus = run(sorted(set(totals) - set(left_out)))
        totals = Counter()
        for counts in by_corpus.values():
            totals.update(counts)
    return sorted(totals), {"imported": dict(sorted(totals.items())), "by_corpus": by_corpus, "left_out": left_out}


def build_corpus(cfg: DemoDataConfig, data_dir: Path, out: Path) -> dict:
    """Import, clean (evaluation sentences removed) and split the training corpus into
    out/corpus/{train,heldout}; returns a summary, writes the pairs of each language at every
    stage to out/corpus/languages.json (LANGUAGES_FILE) and prints one line per step."""
    from data_prep.clean import CleanSettings, clean_corpus, load_eval_sentences
    from data_prep.split import cap_pairs, split_heldout

    corpus = out / "corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    languages, imported = import_corpora(cfg, data_dir, corpus / "raw")
    print(
        f"imported {sum(imported['imported'].values())} pairs in {len(languages)} languages from "
        f"{', '.join(cfg.corpora)}: " + ", ".join(f"{lang} {n}" for lang, n in imported["imported"].items()),
        flush=True,
    )
    if imported["left_out"]:
        print(
            f"left out {len(imported['left_out'])} languages with fewer than {cfg.min_pairs} pairs: "
            + ", ".join(f"{lang} {n}" for lang, n in imported["left_out"].items()),
            flush=True,
        )
    if cfg.gettext_packages:
        print(f"added gettext pairs: {add_gettext_pairs(cfg, corpus / 'raw')}", flush=True)
    settings = CleanSettings(eval_sets=tuple(cfg.eval_sets))
    eval_hashes, eval_counts = load_eval_sentences(data_dir, settings.eval_sets, settings.lowercase)
    cleaned = clean_corpus(corpus / "raw", corpus / "clean", settings, eval_hashes, eval_counts)
    dropped, kept_by_language = Counter(), Counter()
    for pair in cleaned["pairs"]:
        for entry in pair["files"]:
            dropped.update(entry.get("dropped", {}))
            kept_by_language[_non_english(pair["pair"])] += entry.get("kept", 0)
    kept = sum(kept_by_language.values())
    print(
        f"clean: kept {kept} pairs; removed {dropped.get('in_eval_set', 0)} that share a sentence with an evaluation "
        f"set ({', '.join(cfg.eval_sets)}: {sum(c['sentences'] for c in eval_counts.values())} sentences), "
        f"{dropped.get('duplicate', 0)} duplicates, "
        f"{sum(dropped.values()) - dropped.get('in_eval_set', 0) - dropped.get('duplicate', 0)} "
        f"by the other filters (corpus/clean/clean_report.json)",
        flush=True,
    )
    split = split_heldout(
        corpus / "clean", corpus / "train", corpus / "heldout", cfg.heldout_per_pair, cfg.seed, cfg.heldout_draw
    )
    heldout = sum(entry["heldout"] for entry in split["pairs"])
    train_pairs = sum(entry["train"] for entry in split["pairs"])
    removed = sum(entry["removed_overlapping_heldout"] for entry in split["pairs"])
    print(
        f"split: {heldout} held-out pairs (up to {cfg.heldout_per_pair} per language pair; none from the "
        f"{len(split['too_small_for_heldout'])} with fewer than {2 * cfg.heldout_per_pair}), {train_pairs} training "
        f"pairs; {removed} training pairs that shared a side with a held-out pair removed",
        flush=True,
    )
    by_language = {_non_english(entry["pair"]): entry for entry in split["pairs"]}
    train_by_language = {lang: by_language.get(lang, {}).get("train", 0) for lang in languages}
    if cfg.max_train_pairs is not None:
        capped = cap_pairs(corpus / "train", cfg.max_train_pairs, cfg.seed)
        train_pairs = sum(entry["kept"] for entry in capped.values())
        train_by_language.update({_non_english(name): entry["kept"] for name, entry in capped.items()})
        print(
            f"cap: at most {cfg.max_train_pairs} training pairs per language pair: "
            + ", ".join(f"{name} {entry['kept']} of {entry['pairs']}" for name, entry in capped.items()),
            flush=True,
        )
    table = {
        lang: {
            "imported": imported["imported"].get(lang, 0),
            "after_clean": kept_by_language.get(lang, 0),
            "heldout": by_language.get(lang, {}).get("heldout", 0),
            "train": train_by_language[lang],
        }
        for lang in languages
    }
    (corpus / LANGUAGES_FILE).write_text(
        json.dumps({"languages": table, "left_out": imported["left_out"], "by_corpus": imported["by_corpus"]}, indent=2)
        + "\n"
    )
    (corpus / LANGUAGES_FILE).with_suffix(".md").write_text(languages_markdown(table, imported["left_out"], cfg))
    return {
        "languages": languages,
        "imported": imported["imported"],
        "left_out": imported["left_out"],
        "removed_in_eval_set": dropped.get("in_eval_set", 0),
        "dropped": dict(dropped),
        "heldout_pairs": heldout,
        "train_pairs": train_pairs,
        "removed_overlapping_heldout": removed,
    }


def languages_markdown(table: dict[str, dict[str, int]], left_out: dict[str, int], cfg: DemoDataConfig) -> str:
    """The pairs of each language at every stage as a markdown table, most training pairs first."""
    lines = [
        f"Pairs per language ({', '.join(cfg.corpora)}): imported, after cleaning (evaluation sentences, "
        f"duplicates and the other filters removed), held out (up to {cfg.heldout_per_pair}), trained on.",
        "",
        "| language | imported | after cleaning | held out | training |",
        "|:--|--:|--:|--:|--:|",
    ]
    for lang, row in sorted(table.items(), key=lambda item: (-item[1]["train"], item[0])):
        lines.append(f"| {lang} | {row['imported']} | {row['after_clean']} | {row['heldout']} | {row['train']} |")
    totals = {key: sum(row[key] for row in table.values()) for key in ("imported", "after_clean", "heldout", "train")}
    lines.append(
        f"| **{len(table)} languages** | **{totals['imported']}** | **{totals['after_clean']}** | "
        f"**{totals['heldout']}** | **{totals['train']}** |"
    )
    if left_out:
        lines += [
            "",
            f"Left out (fewer than {cfg.min_pairs} pairs): " + ", ".join(f"{k} {v}" for k, v in left_out.items()),
        ]
    return "\n".join(lines) + "\n"


def _non_english(pair: str) -> str:
    """The non-English code of a language pair's name (`de-en`, `en-fr`)."""
    l1, l2 = pair.split("-", 1)
    return l2 if l1 == ENGLISH else l1


def add_gettext_pairs(cfg: DemoDataConfig, raw: Path) -> dict[str, int]:
    """The gettext UI strings of cfg.gettext_packages for the demo's languages, written to
    raw/<pair>/gettext.* (its own train/held-out split is undone: the demo splits after cleaning)."""
    from data_prep.gettext_corpus import build_gettext_corpus
    from ems.corpus import list_parallel, read_parallel, write_parallel

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


def comparison_table(before, after, task: str) -> str:
    """Markdown: mean P@1 per language, untrained vs trained (eval.results.TaskResult), for one task."""
    if not before.ran or not after.ran:
        return f"### {task}\n\nNot run: {before.error or after.error}\n"
    before, after = before.to_dict(), after.to_dict()
    lines = [
        f"### {task}: mean P@1 (%) of xx→en and en→xx",
        "",
        "| lang | n | untrained | trained |",
        "|:--|--:|--:|--:|",
    ]
    for lang, row in after["languages"].items():
        lines.append(f"| {lang} | {row['n']} | {before['languages'][lang]['mean']:.1f} | {row['mean']:.1f} |")
    b, a = before["average"], after["average"]
    lines.append(
        f"| **average** ({a['n_languages']} languages) | {a['n']} | **{b['mean']:.1f}** | **{a['mean']:.1f}** |"
    )
    skipped = {reason: codes for reason, codes in after.get("skipped", {}).items() if codes}
    if skipped:
        lines += ["", "skipped: " + "; ".join(f"{reason}: {', '.join(codes)}" for reason, codes in skipped.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="default: runs/<recipe>")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("EMS_DATA_DIR", DEFAULT_DATA_DIR)),
        help="directory with tatoeba_challenge/, tatoeba/, flores200/, ... (default: $EMS_DATA_DIR or ../shared/data)",
    )
    parser.add_argument(
        "--recipe",
        choices=RECIPES,
        default="demo",
        help="demo: 12 languages, from scratch each time, untrained vs trained; multilingual: every language of "
        "the Tatoeba Challenge and TICO-19, resumable, evaluated on every language by training-data group",
    )
    parser.add_argument("--data-config", default=None, help="default: the recipe's (configs/data/<recipe>.yaml)")
    parser.add_argument("--train-config", default=None, help="default: the recipe's (configs/train/<recipe>.yaml)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override training config keys")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    out = Path("runs") / args.recipe if args.out is None else args.out
    data_config = args.data_config or str(REPO_ROOT / "configs" / "data" / f"{args.recipe}.yaml")
    train_config = args.train_config or str(REPO_ROOT / "configs" / "train" / f"{args.recipe}.yaml")
    data_cfg = load_config(DemoDataConfig, data_config)
    summary = RECIPES[args.recipe](data_cfg, args.data_dir, out, train_config, args.set)
    print(summary)
    return 0


def prepare_data(data_cfg: DemoDataConfig, data_dir: Path, out: Path, stages: Stages) -> dict:
    """Corpus, vocabulary and shards under `out` (corpus/, vocab/, shards/{train,heldout}); returns
    the corpus summary of `build_corpus`."""
    from data_prep.binarize import binarize
    from data_prep.vocab import train_vocab

    stages.start("corpus")
    corpus = build_corpus(data_cfg, data_dir, out)

    stages.start("vocab")
    print(
        f"SentencePiece (unigram, {data_cfg.vocab_size} pieces with the <2xx> tokens) on the training sentences ...",
        flush=True,
    )
    tokenizer = train_vocab(
        out / "corpus" / "train",
        out / "vocab",
        vocab_size=data_cfg.vocab_size,
        preprocessing=data_cfg.preprocessing,
        seed=data_cfg.seed,
    )
    print(f"{tokenizer.vocab_size} pieces, {len(tokenizer.languages)} languages: {out / 'vocab'}", flush=True)

    stages.start("binarize")
    index = binarize(out / "corpus" / "train", out / "vocab", out / "shards" / "train", workers=2)
    binarize(out / "corpus" / "heldout", out / "vocab", out / "shards" / "heldout")
    print(f"{index['n_pairs']} training pairs, {index['n_tokens']} tokens", flush=True)
    stages.stop()
    return corpus


def trained_languages(prepared: Path) -> list[str]:
    """The non-English languages of the training split that `prepare_data` wrote under `prepared`."""
    from data_prep.vocab import corpus_languages

    return [lang for lang in corpus_languages(prepared / "corpus" / "train") if lang != ENGLISH]


def data_paths(prepared: Path, data_dir: Path) -> dict[str, str]:
    """TrainConfig keys that point a run at the data of `prepare_data`."""
    return {
        "data": str(prepared / "shards" / "train"),
        "vocab": str(prepared / "vocab"),
        "valid_data": str(prepared / "shards" / "heldout"),
        "probe_data": str(data_dir),
    }


class DemoStopped(UserError):
    """Training was stopped (signal or STOP file): nothing to evaluate; exit as the trainer does."""

    exit_code = PREEMPTED_EXIT_CODE


def run_demo(data_cfg: DemoDataConfig, data_dir: Path, out: Path, train_config: str, overrides: list[str]) -> str:
    """Every stage (`overrides`: `--set` items of the TrainConfig); returns the report (also written
    to out/demo_report.md)."""
    from ems.encoder import load
    from ems.training.train import train
    from eval.chart import write_comparison_chart
    from eval.curves import CURVES_FILE, plot_curves, read_metrics
    from eval.run_all import run_all

    stages = Stages()
    corpus = prepare_data(data_cfg, data_dir, out, stages)

    stages.start("train")
    paths = {**data_paths(out, data_dir), "out": str(out / "run")}
    train_cfg = load_config(TrainConfig, train_config, overrides, paths)
    shutil.rmtree(out / "run", ignore_errors=True)  # the demo always trains from scratch
    result = train(train_cfg)
    if result["preempted"]:
        raise DemoStopped(
            f"training stopped at step {result['steps']} of {result['max_steps']} (a stop signal or "
            f"{out / 'run' / 'STOP'}); the demo trains from scratch each time: run it again"
        )

    stages.start("eval")
    evaluations = {}
    for name, model_dir in (("untrained", out / "run" / "model-init"), ("trained", Path(result["model_dir"]))):
        print(f"-- {name} model ({model_dir})", flush=True)
        evaluations[name] = run_all(
            load(model_dir),
            data_dir,
            heldout_dir=out / "corpus" / "heldout",
            out_dir=out / "eval" / name,
            languages=corpus["languages"],
            suite_path=DEMO_SUITE,
            print_tables=False,
        )
    chart = write_comparison_chart(evaluations, out / CHART_FILE)
    curves = plot_curves({"demo": read_metrics(out / "run")}, out / "run" / CURVES_FILE)
    stages.stop()

    tables = "\n".join(
        comparison_table(evaluations["untrained"][task], evaluations["trained"][task], task)
        for task in evaluations["trained"]
    )
    valid = [h for h in result["history"] if "valid_loss" in h]
    summary = (
        f"# EMS demo\n\n{corpus['train_pairs']} training pairs in {len(corpus['languages'])} languages "
        f"({', '.join(data_cfg.corpora)}; {corpus['removed_in_eval_set']} pairs sharing a sentence with an "
        "evaluation set removed); "
        f"trained {result['steps']} steps; held-out loss {valid[0]['valid_loss']:.3f} -> {valid[-1]['valid_loss']:.3f} "
        f"(xtr {valid[0]['valid_xtr']:.3f} -> {valid[-1]['valid_xtr']:.3f}, contrastive "
        f"{valid[0]['valid_contrastive']:.3f} -> {valid[-1]['valid_contrastive']:.3f})\n\n"
        f"stage seconds: {json.dumps(stages.seconds)} (total {sum(stages.seconds.values()):.0f})\n\n{tables}"
    )
    (out / REPORT_FILE).write_text(summary)
    (out / STAGES_FILE).write_text(json.dumps({"seconds": stages.seconds, "steps": result["steps"]}, indent=2) + "\n")
    return (
        summary
        + f"""
where everything is:
  corpus      {out / "corpus"}  (raw/import_report.<corpus>.json, clean/clean_report.json, heldout/split_report.json)
  vocabulary  {out / "vocab"}
  shards      {out / "shards"}
  checkpoints {out / "run" / "checkpoints"}   TensorBoard: tensorboard --logdir {out / "run" / "tb"}
  curves      {curves}   (python -m eval.curves {out / "run"})
  model       {out / "run" / "model"}   (ems.load(...).encode(sentences, lang=...))
  evaluation  {out / "eval"}/{{untrained,trained}}/results.json, report.md
  chart       {chart}
  this report {out / REPORT_FILE}"""
    )


def prepared_corpus(data_cfg: DemoDataConfig, data_dir: Path, out: Path, stages: Stages) -> dict:
    """`prepare_data` into `out`, unless it already holds the data of this very config (PREPARED_FILE
    records the config and the corpus summary): then the recorded summary, and nothing is redone."""
    record = out / PREPARED_FILE
    wanted = {"data_config": asdict(data_cfg), "data_dir": str(Path(data_dir).resolve())}
    if record.is_file() and (out / "shards" / "heldout" / "index.json").is_file():
        prepared = json.loads(record.read_text())
        if {key: prepared.get(key) for key in wanted} == wanted:
            print(f"data prepared before with this config: {out} (corpus, vocab, shards)", flush=True)
            return prepared["corpus"]
    record.unlink(missing_ok=True)
    corpus = prepare_data(data_cfg, data_dir, out, stages)
    record.write_text(json.dumps({**wanted, "corpus": corpus}, indent=2) + "\n")
    return corpus


def run_multilingual(
    data_cfg: DemoDataConfig, data_dir: Path, out: Path, train_config: str, overrides: list[str]
) -> str:
    """The all-language recipe: data (kept when prepared before with the same config), training
    (resumed from out/run's checkpoints), then the multilingual suite on every language the sets
    cover, zero-shot on those the model never saw (`ems:DIR,unseen=neutral`), split by each
    language's training pairs (eval.language_groups); returns the report (out/demo_report.md)."""
    from ems.encoder_kinds import load_encoder
    from ems.training.train import train
    from eval.language_groups import MARKDOWN_FILE, grouped_results, training_pairs, write_grouped
    from eval.run_all import run_all

    stages = Stages()
    corpus = prepared_corpus(data_cfg, data_dir, out, stages)
    # a resumed run's training seconds go on from what the earlier invocations recorded
    earlier = out / STAGES_FILE
    trained_before = (
        json.loads(earlier.read_text())["seconds"].get("train", 0.0)
        if earlier.is_file() and (out / "run" / "checkpoints").is_dir()
        else 0.0
    )
    stages.start("train")
    train_cfg = load_config(
        TrainConfig, train_config, overrides, {**data_paths(out, data_dir), "out": str(out / "run")}
    )
    result = train(train_cfg)
    if result["preempted"]:
        raise DemoStopped(
            f"training stopped at step {result['steps']} of {result['max_steps']} (a stop signal or "
            f"{out / 'run' / 'STOP'}); run the same command again: it resumes from the last checkpoint"
        )
    stages.start("eval")
    encoder = load_encoder(f"ems:{result['model_dir']},unseen=neutral", cache_dir=out / "cache")
    run_all(
        encoder,
        data_dir,
        heldout_dir=out / "corpus" / "heldout",
        out_dir=out / "eval",
        suite_path=MULTILINGUAL_SUITE,
        print_tables=False,
    )
    pairs = training_pairs(out / "shards" / "train")
    write_grouped(grouped_results(out / "eval" / "results.json", pairs), out / "eval" / "groups", pairs)
    stages.stop()
    stages.seconds["train"] = round(stages.seconds["train"] + trained_before, 1)
    (out / STAGES_FILE).write_text(json.dumps({"seconds": stages.seconds, "steps": result["steps"]}, indent=2) + "\n")
    summary = (
        f"# EMS, every language\n\n{corpus['train_pairs']} training pairs in {len(corpus['languages'])} languages "
        f"({', '.join(data_cfg.corpora)}; {corpus['removed_in_eval_set']} pairs sharing a sentence with an "
        f"evaluation set removed; {len(corpus['left_out'])} languages under {data_cfg.min_pairs} pairs left out); "
        f"{train_cfg.model} model, trained {result['steps']} steps\n\n"
        f"stage seconds: {json.dumps(stages.seconds)}\n\n" + (out / "eval" / "groups" / MARKDOWN_FILE).read_text()
    )
    (out / REPORT_FILE).write_text(summary)
    return (
        summary
        + f"""
where everything is:
  corpus      {out / "corpus"}  (languages.json: pairs per language imported, after cleaning, held out, trained)
  model       {out / "run" / "model"}   (ems.load(...).encode(sentences, lang=...))
  evaluation  {out / "eval"}/results.json, report.md; by group: {out / "eval" / "groups"}
  this report {out / REPORT_FILE}"""
    )


# --recipe NAME -> its function; its configs are configs/{data,train}/NAME.yaml
RECIPES = {"demo": run_demo, "multilingual": run_multilingual}


if __name__ == "__main__":
    sys.exit(run_main(main))
