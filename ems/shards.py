"""The on-disk format of binarized pair shards (what `data_prep binarize` writes and the trainer
and the teacher stage read), and `PairShards`, its memory-mapped reader.

A shard directory holds:
- `tokens.npy`   every sentence's ids concatenated, in the narrowest dtype the vocabulary allows
                 (uint16 up to 65,536 pieces, else int32; `token_dtype`) (side 1 of pair i is sentence 2i,
                 side 2 is sentence 2i+1). Side 2 is the corpus's pivot language (the language of
                 most language pairs: English in an English-centric corpus) in every pair that has
                 it, else the pair's second language: English-centric batches are then X -> English
                 whatever the alphabetical order, and sorting by side 1's length first does not line
                 up the translations of one English sentence (see ems.training.batch_order.BatchOrder)
- `offsets.npy`  int64, sentence k is tokens[offsets[k]:offsets[k+1]]
- `lengths.npy`  (n_pairs, 2) token count of each pair's two sides, in the narrowest dtype the
                 longest sentence allows (uint8 up to 255 tokens, uint16, else int32;
                 `length_dtype`), so the trainer's batch order never has to diff the offsets
- `langs.npy`    int16 (n_pairs, 2), language index of each side
- `content_ids.npy` uint64 (n_pairs, 2), each side's content id: a 64-bit hash of its normalised
                 text (`data_prep.clean.normalize` + `overlap_key`), equal for equal sentences in any
                 pair or language, so the trainer can tell in-batch translations of one sentence apart
- `index.json`   languages, the pivot, one entry per corpus file pair with its side order
                 (`sides`) and [start, end) pair range
                 (so the trainer can sample by language pair; every row of the range carries the
                 file's language ids in langs.npy, which opening the shards checks) and its report (read, kept,
                 skipped by reason), `format` (SHARD_FORMAT) and the dtypes; written last, so its
                 presence means the shards are complete.
Shards of another `format` are refused (binarize again). `read_index` and `language_pair_counts`
read index.json alone (the model card, eval.language_groups).
"""

from __future__ import annotations

import json
import tokenize
from pathlib import Path

import numpy as np

from ems.corpus import inside_folder
from ems.languages import resolve_language
from ems.mapped import release_mapped_pages, shrunk_size

INDEX_FILE = "index.json"
SHARD_ARRAYS = ("tokens.npy", "offsets.npy", "lengths.npy", "langs.npy", "content_ids.npy")
SHARD_FORMAT = 2  # index.json's "format": the layout above
CHECK_ROWS = 1 << 22  # langs.npy rows compared at a time when opening shards (16 MiB of int16 pairs)
CHECK_TOKENS = 1 << 24  # token ids compared at a time by PairShards.check_token_ids (32 MiB of uint16)


def token_dtype(vocab_size: int) -> str:
    """The narrowest dtype that holds every id of a `vocab_size`-piece vocabulary."""
    return "<u2" if vocab_size <= 1 << 16 else "<i4"


def length_dtype(max_length: int) -> str:
    """The narrowest dtype that holds sentence lengths up to `max_length` tokens."""
    return "<u1" if max_length < 1 << 8 else "<u2" if max_length < 1 << 16 else "<i4"


