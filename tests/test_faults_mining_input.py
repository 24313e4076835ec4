"""Input files that start with a UTF-8 byte order mark (U+FEFF, as Windows editors write them): the
mark is no part of the first line, neither in what `ems-mine` embeds and writes nor in what the
evaluation readers (eval.evaluators.retrieval.read_lines) and the clean stage's evaluation sets
(data_prep.clean) read."""

import codecs
from pathlib import Path

import numpy as np
import pytest

from data_prep.clean import load_eval_sentences, normalize, overlap_key, text_hash
from ems.apps.mine import main as mine_main
from ems.cli import run_main
from ems.mining.streaming import scan_distinct, texts_at
from eval.evaluators.retrieval import read_aligned_files, read_lines

pytestmark = pytest.mark.faults

BOM = codecs.BOM_UTF8
SRC = ["Der Hund bellt.", "Die Katze schläft.", "Ich habe Hunger.", "Der Hund bellt.", "Wo ist der Bahnhof?"]
TGT = ["The dog barks.", "The cat sleeps.", "I am hungry.", "Where is the station?", "A red car."]


def write(path: Path, lines: list[str], bom: bool) -> Path:
    path.write_bytes((BOM if bom else b"") + "".join(f"{line}\r\n" for line in lines).encode("utf-8"))
    return path


def mined(tmp_path: Path, name: str, bom: bool, *extra: str) -> bytes:
    folder = tmp_path / name
    folder.mkdir()
    src, tgt = write(folder / "src.de", SRC, bom), write(folder / "tgt.en", TGT, bom)
    out = folder / "pairs.tsv"
    argv = ["--encoder", "ngram:dim=32", "--src", str(src), "--src-lang", "de", "--tgt", str(tgt)]
    argv += ["--tgt-lang", "en", "--out", str(out), "--k", "2", "--line-numbers", "--work-dir", str(folder / "w")]
    assert mine_main([*argv, *extra]) == 0
    return out.read_bytes()


@pytest.mark.parametrize("shard_lines", ["1000", "2"])
def test_a_leading_bom_is_not_mined_embedded_or_written(tmp_path, capsys, shard_lines):
    """The TSV (sentences, scores: the first line's vector, line numbers) is that of the files
    without the mark, and the first line is still a duplicate of the 4th."""
    with_bom = mined(tmp_path, "bom", True, "--shard-lines", shard_lines)
    assert "\ufeff" not in with_bom.decode("utf-8")
    assert with_bom == mined(tmp_path, "plain", False, "--shard-lines", shard_lines)
    rows = [line.split("\t") for line in with_bom.decode("utf-8").splitlines()]
    assert ["Der Hund bellt.", "1"] in [[row[1], row[3]] for row in rows]
    assert "'src_distinct': 4," in capsys.readouterr().out  # the first line is the 4th's duplicate
    first = tmp_path / "bom" / "w" / "embed" / "src" / "00000.lines.npy"
    assert np.load(first)[0].tolist() == [len(BOM), 0]  # the first line starts after the mark


def test_scan_counts_the_first_line_without_its_bom(tmp_path):
    path = write(tmp_path / "in.txt", SRC, bom=True)
    shards = []
    counts = scan_distinct(path, 10, lambda shard, rows: shards.append(rows.copy()))
    assert counts.distinct == 4 and counts.lines == 5 and counts.skipped == {}
    assert list(texts_at(path, shards[0][:, 0])) == [[*SRC[:3], SRC[4]]]


def test_a_file_holding_only_a_bom_and_blank_lines_has_nothing_to_mine(tmp_path, capsys):
    src, tgt = tmp_path / "src.de", write(tmp_path / "tgt.en", TGT, bom=False)
    src.write_bytes(BOM + b"\n  \n")
    argv = ["--encoder", "ngram:dim=32", "--src", str(src), "--src-lang", "de", "--tgt", str(tgt)]
    assert run_main(mine_main, [*argv, "--tgt-lang", "en", "--out", str(tmp_path / "o.tsv")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: nothing to mine: {src} has no non-empty line (2 lines, 2 empty)"]


def test_evaluation_readers_drop_a_leading_bom(tmp_path):
    xx, en = write(tmp_path / "t.deu", SRC, bom=True), write(tmp_path / "t.eng", TGT, bom=True)
    assert read_lines(xx) == SRC
    assert read_aligned_files(xx, en) == (SRC, TGT)


def test_the_clean_stage_removes_an_evaluation_sentence_from_a_file_with_a_bom(tmp_path):
    """A training pair equal to the first sentence of an evaluation file is found, BOM or not."""
    (tmp_path / "tatoeba").mkdir()
    write(tmp_path / "tatoeba" / "tatoeba.deu-eng.eng", TGT, bom=True)
    hashes, counts = load_eval_sentences(tmp_path, ["tatoeba"])
    assert counts["tatoeba"]["sentences"] == len(TGT)
    wanted = np.array([text_hash(overlap_key(normalize(TGT[0])))], dtype=np.uint64)
    assert hashes.contains(wanted).all()
