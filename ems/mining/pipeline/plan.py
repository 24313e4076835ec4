"""The plan of a mining run: its options, each side's shards, and the units of every step.

In: `MineOptions` and the encoder (loaded by the caller; None with precomputed embeddings).
Out, in the work dir: options.json (this run's options; a stage job reads them back), every
stage's manifest (ems.mining.pipeline.manifest), and each side's line shards

    WORK/embed/<side>/<shard>.lines.npy   (n, 2) int64: byte offset and 0-based line number of
                                          each distinct non-empty line's first occurrence, in
                                          file order, `shard_lines` a shard

from one pass over each input (ems.mining.streaming.scan_distinct), done once: a later plan of the
same work dir checks the settings and the inputs' fingerprints and reuses it. Returns a `Plan`:
the units each step of STEPS has (a SLURM array task or a local pool task each), in order:

    embed     one per shard of each side: its vectors          (ems.mining.pipeline.embed)
    train     one per side searched through an IVF index       (ems.mining.pipeline.index)
    populate  one per shard of such a side
    merge     one per side searched through an index (IVF: on-disk lists; HNSW: built whole)
    knn       one per shard of each side: k nearest on the other side   (ems.mining.pipeline.knn)
    score     one per shard of each side: margins, best pairs, a sorted run (ems.mining.pipeline.score)
    write     one: the merged runs as the TSV

A side is searched exactly (flat: no index, and no train/populate/merge units) or through the
index its --index gives for its number of distinct lines (ems.mining.index_kinds.chosen_kind).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.artifacts import file_fingerprint, same_file
from ems.cli import MissingDataError, UserError
from ems.configs import ConfigError, load_config
from ems.encoder_kinds import checked_language
from ems.mining.index_kinds import as_index_spec, chosen_kind
from ems.mining.pipeline.files import ShardedRows, save_array, save_json
from ems.mining.pipeline.manifest import (
    STAGES,
    DamagedManifest,
    ensure_manifest,
    file_size,
    read_manifest,
    read_options,
    stage_dir,
)
from ems.mining.pipeline.options import MineOptions
from ems.mining.streaming import scan_distinct
from ems.shards import load_array

SIDES = ("src", "tgt")
STEPS = ("embed", "train", "populate", "merge", "knn", "score", "write")
IVF_KINDS = ("ivf", "ivf-sq8", "ivf-pq")


class NothingToMine(UserError):
    """A side with no line to mine (empty, blank, or every line skipped)."""


@dataclass
class Plan:
    """A planned run: its work dir, options, each side's counts and shards (the embed manifest's
    "sides": lines, empty, distinct, skipped, first_skipped, shards, lines_bytes) and the
    encoder's model id (None without one)."""

    work: Path
    options: MineOptions
    sides: dict[str, dict]
    model_id: str | None = None

    @property
    def k(self) -> int:
        """The neighbours per sentence: --k, at most the smaller side's distinct lines."""
        return min(self.options.k, *(self.sides[side]["distinct"] for side in SIDES))

    def other(self, side: str) -> str:
        return SIDES[1 - SIDES.index(side)]

    def path(self, side: str) -> Path:
        return Path(getattr(self.options, side))

    def shard_units(self, sides=SIDES) -> list[str]:
        return [f"{side}-{shard:05d}" for side in sides for shard in range(self.sides[side]["shards"])]

    def index_kind(self, side: str) -> str:
        """How `side` is searched: the kind --index gives for its distinct lines."""
        return chosen_kind(as_index_spec(self.options.index), self.sides[side]["distinct"])

    def units(self, step: str) -> list[str]:
        """The units of `step`, in order (a SLURM array's task i runs units(step)[i])."""
        ivf = [side for side in SIDES if self.index_kind(side) in IVF_KINDS]
        return {
            "embed": self.shard_units(),
            "train": ivf,
            "populate": self.shard_units(ivf),
            "merge": [side for side in SIDES if self.index_kind(side) != "flat"],
            "knn": self.shard_units(),
            "score": self.shard_units(),
            "write": ["all"],
        }[step]

    def shard_start(self, side: str, shard: int) -> int:
        """The side's row number of the shard's first line."""
        return shard * self.options.shard_lines

    def lines(self, side: str, shard: int) -> np.ndarray:
        """The shard's (n, 2) byte offsets and line numbers, memory-mapped."""
        path = stage_dir(self.work, "embed") / side / f"{shard:05d}.lines.npy"
        size = path.stat().st_size if path.is_file() else None
        if size != self.sides[side]["lines_bytes"][shard]:
            raise UserError(f"{path} is missing or cut short: delete {stage_dir(self.work, 'embed')} and run again")
        return np.load(path, mmap_mode="r", allow_pickle=False)

    def all_lines(self, side: str) -> ShardedRows:
        return ShardedRows([self.lines(side, shard) for shard in range(self.sides[side]["shards"])])

    def load(self, step: str, unit: str, path: Path) -> np.ndarray:
        """A .npy file that `unit` of `step` wrote, memory-mapped, once its record says it is whole."""
        file_size(self.work, step, unit, path)
        return np.load(path, mmap_mode="r", allow_pickle=False)

    def vectors_path(self, side: str, shard: int) -> Path:
        return stage_dir(self.work, "embed") / side / f"{shard:05d}.vectors.npy"

    def vectors(self, side: str, shard: int) -> np.ndarray:
        return self.load("embed", f"{side}-{shard:05d}", self.vectors_path(side, shard))

    def all_vectors(self, side: str) -> ShardedRows:
        return ShardedRows([self.vectors(side, shard) for shard in range(self.sides[side]["shards"])])


