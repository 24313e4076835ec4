"""Fuzzing every reader of user files (hypothesis): each starts from a small valid input, which
hypothesis mutates (truncation at any byte, bit flips, spliced and invalid UTF-8 bytes, wrong JSON /
YAML types, huge numbers, deep nesting, paths with `..`, absolute paths and symlinks pointing out of
the input's folder, files deleted or swapped for folders).

The property, per example: the reader either
(a) succeeds and what it read satisfies the reader's invariants (as many lines on both sides, shard
    rows' languages as index.json's ranges say, a loaded model of its config's shapes, ...),
(b) fails with a user error (ems.cli.USER_ERRORS) that says what is wrong, or, through its command
    line (ems.cli.run_main), exits non-zero with exactly one `error: ...` line on stderr, or
(c) counts a skip in its report.
Any other exception (KeyError, TypeError, IndexError, struct.error, zlib.error, RecursionError,
SafetensorError, ...) fails the test, and so does a file opened outside the example's folder (an
audit hook records every path opened during the reader's call; ALLOWED_ROOTS are the interpreter's
and the libraries' own files); the check is on the path as opened, `..` collapsed. Where a symlink
leads is the readers' own check: every reader that walks a folder refuses a file a symlink leads
out of it (ems.corpus.inside_folder), a property of its own below, as is a stage's rerun into a
pre-filled output folder (a clean run's outputs, or one line).

Profiles (EMS_FUZZ_PROFILE): "ci" (the default; derandomized, so CI runs the same examples every
time; EXAMPLES per reader) and "long" (LONG_FACTOR times as many, random); EMS_FUZZ_EXAMPLES=N sets
every reader's count (fixtures/fuzz_profiles.py, which the long profile's runner reads too). No
example database is written (database=None), and hypothesis's caches go to a temporary folder, not
into the repository. What the long profile found is pinned as @example cases, which both profiles run
first: each stays as the regression test of its fix. `python -m benchmarks.fuzz_readers` runs the
long profile reader by reader and tabulates what it found.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gzip
import io
import json
import math
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import typing
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, Phase, example, note, settings
from hypothesis import given as _given
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from ems.cli import USER_ERRORS, one_line, run_main
from fixtures import fuzz_profiles
from fixtures.fuzz_profiles import EXAMPLES_VARIABLE, PROFILE_VARIABLE, PROFILES

pytestmark = pytest.mark.fuzz

REPO_ROOT = Path(__file__).resolve().parents[1]

# --- profiles ------------------------------------------------------------------------------------

PROFILE = os.environ.get(PROFILE_VARIABLE, "ci")
_COMMON = dict(
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
    report_multiple_bugs=True,
)
# ci: no "explain" phase (it runs a failing test again and again to say which parts of the example
# matter; the shrunk example is enough to read)
settings.register_profile("ci", derandomize=True, phases=[p for p in Phase if p is not Phase.explain], **_COMMON)
settings.register_profile("long", derandomize=False, **_COMMON)
# hypothesis's own caches (the constants it collects from the source, Unicode tables) go to a temporary
# folder, not to .hypothesis/ in the repository (there is no example database: database=None)
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "ems-fuzz-hypothesis")
if PROFILE not in PROFILES:
    raise ValueError(f"{PROFILE_VARIABLE} must be ci or long, got {PROFILE!r}")


def examples(reader: str) -> int:
    return fuzz_profiles.examples(reader, PROFILE, os.environ.get(EXAMPLES_VARIABLE))


def fuzz(reader: str, **strategies):
    """@given(**strategies) under the selected profile with the reader's example count."""

    def decorate(test):
        configured = settings(settings.get_profile(PROFILE), max_examples=examples(reader))
        return configured(_given(**strategies)(test))

    return decorate


# --- where readers may open files --------------------------------------------------------------


def _library_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr", "/proc", "/sys", "/dev"}
    roots |= {path for name in ("stdlib", "platstdlib", "purelib", "platlib") if (path := sysconfig.get_path(name))}
    return tuple(sorted(os.path.realpath(root) for root in roots) + sorted(roots))


# The interpreter, the installed libraries (their code and data: MeCab's and jieba's dictionaries),
# this project's own packages (modules imported on first use) and its installed metadata (entry
# points), and the kernel's pseudo files. Nothing else: every reader's own files are under the
# example's folder, and so are its temporary files (watching_opens points `tempfile` there). The
# hook sees Python's opens only: what native code opens itself (sqlite: the OPUS catalogue in
# ~/.OpusTools, SentencePiece, safetensors, pyarrow) is not recorded.
PROJECT_FILES = ("ems", "data_prep", "eval", "ems.egg-info")
ALLOWED_ROOTS = (*_library_roots(), *(str(REPO_ROOT / name) for name in PROJECT_FILES))


class _Opened:
    active = False
    paths: list[tuple[str, object]] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _Opened.active:
        path, mode = args[0], args[1]
        if isinstance(path, (str, bytes, os.PathLike)):
            path = os.fsdecode(path)
            # os.open (mode None) may be relative to a directory descriptor (shutil.rmtree's walk), not
            # to the working directory: only its absolute paths are known
            if mode is not None or os.path.isabs(path):
                _Opened.paths.append((os.path.abspath(path), mode))


if not getattr(sys, "_ems_fuzz_audit_hook", False):  # one hook per interpreter (hooks cannot be removed)
    sys.addaudithook(_audit)
    sys._ems_fuzz_audit_hook = True


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@contextlib.contextmanager
def watching_opens(root: Path, also: tuple[str, ...] = ()):
    """Record every file opened inside the block; afterwards assert each is under `root`, `also`
    or ALLOWED_ROOTS."""
    temporary = Path(root) / ".tmp"  # where the reader's temporary files go (e.g. opustools' unzipped Moses files)
    temporary.mkdir(parents=True, exist_ok=True)
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(temporary)
    _Opened.paths = []
    _Opened.active = True
    try:
        yield
    finally:
        _Opened.active = False
        tempfile.tempdir = saved_tempdir
    allowed = (os.path.abspath(root), *(os.path.abspath(a) for a in also), *ALLOWED_ROOTS)
    outside = sorted({path for path, _ in _Opened.paths if not any(_inside(path, a) for a in allowed)})
    assert not outside, f"opened outside the input's folder {root}: {outside}"


# --- running a reader ------------------------------------------------------------------------------

UNCLEAR = (UnicodeDecodeError, json.JSONDecodeError)  # their messages never name the file


def check_user_error(error: BaseException) -> None:
    """A user error must say something: a message (not only its type's name), not a bare decoding
    error of the standard library (which names no file)."""
    message = one_line(error)
    note(f"user error: {type(error).__name__}: {message}")
    assert type(error) not in UNCLEAR, f"bare {type(error).__name__} names no file: {message}"
    assert message and message != type(error).__name__, f"{type(error).__name__} without a message"


def attempt(root: Path, call, also: tuple[str, ...] = ()):
    """(True, call()) or (False, the user error it raised); any other exception propagates."""
    with watching_opens(root, also):
        try:
            return True, call()
        except USER_ERRORS as error:
            check_user_error(error)
            return False, error


def run_cli(root: Path, main, argv: list[str], also: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """main(argv) through ems.cli.run_main, stdout and stderr captured: (status, stdout, stderr).
    Non-zero: exactly one `error: ` line on stderr, from a user error that says what is wrong
    (check_user_error)."""
    out, err, raised = io.StringIO(), io.StringIO(), []

    def recorded(arguments):  # main, with the user error it raises kept for check_user_error
        try:
            return main(arguments)
        except USER_ERRORS as error:
            raised.append(error)
            raise

    with watching_opens(root, also), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = run_main(recorded, argv)
    note(f"status {status}; stderr: {err.getvalue()[-2000:]!r}")
    if status != 0:
        # split at newlines only: an `error: ` after a carriage return (progress text) is mid-line on a terminal
        errors = [line for line in err.getvalue().split("\n") if line.startswith("error: ")]
        assert len(errors) == 1, f"exit {status} with {len(errors)} error lines: {err.getvalue()[-2000:]!r}"
        assert len(errors[0]) > len("error: ")
        if raised:
            check_user_error(raised[0])
    return status, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def example_root(base: Path, seed: Path | None = None, fixed: str | None = None):
    """A fresh folder for one example (a copy of `seed`), removed afterwards. `fixed`: always the same
    path (for inputs that record their own absolute paths)."""
    if fixed is not None:
        root = base / fixed
        shutil.rmtree(root, ignore_errors=True)
        if seed is not None:
            shutil.copytree(seed, root, symlinks=True)
        else:
            root.mkdir()
    elif seed is not None:
        root = Path(tempfile.mkdtemp(dir=base)) / "in"
        shutil.copytree(seed, root, symlinks=True)
    else:
        root = Path(tempfile.mkdtemp(dir=base)) / "in"
        root.mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(root if fixed is not None else root.parent, ignore_errors=True)


# --- mutations ---------------------------------------------------------------------------------

POSITION = st.integers(min_value=0, max_value=2**32)
BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\x00"]
BYTE_OPS = st.one_of(
    st.tuples(st.just("truncate"), POSITION),
    st.tuples(st.just("flip"), POSITION, st.integers(0, 7)),
    st.tuples(st.just("overwrite"), POSITION, st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), POSITION, st.one_of(st.sampled_from(BAD_UTF8), st.binary(min_size=1, max_size=8))),
    st.tuples(st.just("delete"), POSITION, st.integers(1, 64)),
    st.tuples(st.just("duplicate"), POSITION, st.integers(1, 64)),
)
BYTE_MUTATIONS = st.lists(BYTE_OPS, min_size=1, max_size=3)