class PairShards:
    """Memory-mapped view of a `data_prep.binarize` output directory (format SHARD_FORMAT): one
    error line naming the file, and "binarize again", for shards of another format or missing one of
    SHARD_ARRAYS."""

    def __init__(self, directory: str | Path):
        directory = Path(directory)
        self.directory = directory
        self.index = read_index(directory)
        if self.index.get("format") != SHARD_FORMAT:
            raise ValueError(
                f"{directory / INDEX_FILE}: shard format {self.index.get('format')!r}, not {SHARD_FORMAT}: "
                f"binarize again"
            )
        for name in SHARD_ARRAYS:
            if not shard_file(directory, name).is_file():
                raise FileNotFoundError(f"{directory / name} is missing: binarize again")
        self.tokens = load_array(shard_file(directory, "tokens.npy"))
        self.offsets = load_array(shard_file(directory, "offsets.npy"))
        self.langs = load_array(shard_file(directory, "langs.npy"))
        self.content_ids = load_array(shard_file(directory, "content_ids.npy"))  # (n_pairs, 2) uint64
        self.lengths = load_array(shard_file(directory, "lengths.npy"))
        check_index(directory, self)
        self.languages: list[str] = self.index["languages"]

    def __len__(self) -> int:
        return len(self.langs)

    def check_vocabulary(self, tokenizer, vocab: str | Path) -> None:
        """ValueError unless these shards were made with exactly `tokenizer` (the vocabulary in `vocab`):
        the same languages and the same SentencePiece model file (index.json's vocab_sha1)."""
        made_with = self.index.get("vocab_sha1")
        if self.languages != tokenizer.languages or self.index.get("vocab_size") != tokenizer.vocab_size:
            raise ValueError(
                f"shards in {self.directory} were not made with the vocabulary in {vocab} (languages or size differ)"
            )
        if made_with is None:
            raise ValueError(
                f"{self.directory / INDEX_FILE} does not record which vocabulary made it (no vocab_sha1): "
                f"binarize again with {vocab}"
            )
        if made_with != tokenizer.sha1:
            raise ValueError(
                f"shards in {self.directory} were made with another vocabulary than {vocab}: same languages "
                f"and size, other pieces (vocab_sha1 {made_with[:12]} vs {tokenizer.sha1[:12]}); "
                f"binarize again with {vocab} or train with the vocabulary that made them"
            )

    def check_token_ids(self, vocab_size: int, vocab: str | Path) -> None:
        """ValueError unless every id in tokens.npy is a piece of a `vocab_size`-piece vocabulary (the
        one in `vocab`): one line naming the file, the first bad id, its position and its pair. One
        vectorised pass over the memory-mapped ids, CHECK_TOKENS at a time, its pages released."""
        tokens, where = self.tokens, self.directory / "tokens.npy"
        try:
            for start in range(0, tokens.size, CHECK_TOKENS):
                chunk = tokens[start : start + CHECK_TOKENS]
                bad = chunk >= vocab_size if tokens.dtype.kind == "u" else (chunk < 0) | (chunk >= vocab_size)
                if bad.any():
                    position = start + int(np.argmax(bad))
                    sentence = int(np.searchsorted(self.offsets, position, side="right")) - 1
                    raise ValueError(
                        f"{where}: token id {int(tokens[position])} at position {position} (pair {sentence // 2}, "
                        f"side {sentence % 2 + 1}) is not a piece of the {vocab_size}-piece vocabulary in "
                        f"{vocab}: the file is damaged; binarize again"
                    )
        finally:
            release_mapped_pages(tokens)

    def check_whole(self) -> None:
        """ValueError naming the file when one of the mapped arrays is now shorter than when the
        shards were opened (truncated or overwritten under a running reader), before a read past its
        new end kills the process with SIGBUS. One fstat per array: called before each batch is read."""
        for name, array in self.arrays().items():
            size = shrunk_size(array)
            if size is not None:
                raise ValueError(
                    f"{self.directory / name} is now {size} bytes, shorter than the {array.offset + array.nbytes} "
                    f"it held when it was opened: the shards changed while they were read (truncated, binarized "
                    f"again or copied over); give the run whole shards and start it again (it resumes from its "
                    f"last checkpoint)"
                )

    def sentence(self, k: int) -> np.ndarray:
        return self.tokens[self.offsets[k] : self.offsets[k + 1]]

    def padded(self, sentences: np.ndarray, max_len: int, pad_id: int) -> np.ndarray:
        """(len(sentences), L) int64 token ids of the given sentence indices, each cut at max_len and
        padded with pad_id to L, the longest cut length: one gather for all of them, not a Python loop
        over sentences on the thread that feeds a GPU step."""
        sentences = np.asarray(sentences, dtype=np.int64)
        starts = np.asarray(self.offsets[sentences], dtype=np.int64)
        lengths = np.minimum(np.asarray(self.offsets[sentences + 1], dtype=np.int64) - starts, max_len)
        width = int(lengths.max()) if len(sentences) else 0
        real = np.arange(width) < lengths[:, None]
        out = np.full((len(sentences), width), pad_id, dtype=np.int64)
        out[real] = self.tokens[(starts[:, None] + np.arange(width))[real]]
        return out

    def release_pages(self) -> None:
        """Drop the pages reading the memory-mapped arrays brought into this process (they stay in
        the OS page cache, shared by the ranks of a node): random reads over a 143M-pair corpus
        would otherwise grow each rank's resident set to the size of the files."""
        for array in self.arrays().values():
            release_mapped_pages(array)

    def arrays(self) -> dict[str, np.ndarray]:
        """{file name: its memory-mapped array} of SHARD_ARRAYS."""
        return dict(zip(SHARD_ARRAYS, (self.tokens, self.offsets, self.lengths, self.langs, self.content_ids)))

    def pair_lengths(self) -> np.ndarray:
        """(n_pairs,) the longer side's token count of each pair."""
        return self.side_lengths().max(axis=1)

    def side_lengths(self) -> np.ndarray:
        """(n_pairs, 2) int32 token counts of each pair's first and second side (lengths.npy)."""
        return np.asarray(self.lengths, dtype=np.int32)

    def language_pair_ranges(self) -> dict[str, IndexRanges]:
        """{"l1-l2": its pairs as IndexRanges} from the index's per-file [start, end) ranges; files
        of the same language pair (several corpora) form one group."""
        ranges: dict[str, list[tuple[int, int]]] = {}
        for entry in self.index["files"]:
            ranges.setdefault(f"{entry['l1']}-{entry['l2']}", []).append((entry["start"], entry["end"]))
        return {name: IndexRanges(parts) for name, parts in ranges.items()}

    def language_pair_groups(self) -> dict[str, np.ndarray]:
        """{"l1-l2": pair indices}: `language_pair_ranges` as arrays (8 bytes a pair)."""
        return {name: np.asarray(members) for name, members in self.language_pair_ranges().items()}


