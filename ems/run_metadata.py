"""What produced a run or a model: the code's git commit, the package versions, the command line,
the machine (its CPU, and the threads torch computes with: a float sum split over another number of
threads rounds differently, so bitwise comparisons need the same count) and the time, as
`run_metadata.json`.

    write_run_metadata(run_dir, run_metadata(sys.argv))

The trainer writes it into its run directory when it starts and copies it into the exported
model directory, so a model says which code trained it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import subprocess
from importlib import metadata as distributions
from pathlib import Path

from ems.artifacts import write_text

RUN_METADATA_FILE = "run_metadata.json"
PACKAGES = ("torch", "deepspeed", "sentencepiece", "numpy", "ems")
REPO_ROOT = Path(__file__).resolve().parents[1]


def git_state(directory: Path = REPO_ROOT) -> dict | None:
    """{"commit": HEAD's hash, "dirty": whether tracked files differ from it} of the git checkout
    holding `directory`; None outside a checkout (an installed wheel) or without git."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit, "dirty": bool(changes.strip())}


def package_version(name: str) -> str | None:
    """The installed version of distribution `name`, None if it is not installed."""
    try:
        return distributions.version(name)
    except distributions.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; else what platform reports)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """{"cpu": model name, "cpu_capability": the kernels torch picked (e.g. AVX2, AVX512), "cpus":
    logical CPUs, "torch_threads": the threads torch computes with}."""
    import torch

    return {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def run_metadata(argv: list[str]) -> dict:
    """{"git": git_state() (None outside git), "versions": {package: version or None, "python": ...},
    "command": argv, "host": host name, "machine": machine(), "utc": ISO 8601 time} for the process
    started with `argv`."""
    versions = {name: package_version(name) for name in PACKAGES}
    versions["python"] = platform.python_version()
    return {
        "git": git_state(),
        "versions": versions,
        "command": list(argv),
        "host": socket.gethostname(),
        "machine": machine(),
        "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def write_run_metadata(directory: str | Path, metadata: dict) -> Path:
    """Write `metadata` (a run_metadata dict) as `directory`/run_metadata.json; returns the file's path."""
    path = Path(directory) / RUN_METADATA_FILE
    write_text(path, json.dumps(metadata, indent=2) + "\n", "run metadata")  # whole or not at all
    return path
