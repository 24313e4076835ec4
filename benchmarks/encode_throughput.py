"""Encoding throughput: `ems.load(DIR).encode` against the same model exported with `ems-export`
and encoded by `SentenceTransformer.encode`, on the same real sentences, same machine, same threads.

    python benchmarks/encode_throughput.py --model runs/demo/run/model --out runs/encode_throughput
    python benchmarks/encode_throughput.py --model DIR --languages de,fr,ja --sentences 2000 --repeats 3

The sentences are the first `--sentences` lines of each language's FLORES-200 devtest file (real
text of every length, the data directory's `flores200/devtest`), plus English. Each encoder runs the
whole set `--repeats` times after one warm-up pass; the best pass counts (the machine's noise only
ever slows a pass down). The vectors of the two must be the same model: the minimum row cosine is
reported and a run below 0.999 is refused as not comparable. Prints and writes
OUT/encode_throughput.json: sentences/s of each, their ratio (EMS / sentence-transformers), and the
minimum cosine. One run, quiet machine: two heavy jobs on 2 cores slow each other far more than 2x.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from ems.cli import UserError, add_debug_option, run_main  # noqa: E402
from ems.languages import ENGLISH, flores_file  # noqa: E402

MIN_COSINE = 0.999


def read_sentences(data_dir: Path, languages: list[str], n: int) -> dict[str, list[str]]:
    """{lang: its first n non-empty FLORES-200 devtest lines} for `languages` and English."""
    split_dir = data_dir / "flores200" / "devtest"
    sentences = {}
    for lang in [*languages, ENGLISH]:
        path = flores_file(split_dir, lang, "devtest")
        if path is None:
            raise UserError(f"no FLORES-200 devtest file for {lang!r} in {split_dir}")
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        sentences[lang] = lines[:n]
    return sentences


def best_rate(encode, sentences: dict[str, list[str]], repeats: int) -> tuple[float, dict[str, np.ndarray]]:
    """Sentences/s of the fastest of `repeats` timed passes over every language (after one warm-up
    pass), and the vectors of the last pass."""
    total = sum(len(lines) for lines in sentences.values())
    vectors = {lang: encode(lines, lang) for lang, lines in sentences.items()}
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        vectors = {lang: encode(lines, lang) for lang, lines in sentences.items()}
        seconds.append(time.perf_counter() - started)
    return total / min(seconds), vectors


def min_row_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a model directory saved by this project")
    parser.add_argument("--out", type=Path, default=Path("runs/encode_throughput"))
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("EMS_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    )
    parser.add_argument("--languages", default="de,fr,ja,zh,ru,ar", help="comma-separated (English is added)")
    parser.add_argument("--sentences", type=int, default=1012, help="per language (FLORES devtest has 1012)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    add_debug_option(parser)
    args = parser.parse_args(argv)
    if args.sentences < 1 or args.repeats < 1 or args.batch_size < 1:
        raise UserError("--sentences, --repeats and --batch-size must be >= 1")
    import torch
    from sentence_transformers import SentenceTransformer

    import ems
    from ems.export import export_sentence_transformers

    model = ems.load(args.model)
    languages = [lang.strip() for lang in args.languages.split(",") if lang.strip()]
    unknown = [lang for lang in languages if lang not in model.languages]
    if unknown:
        raise UserError(f"{args.model} has no language {', '.join(unknown)}; it has {', '.join(model.languages)}")
    sentences = read_sentences(args.data_dir, languages, args.sentences)
    args.out.mkdir(parents=True, exist_ok=True)
    st_dir = args.out / "st-export"
    if not st_dir.is_dir():
        export_sentence_transformers(args.model, st_dir)
    st = SentenceTransformer(str(st_dir), trust_remote_code=True, device="cpu")

    ems_rate, ems_vectors = best_rate(
        lambda lines, lang: model.encode(lines, lang, batch_size=args.batch_size), sentences, args.repeats
    )
    st_rate, st_vectors = best_rate(
        lambda lines, lang: st.encode(lines, lang=lang, batch_size=args.batch_size), sentences, args.repeats
    )
    cosine = min(min_row_cosine(ems_vectors[lang], st_vectors[lang]) for lang in sentences)
    if cosine < MIN_COSINE:
        raise UserError(
            f"the two encoders' vectors differ (minimum row cosine {cosine:.5f} < {MIN_COSINE}): not comparable"
        )
    report = {
        "model": str(args.model),
        "sentences": sum(len(lines) for lines in sentences.values()),
        "languages": list(sentences),
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "ems_sentences_per_s": round(ems_rate, 1),
        "st_sentences_per_s": round(st_rate, 1),
        "ems_over_st": round(ems_rate / st_rate, 3),
        "min_row_cosine": round(cosine, 6),
    }
    (args.out / "encode_throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
