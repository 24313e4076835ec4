"""Run metadata and model cards on a real tiny run: django's catalogs cleaned, binarized and
trained on through DeepSpeed, evaluated on real Tatoeba sentences, then exported."""

import dataclasses
import datetime
import json
import shutil
import socket
import subprocess
import sys

import pytest
import torch
import yaml

from data_prep.binarize import binarize
from data_prep.clean import CleanSettings, HashSet, clean_corpus
from ems.apps.export import export_sentence_transformers
from ems.model_config import PRESET_MAX_LEN
from ems.text import Tokenizer
from ems.training.model_card import model_facts, render_model_card
from ems.training.train import train
from tests.conftest import REPO_ROOT, small_run
from tests.fakes import RUN


@pytest.fixture(scope="module")
def run(tiny_pipeline, tmp_path_factory):
    """RUN/ of 12 training steps on shards of corpus/train, split off corpus/clean as data_prep does."""
    root = tmp_path_factory.mktemp("carded")
    shutil.copytree(tiny_pipeline / "corpus" / "train", root / "corpus" / "raw")
    clean_corpus(root / "corpus" / "raw", root / "corpus" / "clean", CleanSettings(), HashSet())
    shutil.copytree(root / "corpus" / "clean", root / "corpus" / "train", ignore=shutil.ignore_patterns("*.json"))
    binarize(root / "corpus" / "train", tiny_pipeline / "vocab", root / "shards")
    train(small_run(tiny_pipeline, root / "run", RUN, data=str(root / "shards"), max_steps=12, log_every=4))
    return root


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_the_trainer_writes_run_metadata_into_the_run_and_the_model(run):
    meta = json.loads((run / "run" / "run_metadata.json").read_text())
    assert json.loads((run / "run" / "model" / "run_metadata.json").read_text()) == meta
    is_ancestor = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "merge-base", "--is-ancestor", meta["git"]["commit"], "HEAD"]
    )
    assert is_ancestor.returncode == 0 and isinstance(meta["git"]["dirty"], bool)
    assert meta["versions"]["torch"] == torch.__version__ and meta["versions"]["ems"] and meta["versions"]["deepspeed"]
    assert meta["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert meta["command"] == sys.argv and meta["host"] == socket.gethostname()
    assert meta["machine"]["torch_threads"] == torch.get_num_threads() and meta["machine"]["cpus"] >= 1
    assert meta["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and meta["machine"]["cpu"]
    started = datetime.datetime.fromisoformat(meta["utc"])
    assert datetime.timedelta(0) <= datetime.datetime.now(datetime.UTC) - started < datetime.timedelta(hours=1)


def test_the_trainers_model_card_has_languages_data_config_and_steps(run):
    card = (run / "run" / "model" / "README.md").read_text()
    languages = Tokenizer.load(run / "run" / "model").languages
    assert front_matter(card) == {
        "library_name": "ems",
        "language": languages,
        "pipeline_tag": "feature-extraction",
        "tags": ["ems", "sentence-embeddings", "multilingual", "feature-extraction"],
    }
    assert f"{len(languages)} languages: {', '.join(languages)}." in card
    index = json.loads((run / "shards" / "index.json").read_text())
    assert f"Trained for 12 steps on {index['n_pairs']:,} sentence pairs ({index['n_tokens']:,} tokens)" in card
    for entry in index["files"]:
        assert f"| {entry['l1']}-{entry['l2']} | {entry['n_pairs']:,} |" in card
    clean = json.loads((run / "corpus" / "clean" / "clean_report.json").read_text())
    read = sum(entry["read"] for pair in clean["pairs"] for entry in pair["files"])
    assert f"The clean stage read {read:,} pairs" in card
    vocab_size = Tokenizer.load(run / "run" / "model").vocab_size
    assert f"| 64 | 2 | 4 | 128 | {vocab_size} | {PRESET_MAX_LEN} | 64 |" in card  # conftest's SMALL_MODEL, tiny preset
    objectives = "xtr × 1 (softmax over the batch's tokens), contrastive × 1 (temperature 0.1), distill × 0"
    assert f"Objectives: {objectives}." in card
    assert "No evaluation report was found" in card
    assert json.loads((run / "run" / "run_metadata.json").read_text())["git"]["commit"] in card


def test_an_export_after_evaluation_carries_the_evaluation_table(run, data_dir, tmp_path):
    from eval.run_all import main as evaluate

    model = run / "run" / "model"
    assert (
        evaluate(
            ["--model", str(model), "--data-dir", str(data_dir), "--languages", "deu,fra,jpn", "--max-sentences", "30"]
        )
        == 0
    )
    report = (model / "eval" / "report.md").read_text().strip()
    out = export_sentence_transformers(model, tmp_path / "st", language="auto", license_id="mit")
    card = (out / "README.md").read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "sentence-transformers" and meta["license"] == "mit"
    assert {"sentence-transformers", "sentence-similarity"} <= set(meta["tags"])
    assert report in card and "| ja | 30 |" in card
    assert 'SentenceTransformer("MODEL_DIR", trust_remote_code=True)' in card and "picks the preprocessing" in card
    assert (out / "run_metadata.json").read_bytes() == (model / "run_metadata.json").read_bytes()


def test_a_model_outside_a_run_gets_a_card_that_says_what_is_unknown(model_dir):
    card = render_model_card(model_facts(model_dir), "hf", default_language="de")
    assert "Trained for an unrecorded number of steps; the training data is not recorded with this model." in card
    assert "Not recorded (no run_metadata.json)." in card and "treats text as `de`" in card
    facts = model_facts(model_dir)
    facts.config = dataclasses.replace(facts.config, xtr_vocabulary="full")  # the paper's softmax, ems-paper's
    assert "Objectives: xtr × 1 (softmax over the vocabulary)," in render_model_card(facts, "hf")
    with pytest.raises(ValueError, match="unknown model card format 'onnx'"):
        render_model_card(model_facts(model_dir), "onnx")
