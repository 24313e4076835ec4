"""The embed step: one shard of one side's distinct lines as vectors on disk.

In: the plan (ems.mining.pipeline.plan: the shard's lines file, WORK/embed/<side>/<shard>.lines.npy)
and the side's text file, or its precomputed per-line .npy (--src-embeddings / --tgt-embeddings).
Out: WORK/embed/<side>/<shard>.vectors.npy, (n, d) float32 or float16 (--dtype), row i the vector
of the shard's line i, written as it is encoded (`chunk_lines` lines at a time, never the whole
shard's text in memory) and renamed into place when complete; then the unit's done record.
"""

from __future__ import annotations

import numpy as np

from ems.cli import UserError
from ems.encoder_kinds import load_encoder
from ems.mining.pipeline.files import save_rows
from ems.mining.pipeline.manifest import SettingChanged, mark_done
from ems.mining.pipeline.plan import Plan, parse_unit
from ems.mining.streaming import chunk_embeddings, texts_at

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


def embed_unit(plan: Plan, unit: str, encoder=None) -> None:
    """Embed shard `unit` ("src-00003") with `encoder` (None: the plan's, or the precomputed rows)."""
    side, shard = parse_unit(unit)
    options = plan.options
    lines = np.array(plan.lines(side, shard))
    precomputed = getattr(options, f"{side}_embeddings")
    if precomputed is not None:
        vectors = np.load(precomputed, mmap_mode="r", allow_pickle=False)
        numbers = lines[:, 1]
        step = options.chunk_lines
        chunks = (vectors[numbers[start : start + step]] for start in range(0, len(numbers), step))
    else:
        encoder = encoder if encoder is not None else plan_encoder(plan)
        texts = texts_at(plan.path(side), lines[:, 0], options.chunk_lines)
        chunks = chunk_embeddings(encoder, texts, getattr(options, f"{side}_lang"), options.tokenizer_workers)
    path = plan.vectors_path(side, shard)
    mark_done(plan.work, "embed", unit, {path: save_rows(path, len(lines), chunks, options.dtype)})