def parse_unit(unit: str) -> tuple[str, int]:
    """ "src-00003" -> ("src", 3)."""
    side, shard = unit.rsplit("-", 1)
    return side, int(shard)


def _absolute(options: MineOptions) -> MineOptions:
    paths = ("src", "tgt", "out", "src_embeddings", "tgt_embeddings", "work_dir", "cache_dir")
    return dataclasses.replace(
        options, **{name: str(Path(getattr(options, name)).absolute()) for name in paths if getattr(options, name)}
    )


def _scan_side(options: MineOptions, side: str, directory: Path) -> dict:
    path = Path(getattr(options, side))
    sizes: list[int] = []

    def write_shard(shard: int, rows: np.ndarray) -> None:
        sizes.append(save_array(directory / side / f"{shard:05d}.lines.npy", rows))

    counts = scan_distinct(path, options.shard_lines, write_shard)
    if counts.distinct == 0:
        skipped = counts.describe_skipped()
        raise NothingToMine(
            f"nothing to mine: {path} has no non-empty line ({counts.lines} lines, {counts.empty} empty"
            + (f"; skipped: {skipped})" if skipped else ")")
        )
    if counts.skipped:
        print(f"note: {path}: skipped {counts.describe_skipped()}", file=sys.stderr)
    embeddings = getattr(options, f"{side}_embeddings")
    if embeddings is not None:
        shape = load_array(embeddings, "write it again").shape
        if len(shape) != 2 or shape[0] != counts.lines:
            raise ValueError(f"{embeddings} has shape {shape}; expected one row per line ({counts.lines}, d) of {path}")
    return {**dataclasses.asdict(counts), "shards": len(sizes), "lines_bytes": sizes}


def _check_inputs(options: MineOptions, manifest: dict) -> None:
    for name, fingerprint in manifest["inputs"].items():
        path = Path(getattr(options, name))
        if not path.is_file():
            raise MissingDataError(f"missing input file {path}")
        if not same_file(fingerprint, path):
            raise UserError(
                f"{path} changed since {stage_dir(options.work_dir, 'embed')} was made from it: use another "
                f"--work-dir, or delete {' '.join(str(stage_dir(options.work_dir, s)) for s in STAGES)} to start again"
            )