def mutate_bytes(data: bytes, ops, region: int | None = None) -> bytes:
    """`data` after the byte operations `ops` (positions modulo its length, or modulo `region`: only
    the first `region` bytes, e.g. a header)."""
    data = bytearray(data)
    for op in ops:
        kind, at = op[0], op[1] % (max(len(data), 1) if region is None else max(min(region, len(data)), 1))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip" and data:
            data[at % len(data)] ^= 1 << op[2]
        elif kind == "overwrite":
            data[at : at + len(op[2])] = op[2]
        elif kind == "insert":
            data[at:at] = op[2]
        elif kind == "delete":
            del data[at : at + op[2]]
        elif kind == "duplicate":
            data[at:at] = data[at : at + op[2]]
    return bytes(data)


DEEP = re.compile(r"""["']?@DEEP:(\d+)@["']?""")
BIG_INT = re.compile(r"""["']?@BIGINT@["']?""")
OUTSIDE, OUTSIDE_REL = "@OUTSIDE@", "@OUTSIDE_REL@"
HOSTILE_VALUES = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2**31,
    2**63,
    -(2**63),
    2**64 + 1,
    10**30,
    1e308,
    -1e308,
    1e-308,
    0.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    " ",
    "\x00",
    "x",
    "de",
    "en",
    "null",
    "1e400",
    "ééé",
    [],
    {},
    [0, 1],
    {"x": 1},
    OUTSIDE,
    OUTSIDE_REL,
    "..",
    "../",
    "/",
    "a/../../b",
    "@DEEP:3000@",
    "@DEEP:40@",
    "@BIGINT@",
]
# the values that need a placeholder (deep nesting, a 5000-digit number, paths out of the folder) get
# a branch of their own, so that each comes up in about 1 in 50 values
SPECIAL_VALUES = [value for value in HOSTILE_VALUES if isinstance(value, str) and value.startswith("@")]
HOSTILE = st.one_of(
    st.sampled_from(SPECIAL_VALUES),
    st.sampled_from(HOSTILE_VALUES),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.integers(-3, 3), max_size=3),
)
STRUCT_OPS = st.one_of(
    st.tuples(st.just("set"), POSITION, HOSTILE),
    st.tuples(st.just("delete"), POSITION),
    st.tuples(st.just("add"), POSITION, st.sampled_from(["x", "files", "name", "0", ""]), HOSTILE),
    st.tuples(st.just("wrap"), POSITION),
)
STRUCT_MUTATIONS = st.lists(STRUCT_OPS, min_size=1, max_size=3)
# a document: changed as a structure, as bytes after serialising it, or both
DOC_MUTATIONS = st.one_of(
    st.tuples(STRUCT_MUTATIONS, st.just([])),
    st.tuples(st.just([]), BYTE_MUTATIONS),
    st.tuples(STRUCT_MUTATIONS, BYTE_MUTATIONS),
)


def _paths(node, prefix=()) -> list[tuple]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


def _get(node, path):
    for key in path:
        node = node[key]
    return node


def mutate_structure(doc, ops):
    """A deep copy of `doc` (JSON-like) after the structural operations `ops`."""
    doc = json.loads(json.dumps(doc))
    for op in ops:
        paths = _paths(doc)
        path = paths[op[1] % len(paths)]
        kind = op[0]
        if kind == "set":  # the hostile values are copied: a shared [] or {} could end up inside itself
            if not path:
                doc = copy.deepcopy(op[2])
            else:
                _get(doc, path[:-1])[path[-1]] = copy.deepcopy(op[2])
        elif kind == "delete" and path:
            parent = _get(doc, path[:-1])
            del parent[path[-1]]
        elif kind == "add":
            node = _get(doc, path)
            if isinstance(node, dict):
                node[op[2]] = copy.deepcopy(op[3])
            elif isinstance(node, list):
                node.append(copy.deepcopy(op[3]))
        elif kind == "wrap":
            if not path:
                doc = [doc]
            else:
                _get(doc, path[:-1])[path[-1]] = [_get(doc, path)]
    return doc


def outside_values(text: str, root: Path, outside: Path) -> str:
    """The placeholders of a serialised document made real: OUTSIDE an absolute path to a file outside
    `root`, OUTSIDE_REL a relative one that climbs out, deep nesting and a 5000-digit number."""
    climb = "../" * (len(root.parts) + 2) + str(outside / "secret.txt").lstrip("/")
    text = text.replace(OUTSIDE_REL, climb).replace(OUTSIDE, str(outside / "secret.txt"))
    text = DEEP.sub(lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)
    return BIG_INT.sub("9" * 5000, text)


def dump_json(doc, root: Path, outside: Path) -> bytes:
    return outside_values(json.dumps(doc, ensure_ascii=False), root, outside).encode("utf-8", "surrogatepass")


def dump_yaml(doc, root: Path, outside: Path) -> bytes:
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False, width=10**6)
    return outside_values(text, root, outside).encode("utf-8", "surrogatepass")


def mutated_doc(doc, mutation, root: Path, outside: Path, dump=dump_json) -> bytes:
    struct_ops, byte_ops = mutation
    data = dump(mutate_structure(doc, struct_ops) if struct_ops else doc, root, outside)
    return mutate_bytes(data, byte_ops) if byte_ops else data


# Changes to a folder's files as a whole: deleted, emptied, swapped for a folder, or for a symlink
# to a file outside the folder (which the user would have made: followed, see the module docstring).
FILE_OPS = st.sampled_from(["delete", "empty", "directory", "symlink_outside"])


def mutate_json_file(path: Path, mutation, root: Path, outside: Path) -> None:
    """Rewrite the JSON file `path` as mutated_doc of its document."""
    path.write_bytes(mutated_doc(json.loads(path.read_text(encoding="utf-8")), mutation, root, outside))


def change_file(path: Path, op: str, outside: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if op == "empty":
        path.write_bytes(b"")
    elif op == "directory":
        path.mkdir()
    elif op == "symlink_outside":
        path.symlink_to(outside / "secret.txt")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A folder beside the examples' that no reader may open a file of (unless a symlink the user
    placed leads there)."""
    path = tmp_path_factory.mktemp("outside")
    (path / "secret.txt").write_text("secret line\nanother secret line\n", encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """No reader reaches the network in these tests: a download is an OSError."""
    import urllib.error
    import urllib.request

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("no network in the fuzz tests")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


# --- shared valid inputs -------------------------------------------------------------------------

WORDS = {
    "de": "der die das haus katze hund wasser brot tisch stuhl buch baum sonne mond stadt fluss".split(),
    "en": "the a house cat dog water bread table chair book tree sun moon city river".split(),
    "fr": "le la maison chat chien eau pain table chaise livre arbre soleil lune ville fleuve".split(),
}


def sentences(lang: str, n: int, offset: int = 0) -> list[str]:
    words = WORDS[lang]
    return [
        " ".join(words[(i * 7 + j * 3 + offset) % len(words)] for j in range(3 + i % 4)).capitalize() + "."
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def corpus_dir(base) -> Path:
    """A small de-en and en-fr corpus (ems.corpus layout)."""
    from ems.corpus import write_parallel

    corpus = base / "corpus"
    write_parallel(corpus, "words", "de", "en", zip(sentences("de", 40), sentences("en", 40)))
    write_parallel(corpus, "words", "en", "fr", zip(sentences("en", 30, 2), sentences("fr", 30, 2)))
    return corpus


@pytest.fixture(scope="module")
def vocab_dir(base, corpus_dir) -> Path:
    """A tiny SentencePiece vocabulary with <2de>, <2en> and <2fr> (ems_tokenizer.json + spm.model)."""
    from data_prep.vocab import train_vocab

    train_vocab(corpus_dir, base / "vocab", vocab_size=64)
    return base / "vocab"


MOSES_DE = ["Hallo Welt.", "  Ein Haus ", "Der Hund\tbellt.", "Grüße, 世界", "Äpfel und Birnen.", "Zweimal."]
MOSES_EN = ["Hello world.", "A house", " The dog barks.", "Greetings, world", "Apples and pears.", "Twice."]


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1] if path.stat().st_size else []


def check_aligned_folder(folder: Path) -> dict[str, int]:
    """Every <pair>/<name>.<l1|l2> file pair under `folder` has as many lines on both sides, none
    empty; {"<pair>/<name>": lines}."""
    counts = {}
    for pair_dir in sorted(p for p in folder.iterdir() if p.is_dir() and "-" in p.name):
        l1, l2 = pair_dir.name.split("-")
        for path in sorted(pair_dir.glob(f"*.{l1}")):
            other = path.with_name(path.name[: -len(l1)] + l2)
            first, second = lines_of(path), lines_of(other)
            assert len(first) == len(second), f"{path}: {len(first)} lines, {other}: {len(second)}"
            assert all(line.strip() for line in first + second), f"an empty line in {path} or {other}"
            counts[f"{pair_dir.name}/{path.name[: -len(l1) - 1]}"] = len(first)
    return counts


# --- Moses parallel files (ems.corpus: every stage that reads a corpus root) ---------------------


def moses_oracle(data_l1: bytes, data_l2: bytes) -> list[tuple[str, str]] | None:
    """What read_parallel must yield for these two files' bytes (None: they differ in length)."""
    lines = []
    for data in (data_l1, data_l2):
        split = data.split(b"\n")
        lines.append(split[:-1] if split[-1] == b"" else split)
    if len(lines[0]) != len(lines[1]):
        return None
    pairs = []
    for i, (raw_l1, raw_l2) in enumerate(zip(*lines)):
        encoding = "utf-8-sig" if i == 0 else "utf-8"
        try:
            text_l1, text_l2 = raw_l1.decode(encoding).strip(), raw_l2.decode(encoding).strip()
        except UnicodeDecodeError:
            continue
        if text_l1 and text_l2:
            pairs.append((text_l1, text_l2))
    return pairs


