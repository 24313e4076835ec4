"""The import layers of pyproject.toml's [tool.importlinter], written by folder and checked by import-linter
(grimp reads every import statement, function-level ones included):

- top: the apps (ems/apps/: demo, ablation, export, the mining command, the console scripts), over the
  trainer (ems/training/);
- middle: data_prep and eval, which do not import each other;
- bottom: the core, every other module of ems/ (text, languages, model, losses, the shard / corpus /
  teacher-store formats, encoders, heads, mining, ...), which imports none of the folders above it;

and no import cycle between sibling modules or packages at any depth. Outside the product: the tests over
the benchmarks over the fixtures they share, over the product, which imports none of them. A new module
needs no entry: its folder says its layer."""

import shutil
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import REPO_ROOT

LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
)


def lint(root):
    return subprocess.run([sys.executable, "-c", LINT], capture_output=True, text=True, cwd=root)


def test_the_import_contracts_hold():
    done = lint(REPO_ROOT)
    if done.returncode != 0:
        pytest.fail(f"import-linter (pyproject.toml [tool.importlinter]):\n{done.stdout}{done.stderr}", pytrace=False)


@pytest.mark.parametrize(
    ("module", "upward_import", "broken"),
    [
        ("ems/text.py", "import eval.results", "the core (ems/ outside apps/ and training/) imports nothing above it"),
        ("ems/heads/__init__.py", "import ems.training.schedule", "the core"),
        ("ems/training/schedule.py", "import ems.apps.demo", "ems/apps > ems/training"),
        ("eval/results.py", "import ems.training.config", "ems/apps > ems/training"),
        ("data_prep/clean.py", "import eval.results", "ems/apps > ems/training"),
        ("ems/text.py", "import fixtures.opus_mirror", "tests > benchmarks > fixtures"),
        ("eval/results.py", "import benchmarks.process_memory", "tests > benchmarks > fixtures"),
        ("fixtures/opus_mirror.py", "import benchmarks.process_memory", "tests > benchmarks > fixtures"),
        ("benchmarks/shard_bytes.py", "import tests.conftest", "tests > benchmarks > fixtures"),
    ],
)
def test_an_upward_import_breaks_a_contract(tmp_path, module, upward_import, broken):
    """The contracts name folders, so a module they never list is still held to its folder's layer."""
    packages = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    for package in packages:
        shutil.copytree(REPO_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{upward_import}  # noqa\n", encoding="utf-8")
    done = lint(tmp_path)
    assert done.returncode != 0, done.stdout
    verdicts = [line for line in done.stdout.splitlines() if line.endswith((" KEPT", " BROKEN"))]
    assert any(line.startswith(broken) for line in verdicts if line.endswith(" BROKEN")), verdicts
