"""Disentanglement heads: ParallelEmbeddings, centering and projection against hand-computed
numpy, save/load round trips, HeadEncoder views, EMS encode(view=...), the train_head CLI."""

import json

import numpy as np
import pytest

import ems
import ems.encoder_kinds
from ems.cli import MissingDataError
from ems.encoder import HEAD_DIR
from ems.heads import HEADS, ParallelEmbeddings, UnknownLanguageError, load_head
from ems.heads.centering import CenteringHead
from ems.heads.encoder_view import HeadEncoder
from ems.heads.projection import ProjectionHead
from eval.parallel_data import encode_pairs, flores_pairs, moses_pairs
from eval.train_head import main as train_head_main
from eval.train_head import train_head
from tests.fakes import LanguageOffsetEncoder


def toy_pairs(n=40, d=5, seed=0):
    """en (index 0) paired with de (index 1): de = en @ A + offset, so centering and projection
    have exact answers."""
    rng = np.random.default_rng(seed)
    en = rng.normal(size=(n, d)).astype(np.float32)
    a = rng.normal(size=(d, d)).astype(np.float32)
    de = en @ a
    return ParallelEmbeddings(en, de, np.zeros(n, np.int64), np.ones(n, np.int64), ["en", "de"]), a


def test_split_is_disjoint_seeded_and_checked():
    data, _ = toy_pairs(n=10)
    train, valid = data.split(0.2, seed=3)
    assert len(train) == 8 and len(valid) == 2
    rows = {tuple(r) for r in train.x} | {tuple(r) for r in valid.x}
    assert len(rows) == 10  # disjoint and complete
    np.testing.assert_array_equal(data.split(0.2, seed=3)[1].x, valid.x)
    assert not np.array_equal(data.split(0.2, seed=4)[1].x, valid.x)
    with pytest.raises(ValueError, match="valid_fraction"):
        data.split(1.0, seed=0)
    with pytest.raises(ValueError, match="language indices"):
        ParallelEmbeddings(data.x, data.y, data.x_lang, data.y_lang + 1, ["en", "de"])


def test_centering_by_hand(tmp_path):
    x = np.array([[1, 2], [3, 4]], np.float32)  # en
    y = np.array([[10, 0], [20, 2]], np.float32)  # de
    data = ParallelEmbeddings(x, y, np.array([0, 0]), np.array([1, 1]), ["en", "de"])
    head = CenteringHead()
    head.fit(data, data)
    np.testing.assert_allclose(head.means["en"], [2, 3])
    np.testing.assert_allclose(head.means["de"], [15, 1])
    np.testing.assert_allclose(head.meaning(np.array([[16, 1]]), "de"), [[1, 0]])
    np.testing.assert_allclose(head.language(np.array([[16, 1], [0, 0]]), "de"), [[15, 1], [15, 1]])
    head.save(tmp_path)
    loaded = load_head(tmp_path)
    assert isinstance(loaded, CenteringHead)
    np.testing.assert_array_equal(loaded.meaning(y, "de"), head.meaning(y, "de"))
    with pytest.raises(UnknownLanguageError, match="not trained on language 'fr'.*de, en"):
        head.meaning(y, "fr")


def test_projection_recovers_a_known_linear_map(tmp_path):
    data, a = toy_pairs()
    train, valid = data.split(0.25, seed=0)
    head = ProjectionHead()
    log = head.fit(train, valid)
    # de @ W = en  =>  W = A^-1
    np.testing.assert_allclose(head.maps["de"], np.linalg.inv(a), atol=1e-3)
    np.testing.assert_allclose(head.meaning(valid.y, "de"), valid.x, atol=1e-3)
    np.testing.assert_array_equal(head.meaning(valid.x, "en"), valid.x)  # English: identity
    np.testing.assert_allclose(head.language(valid.y, "de"), valid.y - head.meaning(valid.y, "de"), atol=1e-6)
    assert log["valid_pair_cosine"] > 0.999 and log["pairs_per_language"] == {"de": len(train)}
    head.save(tmp_path)
    assert json.loads((tmp_path / "head.json").read_text())["name"] == "projection"
    np.testing.assert_array_equal(load_head(tmp_path).meaning(valid.y, "de"), head.meaning(valid.y, "de"))
    with pytest.raises(ValueError, match="no English side"):
        ProjectionHead().fit(ParallelEmbeddings(data.x, data.y, data.x_lang, data.y_lang, ["fr", "de"]), valid)


def test_load_head_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved head"):
        load_head(tmp_path)
    (tmp_path / "head.json").write_text('{"name": "nonsense"}')
    with pytest.raises(ValueError, match="unknown head 'nonsense'"):
        load_head(tmp_path)


def offset_encoder() -> LanguageOffsetEncoder:
    """Six dimensions, de and fr 3 away from en on every axis."""
    return LanguageOffsetEncoder({"en": 0.0, "de": 3.0, "fr": -3.0}, dim=6, seed_length=False)