MOSES_LAYOUTS = st.sampled_from(
    ["as_is", "stray_file", "unsorted_dir", "three_codes", "hidden_dir", "no_dash_dir", "file_op"]
)


@fuzz(
    "moses",
    de=st.one_of(st.just([]), BYTE_MUTATIONS),
    en=st.one_of(st.just([]), BYTE_MUTATIONS),
    layout=MOSES_LAYOUTS,
    file_op=FILE_OPS,
    side=st.sampled_from(["de", "en"]),
)
def test_moses_parallel_files(base, outside, de, en, layout, file_op, side):
    from data_prep.__main__ import main
    from ems.corpus import ReadReport, list_parallel, read_parallel

    with example_root(base) as root:
        corpus = root / "corpus"
        pair = corpus / "de-en"
        pair.mkdir(parents=True)
        data = {
            "de": mutate_bytes(("\n".join(MOSES_DE) + "\n").encode(), de),
            "en": mutate_bytes(("\r\n".join(MOSES_EN) + "\r\n").encode(), en),
        }
        for lang, content in data.items():
            (pair / f"c.{lang}").write_bytes(content)
        if layout == "stray_file":
            (pair / "d.de").write_bytes(b"no counterpart\n")
        elif layout == "unsorted_dir":
            (corpus / "en-de").mkdir()
            (corpus / "en-de" / "c.en").write_bytes(b"x\n")
            (corpus / "en-de" / "c.de").write_bytes(b"y\n")
        elif layout == "three_codes":
            (corpus / "de-en-fr").mkdir()
        elif layout == "hidden_dir":
            (corpus / ".de-en").mkdir()
            (corpus / ".de-en" / "c.de").write_bytes(b"x\n")
        elif layout == "no_dash_dir":
            (corpus / "misc").mkdir()
        elif layout == "file_op":
            change_file(pair / f"c.{side}", file_op, outside)

        ok, files = attempt(root, lambda: list_parallel(corpus))
        for files_pair in files if ok else []:
            report = ReadReport()
            read, pairs = attempt(root, lambda: list(read_parallel(files_pair.path_l1, files_pair.path_l2, report)))
            expected = moses_oracle(data["de"], data["en"]) if files_pair.name == "c" and layout != "file_op" else ...
            if expected is None:
                assert not read, "files of different lengths read without an error"
            if read:
                assert report.read == report.kept + report.skipped_empty + report.skipped_invalid_utf8
                assert report.kept == len(pairs)
                assert all(text == text.strip() and text and "\n" not in text for pair_ in pairs for text in pair_)
                if expected is not ...:
                    assert pairs == expected

        argv = ["split", "--in", str(corpus), "--train-out", str(root / "train"), "--heldout-out", str(root / "held")]
        status, _, _ = run_cli(root, main, [*argv, "--per-pair", "1"])
        if status == 0:
            check_aligned_folder(root / "train")
            check_aligned_folder(root / "held")


# --- gettext catalogs (.mo / .po, alone and inside wheels: data_prep.gettext_catalogs and _corpus) ---


def _catalog(locale: str):
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale=locale)
    german = locale == "de"
    for msgid, de, fr in [
        ("Save", "Speichern", "Enregistrer"),
        ("Delete", "Löschen", "Supprimer"),
        ("Log out", "Abmelden", "Déconnexion"),
        ("Change password", "Passwort ändern", "Modifier le mot de passe"),
        ("Enter a valid date.", "Geben Sie ein gültiges Datum ein.", "Saisissez une date valide."),
        ("<b>Bold</b> %(name)s text", "<b>Fetter</b> %(name)s Text", "Texte <b>gras</b> %(name)s"),
        ("Untranslated", "", ""),
    ]:
        catalog.add(msgid, de if german else fr)
    catalog.add(("%(n)s item", "%(n)s items"), ("%(n)s Eintrag", "%(n)s Einträge") if german else ("%(n)s", "%(n)s"))
    catalog.add("May", "Mai", context="month")  # the same word in both
    catalog.add("Fuzzy one", "Unscharf", flags=["fuzzy"])
    return catalog


@pytest.fixture(scope="module")
def gettext_catalogs() -> dict[str, bytes]:
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import write_po

    mo, po = io.BytesIO(), io.BytesIO()
    write_mo(mo, _catalog("de"))
    write_po(po, _catalog("fr"))
    return {"mo": mo.getvalue(), "po": po.getvalue()}


def fold_header(po: bytes) -> bytes:
    """A .po whose POT-Creation-Date header is folded onto a second line (found by the long profile:
    babel's date parser then calls .group() on None)."""
    date = po.index(b"POT-Creation-Date: ") + len(b"POT-Creation-Date: 2026-11-27")
    return po[:date] + b'\\n"\n" ' + po[date:]


@fuzz(
    "gettext_catalog",
    kind=st.sampled_from(["mo", "po"]),
    mutation=BYTE_MUTATIONS,
    header=st.booleans(),
    folded=st.just(False),
)
@example(kind="po", mutation=[], header=False, folded=True)  # the regression test of that failure
def test_gettext_catalog_bytes(base, gettext_catalogs, kind, mutation, header, folded):
    from data_prep.gettext_catalogs import CatalogEntry, parse_mo, parse_po

    seed = fold_header(gettext_catalogs["po"]) if folded else gettext_catalogs[kind]
    data = mutate_bytes(seed, mutation, region=64 if header and kind == "mo" else None)
    parse = parse_mo if kind == "mo" else (lambda data, source: parse_po(data, source)[0])
    with example_root(base) as root:
        ok, entries = attempt(root, lambda: parse(data, f"x.{kind}"))
    if ok:
        assert all(isinstance(entry, CatalogEntry) for entry in entries)
        assert all(isinstance(entry.msgid, str) and isinstance(entry.msgstr, str) for entry in entries)


HOSTILE_MEMBERS = [
    "../evil/locale/de/LC_MESSAGES/x.mo",
    "/abs/locale/de/LC_MESSAGES/x.mo",
    "pkg/locale/de/LC_MESSAGES/../../../../../x.mo",
    "C:/pkg/locale/de/LC_MESSAGES/x.mo",
    "pkg\\..\\..\\locale\\de\\LC_MESSAGES\\x.mo",
    "pkg/locale/xx_YY.UTF-8@latin/LC_MESSAGES/x.mo",
    "pkg/locale/1/LC_MESSAGES/x.po",
    "pkg/locale/de/LC_MESSAGES/django.po",
]


@fuzz(
    "gettext_wheel",
    target=st.sampled_from(["mo", "po", "zip", "member"]),
    mutation=BYTE_MUTATIONS,
    member=st.sampled_from(HOSTILE_MEMBERS),
    deflated=st.booleans(),
)
def test_gettext_wheel(base, gettext_catalogs, target, mutation, member, deflated):
    from data_prep.gettext_corpus import REPORT_FILE, main

    members = {
        "pkg/__init__.py": b"",
        "pkg/locale/de/LC_MESSAGES/django.mo": gettext_catalogs["mo"],
        "pkg/locale/fr/LC_MESSAGES/django.po": gettext_catalogs["po"],
    }
    if target in ("mo", "po"):
        name = next(name for name in members if name.endswith(target))
        members[name] = mutate_bytes(members[name], mutation)
    elif target == "member":
        members[member] = gettext_catalogs["mo" if member.endswith(".mo") else "po"]
    with example_root(base) as root:
        wheel = root / "pkg-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED if deflated else zipfile.ZIP_STORED) as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        if target == "zip":
            wheel.write_bytes(mutate_bytes(wheel.read_bytes(), mutation))
        out = root / "out"
        argv = [str(out), "--packages", "--wheels", str(wheel), "--min-pairs", "3", "--heldout-size", "1"]
        status, _, _ = run_cli(root, main, argv)
        if status == 0:
            report = json.loads((out / REPORT_FILE).read_text(encoding="utf-8"))
            train, heldout = check_aligned_folder(out / "train"), check_aligned_folder(out / "heldout")
            for language, stats in report["languages"].items():
                pair = "-".join(sorted(("en", language)))
                assert train[f"{pair}/gettext"] == stats["train_pairs"]
                assert heldout[f"{pair}/gettext"] == stats["heldout_pairs"]


# --- OPUS: a local mirror (XCES alignments .xml.gz + raw sentence zips) and downloaded Moses zips ----

OPUS_TEXT = {"de": sentences("de", 8), "en": sentences("en", 8)}
FETCH_CONFIG = {"languages": ["de", "en"], "pivot": "en", "corpora": [{"name": "TED2020", "release": "v1"}]}
HOSTILE_DOCS = [
    OUTSIDE_REL,
    OUTSIDE,
    "de/doc9.xml.gz",
    "",
    "de/../../../../x.xml.gz",
    "../../raw/de.zip",
    "/etc/hostname",
    "de/doc0.xml",
]
HOSTILE_XTARGETS = ["1;", ";", "a;b", "1 2;3", "99999;1", "-1;1", "1;1;1", "", "0;0", "1 1 1;", "2", "1:1"]


def _fetch_config(root: Path, outside: Path, corpus_op=None) -> Path:
    config = json.loads(json.dumps(FETCH_CONFIG))
    if corpus_op is not None:
        config["corpora"][0][corpus_op[0]] = corpus_op[1]
    path = root / "data.yaml"
    path.write_bytes(dump_yaml(config, root, outside))
    return path


def _check_fetched(out: Path) -> None:
    report = json.loads((out / "fetch_report.json").read_text(encoding="utf-8"))
    counts = check_aligned_folder(out)
    for entry in report["fetched"]:
        if entry["status"] == "fetched":
            assert counts[f"{entry['pair']}/TED2020"] == entry["pairs"]


