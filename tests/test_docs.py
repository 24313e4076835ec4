"""The documentation (README.md and the MkDocs site under docs/, mkdocs.yml) builds, and its examples
are real:

- `mkdocs build --strict` succeeds: no dead link between pages, no nav entry without its file.
- Every ```python block runs. The blocks of a page run in order, in one namespace, from a working
  directory laid out as the repository after `ems-demo`: `configs/` (this repository's) and a small,
  real EMS model (de, en, fr, ja) at `runs/demo/run/model`, with its `ems-export` outputs at
  `runs/demo/st` (sentence-transformers) and `runs/demo/hf` (Hugging Face). Write examples against
  those paths. A block that cannot run here (a Hub download, a GPU) gets the line
  `<!-- not run: REASON -->` just before its fence; it is reported as a skipped test with its reason.
- Every shell block (```bash, ```sh, ```shell, ```console: its `$ ` lines) names real commands:
  `python -m MODULE` (also through `torchrun -m` and `deepspeed --module`) an importable module,
  `ems-*` a console script of pyproject.toml, `python FILE.py` a file of the repository, and each
  `--option` after one of this project's modules (ems, data_prep, eval) or a console script appears
  in that command's `--help` (of its subcommand: `ems-prep clean --help`). The help texts come from
  one process that calls each command's main.

The tests at the end feed broken pages to the same functions and check that each problem is caught.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]  # (not from tests.conftest: the help worker imports this module)
PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")])
SKIP_MARKER = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->$")
PYTHON_LANGUAGES = ("python", "py", "python3")
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
OPERATORS = ("&&", "||", "|", ";")
OPTION = re.compile(r"^\[?(?P<name>--[A-Za-z][A-Za-z0-9_-]*)")
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")
ALWAYS_ACCEPTED = ("--help", "--debug")  # ems.cli.run_main takes --debug anywhere on the line


# --- pages -----------------------------------------------------------------------------------------


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    skip_reason: str | None = None

    @property
    def where(self) -> str:
        return f"{_relative(self.page)}:{self.line}"


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def fenced_blocks(text: str, page: Path = Path("page.md")) -> list[Block]:
    """Every fenced code block of a markdown text, with its language (the fence's first word, lower
    case) and the reason of a `<!-- not run: REASON -->` line just before it."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        language = (opening["info"].split() or [""])[0].lstrip("{.").rstrip("}").lower()
        end = i + 1
        while end < len(lines) and not re.match(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[end]):
            end += 1
        body = [line[indent:] if line[:indent].strip() == "" else line for line in lines[i + 1 : end]]
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = SKIP_MARKER.match(before)
        blocks.append(Block(page, i + 1, language, "\n".join(body) + "\n", marker["reason"] if marker else None))
        i = end + 1
    return blocks


def page_blocks(languages: tuple[str, ...]) -> list[Block]:
    return [block for page in PAGES for block in fenced_blocks(page.read_text(), page) if block.language in languages]


# --- mkdocs build --strict ---------------------------------------------------------------------------


def build_site(config_file: Path, site_dir: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of `config_file` into `site_dir`."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config_file),
            "--site-dir",
            str(site_dir),
        ],
        capture_output=True,
        text=True,
        cwd=config_file.parent,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )


def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.fail("mkdocs and mkdocs-material are not installed: pip install -e '.[test]'", pytrace=False)
    done = build_site(REPO_ROOT / "mkdocs.yml", tmp_path / "site")
    if done.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}", pytrace=False)
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_links_to_files_that_exist():
    """README.md is not part of the site (mkdocs does not check it): its relative links must name files."""
    text = (REPO_ROOT / "README.md").read_text()
    targets = re.findall(r"\]\((?!https?://|mailto:|#)([^)\s#]+)", text)
    assert targets, "README.md links into docs/"
    missing = [target for target in targets if not (REPO_ROOT / target).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


# --- python blocks -----------------------------------------------------------------------------------


@dataclass
class PageRun:
    """The namespace a page's blocks share (a module's, so that a dataclass defined in an example finds
    its module), and how far they have run."""

    namespace: dict
    done: int = 0  # blocks of the page run so far (skipped ones included)
    failed: str | None = None  # the first block that raised


def page_namespace(page: Path) -> dict:
    """A fresh module for a page's examples, registered in sys.modules as `docs_example_<page>`."""
    name = "docs_example_" + re.sub(r"\W", "_", _relative(page))
    module = types.ModuleType(name)
    sys.modules[name] = module
    return module.__dict__


def run_python_block(block: Block, namespace: dict) -> None:
    """Run one block in `namespace`; an exception is re-raised as an AssertionError naming the page and
    line, with the traceback of the example's own frames."""
    try:
        exec(compile(block.code, block.where, "exec", dont_inherit=True), namespace)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        trace = "".join(traceback.format_exception(error))
        raise AssertionError(f"the example at {block.where} failed:\n{block.code}\n{trace}") from None


def docs_workspace(root: Path, model_dir: Path) -> Path:
    """The working directory the examples run in: the repository's configs/ and a small real model at
    the demo's output path, exported as the export page's examples need."""
    from ems.apps.export import export_hf, export_sentence_transformers

    root.mkdir(parents=True, exist_ok=True)
    (root / "configs").symlink_to(REPO_ROOT / "configs", target_is_directory=True)
    model = root / "runs" / "demo" / "run" / "model"
    shutil.copytree(model_dir, model)
    export_sentence_transformers(model, root / "runs" / "demo" / "st")
    export_hf(model, root / "runs" / "demo" / "hf")
    return root


@pytest.fixture(scope="module")
def workspace(model_dir, tmp_path_factory):
    return docs_workspace(tmp_path_factory.mktemp("docs") / "repo", model_dir)


PYTHON_BLOCKS = page_blocks(PYTHON_LANGUAGES)
_page_runs: dict[Path, PageRun] = {}


@pytest.mark.slow
@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[block.where for block in PYTHON_BLOCKS])
def test_python_example_runs(block, workspace, monkeypatch):
    """The block runs after the page's blocks before it (run first here when selected alone)."""
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    page = [b for b in PYTHON_BLOCKS if b.page == block.page]
    state = _page_runs.setdefault(block.page, PageRun(page_namespace(block.page)))
    for earlier in page[state.done : page.index(block) + 1]:
        state.done += 1
        if earlier.skip_reason is not None:
            continue
        if state.failed is not None:
            pytest.fail(f"{earlier.where} runs after {state.failed}, which failed", pytrace=False)
        try:
            run_python_block(earlier, state.namespace)
        except AssertionError as error:
            state.failed = earlier.where
            pytest.fail(str(error), pytrace=False)
    if block.skip_reason is not None:
        pytest.skip(f"{block.where} not run: {block.skip_reason}")


def test_the_examples_are_counted():
    """How many python blocks run and how many are marked not to (reported with -rA or -s)."""
    skipped = [block for block in PYTHON_BLOCKS if block.skip_reason is not None]
    print(f"docs python blocks: {len(PYTHON_BLOCKS) - len(skipped)} run, {len(skipped)} marked not run")
    for block in skipped:
        print(f"  not run: {block.where}: {block.skip_reason}")
    assert len(PYTHON_BLOCKS) > len(skipped), "no python example of the docs runs"
    assert all(block.language in PYTHON_LANGUAGES for block in PYTHON_BLOCKS)


# --- shell blocks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    where: str
    kind: str  # "module" (python -m), "script" (a console script) or "file" (python FILE.py)
    name: str
    args: tuple[str, ...]

    @property
    def words(self) -> tuple[str, ...]:
        """The leading bare words: subcommands, if the command has them (resolved against its help)."""
        words = []
        for arg in self.args:
            if not SUBCOMMAND.match(arg):
                break
            words.append(arg)
        return tuple(words)

    @property
    def options(self) -> list[str]:
        names = []
        for arg in self.args:
            if arg == "--":
                break
            found = OPTION.match(arg)
            if found:
                names.append(found["name"])
        return names


