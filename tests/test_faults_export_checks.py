"""Faults of model directories (issue 44, cases 2 and 5): a tampered exported model is refused by
every loader, and weights of a model of another size are one line naming the file and the tensor.

Case 2: the sentence-transformers export (and the transformers one) makes every check that
ems.text.Tokenizer and ems.load make (the shipped ems_core.py holds the same check functions):
a language list or spm.model that is not the model's fails in ems.load, SentenceTransformer and
AutoModel alike, with the same message; none of them loads it.

Case 5: model.safetensors of another model size (or with tensors missing or added) is one line
naming the file and the first tensor that differs, from ems.load, eval's `ems:` encoder, ems-export,
training's init_from, the teacher stage and a saved head; a model directory that is not there is
named as missing."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import ems
from data_prep.binarize import binarize
from data_prep.vocab import train_vocab
from ems.apps.export import export_hf, export_sentence_transformers
from ems.cli import run_main
from ems.corpus import write_parallel
from ems.encoder import MANIFEST_FILE, export_encoder, initialize_from
from ems.model import EncoderNetwork
from ems.model_config import config_from_preset
from ems.text import TOKENIZER_FILE, Tokenizer
from tests.conftest import SMALL_MODEL
from tests.fakes import CHINESE, ENGLISH, GERMAN

pytestmark = pytest.mark.faults

VOCAB_SIZE = 120
# more text of the same three languages: another vocabulary of the same size and language tokens
MORE_ENGLISH = ["The file could not be opened.", "Choose a language.", "Search results", "Next page"]
MORE_GERMAN = ["Die Datei konnte nicht geöffnet werden.", "Wählen Sie eine Sprache.", "Suchergebnisse", "Nächste Seite"]
MORE_CHINESE = ["無法開啟檔案。", "選擇一種語言。", "搜尋結果", "下一頁"]


def tiny_config(tokenizer: Tokenizer, **overrides):
    return config_from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages), **{**SMALL_MODEL, **overrides}
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """A random tiny de/en/zh model and what the tampering needs: its two exports, a model of half
    its width over the same vocabulary, two other vocabularies of the same languages (one of the
    same size, one smaller), its corpus and shards."""
    root = tmp_path_factory.mktemp("export_checks")
    write_parallel(root / "corpus", "tiny", "de", "en", zip(GERMAN, ENGLISH))
    write_parallel(root / "corpus", "tiny", "en", "zh", zip(ENGLISH, CHINESE))
    tokenizer = train_vocab(root / "corpus", root / "vocab", vocab_size=VOCAB_SIZE, character_coverage=1.0)
    write_parallel(root / "corpus2", "tiny", "de", "en", zip(GERMAN + MORE_GERMAN, ENGLISH + MORE_ENGLISH))
    write_parallel(root / "corpus2", "tiny", "en", "zh", zip(ENGLISH + MORE_ENGLISH, CHINESE + MORE_CHINESE))
    same = train_vocab(root / "corpus2", root / "vocab_same_size", vocab_size=VOCAB_SIZE, character_coverage=1.0)
    smaller = train_vocab(root / "corpus", root / "vocab_smaller", vocab_size=100, character_coverage=1.0)
    assert tokenizer.languages == same.languages == smaller.languages == ["de", "en", "zh"]
    assert same.vocab_size == VOCAB_SIZE and smaller.vocab_size == 100 and same.sha1 != tokenizer.sha1
    torch.manual_seed(0)
    model = export_encoder(EncoderNetwork(tiny_config(tokenizer)), tokenizer, root / "model")
    narrow = export_encoder(EncoderNetwork(tiny_config(tokenizer, d_model=32)), tokenizer, root / "narrow")
    binarize(root / "corpus", root / "vocab", root / "shards")
    return {
        "root": root,
        "model": model,
        "narrow": narrow,
        "st": export_sentence_transformers(model, root / "st"),
        "hf": export_hf(model, root / "hf"),
        **{name: root / name for name in ("corpus", "vocab", "vocab_same_size", "vocab_smaller", "shards")},
    }


# --- case 2: tampered exports --------------------------------------------------------------------


def edit_languages(change):
    def tamper(folder: Path, built) -> None:
        meta = json.loads((folder / TOKENIZER_FILE).read_text())
        meta["languages"] = change(meta["languages"])
        (folder / TOKENIZER_FILE).write_text(json.dumps(meta))

    return tamper


def copy_spm(vocabulary: str, with_tokenizer_file: bool):
    def tamper(folder: Path, built) -> None:
        shutil.copyfile(built[vocabulary] / "spm.model", folder / "spm.model")
        if with_tokenizer_file:
            shutil.copyfile(built[vocabulary] / TOKENIZER_FILE, folder / TOKENIZER_FILE)

    return tamper


def write_file(name: str, content: bytes):
    def tamper(folder: Path, built) -> None:
        (folder / name).write_bytes(content)

    return tamper


def narrow_weights(folder: Path, built) -> None:
    if (folder / "modules.json").is_file():  # the sentence-transformers export: ems.load's file layout
        shutil.copyfile(built["narrow"] / "model.safetensors", folder / "model.safetensors")
    else:  # the transformers export: its tensors are named encoder.*
        state = {f"encoder.{name}": tensor for name, tensor in load_file(built["narrow"] / "model.safetensors").items()}
        save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


def drop_norm_bias(folder: Path, built) -> None:
    state = load_file(folder / "model.safetensors")
    del state["encoder.norm.bias" if "encoder.norm.bias" in state else "norm.bias"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


# name: (tamper, the message every loader gives)
TAMPERINGS = {
    "language swapped": (edit_languages(lambda langs: ["de", "en", "ja"]), r"piece <2ja> is not id 4"),
    "languages reordered": (edit_languages(lambda langs: ["en", "de", "zh"]), r"piece <2en> is not id 2"),
    "middle language removed": (edit_languages(lambda langs: ["de", "zh"]), r"piece <2zh> is not id 3"),
    "last language removed": (
        edit_languages(lambda langs: ["de", "en"]),
        r"ems_tokenizer.json lists 2 languages, but the model's config has n_languages=3",
    ),
    "language listed twice": (
        edit_languages(lambda langs: ["de", "en", "zh", "de"]),
        r"languages lists de more than once",
    ),
    "spm.model of another vocabulary (same size)": (
        copy_spm("vocab_same_size", with_tokenizer_file=False),
        r"spm.model: not the file ems_tokenizer.json was saved with \(its SHA-1 is [0-9a-f]{40}, "
        r"ems_tokenizer.json records [0-9a-f]{40}\)",
    ),
    "other vocabulary of another piece count": (
        copy_spm("vocab_smaller", with_tokenizer_file=True),
        r"spm.model has 100 pieces, but the model's config has vocab_size=120",
    ),
    "spm.model that is no SentencePiece model": (write_file("spm.model", b"not a model"), r"not a SentencePiece model"),
    "unknown preprocessing setting": (
        write_file(TOKENIZER_FILE, b'{"languages": ["de", "en", "zh"], "preprocessing": {"lowercaser": true}}'),
        r"unknown preprocessing settings lowercaser",
    ),
    "weights of a model of another size": (
        narrow_weights,
        r"model.safetensors: tensor (encoder\.)?tok_emb.weight is \(120, 32\), but the model of .*config.json "
        r"expects \(120, 64\)",
    ),
    "a tensor missing from the weights": (
        drop_norm_bias,
        r"model.safetensors lacks tensor (encoder\.)?norm.bias \(64,\)",
    ),
}


def tampered_copy(built, export: str, name: str, tmp_path) -> Path:
    slug = re.sub(r"\W+", "_", name)  # the folder's name is a Python identifier: transformers imports it
    folder = tmp_path / f"{export}_{slug}"
    shutil.copytree(built[export], folder)
    TAMPERINGS[name][0](folder, built)
    return folder


def refusal(load, folder: Path) -> str:
    """The one-line message with which `load(folder)` refuses; fails the test if it loads."""
    try:
        loaded = load(folder)
    except (ValueError, OSError) as error:
        message = str(error)
        assert "\n" not in message.strip(), message
        return message
    pytest.fail(f"{folder.name} loaded: {type(loaded).__name__}")


def load_sentence_transformers(folder: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")


def load_automodel(folder: Path):
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(folder), trust_remote_code=True)


def test_the_untampered_exports_load_in_every_loader_and_fingerprint_their_vocabulary(built, tmp_path):
    # the control: what the tampered copies are refused against loads, and records its spm.model's SHA-1
    assert ems.load(built["st"]).languages == ["de", "en", "zh"]
    assert load_sentence_transformers(built["st"]).encode(ENGLISH[:2], lang="en").shape == (2, 64)
    assert load_automodel(built["hf"]).encode(ENGLISH[:2], lang="en").shape == (2, 64)
    for export in ("st", "hf"):
        meta = json.loads((built[export] / TOKENIZER_FILE).read_text())
        assert meta.get("spm_sha1") == Tokenizer.load(built[export]).sha1
    # a tokenizer file without the SHA-1 is refused: its spm.model could not be checked
    folder = tmp_path / "st_without_sha1"
    shutil.copytree(built["st"], folder)
    del meta["spm_sha1"]
    (folder / TOKENIZER_FILE).write_text(json.dumps(meta))
    (folder / MANIFEST_FILE).unlink()
    for load in (ems.load, load_sentence_transformers):
        assert re.search(
            r"no spm_sha1 \(the SHA-1 of its spm\.model\): build the vocabulary again", refusal(load, folder)
        )


@pytest.mark.parametrize("name", list(TAMPERINGS))
def test_a_tampered_sentence_transformers_export_is_refused_by_ems_load_and_sentence_transformers(
    built, tmp_path, name
):
    folder = tampered_copy(built, "st", name, tmp_path)
    pattern = TAMPERINGS[name][1]
    for load in (ems.load, load_sentence_transformers):
        message = refusal(load, folder)
        assert str(folder) in message, message
        assert re.search(pattern, message), (load, message)


@pytest.mark.parametrize("name", list(TAMPERINGS))
def test_a_tampered_transformers_export_is_refused_by_automodel(built, tmp_path, name):
    folder = tampered_copy(built, "hf", name, tmp_path)
    message = refusal(load_automodel, folder)
    assert str(folder) in message and re.search(TAMPERINGS[name][1], message), message
    assert "unknown model config keys" in refusal(ems.load, folder)  # not an ems.load directory at all


# --- case 5: weights of another model, from every loader --------------------------------------------


def mismatched_model(built, tmp_path) -> Path:
    """The model directory with the half-width model's model.safetensors."""
    folder = tmp_path / "mismatched"
    shutil.copytree(built["model"], folder)
    shutil.copyfile(built["narrow"] / "model.safetensors", folder / "model.safetensors")
    return folder


