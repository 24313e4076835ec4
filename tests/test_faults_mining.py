"""Bad input and faults of the staged miner (ems.apps.mine, ems.mining.pipeline): each is one clear
line (status 2) or a counted skip, nothing half-written is ever taken for finished, and a rerun
finishes the job with the bytes of an uninterrupted run, redoing no finished unit. Kills are real
SIGKILLs of a `python -m ems.apps.mine` process, at a chosen point of each stage."""

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ems.apps.mine import main as mine_main
from ems.cli import run_main
from tests.conftest import REPO_ROOT
from tests.fakes import TrigramEncoder, real_sides

SETTINGS = ["--encoder", "ngram:dim=32", "--index", "ivf:n_lists=4", "--shard-lines", "100", "--chunk-lines", "40"]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def sides(data_dir, tmp_path_factory) -> tuple[Path, Path]:
    """300 x 260 distinct real lines: 3 shards a side, 6 units for embed, populate, knn and score."""
    folder = tmp_path_factory.mktemp("sides")
    src, tgt = real_sides(data_dir)
    return write_lines(folder / "src.de", src), write_lines(folder / "tgt.en", tgt)


def argv(src: Path, tgt: Path, out: Path, work: Path | None = None, *extra: str) -> list[str]:
    line = ["--src", str(src), "--src-lang", "de", "--tgt", str(tgt), "--tgt-lang", "en", "--out", str(out)]
    return line + SETTINGS + (["--work-dir", str(work)] if work else []) + list(extra)


@pytest.fixture(scope="module")
def reference(sides, tmp_path_factory) -> bytes:
    """The TSV of an uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "pairs.tsv"
    assert mine_main(argv(*sides, out)) == 0
    return out.read_bytes()


def mine(args: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    status = run_main(mine_main, args)
    return status, capsys.readouterr().err


def error_line(err: str) -> str:
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def records(work: Path) -> dict[str, int]:
    """{done record: mtime_ns} of every finished unit."""
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in work.glob("*/done/*.json")}


# --- kill -9 in every stage ---------------------------------------------------------------------

KILLER = """
import importlib, os, signal, sys
module, name, match, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
target, calls = importlib.import_module(module), []
real = getattr(target, name)
def killing(*args, **kwargs):
    if match in str(args[0]):
        calls.append(args[0])
        if len(calls) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
