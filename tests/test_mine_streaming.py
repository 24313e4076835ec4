"""ems.apps.mine streams its input (ems.mining.streaming): the same pairs as reading the files whole, and
multi-process tokenising gives the vectors of single-process encoding."""

import numpy as np
import pytest

import ems.encoder_kinds
from ems.apps.mine import main as mine_main
from ems.cli import MissingDataError, run_main
from ems.encoder_kinds import EncoderKind, load_encoder
from ems.mining.pipeline.launch import mine_files
from ems.mining.streaming import chunk_embeddings, scan_distinct, texts_at
from tests.fakes import SRC, UI_SENTENCES, TrigramEncoder, in_memory_mine, mining_options, write_inputs

# Repeats, empty and blank lines, a CRLF line, no newline at the end.


@pytest.mark.parametrize(("chunk_lines", "shard_lines"), [(1, 1000), (2, 3), (1000, 1)])
def test_streaming_output_equals_the_in_memory_path(tmp_path, chunk_lines, shard_lines):
    src, tgt = write_inputs(tmp_path)
    encoder = TrigramEncoder()
    options = mining_options(tmp_path, src, tgt, k=2, chunk_lines=chunk_lines, shard_lines=shard_lines)
    counts = mine_files(options, encoder)
    streamed_calls = list(encoder.calls)
    in_memory_mine(encoder, src, tgt, tmp_path / "whole.tsv", k=2)
    streamed = (tmp_path / "streamed.tsv").read_text(encoding="utf-8")
    assert streamed == (tmp_path / "whole.tsv").read_text(encoding="utf-8")
    assert "\tDie Katze schläft.\t" in streamed and "\r" not in streamed  # its CRLF line, without the CR
    assert counts == {
        "src_lines": 9,
        "src_distinct": 5,
        "src_empty": 2,
        "src_skipped": 0,
        "tgt_lines": 8,
        "tgt_distinct": 6,
        "tgt_empty": 1,
        "tgt_skipped": 0,
        "written": counts["written"],
    }
    # streamed: a block of chunk_lines lines at a time, at fixed row numbers whatever the shards
    # (ems.mining.pipeline.embed: a block two shards share is encoded whole by both)
    assert max(n for _, n in streamed_calls) == min(chunk_lines, 6)


def test_scan_keeps_first_occurrences_by_offset(tmp_path):
    src, _ = write_inputs(tmp_path)
    shards = []
    counts = scan_distinct(src, 2, lambda shard, rows: shards.append((shard, rows.copy())))
    assert (counts.lines, counts.empty, counts.distinct, counts.skipped) == (9, 2, 5, {})
    assert [shard for shard, _ in shards] == [0, 1, 2]
    rows = np.concatenate([rows for _, rows in shards])
    assert rows[:, 1].tolist() == [0, 2, 5, 6, 8]
    assert [SRC.encode("utf-8")[o:].split(b"\n")[0].rstrip(b"\r").decode() for o in rows[:, 0].tolist()] == [
        "Der Hund bellt.",
        "Die Katze schläft.",
        "Ich habe Hunger.",
        "Wo ist der Bahnhof?",
        "Guten Tag!",
    ]
    assert list(texts_at(src, rows[:, 0], 2)) == [
        ["Der Hund bellt.", "Die Katze schläft."],
        ["Ich habe Hunger.", "Wo ist der Bahnhof?"],
        ["Guten Tag!"],
    ]
    assert list(texts_at(src, rows[2:, 0], 10)) == [["Ich habe Hunger.", "Wo ist der Bahnhof?", "Guten Tag!"]]