@pytest.fixture(scope="module")
def opus_mirror(base) -> Path:
    from fixtures.opus_mirror import build_mirror

    root = base / "opus_seed"
    build_mirror(root / "mirror", "TED2020", "v1", None, [("de", "en")], docs=2, text=OPUS_TEXT)
    return root


def _rezip(path: Path, edit) -> None:
    with zipfile.ZipFile(path) as archive:
        members = [(name, archive.read(name)) for name in archive.namelist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in edit(members):
            archive.writestr(name, data)


@fuzz(
    "opus_mirror",
    target=st.sampled_from(["xml", "xml_attribute", "gz", "zip", "document", "member", "corpus"]),
    mutation=BYTE_MUTATIONS,
    attribute=st.sampled_from(["fromDoc", "toDoc", "xtargets"]),
    doc=st.sampled_from(HOSTILE_DOCS),
    xtargets=st.sampled_from(HOSTILE_XTARGETS),
    member=st.sampled_from(HOSTILE_MEMBERS + ["TED2020/raw/de/doc0.xml", "TED2020/raw/de/../../../x.xml"]),
    lang=st.sampled_from(["de", "en"]),
    corpus_op=st.tuples(
        st.sampled_from(["name", "release"]),
        st.sampled_from(["..", "../..", "a/../..", OUTSIDE, OUTSIDE_REL, "/", "x/y", " ", "v1/../../.."]),
    ),
)
@example(  # found by the long profile: a link whose xtargets has no ';'
    target="xml_attribute",
    mutation=[],
    attribute="xtargets",
    doc="",
    xtargets="2",
    member="",
    lang="de",
    corpus_op=("name", ".."),
)
def test_opus_mirror(base, outside, opus_mirror, target, mutation, attribute, doc, xtargets, member, lang, corpus_op):
    from data_prep.__main__ import main

    with example_root(base, opus_mirror) as root:
        release = root / "mirror" / "TED2020" / "v1"
        alignment = release / "xml" / "de-en.xml.gz"
        if target == "xml":
            xml = gzip.decompress(alignment.read_bytes())
            alignment.write_bytes(gzip.compress(mutate_bytes(xml, mutation)))
        elif target == "xml_attribute":
            xml = gzip.decompress(alignment.read_bytes()).decode("utf-8")
            value = xtargets if attribute == "xtargets" else outside_values(doc, root, outside)
            xml = re.sub(f'{attribute}="[^"]*"', f'{attribute}="{value}"', xml, count=1 + len(mutation) % 2)
            alignment.write_bytes(gzip.compress(xml.encode("utf-8")))
        elif target == "gz":
            alignment.write_bytes(mutate_bytes(alignment.read_bytes(), mutation))
        elif target == "zip":
            path = release / "raw" / f"{lang}.zip"
            path.write_bytes(mutate_bytes(path.read_bytes(), mutation))
        elif target == "document":
            _rezip(
                release / "raw" / f"{lang}.zip",
                lambda members: [(n, mutate_bytes(d, mutation) if n.endswith("doc0.xml") else d) for n, d in members],
            )
        elif target == "member":
            _rezip(release / "raw" / f"{lang}.zip", lambda members: [*members, (member, members[0][1])])
        config = _fetch_config(root, outside, corpus_op if target == "corpus" else None)
        argv = ["fetch", "--config", str(config), "--mirror", str(root / "mirror"), "--out", str(root / "out")]
        status, _, _ = run_cli(root, main, argv)
        if status == 0:
            _check_fetched(root / "out")


MOSES_ZIP = "TED2020_v1_moses_de-en.txt.zip"


@fuzz(
    "opus_moses_zip",
    target=st.sampled_from(
        ["zip", "zip", "zip_method", "zip_encrypted", "member_text", "member_name", "member_missing"]
    ),
    mutation=BYTE_MUTATIONS,
    lang=st.sampled_from(["de", "en"]),
    member=st.sampled_from(
        [
            "../TED2020.de-en.de",
            "/abs/TED2020.de-en.en",
            "sub/TED2020.de-en.de",
            "TED2020.de-en.fr",
            "TED2020.en-de.de",
            "..\\TED2020.de-en.en",
            "TED2020.de-en.de/",
        ]
    ),
)
@example(target="zip_method", mutation=[], lang="de", member="README")  # found by the long profile
@example(target="zip_encrypted", mutation=[], lang="de", member="README")  # found by the long profile
def test_opus_moses_zip(base, outside, target, mutation, lang, member):
    from data_prep.__main__ import main

    members = {
        "TED2020.de-en.de": ("\n".join(OPUS_TEXT["de"]) + "\n").encode(),
        "TED2020.de-en.en": ("\n".join(OPUS_TEXT["en"]) + "\n").encode(),
        "README": b"not a corpus file\n",
    }
    if target == "member_text":
        members[f"TED2020.de-en.{lang}"] = mutate_bytes(members[f"TED2020.de-en.{lang}"], mutation)
    elif target == "member_name":
        members[member] = members[f"TED2020.de-en.{lang}"]
    elif target == "member_missing":
        del members[f"TED2020.de-en.{lang}"]
    with example_root(base) as root:
        downloads = root / "downloads"
        downloads.mkdir()
        with zipfile.ZipFile(downloads / MOSES_ZIP, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        if target == "zip":
            (downloads / MOSES_ZIP).write_bytes(mutate_bytes((downloads / MOSES_ZIP).read_bytes(), mutation))
        elif target in ("zip_method", "zip_encrypted"):  # the first member's central directory entry
            data = bytearray((downloads / MOSES_ZIP).read_bytes())
            entry = data.index(b"PK\x01\x02")
            if target == "zip_method":
                data[entry + 10 : entry + 12] = (99).to_bytes(2, "little")  # a compression method zipfile lacks
            else:
                data[entry + 8] |= 1  # general purpose flag bit 0: encrypted
            (downloads / MOSES_ZIP).write_bytes(bytes(data))
        config = _fetch_config(root, outside)
        argv = ["fetch", "--config", str(config), "--downloads", str(downloads), "--catalog", "local"]
        status, _, _ = run_cli(root, main, [*argv, "--out", str(root / "out")])
        if status == 0:
            _check_fetched(root / "out")


# --- Hugging Face local layouts (data_prep.hf: jsonl, csv, parquet files, a folder with a README) ----

HF_DE, HF_EN = sentences("de", 6, 1), sentences("en", 6, 1)


def _write_parquet(path: Path, columns: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def _write_arrow(root: Path, layout: str) -> tuple[Path, Path]:
    """(the source, its arrow file): a save_to_disk folder ("saved") or an arrow stream file."""
    import datasets
    import pyarrow as pa

    rows = [{"de": de, "en": en} for de, en in zip(HF_DE, HF_EN)]
    if layout == "saved":
        datasets.Dataset.from_dict({"translation": rows}).save_to_disk(str(root / "saved"))
        return root / "saved", next((root / "saved").glob("*.arrow"))
    table = pa.table({"translation": rows})
    with pa.OSFile(str(root / "pairs.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return root / "pairs.arrow", root / "pairs.arrow"


def _hf_readme(data_files: str) -> dict:
    return {"configs": [{"config_name": "de-en", "data_files": [{"split": "train", "path": data_files}]}]}


@fuzz(
    "hf_local",
    layout=st.sampled_from(["jsonl", "csv", "parquet", "folder", "saved", "arrow"]),
    rows=st.one_of(st.just([]), STRUCT_MUTATIONS),
    mutation=st.one_of(st.just([]), BYTE_MUTATIONS),
    file_op=st.one_of(st.none(), FILE_OPS),
)
@example(layout="jsonl", rows=[("set", 0, None)], mutation=[], file_op=None)  # `null`: pyarrow's segfault
@example(layout="jsonl", rows=[], mutation=[], file_op="empty")  # datasets' StopIteration
@example(layout="folder", rows=[("set", 3, None)], mutation=[], file_op=None)  # a null in the card's configs
# four bytes of a save_to_disk arrow file's offsets overwritten: was pyarrow's SystemError (issue 62)
@example(layout="saved", rows=[], mutation=[("overwrite", 656, b"\xff" * 4)], file_op=None)
def test_hf_local_layouts(base, outside, layout, rows, mutation, file_op):
    from data_prep.__main__ import main

    with example_root(base) as root:
        if layout == "jsonl":
            source = root / "pairs.jsonl"
            table = [{"translation": {"de": de, "en": en}} for de, en in zip(HF_DE, HF_EN)]
            table = mutate_structure(table, rows) if rows else table
            lines = table if isinstance(table, list) else [table]
            text = "".join(outside_values(json.dumps(row, ensure_ascii=False), root, outside) + "\n" for row in lines)
            source.write_bytes(mutate_bytes(text.encode("utf-8", "surrogatepass"), mutation))
        elif layout == "csv":
            source = root / "pairs.csv"
            text = "source,target\n" + "".join(f'"{de}","{en}"\n' for de, en in zip(HF_DE, HF_EN))
            source.write_bytes(mutate_bytes(text.encode(), mutation))
        elif layout == "parquet":
            source = root / "pairs.parquet"
            _write_parquet(source, {"english": HF_EN, "non_english": HF_DE})
            source.write_bytes(mutate_bytes(source.read_bytes(), mutation))
        elif layout in ("saved", "arrow"):  # any byte flip inside a valid arrow file (issue 62)
            source, data_file = _write_arrow(root, layout)
            data_file.write_bytes(mutate_bytes(data_file.read_bytes(), mutation or [("flip", len(HF_DE) * 31, 7)]))
        else:
            folder = root / "dataset"
            _write_parquet(folder / "de-en" / "train-00000-of-00001.parquet", {"english": HF_EN, "non_english": HF_DE})
            card = mutate_structure(_hf_readme("de-en/train-*"), rows) if rows else _hf_readme("de-en/train-*")
            front = dump_yaml(card, root, outside)
            (folder / "README.md").write_bytes(mutate_bytes(b"---\n" + front + b"---\nPairs.\n", mutation))
            source = Path(f"{folder}:de-en")
        if file_op is not None and layout not in ("folder", "saved"):
            change_file(source, file_op, outside)
        argv = ["import", "--format", "hf", str(source), "--out", str(root / "out"), "--languages", "de", "en"]
        status, _, _ = run_cli(root, main, [*argv, "--cache-dir", str(root / "cache")])
        if status == 0:
            counts = check_aligned_folder(root / "out")
            report = json.loads((root / "out" / "hf_import_report.json").read_text(encoding="utf-8"))
            for entry in report.values():
                for pair, pair_counts in entry["pairs"].items():
                    assert counts[f"{pair}/{entry['name']}"] == pair_counts["kept"]


# --- the tokenizer folder (ems_tokenizer.json + spm.model: ems.text.Tokenizer.load) ----------------


def _tokenizer_files(directory: Path, target: str, mutation, file_op, root: Path, outside: Path) -> None:
    """Change the tokenizer files in `directory`: the JSON file as a document, spm.model's bytes, or
    one of them as a whole."""
    meta_path, spm_path = directory / "ems_tokenizer.json", directory / "spm.model"
    if target == "json":
        mutate_json_file(meta_path, mutation, root, outside)
    elif target == "spm":
        spm_path.write_bytes(mutate_bytes(spm_path.read_bytes(), mutation[1] or [("truncate", 1000)]))
    elif target == "legacy_name":
        meta_path.rename(directory / "tokenizer.json")
    elif target in ("json_file", "spm_file"):
        change_file(meta_path if target == "json_file" else spm_path, file_op, outside)


TOKENIZER_TARGETS = st.sampled_from(["json", "json", "json", "spm", "spm", "legacy_name", "json_file", "spm_file"])


@fuzz("tokenizer", target=TOKENIZER_TARGETS, mutation=DOC_MUTATIONS, file_op=FILE_OPS)
@example(target="json", mutation=([("set", 0, "@DEEP:3000@")], []), file_op="delete")  # found by the long profile
def test_tokenizer_folder(base, outside, vocab_dir, target, mutation, file_op):
    from ems.text import Tokenizer

    with example_root(base, vocab_dir) as root:
        _tokenizer_files(root, target, mutation, file_op, root, outside)

        def load_and_encode():
            tokenizer = Tokenizer.load(root)
            return tokenizer, {lang: tokenizer.encode(["Das Haus, the house."], lang) for lang in tokenizer.languages}

        ok, loaded = attempt(root, load_and_encode)
    if ok:
        tokenizer, encoded = loaded
        assert isinstance(tokenizer.languages, list) and all(isinstance(lang, str) for lang in tokenizer.languages)
        assert len(set(tokenizer.languages)) == len(tokenizer.languages)
        for ids in encoded.values():
            assert all(0 <= i < tokenizer.vocab_size for i in ids[0])


# --- model folders (config.json + model.safetensors + the tokenizer: ems.load through `ems:DIR`) ------

TINY_MODEL = {"d_model": 16, "n_heads": 2, "d_ffn": 32, "n_layers": 1, "d_lang": 8, "d_contrastive": 8, "max_len": 32}


@pytest.fixture(scope="module")
def model_dir(base, vocab_dir) -> Path:
    import torch

    from ems.encoder import export_encoder
    from ems.model import EMSModel
    from ems.model_config import config_from_preset
    from ems.text import Tokenizer

    tokenizer = Tokenizer.load(vocab_dir)
    torch.manual_seed(0)
    config = config_from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages), **TINY_MODEL
    )
    return export_encoder(EMSModel(config).encoder, tokenizer, base / "model")


def _safetensors_parts(data: bytes) -> tuple[dict, bytes]:
    size = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + size]), data[8 + size :]


def _safetensors_bytes(header: bytes, payload: bytes) -> bytes:
    return len(header).to_bytes(8, "little") + header + payload


@fuzz(
    "model",
    target=st.sampled_from(["config", "config", "header", "header", "weights", "tokenizer", "file", "manifest"]),
    mutation=DOC_MUTATIONS,
    file_op=FILE_OPS,
    which=st.sampled_from(["config.json", "model.safetensors"]),
    tokenizer_target=TOKENIZER_TARGETS,
)
@example(
    target="config", mutation=([("set", 5, False)], []), file_op="delete", which="config.json", tokenizer_target="json"
)
@example(
    target="config", mutation=([("set", 24, True)], []), file_op="delete", which="config.json", tokenizer_target="json"
)
@example(
    target="config",
    mutation=([("set", 0, "@DEEP:3000@")], []),
    file_op="delete",
    which="config.json",
    tokenizer_target="json",
)
def test_model_folder(base, outside, model_dir, target, mutation, file_op, which, tokenizer_target):
    from safetensors import safe_open

    from ems.encoder import MANIFEST_FILE, MODEL_FILES
    from ems.encoder_kinds import load_encoder

    with example_root(base, model_dir) as root:
        weights = root / "model.safetensors"
        if target == "config":
            mutate_json_file(root / "config.json", mutation, root, outside)
        elif target == "header":
            header, payload = _safetensors_parts(weights.read_bytes())
            weights.write_bytes(_safetensors_bytes(mutated_doc(header, mutation, root, outside), payload))
        elif target == "weights":
            weights.write_bytes(mutate_bytes(weights.read_bytes(), mutation[1] or [("flip", 3, 1)]))
        elif target == "tokenizer":
            _tokenizer_files(root, tokenizer_target, mutation, file_op, root, outside)
        elif target == "manifest":
            mutate_json_file(root / MANIFEST_FILE, mutation, root, outside)
        else:
            change_file(root / which, file_op, outside)

        def load_and_encode():
            encoder = load_encoder(f"ems:{root}")
            return encoder, encoder.encode(["Das Haus."], encoder.languages[0])

        ok, loaded = attempt(root, load_and_encode)
        if ok:
            encoder, vectors = loaded
            config = json.loads((root / "config.json").read_text())
            assert vectors.shape == (1, config.get("d_output") or config["d_model"]) and vectors.dtype == np.float32
            with safe_open(str(weights), framework="pt") as stored:
                stored_shapes = {name: tuple(stored.get_slice(name).get_shape()) for name in stored.keys()}
            model_shapes = {name: tuple(t.shape) for name, t in encoder.model.model.state_dict().items()}
            assert model_shapes == stored_shapes
            assert model_shapes["tok_emb.weight"] == (config["vocab_size"], config["d_model"])
            if (root / MANIFEST_FILE).read_bytes() == (model_dir / MANIFEST_FILE).read_bytes():
                # with its manifest as saved, a model that loads is the saved one, file for file
                for name in MODEL_FILES:
                    assert (root / name).read_bytes() == (model_dir / name).read_bytes(), f"{name} changed, loaded"


# --- shards (index.json + the .npy arrays: ems.shards.PairShards, what the trainer and teacher read) --

SHARD_ARRAY_NAMES = ["tokens.npy", "offsets.npy", "lengths.npy", "langs.npy", "content_ids.npy"]


@pytest.fixture(scope="module")
def shards_dir(base, corpus_dir, vocab_dir) -> Path:
    from data_prep.binarize import binarize

    binarize(corpus_dir, vocab_dir, base / "shards", workers=1)
    return base / "shards"


def hostile_array(array: np.ndarray, kind: int, row: int) -> np.ndarray:
    """`array` with one thing wrong: another dtype, shape or length, values out of range, a row's
    values swapped, or float NaN."""
    kinds = [
        lambda a: a.astype(np.float64),
        lambda a: a.astype(np.int8),
        lambda a: a.reshape(-1),
        lambda a: a[:-1],
        lambda a: np.concatenate([a, a[-1:]]),
        lambda a: a.reshape(*a.shape, 1),
        lambda a: np.full_like(a, -1 if np.issubdtype(a.dtype, np.signedinteger) else 0),
        lambda a: np.where(np.arange(a.size).reshape(a.shape) == row % max(a.size, 1), 7, a).astype(a.dtype),
        lambda a: a[::-1].copy(),
        lambda a: a[:, ::-1].copy() if a.ndim == 2 else a,
        lambda a: np.array([], dtype=a.dtype),
        lambda a: np.array(1, dtype=a.dtype),
    ]
    return kinds[kind % len(kinds)](array)


def _swap_row(array: np.ndarray, row: int) -> np.ndarray:
    array = array.copy()
    if array.ndim == 2 and len(array):
        array[row % len(array)] = array[row % len(array)][::-1]
    return array


ARRAY_OPS = st.one_of(
    st.tuples(st.just("header"), BYTE_MUTATIONS),
    st.tuples(st.just("bytes"), BYTE_MUTATIONS),
    st.tuples(st.just("array"), st.integers(0, 11), st.integers(0, 200)),
    st.tuples(st.just("swap_row"), st.integers(0, 200)),
    st.tuples(st.just("file"), FILE_OPS),
)


def change_array(path: Path, op, outside: Path) -> None:
    if op[0] in ("header", "bytes"):
        path.write_bytes(mutate_bytes(path.read_bytes(), op[1], region=128 if op[0] == "header" else None))
    elif op[0] in ("array", "swap_row"):
        array = np.load(path)
        array = hostile_array(array, op[1], op[2]) if op[0] == "array" else _swap_row(array, op[1])
        with open(path, "wb") as file:  # np.save would add .npy to a name without it
            np.save(file, array)
    else:
        change_file(path, op[1], outside)


@fuzz(
    "shards",
    target=st.sampled_from(["index", "index", *SHARD_ARRAY_NAMES]),
    index_mutation=DOC_MUTATIONS,
    array_op=ARRAY_OPS,
)
# found by the long profile: offsets.npy 0-d and (n, 1); files[0] without l1 (path 16 of the seed's
# index.json); index.json nested too deep for the JSON parser; files null
@example(target="offsets.npy", index_mutation=([], []), array_op=("array", 11, 0))
@example(target="offsets.npy", index_mutation=([], []), array_op=("array", 5, 0))
@example(target="index", index_mutation=([("delete", 16)], []), array_op=("swap_row", 0))
@example(target="index", index_mutation=([("set", 0, "@DEEP:3000@")], []), array_op=("swap_row", 0))
@example(
    target="index", index_mutation=([("add", 0, "x", "@OUTSIDE@"), ("set", 338, None)], []), array_op=("swap_row", 0)
)
def test_shards(base, outside, shards_dir, vocab_dir, target, index_mutation, array_op):
    from ems.shards import PairShards
    from ems.text import Tokenizer

    vocab_size = Tokenizer.load(vocab_dir).vocab_size

    def opened_and_checked() -> PairShards:  # what the trainer does before its first step (check_inputs)
        shards = PairShards(root)
        shards.check_token_ids(vocab_size, vocab_dir)
        return shards

    with example_root(base, shards_dir) as root:
        if target == "index":
            mutate_json_file(root / "index.json", index_mutation, root, outside)
        else:
            change_array(root / target, array_op, outside)
        ok, shards = attempt(root, opened_and_checked)
        if ok:
            tokens = np.asarray(shards.tokens)
            assert tokens.size == 0 or 0 <= tokens.min() <= tokens.max() < vocab_size, "an id outside the vocabulary"
            shards.check_whole()  # nothing shrank since it was opened
            n, languages = len(shards), shards.languages
            assert isinstance(languages, list) and all(isinstance(lang, str) for lang in languages)
            assert shards.langs.shape == (n, 2) and len(shards.offsets) == 2 * n + 1
            assert int(shards.offsets[-1]) == shards.tokens.size
            langs = np.asarray(shards.langs)
            assert ((langs >= 0) & (langs < len(languages))).all(), "a language id outside index.json's languages"
            for entry in shards.index["files"]:
                sides = entry["sides"] if "sides" in entry else [entry["l1"], entry["l2"]]
                expected = [languages.index(side) for side in sides]
                rows = langs[entry["start"] : entry["end"]]
                assert (rows == expected).all(), f"rows {entry['start']}..{entry['end']} are not {sides}"
            for name, members in shards.language_pair_groups().items():
                assert len(members) == len(set(members.tolist()))


# --- every config YAML (ems.configs.load_config and the config dataclasses) -------------------------


def _config_readers():
    """{name: (seed file under configs/, the reader: path -> what it read)} for every kind of config."""
    from data_prep.config import PrepConfig
    from data_prep.recipe import RecipeDataConfig
    from ems.apps.studies.ablation import AblationConfig
    from ems.apps.studies.compute_map_runs import MapConfig
    from ems.configs import load_config
    from ems.training.config import TrainConfig
    from eval.run_all import suite_task_configs
    from eval.task import read_task_config

    return {
        "train": ("train/demo.yaml", lambda path: load_config(TrainConfig, path)),
        "train_paper": ("train/ems-paper.yaml", lambda path: load_config(TrainConfig, path)),
        "data": ("prep/small.yaml", lambda path: load_config(PrepConfig, path)),
        "data_hf": ("prep/distill_hf.yaml", lambda path: load_config(PrepConfig, path)),
        "demo_data": ("data/demo.yaml", lambda path: load_config(RecipeDataConfig, path)),
        "suite": ("eval/suite_demo.yaml", lambda path: [read_task_config(p) for p in suite_task_configs(path)]),
        "task_tatoeba": ("eval/tatoeba.yaml", read_task_config),
        "task_sib200": ("eval/sib200.yaml", read_task_config),
        "task_mlqe": ("eval/mlqe.yaml", read_task_config),
        "task_bucc": ("eval/flores_bucc.yaml", read_task_config),
        "ablation": ("ablation/demo.yaml", lambda path: load_config(AblationConfig, path)),
        "scaling": ("scaling/multilingual.yaml", lambda path: load_config(MapConfig, path)),
    }


CONFIG_KINDS = [
    "train",
    "train_paper",
    "data",
    "data_hf",
    "demo_data",
    "suite",
    "task_tatoeba",
    "task_sib200",
    "task_mlqe",
    "task_bucc",
    "ablation",
    "scaling",
]


def check_types(value, hint, where: str) -> None:
    """`value` is of type `hint` (the scalar types, Literal, unions, lists, tuples, dicts, dataclasses;
    other hints are not checked)."""
    from typing import Annotated, Any, Literal

    if typing.get_origin(hint) is Annotated:  # a FieldsOf section: its class may convert it
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        failures = []
        for option in args:
            try:
                check_types(value, option, where)
                return
            except AssertionError as error:
                failures.append(str(error))
        raise AssertionError(f"{where}: {value!r:.80} is none of {hint}")
    if hint is type(None):
        assert value is None, f"{where}: {value!r:.80} is not None"
    elif hint is bool:
        assert isinstance(value, bool), f"{where}: {value!r:.80} is not a bool"
    elif hint is int:
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r:.80} is not an int"
    elif hint is float:
        assert isinstance(value, float), f"{where}: {value!r:.80} is not a float"
    elif hint is str:
        assert isinstance(value, str), f"{where}: {value!r:.80} is not a str"
    elif origin is Literal:
        assert value in args, f"{where}: {value!r:.80} is not one of {args}"
    elif origin in (list, tuple):
        assert isinstance(value, (list, tuple)), f"{where}: {value!r:.80} is not a list"
        variadic = origin is list or len(args) == 2 and args[1] is Ellipsis
        for i, item in enumerate(value):
            if args:
                check_types(item, args[0] if variadic else args[i], f"{where}[{i}]")
    elif origin is dict or hint is dict:
        assert isinstance(value, dict), f"{where}: {value!r:.80} is not a mapping"
        for key, item in value.items():
            if args:
                check_types(key, args[0], f"{where} key")
                check_types(item, args[1], f"{where}.{key}")
    elif dataclasses.is_dataclass(hint):
        assert isinstance(value, hint), f"{where}: {value!r:.80} is not a {hint.__name__}"
        hints = typing.get_type_hints(hint, include_extras=True)
        for field in dataclasses.fields(hint):
            check_types(getattr(value, field.name), hints[field.name], f"{where}.{field.name}")


