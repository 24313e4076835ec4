"""benchmarks/ imports the project as a user's script would, and every benchmark runs as a module:

- no file under benchmarks/ touches sys.path or imports the repository's `tests` package (inputs shared
  with the tests come from `fixtures`), and none starts a Python child on program text (`python -c`) or
  on a file path (a script): a step that needs a process of its own is a module run with `python -m`;
- benchmarks/ holds modules and study subpackages (benchmarks/gpu/, benchmarks/peer/) only;
- every module of the package and its subpackages has a command line, and `python -m benchmarks.NAME --help`
  (NAME dotted in a subpackage: gpu.acceptance) prints its usage from the repository root, unless it is a
  helper that another benchmark imports;
- the usage lines in the benchmarks and the commands in the documentation name a benchmark by module
  (`python -m benchmarks.NAME`), not by file (`python benchmarks/NAME.py`).

The checks read the syntax tree, so comments and docstrings do not count; the last tests feed them
snippets with each kind of problem.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"
FILES = sorted(BENCHMARKS.rglob("*.py"))
FILE_IDS = [str(path.relative_to(REPO_ROOT)) for path in FILES]
# the package and its subpackages (a folder with __init__.py; gpu/standins/ holds stand-ins, not a package)
PACKAGES = sorted(init.parent for init in BENCHMARKS.rglob("__init__.py"))
# each module by its dotted name under benchmarks: "presets_table", "gpu.acceptance"
MODULES = sorted(
    ".".join(path.relative_to(BENCHMARKS).with_suffix("").parts)
    for package in PACKAGES
    for path in package.glob("*.py")
    if path.stem != "__init__"
)
PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
# a shell line that hands python program text: `python -c ...`, `python3 -u -c ...`
PYTHON_C = re.compile(r"(^|[\s/`'\"])python(3(\.\d+)?)?\s+(-[A-Za-z]+\s+)*-c(\s|$)")
# a benchmark run as a file: `python benchmarks/NAME.py`, `python3 benchmarks/NAME.py`
RUN_AS_FILE = re.compile(r"\bpython(3(\.\d+)?)?\s+(\./)?benchmarks/[\w/]+\.py")
# interpreter options that take the next word as their value
OPTIONS_WITH_VALUE = ("-W", "-X")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def sys_path_uses(tree: ast.Module) -> list[str]:
    """Each `sys.path` in the code (read or changed) and each `from sys import path`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path":
            if isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append(f"line {node.lineno}: sys.path")
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            if any(alias.name == "path" for alias in node.names):
                found.append(f"line {node.lineno}: from sys import path")
    return found


def _is_tests(name: str | None) -> bool:
    return name is not None and (name == "tests" or name.startswith("tests."))


def imports_of_tests(tree: ast.Module) -> list[str]:
    """Each import of the `tests` package or one of its modules, by statement or by
    importlib.import_module / __import__ with the name written out."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _is_tests(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_tests(node.module):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called in ("import_module", "__import__") and _is_tests(node.args[0].value):
                found.append(f"line {node.lineno}: {called}({node.args[0].value!r})")
    return found


def _is_python(node: ast.expr) -> bool:
    """`sys.executable`, or a string that names a python interpreter."""
    if isinstance(node, ast.Attribute) and node.attr == "executable":
        return isinstance(node.value, ast.Name) and node.value.id == "sys"
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(PYTHON.match(Path(node.value).name))


def _what_python_runs(words: list[ast.expr]) -> str:
    """ "module", "program text" or "file" for the words after the interpreter of a command list."""
    skip_value = False
    for word in words:
        if skip_value:
            skip_value = False
            continue
        if isinstance(word, ast.Constant) and isinstance(word.value, str) and word.value.startswith("-"):
            if word.value == "-m":
                return "module"
            if word.value == "-c":
                return "program text"
            skip_value = word.value in OPTIONS_WITH_VALUE
            continue
        return "file"
    return "module"  # the bare interpreter (its version, say): nothing is run


def program_text_children(tree: ast.Module) -> list[str]:
    """Each child Python started on program text or on a file instead of a module: a command list that
    starts with the interpreter and goes on with `-c` or a path, a string holding a `python -c` shell
    line, and any "-c" word outside argparse's add_argument (a command built piece by piece)."""
    found, option_names = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            option_names |= {id(arg) for arg in node.args}
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple) and node.elts and _is_python(node.elts[0]):
            runs = _what_python_runs(node.elts[1:])
            if runs != "module":
                found.append(f"line {node.lineno}: a Python child on {runs}, not `-m MODULE`")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in option_names:
            if node.value == "-c" or PYTHON_C.search(node.value):
                found.append(f"line {node.lineno}: program text for `python -c` ({node.value[:40]!r})")
    return sorted(set(found), key=lambda line: int(line.split()[1].rstrip(":")))


