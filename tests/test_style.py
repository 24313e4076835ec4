"""The code style of pyproject.toml's [tool.ruff], checked in CI through pytest: every Python file
is as `ruff format` writes it, and `ruff check` (pycodestyle, pyflakes, import order, pyupgrade)
finds nothing. To fix a failure: `ruff format . && ruff check --fix .`, then the rest by hand."""

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def ruff(*args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]'", pytrace=False)
    return subprocess.run([sys.executable, "-m", "ruff", *args], capture_output=True, text=True, cwd=REPO_ROOT)


def test_every_file_is_formatted():
    done = ruff("format", "--check", ".")
    if done.returncode != 0:
        pytest.fail(f"ruff format --check:\n{done.stdout}{done.stderr}", pytrace=False)


def test_the_linter_finds_nothing():
    done = ruff("check", "--output-format", "concise", ".")
    if done.returncode != 0:
        pytest.fail(f"ruff check:\n{done.stdout}{done.stderr}", pytrace=False)