def _suite_tasks(suite: Path) -> tuple[str, ...]:
    """The task files a suite names: like paths on a command line, the user's to choose (an absolute
    path to a task config elsewhere is supported), so reading them is no read outside the suite's
    folder."""
    try:
        tasks = yaml.safe_load(suite.read_bytes())["tasks"]
    except Exception:  # a suite the reader refuses anyway
        return ()
    if not isinstance(tasks, list):
        return ()
    return tuple(os.path.abspath(suite.parent / task) for task in tasks if isinstance(task, str) and task)


@pytest.fixture(scope="module")
def config_readers():
    return _config_readers()


@fuzz("configs", kind=st.sampled_from(CONFIG_KINDS), mutation=DOC_MUTATIONS, task=st.integers(0, 10))
@example(kind="train", mutation=([("set", 0, "@DEEP:3000@")], []), task=0)  # found by the long profile
def test_config_yaml(base, outside, config_readers, kind, mutation, task):
    seed, read = config_readers[kind]
    with example_root(base) as root:
        shutil.copytree(REPO_ROOT / "configs", root / "configs")
        path = root / "configs" / seed
        if kind == "suite":  # the suite file, or one of the task files it lists
            tasks = yaml.safe_load(path.read_text())["tasks"]
            target = path if task % (len(tasks) + 1) == 0 else path.parent / tasks[task % (len(tasks) + 1) - 1]
        else:
            target = path
        doc = yaml.safe_load(target.read_text(encoding="utf-8"))
        target.write_bytes(mutated_doc(doc, mutation, root, outside, dump=dump_yaml))
        named = _suite_tasks(path) if kind == "suite" else ()
        ok, config = attempt(root, lambda: read(path), also=named)
    if ok:
        for item in config if isinstance(config, list) else [config]:
            item = item[0] if isinstance(item, tuple) else item
            if dataclasses.is_dataclass(item):
                check_types(item, type(item), kind)


