"""Encoding throughput: `ems.load(DIR).encode` against the same model exported with `ems-export`
and encoded by `SentenceTransformer.encode`, on the same real sentences, same machine, same threads.

    python -m benchmarks.encode_throughput --model runs/demo/run/model --out runs/encode_throughput
    python -m benchmarks.encode_throughput --model DIR --languages de,fr,ja --sentences 2000 --repeats 3
    python -m benchmarks.encode_throughput --model DIR --precision fp32 --tokenizer-workers 1

The sentences are the first `--sentences` lines of each language's FLORES-200 devtest file (real
text of every length, the data directory's `flores200/devtest`), plus English. Each encoder runs the
whole set `--repeats` times after one warm-up pass; the best pass counts (the machine's noise only
ever slows a pass down). EMS encodes as `ems.load(DIR, precision=..., tokenizer_workers=...).encode`
does by default (batches of `--batch-tokens` padded tokens, the device's default if not given);
sentence-transformers in batches of `--batch-size` sentences, in fp32 (its default). The vectors of
the two must be the same model: the minimum row cosine is reported and a run below 0.999 is refused
as not comparable. Prints and writes OUT/encode_throughput.json: sentences/s of each, their ratio
(EMS / sentence-transformers), the minimum cosine, EMS's precision, and the machine's load average
before and after. One run, quiet machine: two heavy jobs on 2 cores slow each other far more than 2x;
under load, the ratio of the two measured in the same run is the figure to read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from ems.cli import UserError, add_debug_option, run_main
from ems.languages import ENGLISH, flores_file

REPO_ROOT = Path(__file__).resolve().parents[1]

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


def best_rates(encoders: dict, sentences: dict[str, list[str]], repeats: int) -> dict[str, tuple[float, dict]]:
    """{name: (sentences/s of its fastest of `repeats` timed passes over every language, the vectors
    of its last pass)} for `encoders` ({name: encode(lines, lang)}), after one warm-up pass each. The
    encoders take turns pass by pass, so a change in the machine's load weighs on all of them."""
    total = sum(len(lines) for lines in sentences.values())
    vectors = {
        name: {lang: encode(lines, lang) for lang, lines in sentences.items()} for name, encode in encoders.items()
    }
    seconds: dict[str, list[float]] = {name: [] for name in encoders}
    for _ in range(repeats):
        for name, encode in encoders.items():
            started = time.perf_counter()
            vectors[name] = {lang: encode(lines, lang) for lang, lines in sentences.items()}
            seconds[name].append(time.perf_counter() - started)
    return {name: (total / min(seconds[name]), vectors[name]) for name in encoders}


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
    parser.add_argument("--batch-size", type=int, default=128, help="sentence-transformers' batch (sentences)")
    parser.add_argument("--batch-tokens", type=int, help="EMS's batch (padded tokens; default: the device's)")
    parser.add_argument("--precision", default="auto", help="EMS's: auto, bf16, fp16 or fp32 (ems.precision)")
    parser.add_argument("--tokenizer-workers", type=int, default=0, help="EMS's tokenizer processes besides itself")
    parser.add_argument("--repeats", type=int, default=3)
    add_debug_option(parser)
    args = parser.parse_args(argv)
    if args.sentences < 1 or args.repeats < 1 or args.batch_size < 1 or (args.batch_tokens or 1) < 1:
        raise UserError("--sentences, --repeats, --batch-size and --batch-tokens must be >= 1")
    if args.tokenizer_workers < 0:
        raise UserError("--tokenizer-workers must be >= 0")
    load_before = os.getloadavg()
    import torch
    from sentence_transformers import SentenceTransformer

    import ems
    from ems.apps.export import export_sentence_transformers
    from ems.encoder import TruncationWarning, default_batch_tokens

    model = ems.load(args.model, precision=args.precision, tokenizer_workers=args.tokenizer_workers)
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

    with warnings.catch_warnings():  # the sentences over max_len: counted below, not warned once a pass
        warnings.simplefilter("ignore", TruncationWarning)
        rates = best_rates(
            {
                "ems": lambda lines, lang: model.encode(lines, lang, batch_tokens=args.batch_tokens),
                "st": lambda lines, lang: st.encode(lines, lang=lang, batch_size=args.batch_size),
            },
            sentences,
            args.repeats,
        )
    model.close()
    (ems_rate, ems_vectors), (st_rate, st_vectors) = rates["ems"], rates["st"]
    cosine = min(min_row_cosine(ems_vectors[lang], st_vectors[lang]) for lang in sentences)
    if cosine < MIN_COSINE:
        raise UserError(
            f"the two encoders' vectors differ (minimum row cosine {cosine:.5f} < {MIN_COSINE}): not comparable"
        )
    report = {
        "model": str(args.model),
        "sentences": sum(len(lines) for lines in sentences.values()),
        "languages": list(sentences),
        "st_batch_size": args.batch_size,
        "ems_batch_tokens": args.batch_tokens or default_batch_tokens(model.device),
        "ems_precision": model.precision,
        "ems_tokenizer_workers": args.tokenizer_workers,
        "truncated_sentences": model.truncated_sentences // (args.repeats + 1),
        "threads": torch.get_num_threads(),
        "ems_sentences_per_s": round(ems_rate, 1),
        "st_sentences_per_s": round(st_rate, 1),
        "ems_over_st": round(ems_rate / st_rate, 3),
        "min_row_cosine": round(cosine, 6),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    (args.out / "encode_throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
