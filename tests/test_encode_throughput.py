"""benchmarks/encode_throughput.py end to end on a small model and real FLORES-200 lines: the report
(both rates, their ratio, the vectors' agreement) and its one-line refusals. The figures themselves
are the benchmark's run on a quiet machine."""

import json

import pytest

import ems
from benchmarks import encode_throughput as bench
from ems.cli import run_main


def test_the_report_compares_the_same_vectors(model_dir, data_dir, tmp_path):
    argv = ["--model", str(model_dir), "--out", str(tmp_path), "--data-dir", str(data_dir)]
    assert run_main(bench.main, [*argv, "--languages", "de,ja", "--sentences", "20", "--repeats", "1"]) == 0
    report = json.loads((tmp_path / "encode_throughput.json").read_text())
    assert report["sentences"] == 60 and report["languages"] == ["de", "ja", "en"]
    assert report["min_row_cosine"] >= bench.MIN_COSINE
    ratio = report["ems_sentences_per_s"] / report["st_sentences_per_s"]  # of the rates as rounded in the report
    assert report["ems_over_st"] == pytest.approx(ratio, abs=2e-3)
    assert report["ems_precision"] == ems.load(model_dir).precision and report["ems_batch_tokens"] == 2048
    assert len(report["load_average_before_after"]) == 2


def test_fp32_and_tokenizer_workers_are_passed_to_ems_load(model_dir, data_dir, tmp_path):
    argv = ["--model", str(model_dir), "--out", str(tmp_path), "--data-dir", str(data_dir)]
    settings = ["--precision", "fp32", "--tokenizer-workers", "1", "--batch-tokens", "512"]
    assert run_main(bench.main, [*argv, "--languages", "de", "--sentences", "130", "--repeats", "1", *settings]) == 0
    report = json.loads((tmp_path / "encode_throughput.json").read_text())
    assert (report["ems_precision"], report["ems_tokenizer_workers"], report["ems_batch_tokens"]) == ("fp32", 1, 512)
    assert report["min_row_cosine"] >= 0.99999  # fp32 on both sides


@pytest.mark.parametrize(
    "option, message",
    [
        (["--tokenizer-workers", "-1"], "error: --tokenizer-workers must be >= 0"),
        (["--precision", "fp8"], "error: precision must be one of auto, bf16, fp16, fp32; got 'fp8'"),
    ],
)
def test_a_bad_setting_is_one_line(model_dir, data_dir, tmp_path, capsys, option, message):
    argv = ["--model", str(model_dir), "--out", str(tmp_path), "--data-dir", str(data_dir), *option]
    assert run_main(bench.main, argv) == 2
    assert capsys.readouterr().err.strip() == message


def test_a_language_the_model_lacks_is_one_line(model_dir, data_dir, tmp_path, capsys):
    argv = ["--model", str(model_dir), "--out", str(tmp_path), "--data-dir", str(data_dir), "--languages", "zh"]
    assert run_main(bench.main, argv) == 2
    assert capsys.readouterr().err.strip() == f"error: {model_dir} has no language zh; it has de, en, fr, ja"