def write_lines(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def test_parallel_data_from_moses_and_flores(tmp_path):
    write_lines(tmp_path / "corpus" / "de-en" / "x.de", ["eins", "", "drei"])
    write_lines(tmp_path / "corpus" / "de-en" / "x.en", ["one", "two", "three"])
    write_lines(tmp_path / "corpus" / "en-fr" / "x.en", ["one"])
    write_lines(tmp_path / "corpus" / "en-fr" / "x.fr", ["un"])
    sets = moses_pairs(tmp_path / "corpus", ["de", "en"])
    assert [(s.x_lang, s.y_lang, s.x, s.y) for s in sets] == [("de", "en", ["eins", "drei"], ["one", "three"])]
    assert sets[0].read["skipped_empty"] == 1
    data = encode_pairs(offset_encoder(), moses_pairs(tmp_path / "corpus"))
    assert data.languages == ["de", "en", "fr"] and len(data) == 3
    np.testing.assert_array_equal(data.y[2], offset_encoder().encode(["un"], "fr")[0])
    with pytest.raises(MissingDataError, match="no aligned file pairs for de,ja"):
        moses_pairs(tmp_path / "corpus", ["de", "ja"])
    flores = tmp_path / "flores"
    write_lines(flores / "eng.devtest", ["one", "two"])
    write_lines(flores / "deu.devtest", ["eins", "zwei"])
    assert [(s.y_lang, s.y) for s in flores_pairs(flores, ["de"])] == [("de", ["eins", "zwei"])]
    with pytest.raises(MissingDataError, match=r"fr \(fra\)"):
        flores_pairs(flores, ["de", "fr"])


def test_head_encoder_round_trip_and_train_head_cli(tmp_path, monkeypatch):
    for lang, words in {
        "en": "one two three four five six seven eight",
        "de": "eins zwei drei vier fünf sechs sieben acht",
    }.items():
        write_lines(tmp_path / "corpus" / "de-en" / f"x.{lang}", words.split())
    data = encode_pairs(offset_encoder(), moses_pairs(tmp_path / "corpus"))
    head, log = train_head("centering", data, valid_fraction=0.25, seed=0)
    assert log["train_pairs"] == 6 and log["valid_pairs"] == 2
    view = HeadEncoder(offset_encoder(), head, "meaning")
    raw = offset_encoder().encode(["eins"], "de")
    np.testing.assert_allclose(view.encode(["eins"], "de"), raw - head.means["de"])
    np.testing.assert_allclose(
        HeadEncoder(offset_encoder(), head, "language").encode(["eins"], "de") + view.encode(["eins"], "de"),
        raw,
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match="unknown view"):
        HeadEncoder(offset_encoder(), head, "syntax")
    with pytest.raises(ValueError, match="unknown head 'nope'"):
        train_head("nope", data)

    # the CLI with an encoder plug-in: same head as train_head above
    monkeypatch.setitem(
        ems.encoder_kinds.ENCODER_KINDS,
        "offset",
        ems.encoder_kinds.EncoderKind(lambda path, device: offset_encoder(), "none", {}),
    )
    assert (
        train_head_main(
            [
                "--encoder",
                "offset",
                "--head",
                "centering",
                "--pairs",
                str(tmp_path / "corpus"),
                "--valid-fraction",
                "0.25",
                "--out",
                str(tmp_path / "head"),
            ]
        )
        == 0
    )
    saved = load_head(tmp_path / "head")
    np.testing.assert_array_equal(
        HeadEncoder(offset_encoder(), saved, "meaning").encode(["eins"], "de"), view.encode(["eins"], "de")
    )
    assert json.loads((tmp_path / "head" / "training_log.json").read_text())["data"][0]["pair"] == "de-en"
    with pytest.raises(SystemExit):
        train_head_main(
            ["--encoder", "offset", "--head", "centering", "--flores", str(tmp_path)]
        )  # --languages missing


def test_heads_registry_has_the_closed_form_heads():
    assert HEADS["centering"] is CenteringHead and HEADS["projection"] is ProjectionHead


def test_ems_encode_views_with_a_saved_head(model_dir, tmp_path):
    sentences = {"en": ["Save", "Log out", "Change password"], "de": ["Speichern", "Abmelden", "Passwort ändern"]}
    model = ems.load(model_dir)
    assert model.head is None
    with pytest.raises(ValueError, match="needs a head saved with the model"):
        model.encode(sentences["en"], "en", view="meaning")
    raw = {lang: model.encode(lines, lang) for lang, lines in sentences.items()}
    data = ParallelEmbeddings(raw["en"], raw["de"], np.zeros(3, np.int64), np.ones(3, np.int64), ["en", "de"])
    head = ProjectionHead()
    head.fit(data, data)
    head.save(model_dir / HEAD_DIR)  # model_dir belongs to this test module alone
    loaded = ems.load(model_dir)
    meaning = raw["de"] @ head.maps["de"]
    np.testing.assert_allclose(loaded.encode(sentences["de"], "de", view="meaning"), meaning, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        loaded.encode(sentences["de"], "de", view="language"), raw["de"] - meaning, rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(loaded.encode(sentences["de"], "de", view="raw"), raw["de"])
    with pytest.raises(ValueError, match="unknown view"):
        loaded.encode(sentences["de"], "de", view="both")
