"""Shared fixtures and helpers. Real benchmark data is read from $EMS_DATA_DIR (default: ../shared/data
next to the repository), never copied into the repository."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ems.training.config import TrainConfig

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    configured = os.environ.get("EMS_DATA_DIR")
    candidate = Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("real data not found: set EMS_DATA_DIR to the shared data directory (tatoeba/, flores200/, ...)")
    return path


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory):
    """A real (small) corpus -> vocab -> shards run: django's catalogs for three languages."""
    from data_prep.binarize import binarize
    from data_prep.gettext_corpus import build_gettext_corpus
    from data_prep.vocab import train_vocab

    root = tmp_path_factory.mktemp("pipeline")
    build_gettext_corpus(
        root / "corpus", packages=("django",), languages=["de", "fr", "ja"], min_pairs=100, heldout_size=50
    )
    train_vocab(root / "corpus" / "train", root / "vocab", vocab_size=1000)
    binarize(root / "corpus" / "train", root / "vocab", root / "shards")
    binarize(root / "corpus" / "heldout", root / "vocab", root / "valid_shards")
    return root


# The evaluation sets of the shared data, linked whole into every sliced_data root.
EVAL_SETS = ("tatoeba", "flores200", "sib200", "mlqe", "sts2017")


@pytest.fixture(scope="module")
def sliced_data(data_dir, tmp_path_factory, request):
    """A data root of the shared data's evaluation sets (symbolic links into the shared data) and, of each
    corpus, the folders that the test module's SLICED_CORPORA ({corpus: [folder, ...]}) names: copies, as
    a corpus reader refuses a file that a symlink leads out of the folder it reads (ems.corpus.inside_folder)."""
    root = tmp_path_factory.mktemp("slice")
    for name in EVAL_SETS:
        (root / name).symlink_to(data_dir / name)
    for corpus, folders in request.module.SLICED_CORPORA.items():
        (root / corpus).mkdir()
        for folder in folders:
            shutil.copytree(data_dir / corpus / folder, root / corpus / folder)
    return root


# A model small enough that a few dozen DeepSpeed steps take seconds.
SMALL_MODEL = {"d_model": 64, "n_heads": 4, "d_ffn": 128, "n_layers": 2, "d_lang": 16, "d_contrastive": 32}


def small_run(pipeline: Path, out: str | Path, *layers: dict, **settings) -> TrainConfig:
    """The TrainConfig of a short run of SMALL_MODEL (the tiny preset) on the shards and vocabulary of
    tiny_pipeline (`pipeline`) into `out`: the dicts `layers` (a test file's run, say) and then `settings`
    over that, each later one winning (a model_overrides replaces SMALL_MODEL whole)."""
    from ems.training.config import TrainConfig

    values = {
        "data": str(pipeline / "shards"),
        "vocab": str(pipeline / "vocab"),
        "out": str(out),
        "model": "tiny",
        "model_overrides": dict(SMALL_MODEL),
    }
    for layer in (*layers, settings):
        values.update(layer)
    return TrainConfig(**values)


@pytest.fixture(scope="module")
def model_dir(tiny_pipeline, tmp_path_factory):
    """An untrained SMALL_MODEL encoder over tiny_pipeline's de/en/fr/ja vocabulary, exported (seeded)."""
    import torch

    from ems.encoder import export_encoder
    from ems.model import EMSModel
    from ems.model_config import config_from_preset
    from ems.text import Tokenizer

    tok = Tokenizer.load(tiny_pipeline / "vocab")
    torch.manual_seed(0)
    model = EMSModel(
        config_from_preset("tiny", vocab_size=tok.vocab_size, n_languages=len(tok.languages), **SMALL_MODEL)
    )
    return export_encoder(model.encoder, tok, tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def one_thread_like_the_subprocesses():
    """One thread for the module's in-process runs, as tests.fakes.launch's processes have
    (OMP_NUM_THREADS=1): CPU kernels sum in a thread-count-dependent order (the embedding gradient:
    up to 5e-6 apart). A module asks for it with `pytestmark = pytest.mark.usefixtures(...)`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def leave_spawned_rank() -> None:
    """The last call of a test's spawned gloo rank, after it wrote its results and destroyed its
    process group: exit at once. A normal interpreter exit there aborts now and then
    ("terminate called without an active exception", some native thread torn down at exit; seen
    with this project's code before and after it imported anything new), which fails the test."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--reverse",
        action="store_true",
        help="run the collected tests last to first: a test that passes alone passes in any order",
    )


def pytest_collection_modifyitems(config, items) -> None:
    """Every test of a fault-injection suite (tests/test_faults_*.py) is marked `faults`; with
    --reverse the tests run in the reverse of their collected order."""
    for item in items:
        if item.path.name.startswith("test_faults_"):
            item.add_marker(pytest.mark.faults)
    if config.getoption("--reverse"):
        items.reverse()
