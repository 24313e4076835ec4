"""Token-id shards the trainer streams from (memory-mapped numpy arrays).

In: a corpus root (aligned-pair layout, raw or pretokenized) and a vocabulary directory.
Out, in `out_dir`: the shard arrays and `index.json` of the format ems.shards defines (one side of
every pair in the corpus's pivot language where it has one; each side's content id, the hash of
its normalised text: `content_id`).
Each file pair is encoded by a worker process into `out_dir/parts/<pair>.<name>/` (raw token and length
arrays, streamed batch by batch); a join step concatenates the parts in corpus order. The
result is byte-identical whatever the number of workers, and a rerun keeps finished parts.
A write the file system refuses (a full disk: numpy's short write too) is ems.artifacts.WriteFailed,
one line naming the file; the join's half-written arrays are removed, finished parts kept.
Read the result with `ems.shards.PairShards`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from itertools import chain, islice
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from data_prep.clean import normalize, overlap_key, text_hash
from data_prep.pretokenize import corpus_preprocessing
from ems.artifacts import file_fingerprint, same_file, write_text, writing
from ems.corpus import ParallelFiles, ReadReport, list_parallel, read_parallel
from ems.shards import INDEX_FILE, SHARD_ARRAYS, SHARD_FORMAT, length_dtype, token_dtype
from ems.text import Tokenizer

PARTS_DIR = "parts"
COPY_BYTES = 1 << 24  # bytes per copy step of the join
JOIN_ROWS = 1 << 20  # sentence lengths (and pair language rows) per step of the join: memory stays flat
WHAT = "binarize"
# what a refused write leaves: said in its one line (ems.artifacts.write_failed)
LEFT = "no index.json was written, the finished parts are kept"


def content_id(text: str) -> int:
    """A sentence's content id: the hash of its normalised text, the same whatever its language
    label or corpus (traditional and simplified Chinese alike, as in the clean stage)."""
    return text_hash(overlap_key(normalize(text)))


def pivot_language(all_files: list[ParallelFiles]) -> str | None:
    """The language of the most language pairs (English in an English-centric corpus); None if no
    language leads (a single pair, or a tie)."""
    counts = Counter(lang for pair in {(f.l1, f.l2) for f in all_files} for lang in pair).most_common(2)
    if len(counts) < 2 or counts[0][1] == counts[1][1]:
        return None
    return counts[0][0]


def _write(array: np.ndarray, out) -> None:
    """`array` appended to the open binary file `out`; a refused write is WriteFailed naming it."""
    with writing(out.name, WHAT, LEFT):
        array.tofile(out)


def _encode_part(task: tuple[ParallelFiles, str, str, bool, int, bool]) -> dict:
    """Encode one file pair into its part directory, its l2 side first when `swap`; returns its entry.
    A part a killed run finished is reused only when its record (part.json, written after its arrays)
    says it was made with these settings from inputs of the same content; else it is encoded again."""
    files, vocab_dir, part_dir, pretokenized, batch_lines, swap = task
    part_dir = Path(part_dir)
    done = part_dir / "part.json"
    inputs, settings = (files.path_l1, files.path_l2), {"swap": swap, "pretokenized": pretokenized}
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # no record, or not one of these
        record = json.loads(done.read_text())
        if record["settings"] == settings and all(map(same_file, record["inputs"], inputs)):
            return record["entry"]
    fingerprints = [file_fingerprint(path) for path in inputs]
    tokenizer = Tokenizer.load(vocab_dir)
    part_dir.mkdir(parents=True, exist_ok=True)
    read = ReadReport()
    n_pairs = skipped = 0
    pairs = read_parallel(files.path_l1, files.path_l2, read)
    side1, side2 = (files.l2, files.l1) if swap else (files.l1, files.l2)
    if swap:
        pairs = ((b, a) for a, b in pairs)

    def encode(sentences: list[str], lang: str) -> list[list[int]]:
        if not pretokenized:
            return tokenizer.encode(sentences, lang)
        return tokenizer.sp.encode(sentences, num_threads=1)  # the worker processes are the parallelism

    with (
        _output(part_dir / "tokens.bin") as tokens_out,
        _output(part_dir / "lengths.bin") as lengths_out,
        _output(part_dir / "content_ids.bin") as ids_out,
    ):
        while chunk := list(islice(pairs, batch_lines)):
            ids1 = encode([p[0] for p in chunk], side1)
            ids2 = encode([p[1] for p in chunk], side2)
            kept = [(pair, a, b) for pair, a, b in zip(chunk, ids1, ids2) if a and b]
            sentences = [s for _, a, b in kept for s in (a, b)]
            skipped += len(chunk) - len(kept)
            n_pairs += len(kept)
            lengths = np.fromiter(map(len, sentences), dtype=np.int32, count=len(sentences))
            _write(np.fromiter(chain.from_iterable(sentences), dtype=np.int32, count=int(lengths.sum())), tokens_out)
            _write(lengths, lengths_out)
            _write(np.array([content_id(text) for pair, _, _ in kept for text in pair], dtype="<u8"), ids_out)
    entry = {
        "l1": files.l1,
        "l2": files.l2,
        "sides": [side1, side2],
        "name": files.name,
        "n_pairs": n_pairs,
        "read": read.to_dict(),
        "skipped_empty_after_tokenization": skipped,
    }
    write_text(done, json.dumps({"entry": entry, "settings": settings, "inputs": fingerprints}, indent=2) + "\n", WHAT)
    return entry


def _check_languages(tokenizer: Tokenizer, all_files: list[ParallelFiles]) -> None:
    for files in all_files:
        for lang in (files.l1, files.l2):
            tokenizer.lang_index(lang)  # clear error for a language the vocabulary lacks


def _max_length(parts: list[Path]) -> int:
    longest = 0
    for part in parts:
        with open(part / "lengths.bin", "rb") as part_lengths:
            while (lengths := np.fromfile(part_lengths, dtype="<i4", count=JOIN_ROWS)).size:
                longest = max(longest, int(lengths.max()))
    return longest


@contextlib.contextmanager
def _output(path: Path, npy: tuple[str, tuple[int, ...]] | None = None) -> Iterator:
    """`path` opened for sequential binary writes (with `npy`, (dtype, shape): a .npy file, its header
    written first) and closed at the end. A write the file system refuses, closing it included, is
    WriteFailed naming it; after an error inside, a failure to close is dropped: the first error stands."""
    out = open(path, "wb")
    try:
        if npy is not None:
            header = {"descr": np.dtype(npy[0]).str, "fortran_order": False, "shape": npy[1]}
            with writing(path, WHAT, LEFT):
                np.lib.format.write_array_header_1_0(out, header)
        yield out
    except BaseException:
        with contextlib.suppress(OSError):
            out.close()
        raise
    with writing(path, WHAT, LEFT):
        out.close()


def _join(out_dir: Path, parts: list[Path], entries: list[dict], tokenizer: Tokenizer) -> None:
    """Concatenate the parts into the shard arrays with sequential writes (no memory map, whose
    written pages would count in the resident set), JOIN_ROWS values in memory at a time; tokens
    and lengths narrowed to `token_dtype` / `length_dtype`. Returns those two dtypes."""
    n_pairs = sum(e["n_pairs"] for e in entries)
    n_tokens = sum((p / "tokens.bin").stat().st_size // 4 for p in parts)
    tokens_dtype, lengths_dtype = token_dtype(tokenizer.vocab_size), length_dtype(_max_length(parts))
    try:
        with (
            _output(out_dir / "tokens.npy.partial", (tokens_dtype, (n_tokens,))) as tokens,
            _output(out_dir / "offsets.npy.partial", ("<i8", (2 * n_pairs + 1,))) as offsets,
            _output(out_dir / "lengths.npy.partial", (lengths_dtype, (n_pairs, 2))) as side_lengths,
            _output(out_dir / "langs.npy.partial", ("<i2", (n_pairs, 2))) as langs,
            _output(out_dir / "content_ids.npy.partial", ("<u8", (n_pairs, 2))) as content_ids,
        ):
            _write(np.zeros(1, dtype="<i8"), offsets)
            end, pair_pos = 0, 0
            for part, entry in zip(parts, entries):
                with open(part / "content_ids.bin", "rb") as part_file, writing(content_ids.name, WHAT, LEFT):
                    shutil.copyfileobj(part_file, content_ids, COPY_BYTES)
                with open(part / "tokens.bin", "rb") as part_tokens:
                    while (ids := np.fromfile(part_tokens, dtype="<i4", count=COPY_BYTES // 4)).size:
                        _write(ids.astype(tokens_dtype), tokens)
                with open(part / "lengths.bin", "rb") as part_lengths:
                    # JOIN_ROWS is even, so every chunk holds whole pairs (both sides of a pair are written together)
                    while (lengths := np.fromfile(part_lengths, dtype="<i4", count=JOIN_ROWS)).size:
                        ends = end + np.cumsum(lengths, dtype="<i8")
                        _write(ends, offsets)
                        _write(lengths.astype(lengths_dtype), side_lengths)
                        end = int(ends[-1])
                pair_langs = np.asarray([tokenizer.lang_index(lang) for lang in entry["sides"]], dtype="<i2")
                for start in range(0, entry["n_pairs"], JOIN_ROWS):
                    _write(np.tile(pair_langs, (min(JOIN_ROWS, entry["n_pairs"] - start), 1)), langs)
                entry["start"], entry["end"] = pair_pos, pair_pos + entry["n_pairs"]
                pair_pos += entry["n_pairs"]
    except BaseException:
        for name in SHARD_ARRAYS:  # half-written: no reader would take them, and they hold the space
            (out_dir / f"{name}.partial").unlink(missing_ok=True)
        raise
    for name in SHARD_ARRAYS:
        (out_dir / f"{name}.partial").replace(out_dir / name)
    return tokens_dtype, lengths_dtype


def binarize(
    corpus_root: str | Path, vocab_dir: str | Path, out_dir: str | Path, batch_lines: int = 2000, workers: int = 1
) -> dict:
    """Tokenize every pair of the corpus with `workers` processes and write the shards; returns the index."""
    tokenizer = Tokenizer.load(vocab_dir)
    made_with = corpus_preprocessing(corpus_root)
    if made_with is not None and made_with != tokenizer.preprocessing:
        raise ValueError(
            f"{corpus_root} was pretokenized with {made_with}, but the vocabulary {vocab_dir} uses "
            f"{tokenizer.preprocessing}; pretokenize again or binarize the raw corpus"
        )
    all_files = list_parallel(corpus_root)
    _check_languages(tokenizer, all_files)
    out_dir = Path(out_dir)
    (out_dir / INDEX_FILE).unlink(missing_ok=True)
    vocab_sha1 = tokenizer.sha1
    parts_root = out_dir / PARTS_DIR
    stamp = parts_root / "vocab.sha1"
    if stamp.is_file() and stamp.read_text() != vocab_sha1:
        shutil.rmtree(parts_root)  # parts of another vocabulary cannot be reused
    parts_root.mkdir(parents=True, exist_ok=True)
    write_text(stamp, vocab_sha1, WHAT)
    parts = [parts_root / f"{files.l1}-{files.l2}.{files.name}" for files in all_files]
    pivot = pivot_language(all_files)
    tasks = [
        (files, str(vocab_dir), str(part), made_with is not None, batch_lines, files.l1 == pivot)
        for files, part in zip(all_files, parts)
    ]
    if workers <= 1:
        entries = [_encode_part(task) for task in tasks]
    else:
        with get_context().Pool(workers) as pool:
            entries = list(pool.imap(_encode_part, tasks))
    if not sum(e["n_pairs"] for e in entries):
        raise ValueError(f"{corpus_root}: no sentence pairs to binarize")
    tokens_dtype, lengths_dtype = _join(out_dir, parts, entries, tokenizer)
    index = {
        "format": SHARD_FORMAT,
        "token_dtype": np.dtype(tokens_dtype).name,
        "length_dtype": np.dtype(lengths_dtype).name,
        "languages": tokenizer.languages,
        "vocab_size": tokenizer.vocab_size,
        "vocab_sha1": vocab_sha1,
        "n_pairs": sum(e["n_pairs"] for e in entries),
        "n_tokens": int(np.load(out_dir / "tokens.npy", mmap_mode="r").size),
        "pretokenized_corpus": made_with is not None,
        "pivot": pivot,
        "files": entries,
    }
    write_text(out_dir / INDEX_FILE, json.dumps(index, indent=2) + "\n", WHAT)
    shutil.rmtree(parts_root)
    return index