def plan(options: MineOptions, encoder=None) -> Plan:
    """Check `options` (languages against `encoder`'s, inputs, the work dir's manifests), scan
    the inputs unless the work dir already holds their scan, and write the manifests and
    options.json. Every refusal comes before any slow work."""
    if options.work_dir is None:
        raise ValueError("a mining plan needs a --work-dir")
    if encoder is None and options.src_embeddings is None:
        raise ValueError("give --encoder, or both --src-embeddings and --tgt-embeddings")
    options = _absolute(options)
    options = dataclasses.replace(
        options,
        src_lang=checked_language(options.src_lang, encoder, "--src-lang"),
        tgt_lang=checked_language(options.tgt_lang, encoder, "--tgt-lang"),
    )
    work = Path(options.work_dir)
    model_id = getattr(encoder, "model_id", None)
    settings = {"model_id": model_id}
    cumulative = {}
    for stage in STAGES:
        settings = {**settings, **options.settings(stage)}
        cumulative[stage] = settings
    for stage in STAGES[:-1]:  # refuse before any work; the score stage is recomputed instead
        existing = read_manifest(work, stage)
        if existing is not None:
            ensure_manifest(work, stage, cumulative[stage])
    embed = read_manifest(work, "embed")
    if embed is not None:
        _check_inputs(options, embed)
    else:
        for side in SIDES:
            if not Path(getattr(options, side)).is_file():
                raise MissingDataError(f"missing input file {getattr(options, side)}")
        shutil.rmtree(stage_dir(work, "embed"), ignore_errors=True)  # the rest of a scan that was cut short
        sides = {side: _scan_side(options, side, stage_dir(work, "embed")) for side in SIDES}
        inputs = {side: sides[side]["fingerprint"] for side in SIDES}
        inputs.update(
            {f"{side}_embeddings": file_fingerprint(getattr(options, f"{side}_embeddings")) for side in SIDES}
            if options.src_embeddings
            else {}
        )
        ensure_manifest(work, "embed", cumulative["embed"], {"inputs": inputs, "sides": sides})
        embed = read_manifest(work, "embed")
    for stage in STAGES[1:]:
        ensure_manifest(work, stage, cumulative[stage])
    save_json(work / "options.json", dataclasses.asdict(options))
    _note_blocks_across_shards(options, embed["sides"])
    return Plan(work, options, embed["sides"], model_id)


def _note_blocks_across_shards(options: MineOptions, sides: dict) -> None:
    """A note when the encoder's blocks of --chunk-lines lines (ems.mining.pipeline.embed) cross
    shard edges, so that some lines are encoded twice."""
    if options.src_embeddings is not None or options.shard_lines % options.chunk_lines == 0:
        return
    if all(sides[side]["shards"] < 2 for side in SIDES):
        return
    print(
        f"note: --shard-lines {options.shard_lines} is not a multiple of --chunk-lines {options.chunk_lines}: a "
        f"block of {options.chunk_lines} lines that two shards share is encoded by both (vectors must not depend "
        "on the sharding); a multiple encodes every line once",
        file=sys.stderr,
    )


def load_plan(work_dir: Path) -> Plan:
    """The plan a work dir holds (what a stage job runs from), its inputs checked unchanged."""
    work = Path(work_dir).absolute()
    embed = read_manifest(work, "embed")
    if embed is None or not (work / "options.json").is_file():
        raise MissingDataError(
            f"{work} holds no mining plan: run `python -m ems.apps.mine plan --work-dir {work} ...` first"
        )
    try:
        options = load_config(MineOptions, values=read_options(work))
    except ConfigError as error:  # a hand-edited options.json: one line naming it
        raise DamagedManifest(f"{work / 'options.json'}: {'; '.join(error.problems)}; run the plan again") from None
    _check_inputs(options, embed)  # a job that reads an input changed since the plan would mine garbage
    return Plan(work, options, embed["sides"], embed["settings"]["model_id"])


def unit_ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (a SLURM --array value); "-" for none."""
    ranges: list[list[int]] = []
    for i in indices:
        if ranges and ranges[-1][1] == i - 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in ranges) or "-"