def mismatch_message(folder: Path) -> str:
    return (
        f"{folder / 'model.safetensors'}: tensor tok_emb.weight is (120, 32), but the model of "
        f"{folder / 'config.json'} expects (120, 64): the weights belong to a model of another size"
    )


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    return lines[0]


def test_ems_load_names_the_file_and_the_first_tensor_of_another_size(built, tmp_path):
    folder = mismatched_model(built, tmp_path)
    with pytest.raises(ValueError) as error:
        ems.load(folder)
    assert str(error.value) == mismatch_message(folder)


def test_ems_load_names_a_missing_or_an_unexpected_tensor(built, tmp_path):
    state = load_file(built["model"] / "model.safetensors")
    folder = tmp_path / "model"
    shutil.copytree(built["model"], folder)
    save_file({k: v for k, v in state.items() if k != "norm.bias"}, folder / "model.safetensors")
    with pytest.raises(
        ValueError, match=r"model.safetensors lacks tensor norm.bias \(64,\) of the model of .*config.json"
    ):
        ems.load(folder)
    save_file({**state, "xtr.out.weight": torch.zeros(3, 2)}, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"model.safetensors holds tensor xtr.out.weight \(3, 2\), which the model"):
        ems.load(folder)
    (folder / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ValueError, match=r"model.safetensors: not a safetensors file"):
        ems.load(folder)


