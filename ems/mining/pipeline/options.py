"""What a mining run is asked to do: one typed dataclass, the same for every launcher.

In: the command line's values (ems.apps.mine), or a mapping read back from a work dir's options.json
(ems.configs.load_config, so a hand-edited file is type-checked). Out: `MineOptions`, checked
(one ValueError naming the setting; `out` that is one of the input files, by path, symlink or hard
link, too), and `OUTPUT_SETTINGS`: which of its fields each stage's
files depend on (the rest only change how a run goes: devices, workers, chunk sizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ems.cli import check_choice
from ems.corpus import check_output_not_input
from ems.mining.index_kinds import DEFAULT_CHUNK_ROWS, parse_index_spec
from ems.mining.margin import DEFAULT_K, MARGINS, RETRIEVAL
from ems.mining.streaming import DEFAULT_CHUNK_LINES

DEFAULT_SHARD_LINES = 1_000_000
INPUT_FILES = ("src", "tgt", "src_embeddings", "tgt_embeddings")  # what a run reads: `out` must be none of them

# The settings each stage's output depends on (a stage's manifest records them; the later stages
# depend on them through the earlier stage's manifest).
OUTPUT_SETTINGS = {
    "embed": (
        "src",
        "tgt",
        "src_lang",
        "tgt_lang",
        "encoder",
        "src_embeddings",
        "tgt_embeddings",
        "shard_lines",
        "dtype",
    ),
    "index": ("index",),
    "knn": ("k",),
    "score": ("margin", "mode", "threshold", "line_numbers", "out"),
}


@dataclass
class MineOptions:
    """One mining run: src against tgt (text files, one sentence per line), pairs to `out` (TSV:
    score, src sentence, tgt sentence[, src line, tgt line]).

    encoder: an ems.encoder_kinds spec, or None when both *_embeddings (precomputed .npy, one row
    per line of the file) are given or the caller embeds with an encoder object. work_dir: where
    the stages keep their files (None: a temporary directory, removed afterwards; give one to
    resume a run or run it under SLURM).
    shard_lines: distinct lines per embed shard (one job each); dtype: how vectors are stored.
    k, margin, mode, index, threshold: the mining itself (ems.mining.margin, ems.mining.index_kinds).
    line_numbers: also write each sentence's 1-based line number (first occurrence).
    cache_dir, device, chunk_lines, chunk_rows, tokenizer_workers, workers: how it runs (local
    launcher: `workers` processes over the shards of a step); they never change the output, except
    that a model encoder's vectors can differ in their last bits with the device and chunk_lines
    (the lines encoded in one call: blocks at fixed row numbers, ems.mining.pipeline.embed), and so
    can the scores; shard_lines, workers and chunk_rows never do."""

    src: str
    src_lang: str
    tgt: str
    tgt_lang: str
    out: str
    encoder: str | None = None
    src_embeddings: str | None = None
    tgt_embeddings: str | None = None
    work_dir: str | None = None
    threshold: float | None = None
    k: int = DEFAULT_K
    margin: str = "ratio"
    mode: str = "max"
    index: str = "auto"
    shard_lines: int = DEFAULT_SHARD_LINES
    dtype: Literal["float32", "float16"] = "float32"
    line_numbers: bool = False
    cache_dir: str | None = None
    device: str | None = None
    chunk_lines: int = DEFAULT_CHUNK_LINES
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    tokenizer_workers: int = 0
    workers: int = 1

    def __post_init__(self) -> None:
        check_choice("margin", self.margin, MARGINS)
        check_choice("mode", self.mode, RETRIEVAL)
        check_choice("dtype", self.dtype, ("float32", "float16"))
        parse_index_spec(self.index)
        for name in ("k", "shard_lines", "chunk_lines", "chunk_rows", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be an integer >= 1, got {value!r}")
        if self.tokenizer_workers < 0:
            raise ValueError(f"--tokenizer-workers must be >= 0, got {self.tokenizer_workers}")
        if (self.src_embeddings is None) != (self.tgt_embeddings is None):
            raise ValueError("give both --src-embeddings and --tgt-embeddings, or neither")
        inputs = [(f"--{name.replace('_', '-')}", getattr(self, name)) for name in INPUT_FILES]
        check_output_not_input(("--out", self.out), inputs)

    def settings(self, stage: str) -> dict:
        """The values of the settings `stage`'s output depends on (OUTPUT_SETTINGS)."""
        return {name: getattr(self, name) for name in OUTPUT_SETTINGS[stage]}
