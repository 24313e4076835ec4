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

Both are checked as they are read: a manifest that is not what its stage wrote (not JSON, a key
missing or of another type: edited by hand, or cut short on disk) is `DamagedManifest`, one line
naming the file and the folders to delete; a unit record that is not is a unit not finished (it is
done again, with a note on stderr), as one whose files changed.
"""

from __future__ import annotations

import math
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


INPUTS = ("src", "tgt", "src_embeddings", "tgt_embeddings")  # the files an embed manifest fingerprints
SIDE_COUNTS = ("lines", "empty", "distinct", "shards")  # an embed manifest's counts of each side


class SettingChanged(UserError):
    """A work dir's stage was made with other settings or inputs than this run's."""


class DamagedManifest(UserError):
    """A stage's manifest is not what the stage wrote (not JSON, a key missing or of another type)."""


def stage_dir(work: Path, stage: str) -> Path:
    return Path(work) / stage


def _json_object(path: Path) -> tuple[dict | None, str | None]:
    """(the JSON object in `path`, None), or (None, what is wrong with the file)."""
    try:
        record = read_json(path)
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except (ValueError, RecursionError) as error:  # ValueError: JSONDecodeError, a number of too many digits
        return None, f"not JSON ({' '.join(str(error).split())})"
    if not isinstance(record, dict):
        return None, f"not a JSON object but {type(record).__name__}"
    return record, None


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fingerprint_problem(fingerprint) -> str | None:
    if not isinstance(fingerprint, dict):
        return "is not a mapping"
    if not (_is_count(fingerprint.get("size")) and isinstance(fingerprint.get("mtime_ns"), int)):
        return "lacks the size or modification time"
    return None if isinstance(fingerprint.get("blake2b"), str) else "lacks the digest"


def _embed_problem(manifest: dict) -> str | None:
    """What is wrong with an embed manifest's inputs and sides (ems.mining.pipeline.plan), or None."""
    settings, inputs, sides = manifest["settings"], manifest.get("inputs"), manifest.get("sides")
    if "model_id" not in settings or not _is_count(settings.get("shard_lines")) or not settings["shard_lines"]:
        return "settings lack the model id or the shard size"
    expected = INPUTS if settings.get("src_embeddings") else INPUTS[:2]
    if not isinstance(inputs, dict) or set(inputs) != set(expected):
        return f"inputs must fingerprint the files {', '.join(expected)}"
    for name, fingerprint in inputs.items():
        if problem := _fingerprint_problem(fingerprint):
            return f"the fingerprint of {name} {problem}"
    if not isinstance(sides, dict) or not all(isinstance(sides.get(side), dict) for side in ("src", "tgt")):
        return "sides must hold the counts of src and tgt"
    for side in ("src", "tgt"):
        counts = sides[side]
        if not all(_is_count(counts.get(name)) for name in SIDE_COUNTS):
            return f"sides.{side} lacks one of the counts {', '.join(SIDE_COUNTS)}"
        if not counts["distinct"] or counts["shards"] != math.ceil(counts["distinct"] / settings["shard_lines"]):
            return f"sides.{side}: {counts['distinct']} distinct lines do not make {counts['shards']} shards"
        sizes = counts.get("lines_bytes")
        if not isinstance(sizes, list) or len(sizes) != counts["shards"] or not all(map(_is_count, sizes)):
            return f"sides.{side}.lines_bytes must list the size of each of its {counts['shards']} shards"
        skipped = counts.get("skipped")
        if not isinstance(skipped, dict) or not all(_is_count(count) for count in skipped.values()):
            return f"sides.{side}.skipped must count the lines skipped by reason"
    return None


def read_manifest(work: Path, stage: str) -> dict | None:
    """`stage`'s manifest (None: there is none yet); DamagedManifest naming the file and what to
    delete when it is not what the stage wrote."""
    path = stage_dir(work, stage) / "manifest.json"
    if not path.is_file():
        return None
    manifest, problem = _json_object(path)
    if problem is None and not isinstance(manifest.get("settings"), dict):
        problem = "no settings"
    if problem is None and stage == "embed":
        problem = _embed_problem(manifest)
    if problem is not None:
        later = " ".join(str(stage_dir(work, s)) for s in STAGES[STAGES.index(stage) :])
        raise DamagedManifest(
            f"{path} is damaged ({problem}), not what the {stage} stage wrote: delete {later} to redo them"
        )
    return manifest


def read_options(work: Path) -> dict:
    """WORK/options.json, the options a plan wrote for its `stage` jobs (a mapping, checked by the
    caller as MineOptions); DamagedManifest naming it when it is not a JSON object."""
    path = Path(work) / "options.json"
    options, problem = _json_object(path)
    if problem is not None:
        raise DamagedManifest(
            f"{path} is damaged ({problem}), not what `python -m ems.apps.mine plan` wrote: run the plan again"
        )
    return options


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
    """(the unit's record, or None; what is wrong with it or its files, or None)."""
    path = done_path(work, step, unit)
    if not path.is_file():
        return None, None
    record, problem = _json_object(path)
    if problem is None:
        files = record.get("files")
        if not isinstance(files, dict) or not all(_is_count(size) for size in files.values()):
            problem = "no sizes of its files"
        elif step == "write" and not _is_count(record.get("written")):
            problem = "no count of the pairs written"
    if problem is not None:
        return None, f"the record {path} is damaged ({problem})"
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
    name = str(_name(work, path))
    if record is not None and name not in record["files"]:
        record, problem = None, f"the record of {step} {unit} does not list {path}"
    if record is None:
        found = problem or f"{path} is not there yet"
        raise UserError(f"{found}: run the {step} step ({step} {unit}) first")
    return record["files"][name]


def _name(work: Path, path: Path) -> Path:
    path = Path(path)
    return path.relative_to(work) if path.is_relative_to(work) else path
