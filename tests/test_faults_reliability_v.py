"""Reliability V: token ids outside the vocabulary and shards cut short under a run, model folders whose
files changed since they were saved, `--set` values and keys as the YAML form reads them and named as
theirs, attention that cannot run on the machine, and every config of ems-demo and the ablation checked
before their first stage. Each is one line `error: ...` (status 2) or one exception, before slow work."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import ems
import ems.apps.demo
import ems.apps.studies.ablation
from ems.apps import export
from ems.cli import run_main
from ems.configs import ConfigError, load_config
from ems.encoder import CONFIG_FILE, MANIFEST_FILE, WEIGHTS_FILE
from ems.model import attention_path
from ems.text import TOKENIZER_FILE
from ems.training.config import TrainConfig
from ems.training.train import main
from tests.conftest import REPO_ROOT
from tests.fakes import cli_args, copy_shards, no_deepspeed, one_error_line, untrained_model

pytestmark = pytest.mark.faults


# --- 2. token ids against the vocabulary; a shard file cut short while a run reads it ------------------


def test_a_token_id_outside_the_vocabulary_is_one_line_before_deepspeed(tiny_pipeline, tmp_path, capsys, monkeypatch):
    # before: training went on until the batch holding that pair, then a 65-line IndexError
    shards = copy_shards(tiny_pipeline, tmp_path)
    tokens = np.load(shards / "tokens.npy", mmap_mode="r+")
    offsets = np.load(shards / "offsets.npy")
    position = int(offsets[2 * 100 + 1]) + 1  # the second token of pair 100's second side
    tokens[position] = 60000  # a byte flipped: an id no 1000-piece vocabulary has
    tokens.flush()
    del tokens
    no_deepspeed(monkeypatch)
    assert run_main(main, cli_args(tiny_pipeline, tmp_path / "run", f"data={shards}")) == 2
    assert one_error_line(capsys) == (
        f"error: {shards / 'tokens.npy'}: token id 60000 at position {position} (pair 100, side 2) is not a piece "
        f"of the 1000-piece vocabulary in {tiny_pipeline / 'vocab'}: the file is damaged; binarize again"
    )


TRUNCATE_WHILE_READING = """
import os, sys
import numpy as np
from ems.shards import PairShards
from ems.training.batches import collate
shards = PairShards(sys.argv[1])
collate(shards, np.arange(4), 64)  # the run reads its first batch
os.truncate(shards.directory / sys.argv[2], 4096)  # then the file is cut short under it
try:
    collate(shards, np.arange(len(shards) - 4, len(shards)), 64)  # pairs past the file's new end
except ValueError as error:
    print(error)