# --- the teacher store (store.json + gen<k>/ids.npy, vectors.npy: ems.teacher_store.TeacherStore) ---

TEACHER_IDS = np.array([3, 17, 29, 1000, 2**63 + 5], dtype=np.uint64)


@pytest.fixture(scope="module")
def teacher_store(base) -> Path:
    store = base / "teacher_seed" / "store"
    (store / "gen0").mkdir(parents=True)
    np.save(store / "gen0" / "ids.npy", TEACHER_IDS)
    np.save(store / "gen0" / "vectors.npy", np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32))
    meta = {"teacher": "npy:x", "identity": "npy-0", "languages": ["en"], "dim": 4, "n": 5, "generation": "gen0"}
    (store / "store.json").write_text(json.dumps(meta))
    return store.parent


@fuzz(
    "teacher_store",
    target=st.sampled_from(["store.json", "store.json", "gen0/ids.npy", "gen0/vectors.npy", "generation"]),
    mutation=DOC_MUTATIONS,
    array_op=ARRAY_OPS,
    generation=st.sampled_from(["symlink_outside", "file", "missing"]),
)
@example(target="gen0/ids.npy", mutation=([], []), array_op=("array", 8, 0), generation="file")  # ids reversed
def test_teacher_store(base, outside, teacher_store, target, mutation, array_op, generation):
    from ems.teacher_store import TeacherStore

    with example_root(base, teacher_store) as root:
        store = root / "store"
        if target == "store.json":
            mutate_json_file(store / "store.json", mutation, root, outside)
        elif target == "generation":
            shutil.rmtree(store / "gen0")
            if generation == "symlink_outside":
                for name in ("ids.npy", "vectors.npy"):
                    shutil.copy(teacher_store / "store" / "gen0" / name, outside / name)
                (store / "gen0").symlink_to(outside, target_is_directory=True)
            elif generation == "file":
                (store / "gen0").write_bytes(b"")
        else:
            change_array(store / target, array_op, outside)

        def read():
            teacher = TeacherStore(store)
            return teacher, teacher.lookup(TEACHER_IDS), teacher.dim, teacher.languages

        ok, read_ = attempt(root, read)
        if ok:
            teacher, (vectors, found), dim, languages = read_
            assert isinstance(dim, int) and isinstance(languages, list)
            assert all(isinstance(lang, str) for lang in languages)
            assert teacher.vectors.ndim == 2 and teacher.vectors.shape == (len(teacher.ids), dim)
            assert teacher.ids.ndim == 1 and len(teacher.ids) == teacher.meta["n"]
            assert vectors.shape == (len(TEACHER_IDS), dim) and vectors.dtype == np.float32
            for i, content_id in enumerate(np.asarray(teacher.ids)):  # every stored id finds its own row
                row, has = teacher.lookup(np.array([content_id], dtype=np.uint64))
                assert has[0], f"id {content_id} of the store is not found"
                np.testing.assert_array_equal(row[0], np.asarray(teacher.vectors[i], dtype=np.float32))