def test_bad_input_files_are_one_clear_error(tmp_path, capsys):
    src, tgt = write_inputs(tmp_path)
    with pytest.raises(MissingDataError, match="missing input file"):
        scan_distinct(tmp_path / "nowhere.de", 10, lambda shard, rows: None)
    base = [
        "--encoder",
        "trigram",
        "--src",
        str(src),
        "--src-lang",
        "de",
        "--tgt",
        str(tgt),
        "--tgt-lang",
        "en",
        "--out",
        str(tmp_path / "o.tsv"),
    ]
    ems.encoder_kinds.ENCODER_KINDS["trigram"] = EncoderKind(lambda path, device: TrigramEncoder(), "none", {})
    try:
        for extra, message in (
            (["--chunk-lines", "0"], "--chunk-lines must be an integer >= 1"),
            (["--src", str(tmp_path / "nowhere.de")], "missing input file"),
        ):
            capsys.readouterr()
            assert run_main(mine_main, base + extra) == 2
            err = capsys.readouterr().err
            assert err.count("error:") == 1 and message in err and "Traceback" not in err
    finally:
        del ems.encoder_kinds.ENCODER_KINDS["trigram"]


def test_work_dir_keeps_the_embeddings_one_row_per_distinct_line(tmp_path):
    src, tgt = write_inputs(tmp_path)
    mine_files(mining_options(tmp_path, src, tgt, work_dir=str(tmp_path / "work"), chunk_lines=2), TrigramEncoder())
    x = np.load(tmp_path / "work" / "embed" / "src" / "00000.vectors.npy")
    y = np.load(tmp_path / "work" / "embed" / "tgt" / "00000.vectors.npy")
    assert x.shape == (5, 64) and y.shape == (6, 64)
    np.testing.assert_array_equal(
        x,
        TrigramEncoder().encode(
            ["Der Hund bellt.", "Die Katze schläft.", "Ich habe Hunger.", "Wo ist der Bahnhof?", "Guten Tag!"], "de"
        ),
    )


def test_workers_with_another_encoder_print_a_note_and_encode_as_without(tmp_path, capsys):
    chunks = [["Der Hund bellt.", "Guten Tag!"], ["Ich habe Hunger."]]
    with_workers = list(chunk_embeddings(TrigramEncoder(), chunks, "de", tokenizer_workers=2))
    assert "note: --tokenizer-workers applies to ems: encoders only; TrigramEncoder" in capsys.readouterr().err
    for got, want in zip(with_workers, chunk_embeddings(TrigramEncoder(), chunks, "de")):
        np.testing.assert_array_equal(got, want)


def test_multi_process_tokenising_gives_the_single_process_vectors(model_dir, tmp_path):
    encoder = load_encoder(f"ems:{model_dir}", cache_dir=tmp_path / "cache")
    lines = UI_SENTENCES * 3
    chunks = [lines[i : i + 5] for i in range(0, len(lines), 5)]
    single = list(chunk_embeddings(load_encoder(f"ems:{model_dir}"), chunks, "en"))
    pooled = list(chunk_embeddings(encoder, chunks, "en", tokenizer_workers=2))
    assert len(pooled) == len(single) == 5
    for got, want in zip(pooled, single):
        np.testing.assert_array_equal(got, want)
    assert encoder.misses == 5 and encoder.model_id  # encoded through the cache, one entry per chunk
    again = list(chunk_embeddings(encoder, chunks, "en", tokenizer_workers=2))
    assert encoder.hits == 5 and all(np.array_equal(a, b) for a, b in zip(again, single))


def test_mine_command_with_tokenizer_workers(model_dir, tmp_path):
    lines = ["Enter a valid date.", "This field is required.", "Save", "", "Change password", "Save", "Log out"]
    (tmp_path / "a.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "b.en").write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    outputs = []
    for workers in ("0", "2"):
        argv = [
            "--encoder",
            f"ems:{model_dir}",
            "--src",
            str(tmp_path / "a.en"),
            "--src-lang",
            "en",
            "--tgt",
            str(tmp_path / "b.en"),
            "--tgt-lang",
            "en",
            "--out",
            str(tmp_path / f"{workers}.tsv"),
            "--k",
            "2",
            "--chunk-lines",
            "2",
            "--tokenizer-workers",
            workers,
        ]
        assert mine_main(argv) == 0
        outputs.append((tmp_path / f"{workers}.tsv").read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == 5
