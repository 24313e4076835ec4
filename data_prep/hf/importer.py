"""One Hugging Face source imported into an output directory, start to end.

In: a CorpusSpec whose `hf` is the source (see data_prep.hf for the sources and the files written), the
output root, optionally the language pairs to keep, whether to stream, the datasets cache; out: the
corpus files per language pair and the source's entry in `OUT/hf_import_report.json` (also returned),
with `status` "imported", or "exists" when an earlier import with the same settings is complete and
nothing was read (data_prep.hf.report).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from data_prep.config import CorpusSpec, split_hf_source
from data_prep.hf.hub import hub_access
from data_prep.hf.local import COMPRESSIONS, FILE_BUILDERS
from data_prep.hf.report import is_finished, previous_entry, record
from data_prep.hf.rows import import_rows
from data_prep.hf.source import open_dataset


def import_hf(
    spec: CorpusSpec,
    out_root: str | Path,
    pairs: Iterable[str] | None = None,
    streaming: bool = True,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> dict:
    """Import the Hugging Face dataset `spec.hf` into `out_root` (see data_prep.hf), keeping
    only the language pairs `pairs` ("de-en") when given; returns its report entry, also written to
    `out_root/hf_import_report.json` under the corpus name (with `status` "imported", or "exists"
    when a previous import with the same settings is complete and nothing was read)."""
    started = time.time()
    out_root = Path(out_root)
    path, config = split_hf_source(spec.hf)
    selected = None if pairs is None else sorted(set(pairs))
    name = spec.name or default_name(path, config, spec.split)
    key = name if selected is None else f"{name} ({' '.join(selected)})"
    settings = {
        "source": spec.hf,
        "split": spec.split,
        "columns": spec.columns,
        "languages": spec.languages,
        "min_score": spec.min_score,
        "max_pairs": spec.max_pairs,
        "max_pairs_for": spec.max_pairs_for,
        "sample": spec.sample,
        "seed": spec.seed,
        "pairs": selected,
    }
    previous = previous_entry(out_root, key)
    if is_finished(out_root, previous, settings):
        return {**previous, "status": "exists"}
    with hub_access(path) as offline_reason:
        dataset, split, total = open_dataset(path, config, spec.split, streaming, cache_dir, offline_reason)
        where = f"{spec.hf} ({split})"
        entry = import_rows(dataset, spec, config, name, selected, out_root, total, progress, where)
    entry = {"source": spec.hf, "split": split, "name": name, "settings": settings, **entry}
    entry["seconds"] = round(time.time() - started, 1)
    record(out_root, key, entry, previous)
    return {**entry, "status": "imported"}


def default_name(path: str, config: str | None, split: str | None) -> str:
    """The corpus files' name: the dataset's (a Hub id's last part, a local path's name without its
    data-file suffixes), then `.<config>` and `.<split>` unless train."""
    base = Path(path.rstrip("/")).name or "dataset"
    if "*" not in base:
        for suffix in reversed(Path(base).suffixes):
            if suffix in FILE_BUILDERS or suffix in COMPRESSIONS:
                base = base[: -len(suffix)]
    else:
        base = Path(path).parent.name or "dataset"
    return ".".join(part for part in (base, config, None if split in (None, "train") else split) if part)
