"""The stratified validation sample, the retrieval probe behind learning curves, eval.curves, and
a training run that logs per-language-pair validation losses and probe scores."""

import json

import numpy as np
import pytest

from data_prep.binarize import binarize
from ems.cli import run_main
from ems.corpus import write_parallel
from ems.model import EncoderNetwork
from ems.model_config import config_from_preset
from ems.shards import PairShards
from ems.text import Tokenizer
from ems.training.retrieval_probe import RetrievalProbe
from ems.training.train import train
from ems.training.validator import SAMPLE_FILE, equal_shares, stratified_sample, validation_sample
from eval.curves import main as curves_main
from eval.curves import read_metrics
from eval.evaluators.retrieval import bidirectional_p_at_1
from eval.evaluators.tatoeba import load_tatoeba_pair
from tests.conftest import SMALL_MODEL, small_run


def test_equal_shares_give_small_groups_all_they_have_and_share_the_rest():
    assert equal_shares(np.array([100, 100, 100]), 30).tolist() == [10, 10, 10]
    assert equal_shares(np.array([3, 100, 100]), 30).tolist() == [3, 14, 13]  # 27 left for two groups
    assert equal_shares(np.array([3, 5, 100]), 30).tolist() == [3, 5, 22]
    assert equal_shares(np.array([3, 5, 0]), 30).tolist() == [3, 5, 0]  # fewer than asked: everything
    assert equal_shares(np.array([7, 7]), 0).tolist() == [0, 0]


def test_stratified_sample_spreads_over_every_language_pair_in_mixed_order():
    groups = {"ar-en": np.arange(0, 50), "de-en": np.arange(50, 1050), "en-ja": np.arange(1050, 1250)}
    sample = stratified_sample(groups, 300, seed=0)
    assert len(sample) == len(set(sample.tolist())) == 300
    counts = [int(np.isin(sample, members).sum()) for members in groups.values()]
    assert counts == [50, 125, 125]
    # the first batch of 64 already holds every language pair (the sample is shuffled)
    assert all(np.isin(sample[:64], members).any() for members in groups.values())
    np.testing.assert_array_equal(sample, stratified_sample(groups, 300, seed=0))
    assert not np.array_equal(sample, stratified_sample(groups, 300, seed=1))


def test_the_validation_sample_is_stored_and_read_back(tiny_pipeline, tmp_path):
    shards = PairShards(tiny_pipeline / "valid_shards")
    first = validation_sample(tmp_path, shards, 60, seed=4, write=True)
    stored = json.loads((tmp_path / SAMPLE_FILE).read_text())
    assert stored["pairs_per_language_pair"] == {"de-en": 20, "en-fr": 20, "en-ja": 20}
    # read back even when asked with other settings: the sample is the run's, chosen once
    np.testing.assert_array_equal(validation_sample(tmp_path, shards, 90, seed=5, write=True), first)
    stored["n_pairs"] += 1
    (tmp_path / SAMPLE_FILE).write_text(json.dumps(stored))
    with pytest.raises(ValueError, match="delete it to draw a new sample"):
        validation_sample(tmp_path, shards, 60, seed=4, write=False)


def test_probe_scores_equal_the_tatoeba_protocol_on_the_same_sentences(tiny_pipeline, data_dir):
    import torch

    tokenizer = Tokenizer.load(tiny_pipeline / "vocab")
    torch.manual_seed(0)
    encoder = EncoderNetwork(config_from_preset("tiny", vocab_size=tokenizer.vocab_size, n_languages=3, **SMALL_MODEL))
    probe = RetrievalProbe(data_dir, tokenizer, max_sentences=40)
    assert {(s.task, s.lang) for s in probe.sets} == {
        (t, lang) for t in ("tatoeba", "flores") for lang in ("de", "fr", "ja")
    }
    encoder.train()
    scores = probe.run(encoder)
    assert encoder.training  # its mode is restored
    from ems.encoder import EMSEncoder

    xx, en = load_tatoeba_pair(data_dir / "tatoeba", "jpn", 40)
    model = EMSEncoder(encoder, tokenizer)  # (puts the encoder in eval mode)
    expected = bidirectional_p_at_1(model.encode(xx, "ja"), model.encode(en, "en"), xx_texts=xx, en_texts=en)["mean"]
    assert scores["tatoeba"]["languages"]["ja"] == pytest.approx(expected)
    assert scores["tatoeba"]["average"] == pytest.approx(np.mean(list(scores["tatoeba"]["languages"].values())))