"""


@pytest.mark.parametrize("name", ["tokens.npy", "offsets.npy"])
def test_a_shard_file_cut_short_under_a_run_is_one_line_not_sigbus(tiny_pipeline, tmp_path, name):
    # before: the read past the file's new end killed the process with SIGBUS and no message
    shards = copy_shards(tiny_pipeline, tmp_path)
    assert (shards / name).stat().st_size > 3 * 4096
    done = subprocess.run(
        [sys.executable, "-c", TRUNCATE_WHILE_READING, str(shards), name],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith(f"{shards / name} is now 4096 bytes, shorter than the ")
    assert "the shards changed while they were read" in done.stdout and done.stdout.count("\n") == 1


# --- 4. a model folder whose files changed since it was saved -------------------------------------------


def edit_config(model: Path, **changes) -> None:
    config = json.loads((model / CONFIG_FILE).read_text())
    (model / CONFIG_FILE).write_text(json.dumps({**config, **changes}, indent=2))


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40  # a float's high bits (safetensors: tensor data last): the header still reads
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "change, changed",
    [
        (lambda model: edit_config(model, n_heads=8), CONFIG_FILE),  # d_model 64: the weights fit 4 or 8 heads
        (lambda model: edit_config(model, norm_placement="post"), CONFIG_FILE),
        (lambda model: flip_last_byte(model / WEIGHTS_FILE), WEIGHTS_FILE),
    ],
)
def test_a_model_file_changed_since_it_was_saved_is_one_line_naming_it(
    tiny_pipeline, tmp_path, capsys, change, changed
):
    # before: the model loaded silently and gave other vectors
    model, _ = untrained_model(tiny_pipeline, tmp_path / "model")
    ems.load(model)  # as saved: loads
    change(model)
    with pytest.raises(ValueError, match=f"^{model / changed} is not the file the model was saved with"):
        ems.load(model)
    # the export refuses it too, as one line, and writes nothing
    assert run_main(export.main, [str(model), str(tmp_path / "out"), "--format", "hf"]) == 2
    assert f"{model / changed} is not the file the model was saved with" in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_a_model_file_of_another_size_or_missing_is_named(tiny_pipeline, tmp_path):
    model, _ = untrained_model(tiny_pipeline, tmp_path / "model")
    with open(model / TOKENIZER_FILE, "a") as tokenizer:
        tokenizer.write("\n")  # still the same JSON: only the manifest tells
    size = (model / TOKENIZER_FILE).stat().st_size
    with pytest.raises(
        ValueError, match=rf"^{model / TOKENIZER_FILE} is not the file .* \({size} bytes, not {size - 1}, "
    ):
        ems.load(model)
    (model / TOKENIZER_FILE).rename(model / "tokenizer.json")  # Hugging Face's name for its own tokenizers
    with pytest.raises(FileNotFoundError, match=f"^{model} has no spm.model \\+ {TOKENIZER_FILE}: not a vocabulary"):
        export.check_model_dir(model)


def test_exports_and_saves_write_the_manifest_and_folders_without_one_load_unchecked(tiny_pipeline, tmp_path):
    model, _ = untrained_model(tiny_pipeline, tmp_path / "model")
    recorded = json.loads((model / MANIFEST_FILE).read_text())["files"]
    assert sorted(recorded) == sorted(["config.json", "model.safetensors", "spm.model", "ems_tokenizer.json"])
    st = export.export_sentence_transformers(model, tmp_path / "st")
    hf = export.export_hf(model, tmp_path / "hf")
    assert json.loads((st / MANIFEST_FILE).read_text())["files"] == recorded  # the same four files, copied
    assert (hf / MANIFEST_FILE).is_file()
    ems.load(st)
    edit_config(st, n_heads=8)
    with pytest.raises(ValueError, match="config.json is not the file the model was saved with"):
        ems.load(st)
    # a folder without a manifest (sentence-transformers' save of the exported module writes none) is not checked
    (model / MANIFEST_FILE).unlink()
    edit_config(model, n_heads=8)
    assert ems.load(model).model.cfg.n_heads == 8


# --- 5. --set compile=true|false; attention varlen where it cannot run ----------------------------------


@pytest.mark.parametrize("text, value", [("true", True), ("false", False), ("auto", "auto"), ("no", False)])
def test_compile_on_the_command_line_reads_as_in_yaml(tmp_path, text, value):
    # before: `--set compile=false` was the string 'false' ("compile must be true, false or auto, got 'false'")
    (tmp_path / "run.yaml").write_text(f"compile: {text}\n")
    assert load_config(TrainConfig, tmp_path / "run.yaml").compile == value
    assert load_config(TrainConfig, None, [f"compile={text}"]).compile == value
    with pytest.raises(ConfigError, match="^TrainConfig: compile must be true, false or auto, got 'sometimes'$"):
        load_config(TrainConfig, None, ["compile=sometimes"])


def test_attention_varlen_off_cuda_is_one_line_before_the_data_is_read(tiny_pipeline, tmp_path, capsys, monkeypatch):
    # before: training on CPU ended in a 151-line NotImplementedError from aten's varlen kernel
    if torch.cuda.is_available():  # the check is of DeepSpeed's accelerator: make it a CPU one
        monkeypatch.setattr("ems.training.setup.accelerator_device", lambda: torch.device("cpu"))
    # the one pass over the data comes after the check (raising=False: a version without the pass fails below)
    monkeypatch.setattr(
        "ems.shards.PairShards.check_token_ids", lambda *args: pytest.fail("the data were read"), raising=False
    )
    no_deepspeed(monkeypatch)
    assert run_main(main, cli_args(tiny_pipeline, tmp_path / "run", "model_overrides.attention=varlen")) == 2
    assert one_error_line(capsys) == (
        "error: attention varlen runs only on CUDA with torch.nn.attention.varlen (torch >= 2.10), not on cpu: "
        "use attention auto (varlen where it runs), sdpa or matmul"
    )
    with pytest.raises(ValueError, match="^attention varlen runs only on CUDA"):
        attention_path("varlen", torch.device("cpu"), torch.bfloat16)
    assert attention_path("auto", torch.device("cpu"), torch.bfloat16) in ("matmul", "sdpa")


# --- 9. every config and --set item of ems-demo and the ablation before their first stage ---------------


def no_stage(*args, **kwargs):
    pytest.fail("a stage started before the configs were checked")


@pytest.mark.parametrize("recipe", ["demo", "multilingual"])
def test_a_set_key_that_names_nothing_is_one_line_naming_it_before_the_demo_s_first_stage(
    tmp_path, capsys, monkeypatch, recipe
):
    # before: refused after corpus, vocabulary and binarize, blaming configs/train/<recipe>.yaml
    monkeypatch.setattr(ems.apps.demo, "prepare_data", no_stage)
    args = ["--recipe", recipe, "--out", str(tmp_path / "demo"), "--data-dir", str(tmp_path), "--set", "max_step=5"]
    assert run_main(ems.apps.demo.main, args) == 2
    assert one_error_line(capsys) == (
        f"error: {REPO_ROOT / 'configs' / 'train' / f'{recipe}.yaml'}: --set 'max_step=5': unknown key(s) "
        "['max_step']; did you mean 'max_steps'?"
    )


def test_a_directory_given_as_a_config_file_says_so(tmp_path, capsys, monkeypatch):
    # before: "config file DIR does not exist"
    monkeypatch.setattr(ems.apps.demo, "prepare_data", no_stage)
    args = ["--out", str(tmp_path / "demo"), "--data-dir", str(tmp_path), "--data-config", str(tmp_path)]
    assert run_main(ems.apps.demo.main, args) == 2
    assert one_error_line(capsys) == f"error: config file {tmp_path} is a directory: give the YAML file itself"


def test_the_ablation_checks_its_set_items_and_data_configs_before_preparing_data(tmp_path, monkeypatch):
    monkeypatch.setattr(ems.apps.studies.ablation, "prepare_data", no_stage)
    monkeypatch.setattr(ems.apps.studies.ablation, "prepare_teachers", no_stage)
    config = tmp_path / "ablation.yaml"
    config.write_text(yaml.safe_dump({"variants": {"a": {}, "b": {"lr": 0.001}}, "seeds": [0]}))
    argv = ["--config", str(config), "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path)]
    with pytest.raises(ConfigError, match=r"--set 'max_step=5': unknown key\(s\) \['max_step'\]; did you mean"):
        ems.apps.studies.ablation.main([*argv, "--set", "max_step=5"])
    # a data variant's config file: checked before the base data are prepared
    config.write_text(
        yaml.safe_dump({"variants": {"a": {}, "b": {}}, "seeds": [0], "data_variants": {"b": str(tmp_path)}})
    )
    with pytest.raises(IsADirectoryError, match=f"^config file {tmp_path} is a directory"):
        ems.apps.studies.ablation.main(argv)
    assert not os.path.exists(tmp_path / "out" / "data")