def project_packages() -> tuple[str, ...]:
    """The top-level packages of this project (pyproject.toml's package find patterns)."""
    found = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return tuple(pattern.rstrip("*") for pattern in found["include"])


def _ours(module: str) -> bool:
    return module.split(".")[0] in project_packages()


def console_scripts() -> dict[str, str]:
    """pyproject.toml's [project.scripts]: name -> "module:function"."""
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def shell_lines(block: Block) -> list[tuple[int, str]]:
    """(line number, command line) of a shell block: continuation lines joined; in a console block only
    the `$ ` lines (the rest is output)."""
    found, pending, start = [], "", 0
    for offset, raw in enumerate(block.code.splitlines(), start=block.line + 1):
        line = raw.rstrip()
        if not pending:
            start = offset
            if block.language == "console":
                if not line.lstrip().startswith("$ "):
                    continue
                line = line.lstrip()[2:]
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        found.append((start, pending + line))
        pending = ""
    if pending:
        found.append((start, pending))
    return found


def commands_in(block: Block) -> tuple[list[Command], list[str]]:
    """The commands a shell block runs that name this project's modules, console scripts and files, and
    the lines that could not be read as shell."""
    commands, problems = [], []
    for number, line in shell_lines(block):
        where = f"{_relative(block.page)}:{number}"
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as error:
            problems.append(f"{where}: not a shell line ({error}): {line}")
            continue
        simple: list[str] = []
        for token in [*tokens, ";"]:
            if token not in OPERATORS:
                simple.append(token)
                continue
            command = _command(where, simple)
            if command is not None:
                commands.append(command)
            simple = []
    return commands, problems


def _command(where: str, tokens: list[str]) -> Command | None:
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):  # VAR=value before the command
        tokens = tokens[1:]
    if not tokens:
        return None
    program, rest = Path(tokens[0]).name, tokens[1:]
    if program.startswith("ems-"):
        return Command(where, "script", program, tuple(rest))
    if re.fullmatch(r"python(3(\.\d+)?)?", program):
        for i, token in enumerate(rest):
            if token == "-m" and i + 1 < len(rest):
                return Command(where, "module", rest[i + 1], tuple(rest[i + 2 :]))
            if token == "-c":
                return None
            if not token.startswith("-"):
                return Command(where, "file", token, tuple(rest[i + 1 :])) if token.endswith(".py") else None
        return None
    if program in ("torchrun", "deepspeed"):
        for i, token in enumerate(rest[:-1]):
            if token in ("-m", "--module"):
                return Command(where, "module", rest[i + 1], tuple(rest[i + 2 :]))
    return None


def _module_exists(name: str) -> bool:
    """Whether `python -m name` finds a module, looked up on sys.path by the path finder alone: no package
    is imported and no other finder of sys.meta_path is asked. (importlib.util.find_spec("pip") asks
    setuptools' _distutils_hack, which then turns its distutils off for the rest of the process: DeepSpeed's
    import of distutils in a later test, the demo's, failed after this one.)"""
    found = None
    for part in name.split("."):
        if found is not None and found.submodule_search_locations is None:
            return False  # a module, not a package: it has no submodules
        where = None if found is None else found.submodule_search_locations
        try:
            found = importlib.machinery.PathFinder.find_spec(part if found is None else f"{found.name}.{part}", where)
        except (ImportError, ValueError):
            return False
        if found is None:
            return False
    return True


