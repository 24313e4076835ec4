"""Stage manifests: what a stage's files were made from, and which of its units are finished.

In: a work dir, a stage, the settings its output depends on and its inputs' fingerprints. Out:

    WORK/<stage>/manifest.json          {"stage", "settings", "inputs", ...}: settings of this
                                        stage and every earlier one (ems.mining.pipeline.options.
                                        OUTPUT_SETTINGS), the input files' fingerprints
    WORK/<stage>/done/<unit>.json       one record per finished unit: {"files": {path: bytes}}

A unit is finished when its record exists and every file it lists still has its recorded size
(a file cut short on disk makes the unit unfinished again: a rerun redoes it). A record is written
after its files are in place, so a unit killed at any point is simply not finished. A manifest
made with other settings is refused (`SettingChanged`, one line naming the setting), except the
score stage's, which is cheap to recompute: its files are dropped and the new settings written.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ems.cli import UserError
from ems.mining.pipeline.files import read_json, save_json

STAGES = ("embed", "index", "knn", "score")
STAGE_OF_STEP = {
    "embed": "embed",
    "train": "index",
    "populate": "index",
    "merge": "index",
    "knn": "knn",
    "score": "score",
    "write": "score",
}
RECOMPUTED = ("score",)  # a change of these stages' settings redoes them instead of refusing


class SettingChanged(UserError):
    """A work dir's stage was made with other settings or inputs than this run's."""


def stage_dir(work: Path, stage: str) -> Path:
    return Path(work) / stage


def read_manifest(work: Path, stage: str) -> dict | None:
    path = stage_dir(work, stage) / "manifest.json"
    return read_json(path) if path.is_file() else None


def _difference(old: dict, new: dict) -> str | None:
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            return f"{name}={old.get(name)!r}; this run has {name}={new.get(name)!r}"
    return None


def ensure_manifest(work: Path, stage: str, settings: dict, extra: dict | None = None) -> None:
    """Write `stage`'s manifest ({"stage", "settings", **extra}) unless one with the same settings
    is there. Other settings: SettingChanged naming the first that differs, or, for a stage in
    RECOMPUTED, a note on stderr and the stage's files dropped so that it runs again."""
    existing = read_manifest(work, stage)
    if existing is not None:
        changed = _difference(existing["settings"], settings)
        if changed is None:
            return
        directory = stage_dir(work, stage)
        if stage not in RECOMPUTED:
            later = [str(stage_dir(work, s)) for s in STAGES[STAGES.index(stage) :]]
            raise SettingChanged(
                f"{directory} was made with {changed}: use another --work-dir, or delete {' '.join(later)} to redo it"
            )
        print(f"note: {directory} was made with {changed}: doing the {stage} stage again", file=sys.stderr)
        shutil.rmtree(directory)
    save_json(stage_dir(work, stage) / "manifest.json", {"stage": stage, "settings": settings, **(extra or {})})


def done_path(work: Path, step: str, unit: str) -> Path:
    return stage_dir(work, STAGE_OF_STEP[step]) / "done" / f"{step}-{unit}.json"


def mark_done(work: Path, step: str, unit: str, files: dict[Path, int], **extra) -> None:
    """Record `unit` of `step` as finished: its files and their sizes (paths under `work` are
    kept relative to it, so that a work dir can move)."""
    relative = {str(_name(work, path)): size for path, size in files.items()}
    save_json(done_path(work, step, unit), {"files": relative, **extra})


def _problem(work: Path, step: str, unit: str) -> tuple[dict | None, str | None]:
    """(the unit's record, or None; what is wrong with its files, or None)."""
    path = done_path(work, step, unit)
    if not path.is_file():
        return None, None
    record = read_json(path)
    for name, size in record["files"].items():
        file = Path(work) / name
        actual = file.stat().st_size if file.is_file() else None
        if actual != size:
            found = "is missing" if actual is None else f"has {actual} bytes"
            return None, f"{file} {found}, written with {size}"
    return record, None


def done_record(work: Path, step: str, unit: str, note: bool = False) -> dict | None:
    """The unit's record if it is finished (every file it lists has its size), else None; with
    `note`, a file of another size is reported on stderr (the unit is about to be done again)."""
    record, problem = _problem(work, step, unit)
    if problem and note:
        print(f"note: {problem}: {step} {unit} is done again", file=sys.stderr)
    return record


def file_size(work: Path, step: str, unit: str, path: Path) -> int:
    """The size `path` had when `unit` of `step` finished; a UserError naming the step to run
    when that unit is not finished, or its files are not as it wrote them (cut short on disk)."""
    record, problem = _problem(work, step, unit)
    if record is None:
        found = problem or f"{path} is not there yet"
        raise UserError(f"{found}: run the {step} step ({step} {unit}) first")
    return record["files"][str(_name(work, path))]


def _name(work: Path, path: Path) -> Path:
    path = Path(path)
    return path.relative_to(work) if path.is_relative_to(work) else path
