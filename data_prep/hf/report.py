"""The import report, `OUT/hf_import_report.json`: one entry per imported source, and what a rerun may skip.

In: the output root, an entry's key (the corpus name, with the language pairs asked for) and its
settings; out: the earlier import's entry, whether it is finished with the same settings (its files all
there: a rerun reads nothing, no download), and the new entry written beside the others (pair tasks
running side by side add theirs under the report file's lock), the files of an earlier import of the same
key that the new one did not write removed. A report that names a file outside the output root is an
HFImportError, and nothing there is removed.
"""

from __future__ import annotations

import json
from pathlib import Path

from data_prep.hf.errors import inside
from ems.artifacts import update_json

REPORT_FILE = "hf_import_report.json"


def previous_entry(out_root: Path, key: str) -> dict | None:
    """The report's entry `key` (None: none); HFImportError when it names a file outside `out_root`
    (its files are looked at, and removed when stale)."""
    path = out_root / REPORT_FILE
    previous = json.loads(path.read_text(encoding="utf-8")).get(key) if path.is_file() else None
    for file in _files(previous or {}):
        inside(out_root, file, path)
    return previous


def is_finished(out_root: Path, previous: dict | None, settings: dict) -> bool:
    """Whether the earlier import `previous` had these settings and its files are all there."""
    return (
        previous is not None
        and previous["settings"] == settings
        and all((out_root / file).is_file() for file in _files(previous))
    )


def record(out_root: Path, key: str, entry: dict, previous: dict | None) -> None:
    """Remove the files of `previous` that `entry` does not list, then write `entry` under `key`."""
    written = set(_files(entry))
    for stale in set(_files(previous or {})) - written:  # an earlier import of this name with other settings
        (out_root / stale).unlink(missing_ok=True)

    def add(reports: dict) -> None:  # to the report as it is now: pair tasks running beside add theirs
        reports[key] = entry

    update_json(out_root / REPORT_FILE, add)


def _files(entry: dict) -> list[str]:
    return [file for pair in entry.get("pairs", {}).values() for file in pair.get("files", [])]