def files_as_scripts(text: str) -> list[str]:
    """Each line of `text` that runs a benchmark as a file."""
    return [f"line {n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if RUN_AS_FILE.search(line)]


# --- every file under benchmarks/ ------------------------------------------------------------------


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_no_benchmark_touches_sys_path(path):
    assert not sys_path_uses(_tree(path)), "import the installed project instead: python -m benchmarks.NAME"


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_no_benchmark_imports_the_tests(path):
    assert not imports_of_tests(_tree(path)), "what tests and benchmarks both need lives in the fixtures package"


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_a_child_python_runs_a_module(path):
    assert not program_text_children(_tree(path)), "run a step in a child as `python -m benchmarks.NAME ...`"


@pytest.mark.parametrize("path", FILES, ids=FILE_IDS)
def test_usage_lines_run_the_module(path):
    assert not files_as_scripts(path.read_text(encoding="utf-8")), "write `python -m benchmarks.NAME`"


# --- the package's modules -------------------------------------------------------------------------


def _has_main_block(tree: ast.Module) -> bool:
    """Whether the module ends in an `if __name__ == "__main__":` block."""
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            left, right = node.test.left, node.test.comparators[0]
            if isinstance(left, ast.Name) and left.id == "__name__" and getattr(right, "value", None) == "__main__":
                return True
    return False


def _module_path(name: str) -> Path:
    return BENCHMARKS.joinpath(*name.split(".")).with_suffix(".py")


def imported_modules(tree: ast.Module, package: str = "") -> set[str]:
    """The modules of the benchmarks package that `tree` imports (absolute, or relative to `package`, the
    dotted name under benchmarks of the importing module's package), by their dotted names under
    benchmarks: a subpackage's `from benchmarks.gpu import stage` is gpu.stage."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.removeprefix("benchmarks.") for a in node.names if a.name.startswith("benchmarks.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base = ".".join([*parts[: len(parts) - (node.level - 1)], *filter(None, [node.module])])
            elif node.module == "benchmarks" or (node.module or "").startswith("benchmarks."):
                base = node.module.removeprefix("benchmarks").removeprefix(".")
            else:
                continue
            if base:
                names.add(base)
            names |= {f"{base}.{a.name}" if base else a.name for a in node.names}
    return names


def _package_of(name: str) -> str:
    return name.rpartition(".")[0]


COMMANDS = [name for name in MODULES if _has_main_block(_tree(_module_path(name)))]


def test_benchmarks_holds_modules_and_study_packages_only():
    strays = [
        str(path.relative_to(REPO_ROOT))
        for path in BENCHMARKS.iterdir()
        if path.name != "__pycache__" and not (path.suffix == ".py" or (path / "__init__.py").is_file())
    ]
    assert not strays, f"neither a benchmark module nor a study's package: {strays}"


def test_every_module_is_a_benchmark_or_a_helper_of_one():
    helpers = set().union(*(imported_modules(_tree(_module_path(name)), _package_of(name)) for name in COMMANDS))
    orphans = [name for name in MODULES if name not in COMMANDS and name not in helpers]
    assert not orphans, f"no command line and no benchmark imports them: {orphans}"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_runs_as_a_module(name):
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]


# --- the documentation ---------------------------------------------------------------------------


def test_the_documentation_runs_benchmarks_as_modules():
    pages = [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")]
    pages += [path for folder in ("configs", "slurm") for path in (REPO_ROOT / folder).rglob("*") if path.is_file()]
    found = {
        str(page.relative_to(REPO_ROOT)): lines
        for page in sorted(pages)
        if (lines := files_as_scripts(page.read_text(encoding="utf-8", errors="replace")))
    }
    assert not found, found


# --- the checks find what they look for ----------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "code"),
    [
        (sys_path_uses, "import sys\nsys.path.insert(0, '..')"),
        (sys_path_uses, "import sys\nsys.path[:0] = ['..']"),
        (sys_path_uses, "from sys import path\npath.append('..')"),
        (imports_of_tests, "from tests.opus_mirror import build_mirror"),
        (imports_of_tests, "import tests.conftest"),
        (imports_of_tests, "import importlib\nimportlib.import_module('tests.hf_datasets')"),
        (program_text_children, "subprocess.run([sys.executable, '-c', 'print(1)'])"),
        (program_text_children, "subprocess.run([sys.executable, '-X', 'importtime', '-c', CODE])"),
        (program_text_children, "subprocess.run([sys.executable, __file__, '--child'])"),
        (program_text_children, "subprocess.run(('python3', 'benchmarks/x.py'))"),
        (program_text_children, "command = [sys.executable]\ncommand += ['-c', CODE]"),
        (program_text_children, "os.system('python -c \"import ems\"')"),
    ],
)
def test_each_problem_is_found(check, code):
    assert check(ast.parse(code))


@pytest.mark.parametrize(
    ("check", "code"),
    [
        (sys_path_uses, "import os\nos.path.join('a', 'b')"),
        (imports_of_tests, "from fixtures.opus_mirror import build_mirror\nimport testsuite"),
        (program_text_children, "subprocess.run([sys.executable, '-m', 'benchmarks.process_memory', PEAK])"),
        (program_text_children, "subprocess.run([sys.executable, '-X', 'importtime', '-m', 'ems'])"),
        (program_text_children, "parser.add_argument('-c', '--config')"),
    ],
)
def test_what_is_allowed_passes(check, code):
    assert not check(ast.parse(code))


def test_a_benchmark_run_as_a_file_is_found():
    assert files_as_scripts("run\n    python benchmarks/mining_scale.py --n 3\n") == [
        "line 2: python benchmarks/mining_scale.py --n 3"
    ]
    assert files_as_scripts("python benchmarks/gpu/acceptance.py run") == [
        "line 1: python benchmarks/gpu/acceptance.py run"
    ]
    assert not files_as_scripts("python -m benchmarks.mining_scale --n 3 (benchmarks/mining_scale.py)")


def test_imports_are_named_by_their_dotted_module():
    code = "from benchmarks.gpu import stage as s\nfrom benchmarks.peer.grid import X\nimport benchmarks.bare_step\n"
    assert imported_modules(ast.parse(code + "from . import report\n"), "gpu") >= {
        "gpu.stage",
        "peer.grid",
        "bare_step",
        "gpu.report",
    }
