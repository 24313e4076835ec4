"""Mine translation pairs from two monolingual files with margin scoring (the BUCC procedure), on
one machine or as SLURM array jobs.

    # one command, every stage on this machine (`ems-mine` is the same)
    python -m ems.apps.mine --encoder ems:runs/x/model --src corpus.de --src-lang de --tgt corpus.en --tgt-lang en \\
        --out pairs.tsv [--threshold 1.05] [--mode max] [--margin ratio] [--k 4] [--index ivf-sq8:nprobe=64]
        [--work-dir DIR] [--workers N] [--shard-lines 1000000] [--dtype float16] [--line-numbers]
        [--src-embeddings src.npy --tgt-embeddings tgt.npy]   # precomputed, one row per file line
        [--cache-dir DIR] [--device cuda] [--chunk-lines 20000] [--tokenizer-workers 2]
    # the same run as separate jobs (slurm/mine.sh runs these)
    python -m ems.apps.mine plan --work-dir DIR <the options above>   # prints each step's unfinished units
    python -m ems.apps.mine stage STEP --work-dir DIR [--unit I]      # one unit of a step, or all of them

One sentence per line in, "<score>\\t<src sentence>\\t<tgt sentence>" lines out (with
--line-numbers also each sentence's 1-based line number), best first. Identical lines are mined
once (as in BUCC); empty lines, lines that are not UTF-8 and lines with a NUL byte are skipped
and counted. The run goes through stages with files between them in --work-dir (a temporary
directory by default): embed (each side's distinct lines in shards of --shard-lines), index
(trained on a sample, populated per shard, merged on disk), k-NN per shard, score and write
(ems.mining.pipeline says what each holds). Every finished shard is kept: the same command
again resumes a killed run; other settings in the same --work-dir are refused (naming the
setting), except the scoring ones (--threshold, --mode, --margin, ...), which score again.
Without --threshold every candidate pair is written; a BUCC threshold from `eval.run_all`
(results.json, "threshold" of a language) is a good starting point for the same encoder.
--src-lang and --tgt-lang are checked before any file is read: one of the encoder's languages (or
an alias of one: deu, DE, deu_Latn -> de), or any registered language code for an encoder that takes
every language. Bad input is one `error: ...` line and exit status 2; --debug (or EMS_DEBUG=1) shows
the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path

from ems.cli import add_debug_option, run_main
from ems.encoder_kinds import ENCODER_KINDS, load_encoder
from ems.mining.index_kinds import INDEX_TYPES
from ems.mining.margin import MARGINS, RETRIEVAL
from ems.mining.pipeline.launch import mine_files, run_step
from ems.mining.pipeline.manifest import done_record
from ems.mining.pipeline.options import MineOptions
from ems.mining.pipeline.plan import STEPS, plan, unit_ranges

COMMANDS = ("plan", "stage")
# Every MineOptions field is the option --<field-name>: its type, its default (none: required) and,
# for a Literal, its choices come from MineOptions, which also checks the values; here is only
# what --help says of each.
HELP = {
    "src": "source text file, one sentence per line",
    "src_lang": "language code, e.g. de (checked against the encoder's)",
    "tgt": "target text file, one sentence per line",
    "tgt_lang": "language code, e.g. en",
    "out": "output TSV: score, src, tgt",
    "encoder": f"KIND[:PATH][,key=value...], KIND one of {', '.join(ENCODER_KINDS)}",
    "src_embeddings": "precomputed .npy, one row per line of --src",
    "tgt_embeddings": "precomputed .npy, one row per line of --tgt",
    "work_dir": "the stages' files (kept: rerun to resume); none: a temporary directory",
    "threshold": "keep pairs scoring at least this (none: every pair)",
    "k": "nearest neighbours of each sentence that the margin looks at",
    "margin": f"one of {', '.join(MARGINS)}",
    "mode": f"which direction's neighbours make the pairs: one of {', '.join(RETRIEVAL)}",
    "index": f"KIND[:key=value,...], KIND one of {', '.join(INDEX_TYPES)}, "
    "e.g. ivf-pq:nprobe=32,m=32 (see ems.mining.index_kinds.IndexSpec; auto: exact below 1M rows)",
    "shard_lines": "distinct lines per shard (one job each)",
    "dtype": "how vectors are stored",
    "line_numbers": "also write each sentence's 1-based line number",
    "cache_dir": "cache embeddings here",
    "device": "where the encoder runs: cpu, cuda, cuda:1, ... (as device= in the spec; none: cpu)",
    "chunk_lines": "lines read and encoded at a time",
    "chunk_rows": "queries per k-NN search call",
    "tokenizer_workers": "ems: encoders: tokenise in this many processes while the model runs (0: in this process)",
    "workers": "processes running a step's shards at once",
}


def _mining_parser(prog: str, work_dir_required: bool) -> argparse.ArgumentParser:
    """The options of a mining run, one per MineOptions field (HELP); `plan` requires --work-dir."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    types = typing.get_type_hints(MineOptions)
    for field in dataclasses.fields(MineOptions):
        flag, kind = f"--{field.name.replace('_', '-')}", types[field.name]
        if kind is bool:
            parser.add_argument(flag, action="store_true", help=HELP[field.name])
            continue
        required = field.default is dataclasses.MISSING
        choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
        value_type = str if choices else next(t for t in (*typing.get_args(kind), kind) if t is not type(None))
        parser.add_argument(
            flag,
            type=value_type,
            choices=choices,
            required=required or (field.name == "work_dir" and work_dir_required),
            default=None if required else field.default,
            help=HELP[field.name] + ("" if required or field.default is None else f" (default: {field.default})"),
        )
    add_debug_option(parser)
    return parser


def _options(args: argparse.Namespace) -> MineOptions:
    return MineOptions(**{field.name: getattr(args, field.name) for field in dataclasses.fields(MineOptions)})


def plan_main(argv: list[str]) -> int:
    """`plan`: write the plan; print one line per step, "STEP UNITS" (a SLURM --array value of
    its unfinished units, "-" for none), on stdout. The encoder is loaded here on the CPU (a login
    node may have no GPU), only for its languages and model id; --device is the jobs'."""
    options = _options(_mining_parser("python -m ems.apps.mine plan", True).parse_args(argv))
    planned = plan(options, None if options.encoder is None else load_encoder(options.encoder, options.cache_dir))
    for step in STEPS:
        units = planned.units(step)
        pending = [i for i, unit in enumerate(units) if done_record(planned.work, step, unit) is None]
        print(step, unit_ranges(pending))
    return 0


def stage_main(argv: list[str]) -> int:
    """`stage STEP --work-dir DIR [--unit I]`."""
    parser = argparse.ArgumentParser(prog="python -m ems.apps.mine stage", description="Run one step of a planned run.")
    parser.add_argument("step", choices=STEPS)
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--unit", type=int, help="the unit to run (a SLURM array task id); default: all")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    run_step(args.work_dir, args.step, args.unit)
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; bad input raises (run_main: one `error: ...` line, status 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return {"plan": plan_main, "stage": stage_main}[argv[0]](argv[1:])
    parser = _mining_parser("python -m ems.apps.mine", False)
    parser.epilog = "Commands for separate jobs: python -m ems.apps.mine {plan,stage} --help"
    options = _options(parser.parse_args(argv))
    counts = mine_files(options)
    print(f"wrote {counts['written']} pairs to {options.out}; {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