def command_problems(commands: list[Command], helps: dict[tuple, tuple[list[str], str]]) -> list[str]:
    """What is wrong with `commands`: an unknown module, console script or file, or an option that the
    command's help does not list. `helps` maps (kind, name, words) to (subcommand words, help text)
    (help_texts)."""
    scripts = console_scripts()
    problems = []
    for command in commands:
        if command.kind == "file":
            if not (REPO_ROOT / command.name).is_file():
                problems.append(f"{command.where}: python {command.name}: no such file in the repository")
            continue
        if command.kind == "module" and not _module_exists(command.name):
            problems.append(f"{command.where}: python -m {command.name}: no such module")
            continue
        if command.kind == "module" and not _ours(command.name):
            continue  # another package's module (pip, mkdocs, ...): it exists; its options are its own
        if command.kind == "script" and command.name not in scripts:
            problems.append(f"{command.where}: {command.name} is no console script of pyproject.toml")
            continue
        subcommands, text = helps[(command.kind, command.name, command.words)]
        for option in command.options:
            if option not in ALWAYS_ACCEPTED and not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text):
                shown = " ".join(["python -m" if command.kind == "module" else "", command.name, *subcommands])
                problems.append(
                    f"{command.where}: {shown.strip()} has no option {option} (its --help does not list it)"
                )
    return problems


HELP_WORKER = "import sys; from tests.test_docs import help_worker; help_worker()"