def test_ems_load_of_a_directory_that_does_not_exist_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"^model directory {tmp_path / 'gone'} does not exist$"):
        ems.load(tmp_path / "gone")


def test_eval_ems_encoder_of_mismatched_weights_is_one_error_line(built, tmp_path, capsys):
    from eval.run_all import main

    folder = mismatched_model(built, tmp_path)
    argv = ["--encoder", f"ems:{folder}", "--out", str(tmp_path / "eval"), "--data-dir", str(tmp_path)]
    assert run_main(main, argv) == 2
    assert one_error_line(capsys) == f"error: {mismatch_message(folder)}"


def test_export_of_mismatched_weights_is_one_error_line_and_writes_nothing(built, tmp_path, capsys):
    from ems.apps.export import main

    folder = mismatched_model(built, tmp_path)
    for export_format in ("sentence-transformers", "hf"):
        assert run_main(main, [str(folder), str(tmp_path / "out"), "--format", export_format]) == 2
        assert one_error_line(capsys) == f"error: {mismatch_message(folder)}"
        assert not (tmp_path / "out").exists()


def test_init_from_mismatched_weights_is_one_error_line_before_deepspeed(built, tmp_path, capsys, monkeypatch):
    from ems.training.train import main

    def refuse():
        raise AssertionError("DeepSpeed was started before the inputs were checked")

    monkeypatch.setattr("ems.training.train.init_distributed", refuse)
    folder = mismatched_model(built, tmp_path)
    settings = [f"data={built['shards']}", f"vocab={built['vocab']}", f"out={tmp_path / 'run'}", f"init_from={folder}"]
    settings += [f"model_overrides.{key}={value}" for key, value in SMALL_MODEL.items()]
    assert run_main(main, ["--set", *settings]) == 2
    assert one_error_line(capsys) == f"error: {mismatch_message(folder)}"
    # the Python API of the same start: a ValueError with the message
    tokenizer = Tokenizer.load(built["vocab"])
    with pytest.raises(ValueError) as error:
        initialize_from(EncoderNetwork(tiny_config(tokenizer)), tokenizer, folder)
    assert str(error.value) == mismatch_message(folder)