def shard_file(directory: str | Path, name: str) -> Path:
    """DIR/NAME of a shard directory, refused (OutsideRootError) when a symlink leads it outside DIR."""
    return inside_folder(directory, Path(directory) / name, f"the shard folder {directory}")


def read_index(directory: str | Path) -> dict:
    """A shard directory's index.json (without opening the arrays). FileNotFoundError naming it
    when there is none (not binarized, or not finished), ValueError when it is not valid JSON or
    leads outside the directory (a symlink)."""
    path = shard_file(directory, INDEX_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no {INDEX_FILE}: run data_prep binarize first")
    try:
        index = json.loads(path.read_text())
    except (ValueError, RecursionError) as error:  # RecursionError: nested too deep for the parser
        raise ValueError(f"{path} is not valid JSON ({error}): binarize again") from None
    if not isinstance(index, dict):
        raise ValueError(f"{path} holds a JSON {type(index).__name__}, not the object binarize writes: binarize again")
    return index


def language_pair_counts(index: dict) -> dict[tuple[str, str], int]:
    """{(l1, l2): pairs} from an index.json's per-file entries (several corpora of one language pair
    add up; an entry without n_pairs counts its [start, end) range), in the order they first appear."""
    pairs: dict[tuple[str, str], int] = {}
    for entry in index["files"]:
        key = (entry["l1"], entry["l2"])
        pairs[key] = pairs.get(key, 0) + (entry["n_pairs"] if "n_pairs" in entry else entry["end"] - entry["start"])
    return pairs


# What np.load raises for a .npy file that is cut short or damaged (its header is parsed as Python tokens).
NPY_ERRORS = (ValueError, OSError, EOFError, SyntaxError, TypeError, tokenize.TokenError)


def load_array(path: Path, remedy: str = "binarize again") -> np.ndarray:
    """A memory-mapped .npy file; a truncated or damaged one is a ValueError naming it and `remedy`."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except NPY_ERRORS as error:
        raise ValueError(
            f"{path} cannot be read as an array ({' '.join(str(error).split())}): it is truncated or damaged; {remedy}"
        ) from None


def check_index(directory: Path, shards: PairShards) -> None:
    """index.json against the arrays it describes: counts, dtypes, languages and the per-file
    [start, end) ranges (contiguous from 0 to the number of pairs, each file's n_pairs its length).
    A mismatch (an index edited by hand, arrays from another binarize) is one error naming the
    file and the field."""
    index, where = shards.index, directory / INDEX_FILE
    for name, array, ndim in (
        ("tokens.npy", shards.tokens, 1),
        ("offsets.npy", shards.offsets, 1),
        ("langs.npy", shards.langs, 2),
        ("content_ids.npy", shards.content_ids, 2),
        ("lengths.npy", shards.lengths, 2),
    ):
        if array.ndim != ndim:
            raise ValueError(f"{directory / name} has shape {array.shape}, not {ndim}-dimensional; binarize again")
    n_pairs = len(shards.langs)

    def wrong(field: str, found, expected) -> ValueError:
        return ValueError(
            f"{where}: {field} is {found!r} but the arrays say {expected!r}; the index does not "
            f"describe these shards (binarize again)"
        )

    for name, array in (
        ("offsets.npy", shards.offsets),
        ("content_ids.npy", shards.content_ids),
        ("lengths.npy", shards.lengths),
    ):
        expected = 2 * n_pairs + 1 if name == "offsets.npy" else (n_pairs, 2)
        found = len(array) if name == "offsets.npy" else array.shape
        if found != expected:
            raise ValueError(
                f"{directory}: {name} and langs.npy disagree on the number of pairs ({found} vs {expected})"
            )
    if len(shards.offsets) and int(shards.offsets[-1]) != shards.tokens.size:
        raise ValueError(
            f"{directory}: offsets.npy ends at {int(shards.offsets[-1])} but "
            f"tokens.npy holds {shards.tokens.size} tokens"
        )
    for field in ("languages", "files"):
        if field not in index:
            raise ValueError(f"{where} has no {field!r}: it was not written by data_prep binarize")
    if not isinstance(index["files"], list):
        raise ValueError(f"{where}: files must be a list of file entries, got {index['files']!r:.200}")
    if "n_pairs" in index and index["n_pairs"] != n_pairs:
        raise wrong("n_pairs", index["n_pairs"], n_pairs)
    if "n_tokens" in index and index["n_tokens"] != shards.tokens.size:
        raise wrong("n_tokens", index["n_tokens"], shards.tokens.size)
    for field, array in (("token_dtype", shards.tokens), ("length_dtype", shards.lengths)):
        if field in index and index[field] != array.dtype.name:
            raise wrong(field, index[field], array.dtype.name)
    position = 0
    for k, entry in enumerate(index["files"]):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(side), str) for side in ("l1", "l2")):
            raise ValueError(f"{where}: files[{k}] is not an entry with the languages l1 and l2: {entry!r:.200}")
        start, end = entry.get("start"), entry.get("end")
        if start != position or not isinstance(end, int) or not start <= end <= n_pairs:
            raise wrong(
                f"files[{k}] ({entry.get('name')}) range",
                [start, end],
                f"a range starting at {position} and ending by {n_pairs}",
            )
        if "n_pairs" in entry and entry["n_pairs"] != end - start:
            raise wrong(f"files[{k}] ({entry.get('name')}) n_pairs", entry["n_pairs"], end - start)
        position = end
    if position != n_pairs:
        raise wrong("files' ranges", f"ending at {position}", f"{n_pairs} pairs")
    check_file_languages(directory, index, shards.langs)


def check_file_languages(directory: Path, index: dict, langs: np.ndarray) -> None:
    """Every row of each index.json file's [start, end) range carries that file's language ids in
    langs.npy (`sides` in order), so
    that sampling, one-pair batches and per-pair validation, which group pairs by these ranges,
    never take one language pair for another. A disagreement (a boundary moved in index.json) is one
    ValueError naming the index, the file entry and the first disagreeing row. One vectorised pass
    over the memory-mapped array (each row's two ids compared as one integer), its pages released."""
    where = directory / INDEX_FILE
    if langs.ndim != 2 or langs.shape[1:] != (2,):
        raise ValueError(f"{directory / 'langs.npy'} has shape {langs.shape}, not (n_pairs, 2); binarize again")
    languages = index["languages"]
    if not isinstance(languages, list) or not all(isinstance(lang, str) for lang in languages):
        raise ValueError(f"{where}: languages must be a list of language codes, got {languages!r:.200}")
    key_dtype = {1: "<u2", 2: "<u4", 4: "<u8"}.get(langs.dtype.itemsize)
    as_keys = key_dtype is not None and langs.flags.c_contiguous
    try:
        for k, entry in enumerate(index["files"]):
            name = f"files[{k}] ({entry.get('name')}, {entry.get('l1')}-{entry.get('l2')})"
            sides = entry.get("sides")
            try:
                if not isinstance(sides, list) or len(sides) != 2:
                    raise ValueError(f"sides must be a list of two languages, got {sides!r}")
                ids = [languages.index(resolve_language(lang, languages)) for lang in sides]
            except (TypeError, ValueError) as error:
                raise ValueError(f"{where}: {name} does not name two of the index's languages ({error})") from None
            expected = np.array(ids).astype(langs.dtype)
            for start in range(entry["start"], entry["end"], CHECK_ROWS):
                rows = langs[start : min(start + CHECK_ROWS, entry["end"])]
                if as_keys:  # each row's two ids as one integer: one comparison a row
                    bad = rows.view(key_dtype).ravel() != expected.view(key_dtype)[0]
                else:
                    bad = (rows != expected).any(axis=1)
                if bad.any():
                    row = start + int(np.argmax(bad))
                    found = [int(i) for i in langs[row]]
                    shown = "-".join(languages[i] if 0 <= i < len(languages) else str(i) for i in found)
                    raise ValueError(
                        f"{where}: {name} spans rows [{entry['start']}, {entry['end']}) but row {row} of "
                        f"langs.npy is {shown} {found}, not {'-'.join(sides)} {ids}; "
                        f"the index's ranges do not match the rows' languages (binarize again)"
                    )
    finally:
        release_mapped_pages(langs)


class IndexRanges:
    """The indices of a few [start, end) ranges, concatenated, without building the array:
    `len`, `members[positions]` (an integer array of positions in, pair indices out) and
    `np.asarray(members)` (the whole array)."""

    def __init__(self, ranges: list[tuple[int, int]]):
        self.starts = np.array([start for start, _ in ranges], dtype=np.int64)
        sizes = np.array([end - start for start, end in ranges], dtype=np.int64)
        if (sizes < 0).any():
            raise ValueError(f"ranges must have start <= end: {ranges}")
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= len(self)):
            raise IndexError(f"positions outside 0..{len(self) - 1}")
        which = np.searchsorted(self.offsets, positions, side="right") - 1
        return self.starts[which] + positions - self.offsets[which]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self[np.arange(len(self))].astype(dtype or np.int64, copy=False)
