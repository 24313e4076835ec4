"""Atomic, verifiable training checkpoints in a directory of step tags.

Layout under a checkpoint directory:
    step<N>/          one checkpoint: DeepSpeed's files, each rank's RNG state, manifest.json
    latest            the tag of the newest complete checkpoint (replaced last, atomically)
    .partial-step<N>/ a checkpoint being written (left behind by a crash; removed on the next save)

Publishing a checkpoint: every rank writes into .partial-step<N>/step<N>/; then rank 0 writes
manifest.json (size + sha256 of every file), fsyncs the files and directories, renames the tag
directory into place, and only then rewrites `latest`. A checkpoint whose manifest is missing
or does not match its files (a truncated or corrupt write) is skipped on load with a warning,
and the newest checkpoint that does verify is used instead.

Loading never runs code from a run directory. DeepSpeed's own engine unpickles its `.pt` files
with `weights_only=False`, so any class named in the file would be imported and called; the
trainer points the engine's loader at load_tensor_file (load_only_tensors), which loads them with
`weights_only=True`: tensors, containers and plain values, plus the four DeepSpeed classes
(deepspeed_state_classes) that its optimizer states hold, all of them plain records. A file
naming anything else is refused (UnsafeCheckpointError). The manifest is no defence against
tampering (anyone can regenerate it); the allow-list is.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import pickle
import random
import re
import shutil
from collections.abc import Collection, Iterator
from pathlib import Path

import numpy as np
import torch

from ems.artifacts import file_record, fsync_path, read_manifest_files, sha256_file
from ems.cli import UserError
from ems.corpus import OutsideRootError, inside_folder, resolve_inside

LATEST = "latest"
MANIFEST = "manifest.json"
PARTIAL_PREFIX = ".partial-"
TAG_PATTERN = re.compile(r"step(\d+)")
log = logging.getLogger(__name__)


def step_tag(step: int) -> str:
    return f"step{step}"


def partial_dir(checkpoint_dir: Path, tag: str) -> Path:
    """Where the ranks write checkpoint `tag` before it is published (DeepSpeed's save_dir)."""
    return checkpoint_dir / f"{PARTIAL_PREFIX}{tag}"


def _checkpoint_files(tag_dir: Path) -> list[Path]:
    return sorted(p for p in tag_dir.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(tag_dir: Path) -> None:
    """manifest.json: {relative path: {"bytes", "sha256"}} of every file, all fsynced."""
    files = {}
    for path in _checkpoint_files(tag_dir):
        fsync_path(path)
        files[str(path.relative_to(tag_dir))] = file_record(path)
    _write_durably(tag_dir / MANIFEST, json.dumps({"files": files}, indent=1) + "\n")
    for directory in {tag_dir, *(p.parent for p in _checkpoint_files(tag_dir))}:
        fsync_path(directory)


class UnsafeCheckpointError(UserError):
    """A checkpoint file names a Python object outside the allow-list: it is never unpickled."""


class NoUsableCheckpointError(UserError):
    """A run directory has checkpoints, and none of them can be resumed from."""


class DamagedCheckpointError(UserError):
    """A checkpoint file that its manifest vouches for cannot be read (made by other code, or changed
    and its manifest written again): the message names the file."""


def verify(tag_dir: Path) -> str | None:
    """None if `tag_dir` is a complete checkpoint matching its manifest, else what is wrong."""
    manifest_path = tag_dir / MANIFEST
    if not manifest_path.is_file():
        return f"{tag_dir} has no {MANIFEST} (an incomplete write)"
    try:
        inside_folder(tag_dir, manifest_path, "the checkpoint")
        expected = read_manifest_files(manifest_path)
    except OutsideRootError as error:
        return str(error)
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, nested too deep, not a manifest
        return f"{manifest_path} is unreadable: {' '.join(str(error).split())}"
    for name, entry in expected.items():
        try:
            path = resolve_inside(tag_dir, name, manifest_path, home="the checkpoint")
        except OutsideRootError as error:
            return str(error)
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{path} has {path.stat().st_size} bytes, the manifest says {entry['bytes']} (truncated?)"
        if sha256_file(path) != entry["sha256"]:
            return f"{path} does not match its sha256 in the manifest (corrupt)"
    return None


def _write_durably(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file, fsync, rename: readers see old or new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_path(path.parent)


def publish(checkpoint_dir: Path, tag: str, keep_last: int, keep: Collection[str] = ()) -> None:
    """Rank 0, after every rank has written into partial_dir(tag): manifest, rename into place,
    point `latest` at it, then delete all but the newest `keep_last` checkpoints (those tagged in
    `keep`, e.g. a wsd run's branch points, are never deleted, nor counted)."""
    staged = partial_dir(checkpoint_dir, tag) / tag
    write_manifest(staged)
    final = checkpoint_dir / tag
    if final.exists():
        shutil.rmtree(final)  # a re-save of the same step (e.g. resumed and stopped again at once)
    staged.rename(final)
    fsync_path(checkpoint_dir)
    shutil.rmtree(partial_dir(checkpoint_dir, tag))
    _write_durably(checkpoint_dir / LATEST, tag)
    for old in [saved for saved in saved_tags(checkpoint_dir) if saved not in keep][:-keep_last]:
        shutil.rmtree(checkpoint_dir / old)
    for leftover in checkpoint_dir.glob(f"{PARTIAL_PREFIX}*"):
        shutil.rmtree(leftover)


def reject(checkpoint_dir: Path, tag: str) -> Path:
    """Rank 0: move checkpoint `tag` aside to rejected-<tag>/ (never resumed from, kept for a
    post-mortem) and point `latest` at the newest checkpoint left (or remove it); returns where."""
    rejected = checkpoint_dir / f"rejected-{tag}"
    if rejected.exists():
        shutil.rmtree(rejected)
    (checkpoint_dir / tag).rename(rejected)
    remaining = saved_tags(checkpoint_dir)
    if remaining:
        _write_durably(checkpoint_dir / LATEST, remaining[-1])
    else:
        (checkpoint_dir / LATEST).unlink(missing_ok=True)
    fsync_path(checkpoint_dir)
    return rejected


def saved_tags(checkpoint_dir: Path) -> list[str]:
    """Published checkpoint tags, oldest first."""
    tags = [p.name for p in checkpoint_dir.iterdir() if p.is_dir() and TAG_PATTERN.fullmatch(p.name)]
    return sorted(tags, key=lambda t: int(TAG_PATTERN.fullmatch(t).group(1)))


def _latest(checkpoint_dir: Path) -> str | None:
    """The tag `latest` names, or None when there is no `latest` or it names no tag (a warning says
    so: the newest checkpoint that verifies is used, as without it)."""
    latest_file = checkpoint_dir / LATEST
    if not latest_file.is_file():
        return None
    try:
        latest = latest_file.read_bytes().decode("utf-8").strip()
    except UnicodeDecodeError:
        latest = None
    if latest is None or not TAG_PATTERN.fullmatch(latest):
        log.warning(
            "warning: %s names no checkpoint (step<N>): ignored, the newest one that verifies is used", latest_file
        )
        return None
    return latest


def resumable_tags(checkpoint_dir: Path) -> Iterator[str]:
    """The tags to try resuming from, best first: `latest` if it verifies, then each older
    checkpoint that does (a warning names what was wrong with each one skipped). Checked one at a
    time, as the caller asks for the next (a caller also rejects ones whose weights are not finite)."""
    if not checkpoint_dir.is_dir():
        return
    latest = _latest(checkpoint_dir)
    candidates = saved_tags(checkpoint_dir)[::-1]
    if latest in candidates:  # `latest` first, then older ones; never a newer unpublished one
        candidates = candidates[candidates.index(latest) :]
    for tag in candidates:
        problem = verify(checkpoint_dir / tag)
        if problem is None:
            yield tag
        else:
            log.warning("warning: skipping checkpoint %s: %s; trying the previous one", tag, problem)


def no_usable_checkpoint(checkpoint_dir: Path, why: str) -> NoUsableCheckpointError:
    return NoUsableCheckpointError(
        f"{checkpoint_dir}: {why}, so the run cannot resume; move {checkpoint_dir} aside to start this run "
        "again from step 0 (or train into a new out= directory)"
    )


# DeepSpeed's classes inside its ZeRO / bf16 / fp16 optimizer states (found by loading every
# configs/deepspeed/*.json checkpoint with weights_only=True): a loss-scale record, the ZeRO-stage
# enum and a (start, numel) named tuple; none runs code when rebuilt.
def deepspeed_state_classes() -> list:
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


# What torch.load raises for a file that is not a whole torch file (truncated, bytes changed): its
# zip reader's RuntimeError, EOFError, and the unpickler's and storage rebuilding's errors.
DAMAGED_FILE_ERRORS = (RuntimeError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError)


def load_tensor_file(path: str | Path, map_location=None):
    """torch.load with weights_only=True and the DeepSpeed allow-list; UnsafeCheckpointError
    (nothing in the file is run) when it names any other object, DamagedCheckpointError naming the
    file when it is not a whole torch file."""
    try:
        with torch.serialization.safe_globals(deepspeed_state_classes()):
            return _TORCH_LOAD(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message: a generic paragraph, then the line that names what was refused
        found = re.search(r"[^\n]*unsupported[^\n]*", str(error), flags=re.IGNORECASE)
        if found is None:  # not a refusal: the pickle itself is broken
            raise DamagedCheckpointError(_damaged(path, error)) from None
        refused = found.group(0).rstrip(" .")
        raise UnsafeCheckpointError(
            f"refusing to load {path}: it names a Python object outside the allow-list of tensors, plain values and "
            f"DeepSpeed's state records ({refused}); this project never writes one, so the file was made by other "
            "code or tampered with. Nothing in it was run. Delete that checkpoint directory to resume from an "
            "earlier one"
        ) from None
    except DAMAGED_FILE_ERRORS as error:
        raise DamagedCheckpointError(_damaged(path, error)) from None


def _damaged(path: str | Path, error: BaseException) -> str:
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (
        f"{path} is not a whole torch file ({reason}) although its checkpoint's manifest lists it as written: "
        "delete that checkpoint directory to resume from an earlier one"
    )


_TORCH_LOAD = torch.load  # torch's own, also while tensor_files_only() stands in for it


@contextlib.contextmanager
def tensor_files_only():
    """While inside: every torch.load is load_tensor_file, for DeepSpeed code that calls torch.load
    with weights_only=False itself (its universal-checkpoint converter and loader)."""
    torch.load = lambda f, map_location=None, *args, **kwargs: load_tensor_file(f, map_location)
    try:
        yield
    finally:
        torch.load = _TORCH_LOAD


def zero_partitions(tag_dir: Path) -> int:
    """How many data-parallel ranks' optimizer partitions a checkpoint holds (ZeRO 1/2 and
    DeepSpeed's bf16 optimizer write one file per rank); 0 when the optimizer state is whole in
    the model file (ZeRO 0 without bf16), which any number of ranks can load."""
    return len(list(Path(tag_dir).glob("*zero_pp_rank_*_mp_rank_00_optim_states.pt")))


def to_universal(tag_dir: Path, out_dir: Path) -> None:
    """DeepSpeed's universal checkpoint of `tag_dir` in `out_dir` (ds_to_universal): each
    parameter's fp32 weights and Adam moments whole, which a run with any number of ranks loads
    (`"checkpoint": {"load_universal": true}`). Files are read through load_tensor_file; the
    Megatron-specific metadata the converter asks for is filled with its defaults."""
    from deepspeed.checkpoint import ds_to_universal

    args = argparse.Namespace(
        input_folder=str(tag_dir),
        output_folder=str(out_dir),
        num_extract_workers=1,
        num_merge_workers=1,
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=True,
    )
    with tensor_files_only(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        ds_to_universal.main(args)  # its progress bars and prints would drown the trainer's log


def load_only_tensors(engine) -> None:
    """Make a DeepSpeed engine read every checkpoint file through load_tensor_file (its own
    loader unpickles with weights_only=False); saving is unchanged."""
    engine.checkpoint_engine.load = load_tensor_file


def rng_state() -> dict:
    """This process's torch, numpy (global) and python RNG states as JSON-ready values."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state().tolist(),
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "python": [version, list(internal), gauss],
    }


def set_rng_state(state: dict) -> None:
    """Set this process's RNG states from `rng_state`'s record; ValueError (nothing set) for one that
    is not such a record."""
    try:
        torch_state = torch.tensor(state["torch"], dtype=torch.uint8)
        name, keys, *rest = state["numpy"]
        numpy_state = (name, np.asarray(keys, dtype=np.uint32), *rest)
        version, internal, gauss = state["python"]
        python_state = (version, tuple(internal), gauss)
        # each is checked (on a generator of its own) before any global state changes
        torch.Generator().set_state(torch_state)
        np.random.RandomState().set_state(numpy_state)
        random.Random().setstate(python_state)
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(f"not the RNG states of a checkpoint ({reason})") from None
    torch.set_rng_state(torch_state)
    np.random.set_state(numpy_state)
    random.setstate(python_state)


def load_rng_state(path: Path) -> None:
    """Set this process's RNG states from the file `path` (rng_file) of a checkpoint;
    DamagedCheckpointError naming it when it is not such a record."""
    try:
        set_rng_state(json.loads(Path(path).read_bytes()))
    except (ValueError, RecursionError) as error:  # ValueError: UnicodeDecodeError, JSONDecodeError, set_rng_state
        raise DamagedCheckpointError(
            f"{path}: {' '.join(str(error).split())}; delete that checkpoint directory to resume from an earlier one"
        ) from None


def rng_file(tag_dir: Path, rank: int) -> Path:
    return tag_dir / f"rng_rank{rank}.json"
