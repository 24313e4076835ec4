"""The import layers of pyproject.toml's [tool.importlinter], checked by import-linter (grimp reads
every import statement, function-level ones included):

- top: training and the apps (ems.train, ems.training, ems.demo, ems.ablation, ems.export, ...);
- middle: data_prep and eval, which do not import each other;
- bottom: the core (ems: text, languages, model, losses, the shard / corpus / teacher-store
  formats, encoders, heads, mining, ...), which imports nothing above it;

and no import cycle between sibling modules or packages at any depth. With every ems module in
a layer, a cycle across the three top-level packages would need an upward import, so these two
contracts leave no module-level cycle anywhere."""

import pkgutil
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import REPO_ROOT

LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
)


def test_the_import_contracts_hold():
    done = subprocess.run([sys.executable, "-c", LINT], capture_output=True, text=True, cwd=REPO_ROOT)
    if done.returncode != 0:
        pytest.fail(f"import-linter (pyproject.toml [tool.importlinter]):\n{done.stdout}{done.stderr}", pytrace=False)


def test_every_ems_module_is_in_a_layer():
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [contract["layers"] for contract in config["contracts"] if contract["id"] == "layers"]
    named = {name.strip().strip("()") for layer in layers for name in layer.replace("|", ":").split(":")}
    modules = {f"ems.{module.name}" for module in pkgutil.iter_modules([str(REPO_ROOT / "ems")])}
    if modules - named:
        pytest.fail(
            f"{', '.join(sorted(modules - named))}: in no layer of the 'layers' contract in pyproject.toml; "
            "add each to the core (bottom) or to training and the apps (top)",
            pytrace=False,
        )
