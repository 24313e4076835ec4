"""The console scripts pyproject.toml installs run the same main as `python -m <module>`."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = {
    "ems-prep": "data_prep",
    "ems-data": "data_prep.manifest_fetch",
    "ems-train": "ems.training.train",
    "ems-eval": "eval.run_all",
    "ems-mine": "ems.apps.mine",
    "ems-export": "ems.apps.export",
    "ems-demo": "ems.apps.demo",
}


def _script(name: str) -> Path:
    path = Path(sys.executable).parent / name  # pip puts console scripts beside the interpreter
    if not path.is_file():
        pytest.fail(f"{path} is missing: install the project (pip install -e .) to get the console scripts")
    return path


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_shows_the_modules_usage(name):
    by_script = subprocess.run([str(_script(name)), "--help"], capture_output=True, text=True, timeout=300)
    by_module = subprocess.run(
        [sys.executable, "-m", SCRIPTS[name], "--help"], capture_output=True, text=True, timeout=300
    )
    assert by_script.returncode == 0, by_script.stderr[-2000:]
    assert by_script.stdout.startswith("usage:")
    # the same parser: all but the usage line, which names the program as it was run
    assert by_script.stdout.split("\n\n", 1)[1] == by_module.stdout.split("\n\n", 1)[1]


def test_script_reports_a_user_error_in_one_line(tmp_path):
    result = subprocess.run(
        [str(_script("ems-eval")), "--model", str(tmp_path / "none"), "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: model directory {tmp_path / 'none'} does not exist"