# --- mining: its inputs (two text files, precomputed .npy vectors) and its work dir's manifests ------

MINE_SRC, MINE_TGT = sentences("de", 6, 3), sentences("en", 6, 3)


def _mine_inputs(folder: Path) -> None:
    rng = np.random.default_rng(1)
    (folder / "src.txt").write_text("\n".join(MINE_SRC) + "\n", encoding="utf-8")
    (folder / "tgt.txt").write_text("\n".join(MINE_TGT) + "\n", encoding="utf-8")
    shared = rng.normal(size=(6, 8))
    np.save(folder / "src.npy", (shared + 0.1 * rng.normal(size=(6, 8))).astype(np.float32))
    np.save(folder / "tgt.npy", (shared + 0.1 * rng.normal(size=(6, 8))).astype(np.float32))


def _mine_argv(folder: Path) -> list[str]:
    files = {name: str(folder / name) for name in ("src.txt", "tgt.txt", "src.npy", "tgt.npy")}
    return [
        *["--src", files["src.txt"], "--src-lang", "de", "--tgt", files["tgt.txt"], "--tgt-lang", "en"],
        *["--src-embeddings", files["src.npy"], "--tgt-embeddings", files["tgt.npy"], "--k", "2"],
        *["--out", str(folder / "pairs.tsv"), "--work-dir", str(folder / "work"), "--shard-lines", "4"],
    ]


def _check_mined(folder: Path, src: bytes, tgt: bytes) -> None:
    def texts(data: bytes) -> set[str]:
        return {line.decode("utf-8", "replace").strip() for line in data.split(b"\n")}

    src_lines, tgt_lines = texts(src), texts(tgt)
    for line in (folder / "pairs.tsv").read_text(encoding="utf-8").splitlines():
        score, source, target = line.split("\t")
        assert math.isfinite(float(score))
        assert source.strip() in src_lines and target.strip() in tgt_lines, f"{line!r} is not from the inputs"


@fuzz(
    "mining_inputs",
    target=st.sampled_from(["src.txt", "tgt.txt", "src.npy", "tgt.npy"]),
    mutation=BYTE_MUTATIONS,
    array_op=ARRAY_OPS,
)
def test_mining_inputs(base, outside, target, mutation, array_op):
    from ems.apps.mine import main

    with example_root(base) as root:
        _mine_inputs(root)
        if target.endswith(".txt"):
            (root / target).write_bytes(mutate_bytes((root / target).read_bytes(), mutation))
        else:
            change_array(root / target, array_op, outside)
        src, tgt = ((root / name).read_bytes() if (root / name).is_file() else b"" for name in ("src.txt", "tgt.txt"))
        status, _, _ = run_cli(root, main, _mine_argv(root))
        if status == 0:
            _check_mined(root, src, tgt)


@pytest.fixture(scope="module")
def mining_work(base) -> tuple[Path, bytes]:
    """A finished mining run (inputs, work dir, pairs.tsv) made at the path the examples are copied to
    (manifests record absolute paths), kept in a seed folder; and the TSV it wrote."""
    from ems.apps.mine import main

    folder = base / "mining_work"
    folder.mkdir()
    _mine_inputs(folder)
    assert run_main(main, _mine_argv(folder)) == 0
    seed = base / "mining_work_seed"
    shutil.copytree(folder, seed, symlinks=True)
    shutil.rmtree(folder)
    return seed, (seed / "pairs.tsv").read_bytes()


@fuzz(
    "mining_workdir",
    target=st.sampled_from(["json", "json", "json", "npy", "file"]),
    which=st.integers(0, 1000),
    mutation=DOC_MUTATIONS,
    npy=st.one_of(st.tuples(st.just("header"), BYTE_MUTATIONS), st.tuples(st.just("truncate"), POSITION)),
    file_op=FILE_OPS,
    command=st.sampled_from(["rerun", "stage"]),
)
def test_mining_work_dir(base, outside, mining_work, target, which, mutation, npy, file_op, command):
    from ems.apps.mine import main

    seed, expected = mining_work
    with example_root(base, seed, fixed="mining_work") as root:
        work = root / "work"
        files = sorted(path for path in work.rglob("*") if path.is_file())
        if target == "json":
            path = [p for p in files if p.suffix == ".json"][which % sum(p.suffix == ".json" for p in files)]
            path.write_bytes(mutated_doc(json.loads(path.read_text()), mutation, root, outside))
        elif target == "npy":
            path = [p for p in files if p.suffix == ".npy"][which % sum(p.suffix == ".npy" for p in files)]
            data = path.read_bytes()
            cut = data[: npy[1] % len(data)] if npy[0] == "truncate" else None
            path.write_bytes(mutate_bytes(data, npy[1], region=128) if cut is None else cut)
        else:
            path = files[which % len(files)]
            change_file(path, file_op, outside)
        note(f"changed {path.relative_to(root)}")
        # the same command again (it resumes), or a SLURM job's `stage` (the plan read back from options.json)
        argv = _mine_argv(root) if command == "rerun" else ["stage", "write", "--work-dir", str(work)]
        status, _, _ = run_cli(root, main, argv)
        if status == 0:
            assert (root / "pairs.tsv").read_bytes() == expected, "a resumed run wrote other pairs"


# --- checkpoints (ems.training.checkpoint: `latest`, manifests, the tensor files, the RNG states) ---------------

MODEL_STATES = "mp_rank_00_model_states.pt"


@pytest.fixture(scope="module")
def checkpoints(base) -> Path:
    import torch

    from ems.training.checkpoint import rng_state, write_manifest

    directory = base / "checkpoint_seed" / "checkpoints"
    for step in (5, 10):
        tag_dir = directory / f"step{step}"
        tag_dir.mkdir(parents=True)
        torch.save({"module": {"w": torch.full((2, 3), float(step))}, "step": step}, tag_dir / MODEL_STATES)
        (tag_dir / "rng_rank0.json").write_text(json.dumps(rng_state()))
        write_manifest(tag_dir)
    (directory / "latest").write_text("step10")
    return directory.parent


def resume_like(directory: Path):
    """What ems.training.resume reads of a run's checkpoints, without an engine: the newest tag that
    verifies, its tensor file (as DeepSpeed's loader would read it) and its RNG states."""
    from ems.training.checkpoint import load_rng_state, load_tensor_file, resumable_tags, rng_file

    for tag in resumable_tags(directory):
        state = load_tensor_file(directory / tag / MODEL_STATES)
        load_rng_state(rng_file(directory / tag, 0))
        return tag, state
    return None, None


@contextlib.contextmanager
def kept_rng_states():
    import random

    import torch

    saved = torch.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        np.random.set_state(saved[1])
        random.setstate(saved[2])