def help_texts(commands: list[Command]) -> dict[tuple, tuple[list[str], str]]:
    """(kind, name, words) -> (the subcommand words, their --help text) of each command, from one process."""
    scripts = console_scripts()
    wanted = sorted(
        {
            (c.kind, c.name, c.words)
            for c in commands
            if (c.kind == "module" and _ours(c.name) and _module_exists(c.name))
            or (c.kind == "script" and c.name in scripts)
        }
    )
    if not wanted:
        return {}
    done = subprocess.run(
        [sys.executable, "-c", HELP_WORKER],
        input=json.dumps([[kind, name, list(words)] for kind, name, words in wanted]),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
        timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(f"the help worker failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}", pytrace=False)
    answers = json.loads(done.stdout.splitlines()[-1])
    return {key: (used, text) for key, (used, text) in zip(wanted, answers, strict=True)}


def help_worker() -> None:
    """Read [[kind, name, words], ...] from stdin; print a JSON list of [subcommand words, help text]:
    the help of the command followed by its words for as long as each word is one of the subcommands
    (`{a,b,...}`) that the help before it lists."""
    scripts = console_scripts()
    requests = json.loads(sys.stdin.read())
    texts = []
    with contextlib.redirect_stdout(io.StringIO()):  # what imports print stays out of the JSON line
        for kind, name, words in requests:
            text = _help(kind, name, [], scripts)
            used: list[str] = []
            for word in words:
                if not re.search(rf"\{{[^}}]*(?<![\w-]){re.escape(word)}(?![\w-])[^}}]*\}}", text):
                    break
                used.append(word)
                text = _help(kind, name, used, scripts)
            texts.append([used, text])
    print(json.dumps(texts))


def _help(kind: str, name: str, words: list[str], scripts: dict[str, str]) -> str:
    """`name words... --help`'s output, from the command's main called in this process (a subprocess
    where the module has no main(argv))."""
    argv = [*words, "--help"]
    output = io.StringIO()
    old_argv = sys.argv
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            if kind == "script":
                module, function = scripts[name].split(":")
                sys.argv = [name, *argv]
                getattr(importlib.import_module(module), function)()
            else:
                spec = importlib.util.find_spec(name)
                target = f"{name}.__main__" if spec.submodule_search_locations is not None else name
                main = getattr(importlib.import_module(target), "main", None)
                if main is None:
                    raise TypeError("no main")
                sys.argv = [name, *argv]
                main(argv)
    except SystemExit:
        pass
    except TypeError:
        done = subprocess.run([sys.executable, "-m", name, *argv], capture_output=True, text=True, timeout=300)
        return done.stdout + done.stderr
    finally:
        sys.argv = old_argv
    return output.getvalue()


SHELL_PAGES = [page for page in PAGES if any(b.language in SHELL_LANGUAGES for b in fenced_blocks(page.read_text()))]


@pytest.fixture(scope="module")
def all_helps():
    commands = [c for block in page_blocks(SHELL_LANGUAGES) for c in commands_in(block)[0]]
    return help_texts(commands)


@pytest.mark.parametrize("page", SHELL_PAGES, ids=[_relative(page) for page in SHELL_PAGES])
def test_shell_commands_name_real_modules_scripts_and_options(page, all_helps):
    problems, commands = [], []
    for block in fenced_blocks(page.read_text(), page):
        if block.language in SHELL_LANGUAGES:
            found, unreadable = commands_in(block)
            commands += found
            problems += unreadable
    problems += command_problems(commands, all_helps)
    assert not problems, "\n".join(problems)


# --- each check fails on a broken page ------------------------------------------------------------------

BROKEN_PAGE = """# A broken page

```python
values = [1, 2]
```

```python
values[5]
```

<!-- not run: needs the network -->
```python
raise RuntimeError("never run")
```

```bash
python -m ems.nonexistent --out x
ems-nonexistent --help
ems-data fetch tatoeba --out data --no-such-flag   # an option fetch does not take
python -m data_prep clean --config c.yaml --in a --out b --bogus && ems-data list
python benchmarks/no_such_benchmark.py --n 3
echo "unbalanced
```
"""


def test_a_python_block_that_raises_fails_and_a_marked_one_is_skipped():
    blocks = fenced_blocks(BROKEN_PAGE)
    python = [block for block in blocks if block.language == "python"]
    assert [block.skip_reason for block in python] == [None, None, "needs the network"]
    namespace = page_namespace(Path("page.md"))
    run_python_block(python[0], namespace)
    assert namespace["values"] == [1, 2]  # blocks share a namespace
    with pytest.raises(AssertionError, match=r"page\.md:7 failed(.|\n)*IndexError"):
        run_python_block(python[1], namespace)


def test_unknown_modules_scripts_files_and_options_are_found():
    (block,) = [block for block in fenced_blocks(BROKEN_PAGE) if block.language == "bash"]
    commands, unreadable = commands_in(block)
    assert [(c.kind, c.name, c.words) for c in commands] == [
        ("module", "ems.nonexistent", ()),
        ("script", "ems-nonexistent", ()),
        ("script", "ems-data", ("fetch", "tatoeba")),
        ("module", "data_prep", ("clean",)),
        ("script", "ems-data", ("list",)),
        ("file", "benchmarks/no_such_benchmark.py", ()),
    ]
    assert len(unreadable) == 1 and "not a shell line" in unreadable[0]
    problems = command_problems(commands, help_texts(commands))
    assert problems == [
        "page.md:17: python -m ems.nonexistent: no such module",
        "page.md:18: ems-nonexistent is no console script of pyproject.toml",
        "page.md:19: ems-data fetch has no option --no-such-flag (its --help does not list it)",
        "page.md:20: python -m data_prep clean has no option --bogus (its --help does not list it)",
        "page.md:21: python benchmarks/no_such_benchmark.py: no such file in the repository",
    ]


def test_looking_a_module_up_imports_nothing_and_changes_no_finder():
    """Another package's module (pip) is looked up without importing it or asking the finders of
    sys.meta_path: setuptools' finder, asked for pip, turned its distutils off for the rest of the session
    (DeepSpeed's import of distutils then failed in tests/test_demo.py run after this file)."""
    finders = [(finder, dict(getattr(finder, "__dict__", {}))) for finder in sys.meta_path]
    modules = set(sys.modules)
    assert _module_exists("pip") and _module_exists("json.tool") and _module_exists("ems.apps.export")
    assert not _module_exists("ems.nonexistent") and not _module_exists("json.tool.deeper")
    assert not _module_exists("no_such_package_anywhere.sub")
    assert set(sys.modules) == modules
    assert [(finder, dict(getattr(finder, "__dict__", {}))) for finder in sys.meta_path] == finders


def test_a_dead_link_fails_the_strict_build(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: broken\ndocs_dir: docs\n")
    done = build_site(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "missing.md" in done.stdout + done.stderr