def test_teacher_of_mismatched_weights_is_one_error_line(built, tmp_path, capsys):
    from data_prep.__main__ import main

    folder = mismatched_model(built, tmp_path)
    shards = tmp_path / "shards"
    shutil.copytree(built["shards"], shards)
    argv = ["teacher", "--shards", str(shards), "--in", str(built["corpus"]), "--teacher", f"ems:{folder}"]
    assert run_main(main, argv) == 2
    assert one_error_line(capsys) == f"error: {mismatch_message(folder)}"


def test_a_head_of_mismatched_weights_is_one_line_naming_its_file(built, tmp_path):
    from ems.heads.dream import DreamHead

    folder = tmp_path / "model"
    shutil.copytree(built["model"], folder)
    heads = []
    for dim in (64, 32):
        head = DreamHead()
        head.dim, head.languages, head.classifier_languages = dim, ["de", "en", "zh"], ["de", "en", "zh"]
        head.module = head.build_module(dim, 3)
        head.save(tmp_path / f"head{dim}")
        heads.append(tmp_path / f"head{dim}")
    shutil.copytree(heads[0], folder / "head")
    assert ems.load(folder).encode(ENGLISH[:2], "en", view="meaning").shape == (2, 64)  # the control
    shutil.copyfile(heads[1] / "head.safetensors", folder / "head" / "head.safetensors")
    with pytest.raises(ValueError) as error:
        ems.load(folder)
    message = str(error.value)
    assert message.startswith(f"{folder / 'head' / 'head.safetensors'}: tensor ") and "\n" not in message
    assert "(32, 32), but the dream head of" in message and "expects (64, 64)" in message, message
    assert np.isfinite(ems.load(built["model"]).encode(ENGLISH[:1], "en")).all()


@pytest.mark.parametrize("text", ["[1, 2]", "[" * 3000 + "]" * 3000, "{not json"])
def test_a_damaged_head_json_is_one_line_naming_it(text, tmp_path):
    from ems.heads import HEAD_JSON, load_head

    (tmp_path / HEAD_JSON).write_text(text)
    # before: AttributeError ('list' has no .get) and RecursionError leaked
    with pytest.raises(ValueError) as raised:
        load_head(tmp_path)
    assert str(tmp_path / HEAD_JSON) in str(raised.value) and "\n" not in str(raised.value)


# --- the exported loaders: a file missing, or a symlink out of the model folder (issue "Reliability V", item 11) ---

LOADERS = {"st": load_sentence_transformers, "hf": load_automodel}


@pytest.mark.parametrize("export", list(LOADERS))
@pytest.mark.parametrize("name", ["spm.model", TOKENIZER_FILE, "model.safetensors"])
def test_an_export_missing_a_file_is_one_line_naming_it(built, tmp_path, export, name):
    """Was (sentence-transformers, spm.model missing): a TypeError from pathlib, naming nothing."""
    folder = tmp_path / f"{export}_missing"
    shutil.copytree(built[export], folder)
    (folder / name).unlink()
    assert refusal(LOADERS[export], folder) == f"{folder} is not an exported EMS model: {name} is missing"


@pytest.mark.parametrize("export", list(LOADERS))
@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "spm.model", TOKENIZER_FILE])
def test_an_export_with_a_file_linked_out_of_its_folder_is_refused(built, tmp_path, export, name):
    """Was: read through the link (a link is refused for where it leads, not what it holds)."""
    folder = tmp_path / f"{export}_linked"
    shutil.copytree(built[export], folder)
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    (folder / name).rename(outside)
    (folder / name).symlink_to(outside)
    message = refusal(LOADERS[export], folder)
    assert message.startswith(f"{folder / name} leads to {outside}, outside the model folder {folder}"), message


@pytest.mark.parametrize("export", list(LOADERS))
def test_an_export_in_a_hub_cache_snapshot_loads_through_its_links_into_blobs(built, tmp_path, export):
    """A snapshot of the Hub's cache (what snapshot_download returns): REPO/snapshots/REV/ whose files
    are links into REPO/blobs/, which the loaders follow."""
    repository = tmp_path / "models--someone--ems"
    snapshot = repository / "snapshots" / "0123abc"
    shutil.copytree(built[export], snapshot)
    (repository / "blobs").mkdir()
    for path in sorted(snapshot.iterdir()):
        if path.is_file():
            blob = repository / "blobs" / f"{path.name}.blob"
            path.rename(blob)
            path.symlink_to(Path("..", "..", "blobs", blob.name))
    assert LOADERS[export](snapshot).encode(ENGLISH[:2], lang="en").shape == (2, 64)