@fuzz(
    "checkpoint",
    target=st.sampled_from(["latest", "latest_text", "manifest", "tensors", "tensors_unlisted", "rng", "file"]),
    mutation=DOC_MUTATIONS,
    latest=st.sampled_from(["", "step5", "step99", "../step10", OUTSIDE, "step10\n\n", "STEP10", "step010"]),
    which=st.sampled_from(["manifest.json", MODEL_STATES, "rng_rank0.json"]),
    file_op=FILE_OPS,
)
@example(target="latest", mutation=([], [("insert", 0, b"\xff")]), latest="", which="manifest.json", file_op="delete")
@example(target="tensors", mutation=([], [("truncate", 4)]), latest="", which="manifest.json", file_op="delete")
@example(target="rng", mutation=([("set", 0, None)], []), latest="", which="manifest.json", file_op="delete")
@example(
    target="manifest", mutation=([("set", 0, "@DEEP:3000@")], []), latest="", which="manifest.json", file_op="delete"
)
def test_checkpoints(base, outside, checkpoints, target, mutation, latest, which, file_op):
    import torch

    from ems.training.checkpoint import write_manifest

    with example_root(base, checkpoints) as root:
        directory = root / "checkpoints"
        tag_dir = directory / "step10"
        if target == "latest":
            (directory / "latest").write_bytes(mutate_bytes(b"step10", mutation[1] or [("insert", 0, b"\xff")]))
        elif target == "latest_text":
            (directory / "latest").write_bytes(outside_values(latest, root, outside).encode())
        elif target == "manifest":
            mutate_json_file(tag_dir / "manifest.json", mutation, root, outside)
        elif target in ("tensors", "tensors_unlisted"):
            path = tag_dir / MODEL_STATES
            path.write_bytes(mutate_bytes(path.read_bytes(), mutation[1] or [("flip", 100, 0)]))
            if target == "tensors":  # a manifest that matches: the file itself must be checked
                write_manifest(tag_dir)
        elif target == "rng":
            mutate_json_file(tag_dir / "rng_rank0.json", mutation, root, outside)
            write_manifest(tag_dir)
        else:
            change_file(tag_dir / which, file_op, outside)
        with kept_rng_states():
            ok, read = attempt(root, lambda: resume_like(directory))
        if ok:
            tag, state = read
            assert tag in ("step5", "step10", None)
            if tag is not None:
                assert isinstance(state, dict) and isinstance(state.get("module"), dict)
                assert all(isinstance(t, torch.Tensor) for t in state["module"].values())


# --- folders with a symlink out (issue 62): every folder reader refuses it ----------------------------

LINKED_READERS = ["moses", "tatoeba", "tico19", "heldout", "shards", "vocab", "model"]
# the files each reader of a seeded folder opens (a link among the others is not its business)
READ_FILES = {
    "shards": ["index.json", "tokens.npy", "offsets.npy", "langs.npy", "content_ids.npy", "lengths.npy"],
    "vocab": ["spm.model", "ems_tokenizer.json"],
    "model": ["config.json", "model.safetensors", "spm.model", "ems_tokenizer.json"],
}


def _linked_folder(reader: str, root: Path, seeds: dict[str, Path]) -> tuple[Path, list[str]]:
    """The folder `reader` reads, made under `root`, and its files a link may replace."""
    if reader in ("moses", "tatoeba", "tico19", "heldout"):
        folder, stem, sides = {
            "moses": ("de-en", "c", ("de", "en")),
            "heldout": ("de-en", "c", ("de", "en")),
            "tatoeba": ("afr-eng", "tatoeba-test-v2021-08-07", ("afr", "eng")),
            "tico19": ("en-fr", "tico19-test", ("en", "fr")),
        }[reader]
        (root / "in" / folder).mkdir(parents=True)
        for side, text in zip(sides, (MOSES_DE, MOSES_EN)):
            (root / "in" / folder / f"{stem}.{side}").write_text("\n".join(text) + "\n", encoding="utf-8")
        return root / "in", [f"{folder}/{stem}.{side}" for side in sides]
    shutil.copytree(seeds[reader], root / "in")
    return root / "in", READ_FILES[reader]


def _read_folder(reader: str, folder: Path, root: Path):
    """Read `folder` as `reader` does: (True, what it read) or (False, the user error)."""
    from data_prep.__main__ import main
    from ems.encoder import check_model_directory
    from ems.shards import PairShards
    from ems.text import Tokenizer

    if reader in ("moses", "tatoeba", "tico19"):
        argv = {
            "moses": ["pretokenize", "--workers", "1"],
            "tatoeba": ["import", "--format", "tatoeba_challenge"],
            "tico19": ["import", "--format", "tico19"],
        }[reader]
        status, _, err = run_cli(root, main, [*argv, "--in", str(folder), "--out", str(root / "out")])
        return status == 0, err
    if reader == "heldout":  # an evaluation reader: a file it cannot use is a data error of its language
        from eval.evaluators.heldout import find_heldout_bitexts

        ok, found = attempt(root, lambda: find_heldout_bitexts(folder))
        errors = found[2] if ok else {}
        return ok and not errors, (f"error: {'; '.join(errors.values())}" if errors else found)
    load = {"shards": PairShards, "vocab": Tokenizer.load, "model": check_model_directory}[reader]
    return attempt(root, lambda: load(folder))


@fuzz(
    "folder_links",
    linked=st.sampled_from(LINKED_READERS),
    which=st.integers(0, 50),
    link=st.sampled_from(["file", "folder"]),
)
def test_a_folder_with_a_symlink_out_is_refused(base, outside, shards_dir, vocab_dir, model_dir, linked, which, link):
    """Property: a folder whose file (or, for a corpus, pair folder) is a symlink leading out of it is
    refused in one line naming the file, by every folder reader; the same folder without the link is
    read. The link leads to a copy of the very file it replaces: refused for where it leads, not what
    it holds."""
    from ems.corpus import OutsideRootError

    seeds = {"shards": shards_dir, "vocab": vocab_dir, "model": model_dir}
    with example_root(base) as root:
        folder, files = _linked_folder(linked, root, seeds)
        assert _read_folder(linked, folder, root)[0], "the folder without a link is read"
        shutil.rmtree(root / "out", ignore_errors=True)
        name = files[which % len(files)]
        elsewhere = root.parent / "elsewhere"  # beside the example's folder, removed with it
        if link == "folder" and "/" in name:
            shutil.move(folder / name.split("/")[0], elsewhere)
            (folder / name.split("/")[0]).symlink_to(elsewhere, target_is_directory=True)
            named = folder / name.split("/")[0]
        else:
            elsewhere.mkdir()
            shutil.move(folder / name, elsewhere / "file")
            (folder / name).symlink_to(elsewhere / "file")
            named = folder / name
        ok, read = _read_folder(linked, folder, root.parent)
        assert not ok, f"{linked} read {named}, a symlink out of {folder}"
        if isinstance(read, str):
            assert f"error: {named}" in read and " leads to " in read, read
        else:
            assert isinstance(read, OutsideRootError) and str(read).startswith(str(named)), read


# --- a stage rerun into a pre-filled output folder (issue 62): a clean run's outputs, or one line -----

PREFILL_OPS = st.lists(
    st.one_of(
        st.just(("copy_inputs",)),  # the input files under their own names (the clean stage's output)
        st.tuples(st.just("garbage"), st.sampled_from(["de", "en"]), BYTE_MUTATIONS),  # a mangled output
        st.tuples(st.just("marker"), DOC_MUTATIONS),  # a pretokenize marker, mutated
        st.just(("foreign_name",)),  # a file pair the stage does not write
        st.just(("other_pair",)),  # a pair folder the stage does not write
        st.just(("stray_file",)),  # a file that is no corpus file
    ),
    min_size=1,
    max_size=3,
)


def _stage_outputs(out: Path) -> dict:
    """The corpus files and the stage's marker or report under `out`, the times of the files a marker
    records left out (contents only)."""
    from data_prep.pretokenize import MARKER_FILE

    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.glob("*-*/*")) if p.is_file()}
    if (out / MARKER_FILE).is_file():
        marker = json.loads((out / MARKER_FILE).read_text(encoding="utf-8"))
        for record in marker["files"].values():
            for fingerprint in record["inputs"] + record["outputs"]:
                del fingerprint["mtime_ns"]
        files[MARKER_FILE] = marker
    return files


@fuzz("prefilled", stage=st.sampled_from(["pretokenize", "clean"]), ops=PREFILL_OPS)
def test_a_stage_rerun_into_a_prefilled_folder_gives_a_clean_runs_outputs_or_one_line(
    base, outside, corpus_dir, stage, ops
):
    """Property: a stage run into an output folder already holding files (its own, another stage's,
    mangled ones, a marker) writes what it writes into an empty folder, or refuses in one line."""
    from data_prep.__main__ import main
    from data_prep.pretokenize import MARKER_FILE, pretokenize_corpus

    with example_root(base, corpus_dir) as corpus:  # the input, a copy inside the example's folder
        root = corpus.parent
        config = root / "data.yaml"
        config.write_text("languages: [de, en, fr]\npivot: en\nclean:\n  eval_sets: []\n", encoding="utf-8")
        argv = {
            "pretokenize": ["pretokenize", "--workers", "1"],
            "clean": ["clean", "--config", str(config), "--data-dir", str(root / "no-eval")],
        }[stage]
        assert run_cli(root, main, [*argv, "--in", str(corpus), "--out", str(root / "reference")])[0] == 0
        out = root / "out"
        out.mkdir()
        for op in ops:
            if op[0] == "copy_inputs":
                shutil.copytree(corpus, out, dirs_exist_ok=True)
            elif op[0] == "garbage":
                path = out / "de-en" / f"words.{op[1]}"
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(mutate_bytes((corpus / "de-en" / f"words.{op[1]}").read_bytes(), op[2]))
            elif op[0] == "marker":
                pretokenize_corpus(corpus, root / "marked")
                (out / MARKER_FILE).write_bytes(
                    mutated_doc(json.loads((root / "marked" / MARKER_FILE).read_text()), op[1], root, outside)
                )
            elif op[0] in ("foreign_name", "other_pair"):
                pair = "de-en" if op[0] == "foreign_name" else "de-fr"
                for lang in pair.split("-"):
                    (out / pair).mkdir(exist_ok=True)
                    (out / pair / f"stale.{lang}").write_text("Stale text.\n", encoding="utf-8")
            else:
                (out / "notes.txt").write_text("not a corpus file\n", encoding="utf-8")
        status, _, _ = run_cli(root, main, [*argv, "--in", str(corpus), "--out", str(out)])
        if status == 0:
            assert _stage_outputs(out) == _stage_outputs(root / "reference")
