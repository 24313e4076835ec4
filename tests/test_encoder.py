"""The inference API: ems.load(path).encode(sentences, lang)."""

import numpy as np
import pytest

import ems
from tests.conftest import SMALL_MODEL
from tests.fakes import UI_SENTENCES


def test_encode_returns_float32_and_is_deterministic(model_dir):
    model = ems.load(model_dir)
    a = model.encode(UI_SENTENCES, lang="en")
    assert a.dtype == np.float32 and a.shape == (len(UI_SENTENCES), SMALL_MODEL["d_model"])
    np.testing.assert_array_equal(a, ems.load(model_dir).encode(UI_SENTENCES, lang="en"))


def test_encode_does_not_depend_on_order_or_batch_size(model_dir):
    model = ems.load(model_dir)
    reference = model.encode(UI_SENTENCES, lang="en", batch_size=len(UI_SENTENCES))
    perm = np.random.default_rng(0).permutation(len(UI_SENTENCES))
    shuffled = model.encode([UI_SENTENCES[i] for i in perm], lang="en", batch_size=3)
    np.testing.assert_allclose(shuffled, reference[perm], rtol=1e-5, atol=1e-6)


def test_encode_applies_training_preprocessing(model_dir):
    model = ems.load(model_dir)
    np.testing.assert_array_equal(model.encode(["SAVE CHANGES"], "en"), model.encode(["save changes"], "en"))


def test_heads_are_not_exported(model_dir):
    from safetensors.torch import load_file

    assert not any(k.startswith(("xtr", "contrastive")) for k in load_file(str(model_dir / "model.safetensors")))


def test_bad_inputs_are_clear_errors(model_dir, tmp_path):
    model = ems.load(model_dir)
    with pytest.raises(ValueError, match="no tokens after preprocessing"):
        model.encode(["fine", "   "], lang="en")
    with pytest.raises(TypeError, match="list of sentences"):
        model.encode("one string", lang="en")
    with pytest.raises(FileNotFoundError, match="not an EMS model directory"):
        ems.load(tmp_path)