setattr(target, name, killing)
from ems.apps.mine import main
sys.exit(main(sys.argv[5:]))
"""

# stage: (module, function, a string its first argument holds, the call that is killed)
KILLS = {
    "plan": ("ems.mining.pipeline.plan", "save_array", "", 2),  # the scan's second line shard
    "embed": ("ems.mining.streaming", "encode_checked", "", 5),  # src shard 1, its 2nd chunk of 40 lines
    "train": ("ems.mining.pipeline.manifest", "save_json", "/done/train-", 2),
    "populate": ("ems.mining.pipeline.manifest", "save_json", "/done/populate-", 2),
    "merge": ("ems.mining.pipeline.manifest", "save_json", "/done/merge-", 2),
    "knn": ("ems.mining.pipeline.manifest", "save_json", "/done/knn-", 2),
    "score": ("ems.mining.pipeline.manifest", "save_json", "/done/score-", 2),
    "write": ("ems.mining.pipeline.score", "line_at", "", 9),  # the TSV's 5th line
}
UNITS = {"embed": 6, "train": 2, "populate": 6, "merge": 2, "knn": 6, "score": 6}


@pytest.mark.parametrize("stage", list(KILLS))
def test_kill_9_in_every_stage_then_a_rerun_finishes_without_redoing_finished_units(
    stage, sides, reference, tmp_path, capsys
):
    work, out = tmp_path / "work", tmp_path / "out" / "pairs.tsv"
    module, function, match, nth = KILLS[stage]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, module, function, match, str(nth), *argv(*sides, out, work)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()
    before = records(work)
    if stage in UNITS:  # the first unit finished, the second was cut off before its record
        first = "src" if stage in ("train", "merge") else "src-00000"
        assert [name.rsplit("/", 1)[1] for name in before if f"/{stage}-" in name] == [f"{stage}-{first}.json"]
    if stage == "plan":
        assert not (work / "embed" / "manifest.json").exists() and (work / "embed" / "src" / "00000.lines.npy").exists()
    if stage in ("embed", "write"):  # killed in the middle of a file: only its partial is there
        assert list(work.rglob(".*.partial")) or list(out.parent.glob(".*.partial"))

    status, err = mine(argv(*sides, out, work), capsys)
    assert status == 0, err
    assert out.read_bytes() == reference
    after = records(work)
    assert {name: after[name] for name in before} == before  # no finished unit was done again
    if stage in UNITS:
        assert f"{stage}: 1 of {UNITS[stage]} units finished before" in err
    assert not list(work.rglob("*.partial")) and not list(out.parent.glob(".*.partial"))


# --- disk full, a truncated shard, another setting ---------------------------------------------


class _FullDisk:
    """A file whose second write fails with ENOSPC (its first one, the .npy header, goes through)."""

    def __init__(self, f):
        self.f, self.writes = f, 0

    def write(self, data):
        self.writes += 1
        if self.writes > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.f.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_disk_full_while_writing_a_shard_is_one_line_and_a_rerun_finishes(
    sides, reference, tmp_path, capsys, monkeypatch
):
    import ems.mining.pipeline.files

    work, out = tmp_path / "work", tmp_path / "pairs.tsv"

    def full_for_src_shard_1(path, mode="r", **kwargs):
        f = open(path, mode, **kwargs)
        return _FullDisk(f) if ".00001.vectors.npy" in str(path) and "src" in str(path) else f

    monkeypatch.setattr(ems.mining.pipeline.files, "open", full_for_src_shard_1, raising=False)
    status, err = mine(argv(*sides, out, work), capsys)
    shard = work / "embed" / "src" / "00001.vectors.npy"
    assert status == 2
    assert error_line(err) == (
        f"error: could not write {shard}: No space left on device; nothing of it was kept (rerun to finish)"
    )
    assert not shard.exists() and not list(work.rglob("*.partial")) and not out.exists()
    assert not (work / "embed" / "done" / "embed-src-00001.json").exists()
    monkeypatch.undo()
    status, err = mine(argv(*sides, out, work), capsys)
    assert status == 0 and out.read_bytes() == reference
    assert "embed: 1 of 6 units finished before" in err


def test_a_shard_file_cut_short_on_disk_is_named_and_a_rerun_redoes_only_that_shard(sides, reference, tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "pairs.tsv"
    assert mine(["plan", *argv(*sides, out, work)], capsys)[0] == 0
    assert mine(["stage", "embed", "--work-dir", str(work)], capsys)[0] == 0
    shard = work / "embed" / "src" / "00001.vectors.npy"
    size = shard.stat().st_size
    os.truncate(shard, size - 100)
    before = records(work)

    status, err = mine(["stage", "train", "--work-dir", str(work), "--unit", "0"], capsys)  # a SLURM task
    assert status == 2
    assert error_line(err) == (
        f"error: {shard} has {size - 100} bytes, written with {size}: run the embed step (embed src-00001) first"
    )
    status, err = mine(argv(*sides, out, work), capsys)
    assert status == 0 and out.read_bytes() == reference
    assert f"note: {shard} has {size - 100} bytes, written with {size}: embed src-00001 is done again" in err
    after = records(work)
    assert [name for name in before if after[name] != before[name]] == ["embed/done/embed-src-00001.json"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--k", "3"], "knn was made with k=4; this run has k=3: use another --work-dir, or delete"),
        (["--shard-lines", "50"], "embed was made with shard_lines=100; this run has shard_lines=50"),
        (["--index", "flat"], "index was made with index='ivf:n_lists=4'; this run has index='flat'"),
        (["--encoder", "ngram:dim=16"], "embed was made with encoder='ngram:dim=32'; this run has encoder="),
        (["--src-lang", "fr"], "embed was made with src_lang='de'; this run has src_lang='fr'"),
    ],
)
def test_a_work_dir_made_with_another_setting_is_refused_naming_it(sides, tmp_path, capsys, change, message):
    work, out = tmp_path / "work", tmp_path / "pairs.tsv"
    assert mine(argv(*sides, out, work), capsys)[0] == 0
    before = records(work)
    status, err = mine(argv(*sides, out, work) + change, capsys)
    assert status == 2 and message in error_line(err)
    assert records(work) == before


def test_scoring_settings_score_again_and_a_changed_input_is_refused(sides, tmp_path, capsys):
    work = tmp_path / "work"
    assert mine(argv(*sides, tmp_path / "fresh.tsv", None, "--mode", "forward"), capsys)[0] == 0
    assert mine(argv(*sides, tmp_path / "max.tsv", work), capsys)[0] == 0
    status, err = mine(argv(*sides, tmp_path / "forward.tsv", work, "--mode", "forward"), capsys)
    assert status == 0 and f"note: {work / 'score'} was made with mode='max'; this run has mode='forward'" in err
    assert (tmp_path / "forward.tsv").read_bytes() == (tmp_path / "fresh.tsv").read_bytes()

    changed = tmp_path / "src.de"
    changed.write_bytes(sides[0].read_bytes())
    assert mine(argv(changed, sides[1], tmp_path / "a.tsv", tmp_path / "w2"), capsys)[0] == 0
    with open(changed, "a", encoding="utf-8") as f:
        f.write("Ein neuer Satz.\n")
    status, err = mine(argv(changed, sides[1], tmp_path / "a.tsv", tmp_path / "w2"), capsys)
    assert status == 2 and f"error: {changed} changed since {tmp_path / 'w2' / 'embed'} was made from it" in err


# --- bad input ----------------------------------------------------------------------------------


def test_an_empty_side_is_one_line_before_any_work(tmp_path, capsys):
    src = write_lines(tmp_path / "src.de", ["Der Hund bellt."])
    for lines, detail in (([], "(0 lines, 0 empty)"), (["", "  "], "(2 lines, 2 empty)")):
        tgt = write_lines(tmp_path / "tgt.en", lines)
        status, err = mine(argv(src, tgt, tmp_path / "o.tsv"), capsys)
        assert status == 2 and error_line(err) == f"error: nothing to mine: {tgt} has no non-empty line {detail}"
    (tmp_path / "tgt.en").write_bytes(b"\xff\xfe\n\x00\n")
    status, err = mine(argv(src, tmp_path / "tgt.en", tmp_path / "o.tsv"), capsys)
    assert error_line(err) == (
        f"error: nothing to mine: {tmp_path / 'tgt.en'} has no non-empty line (2 lines, 0 empty; "
        "skipped: 1 not UTF-8 (first: line 1), 1 with a NUL byte (first: line 2))"
    )
    assert not (tmp_path / "o.tsv").exists()


def test_one_line_each_side_is_one_pair(tmp_path, capsys):
    src = write_lines(tmp_path / "src.de", ["Der Hund bellt."])
    tgt = write_lines(tmp_path / "tgt.en", ["The dog barks."])
    status, err = mine(argv(src, tgt, tmp_path / "o.tsv", None, "--index", "flat"), capsys)
    assert status == 0, err
    # k = 1: the margin ratio is cos / ((cos + cos) / 2)
    assert (tmp_path / "o.tsv").read_text(encoding="utf-8") == "1.000000\tDer Hund bellt.\tThe dog barks.\n"


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b"Ein \x00 Satz.", "with a NUL byte"),
        (b"Ein \xff Satz.", "not UTF-8"),
        (b"Ein\tSatz.", "with a tab"),
        # every other character str.splitlines breaks on: a line-splitting reader of the TSV would break the row
        *((f"Ein{char}Satz.".encode(), "with a line break inside") for char in "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"),
    ],
)
def test_a_nul_byte_or_non_utf8_line_is_a_counted_skip(sides, tmp_path, capsys, bad, reason):
    lines = sides[0].read_bytes().split(b"\n")
    with_bad = tmp_path / "src.de"
    with_bad.write_bytes(b"\n".join(lines[:5] + [bad] + lines[5:]))
    without = tmp_path / "clean.de"
    without.write_bytes(b"\n".join(lines))
    assert mine(argv(without, sides[1], tmp_path / "clean.tsv"), capsys)[0] == 0
    capsys.readouterr()
    assert mine_main(argv(with_bad, sides[1], tmp_path / "o.tsv")) == 0
    captured = capsys.readouterr()
    assert f"note: {with_bad}: skipped 1 {reason} (first: line 6)" in captured.err
    assert "'src_skipped': 1" in captured.out and "'src_distinct': 300" in captured.out
    assert (tmp_path / "o.tsv").read_bytes() == (tmp_path / "clean.tsv").read_bytes()


def test_a_line_of_1_mb_is_mined_whole(sides, tmp_path, capsys):
    lines = sides[0].read_text(encoding="utf-8").splitlines()
    long_line = ((" ".join(lines) + " ") * 100)[: 1 << 20]
    src = write_lines(tmp_path / "src.de", lines[:50] + [long_line])
    status, err = mine(argv(src, sides[1], tmp_path / "o.tsv", None, "--mode", "forward"), capsys)
    assert status == 0, err
    rows = [line.split("\t") for line in (tmp_path / "o.tsv").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 51 and [len(row[1]) for row in rows if len(row[1]) > 1000] == [1 << 20]


def test_a_mismatched_src_lang_is_one_line(sides, tmp_path, capsys, monkeypatch):
    import ems.encoder_kinds
    from ems.encoder_kinds import EncoderKind

    bilingual = EncoderKind(lambda path, device: TrigramEncoder(languages=["de", "en"]), "none", {})
    monkeypatch.setitem(ems.encoder_kinds.ENCODER_KINDS, "bilingual", bilingual)
    work = tmp_path / "work"
    for command in ([], ["plan"]):
        args = argv(*sides, tmp_path / "o.tsv", work, "--encoder", "bilingual", "--src-lang", "fr")
        status, err = mine(command + args, capsys)
        assert status == 2
        assert error_line(err) == "error: --src-lang: language 'fr' is not in the encoder's languages: de en"
    assert not (work / "embed").exists()
