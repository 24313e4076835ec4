"""The embed step: one shard of one side's distinct lines as vectors on disk.

In: the plan (ems.mining.pipeline.plan: the shard's lines file, WORK/embed/<side>/<shard>.lines.npy)
and the side's text file, or its precomputed per-line .npy (--src-embeddings / --tgt-embeddings).
Out: WORK/embed/<side>/<shard>.vectors.npy, (n, d) float32 or float16 (--dtype), row i the vector
of the shard's line i, written as it is encoded (`chunk_lines` lines at a time, never the whole
shard's text in memory) and renamed into place when complete; then the unit's done record.

The encoder is called on blocks of `chunk_lines` distinct lines at fixed row numbers of the side
(rows 0 to chunk_lines - 1, then the next chunk_lines, ...), not on pieces of the shard: a model
encoder batches a call's sentences together (by length, padded), and its float rounding depends
on the batch, so a line's vector would depend on the sharding. A block that crosses the shard's
edge is encoded whole (its other lines are read from the neighbouring shards' lines files) and
only the shard's rows kept: with --shard-lines a multiple of --chunk-lines every line is encoded
once (the plan prints a note otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ems.cli import UserError
from ems.encoder_kinds import load_encoder
from ems.mining.pipeline.files import save_rows
from ems.mining.pipeline.manifest import SettingChanged, mark_done
from ems.mining.pipeline.plan import Plan, parse_unit
from ems.mining.streaming import chunk_embeddings, texts_at
from ems.shards import load_array

_loaded: dict[tuple, object] = {}  # one encoder per process, loaded by its first embed unit


def plan_encoder(plan: Plan):
    """The encoder of the plan's options (loaded once per process), checked to be the model the
    plan was made with (its model id)."""
    options = plan.options
    if options.encoder is None:
        raise UserError(f"{plan.work} was planned with an encoder object, not a spec: embed it in that process")
    key = (options.encoder, options.cache_dir, options.device)
    if key not in _loaded:
        _loaded[key] = load_encoder(options.encoder, options.cache_dir, options.device)
    encoder = _loaded[key]
    if getattr(encoder, "model_id", None) != plan.model_id:
        raise SettingChanged(
            f"encoder {options.encoder} is now model {getattr(encoder, 'model_id', None)}; {plan.work} was planned "
            f"with {plan.model_id}: use another --work-dir"
        )
    return encoder


def encoder_blocks(plan: Plan, side: str, shard: int) -> tuple[list[tuple[int, int]], int, int]:
    """The blocks of rows (start, stop) of `side` that the encoder is called on for `shard` (see
    the module docstring), and the shard's own rows (start, stop)."""
    rows, size = plan.sides[side]["distinct"], plan.options.chunk_lines
    start = plan.shard_start(side, shard)
    stop = min(start + plan.options.shard_lines, rows)
    return [(b, min(b + size, rows)) for b in range(start // size * size, stop, size)], start, stop


def _encoded_rows(plan: Plan, side: str, shard: int, encoder) -> Iterator[np.ndarray]:
    """The shard's vectors, a block at a time: each block of `encoder_blocks` encoded in one call,
    cut to the shard's rows."""
    options = plan.options
    blocks, start, stop = encoder_blocks(plan, side, shard)
    offsets = plan.all_lines(side)[blocks[0][0] : blocks[-1][1]][:, 0]
    # texts_at hands out chunk_lines texts at a time from a block's first row: one block each
    texts = texts_at(plan.path(side), offsets, options.chunk_lines)
    vectors = chunk_embeddings(encoder, texts, getattr(options, f"{side}_lang"), options.tokenizer_workers)
    for (first, last), block in zip(blocks, vectors, strict=True):
        yield block[max(start, first) - first : min(stop, last) - first]


def embed_unit(plan: Plan, unit: str, encoder=None) -> None:
    """Embed shard `unit` ("src-00003") with `encoder` (None: the plan's, or the precomputed rows)."""
    side, shard = parse_unit(unit)
    options = plan.options
    lines = np.array(plan.lines(side, shard))
    precomputed = getattr(options, f"{side}_embeddings")
    if precomputed is not None:
        vectors = load_array(precomputed, "write it again")
        numbers = lines[:, 1]
        step = options.chunk_lines
        chunks = (vectors[numbers[start : start + step]] for start in range(0, len(numbers), step))
    else:
        chunks = _encoded_rows(plan, side, shard, encoder if encoder is not None else plan_encoder(plan))
    path = plan.vectors_path(side, shard)
    mark_done(plan.work, "embed", unit, {path: save_rows(path, len(lines), chunks, options.dtype)})
