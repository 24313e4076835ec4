"""Every study under ems/apps/studies/ with a command line runs as its module: `python -m
ems.apps.studies.NAME --help` prints its usage, and the usage lines of its docstring name it by that
module (as benchmarks/ is checked in test_benchmarks_house)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

STUDIES = REPO_ROOT / "ems" / "apps" / "studies"
COMMANDS = sorted(
    path.stem
    for path in STUDIES.glob("*.py")
    if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in ast.parse(path.read_text()).body)
)
USAGE = re.compile(r"python -m (ems\.apps\.studies\.\w+)")


def test_the_studies_with_a_command_line_are_found():
    assert {"ablation", "compute_map_runs", "heads_study", "quoted_reference_rows"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_runs_as_a_module_and_the_usage_names_it(name):
    module = f"ems.apps.studies.{name}"
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT
    )
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr
    docstring = ast.get_docstring(ast.parse((STUDIES / f"{name}.py").read_text())) or ""
    named = set(USAGE.findall(docstring))
    assert module in named, f"{name}'s docstring has no usage line `python -m {module}`"


def test_the_files_the_studies_read_by_default_are_in_the_repository():
    """Paths a study builds from the repository root (a module moved into another folder once pointed one
    level too high)."""
    from ems.apps.studies import heads_study, quoted_reference_rows

    assert heads_study.STS_CONFIG.is_file() and quoted_reference_rows.QUOTED.is_file()
