"""`ems-prep fetch`'s Hugging Face part: the import of every `hf:` corpus of a data-prep plan
(configs/prep/*.yaml) that can give one of its language pairs (the OPUS part: data_prep.opus.fetch).

In: a PrepConfig, the output root, the language pairs asked for (default: the config's), `dry_run`;
out: each corpus imported (data_prep.hf.importer) keeping only those pairs, one entry per corpus
(status imported, exists, failed, or planned with `dry_run`, printing each). A corpus whose import fails
is reported and the others go on; one HFImportError at the end names the failures.
"""

from __future__ import annotations

from pathlib import Path

from data_prep.config import PrepConfig
from data_prep.hf.errors import HFImportError
from data_prep.hf.importer import import_hf


def import_plan_corpora(
    config: PrepConfig, out_root: str | Path, pairs: list[str] | None = None, dry_run: bool = False, **options
) -> list[dict]:
    """Import every `hf:` corpus of `config` that can give one of `pairs` (default: the config's) into
    `out_root`, keeping only those pairs; returns one entry per corpus (status imported, exists,
    failed, or with `dry_run` planned, printing each). A corpus whose import fails is reported and the
    others go on; HFImportError at the end names the failures. `options`: import_hf's."""
    wanted = config.pair_names() if pairs is None else list(pairs)
    entries = []
    for spec in config.hf_corpora:
        known = spec.hf_pair()
        if known is not None and known not in wanted:
            continue
        if dry_run:
            cap = spec.max_pairs_for.get(known, spec.max_pairs) if known else spec.max_pairs
            print(f"hf\t{spec.hf}\t{known or 'pairs from its rows'}\tcap {cap if cap is not None else 'all'}")
            entries.append({"source": spec.hf, "status": "planned", "pairs": {known: {}} if known else {}})
            continue
        try:
            entries.append(import_hf(spec, out_root, None if known else wanted, **options))
        except HFImportError as error:
            entries.append({"source": spec.hf, "status": "failed", "reason": str(error), "pairs": {}})
    failed = [entry for entry in entries if entry["status"] == "failed"]
    if failed:
        raise HFImportError(
            f"{len(failed)} Hugging Face corpus import(s) failed: " + "; ".join(entry["reason"] for entry in failed)
        )
    return entries