def test_probe_reports_languages_without_a_test_set(tmp_path, data_dir):
    write_parallel(tmp_path / "corpus", "x", "en", "br", [("hello there", "mat eo")] * 3)
    from data_prep.vocab import train_vocab

    tokenizer = train_vocab(tmp_path / "corpus", tmp_path / "vocab", vocab_size=14)
    probe = RetrievalProbe(data_dir, tokenizer, max_sentences=10)
    assert probe.missing == {"tatoeba": [], "flores": ["br"]}  # Tatoeba has bre, FLORES-200 no Breton


@pytest.fixture(scope="module")
def probed_run(tiny_pipeline, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("probed")
    cfg = small_run(
        tiny_pipeline,
        out,
        batch_size=32,
        lr=2e-3,
        warmup_steps=5,
        max_steps=30,
        log_every=10,
        save_every=1000,
        valid_data=str(tiny_pipeline / "valid_shards"),
        valid_every=15,
        valid_pairs=96,
        probe_every=15,
        probe_data=str(data_dir),
        probe_sentences=50,
        bucket_batches=50,
    )
    return out, train(cfg)


def test_training_logs_per_pair_validation_and_probe_scores(probed_run):
    out, result = probed_run
    valid = [r for r in result.history if "valid_loss" in r]
    probes = [r for r in result.history if "probe_tatoeba" in r]
    assert [r["step"] for r in valid] == [r["step"] for r in probes] == [0, 15, 30]
    for record in valid:
        pairs = record["valid_pairs"]
        assert set(pairs) == {"de-en", "en-fr", "en-ja"}
        # the overall losses are the pair losses weighted by their share of the sample (32 each)
        assert record["valid_xtr"] == pytest.approx(np.mean([p["xtr"] for p in pairs.values()]))
    assert set(probes[-1]["probe_languages"]["flores"]) == {"de", "fr", "ja"}
    assert all(0 <= p <= 100 for r in probes for p in r["probe_languages"]["tatoeba"].values())
    train_records = [r for r in result.history if "loss" in r and "valid_loss" not in r]
    assert all(0 <= r["duplicate_rows"] < 1 for r in train_records)
    assert (out / SAMPLE_FILE).is_file()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = EventAccumulator(str(out / "tb")).Reload().Tags()["scalars"]
    assert {"valid_pair/en-ja", "probe/tatoeba/average", "probe/flores/de", "duplicate_rows"} <= set(tags)


def test_curves_plot_a_run_and_reject_a_directory_without_metrics(probed_run, tmp_path, capsys):
    out, _ = probed_run
    metrics = read_metrics(out)
    assert [r["step"] for r in metrics["probe"]] == [0, 15, 30] and len(metrics["train"]) == 3
    assert curves_main([str(out)]) == 0 and (out / "curves.png").stat().st_size > 10_000
    assert curves_main([str(out), str(out), "--out", str(tmp_path / "two.png")]) == 0
    capsys.readouterr()
    assert run_main(curves_main, [str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "metrics.jsonl not found" in err and err.count("\n") == 1


def test_shards_without_content_ids_are_refused_in_one_line(tiny_pipeline, tmp_path):
    old = tmp_path / "old_shards"
    binarize(tiny_pipeline / "corpus" / "train", tiny_pipeline / "vocab", old)
    (old / "content_ids.npy").unlink()
    with pytest.raises(FileNotFoundError, match=f"^{old / 'content_ids.npy'} is missing: binarize again$"):
        PairShards(old)
