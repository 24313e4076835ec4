"""The test suite's small library: fake encoders, small inputs, and shared runs and checks.

Fake encoders stand in for a model wherever a test needs vectors and not a trained encoder: each has
`encode(sentences, lang) -> float32 array (one row per sentence)` and a `languages` attribute (None: any
language), as eval's and the miner's encoders do. The inputs write small files of the formats the
readers expect; the runs are the settings and launchers of the short training runs several test files
make. Fixtures stay in conftest.py; no test module imports another test module, only this one (and
conftest.py's helpers).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

import ems
from ems.configs import dump_config, load_config
from ems.mining.margin import mine
from ems.mining.pipeline.options import MineOptions
from ems.training.config import TrainConfig
from eval.evaluators.classification import ClassificationConfig, MlpSettings
from eval.evaluators.retrieval import read_lines
from eval.evaluators.tatoeba import DEFAULT_FILE_PATTERN, TatoebaConfig
from tests.conftest import REPO_ROOT, SMALL_MODEL

# --- fake encoders --------------------------------------------------------------------------------


class TableEncoder:
    """Hand-set vectors: encode(sentences, lang) returns `vectors[(lang, sentence)]` of each sentence
    (float32 rows; a KeyError for a pair the table lacks). `languages` is what the encoder claims to
    cover (None: any); `calls` lists (lang, number of sentences) of each call."""

    def __init__(self, vectors: dict, languages=None):
        self.vectors, self.languages, self.calls = vectors, languages, []

    def encode(self, sentences, lang):
        self.calls.append((lang, len(sentences)))
        return np.array([self.vectors[(lang, s)] for s in sentences], dtype=np.float32)


class TrigramEncoder:
    """Any sentence -> the sum of fixed random vectors (dim 64) of its hashed character trigrams: cheap,
    deterministic, better than chance on related languages, and continuous so exact cosine ties are
    unlikely. The language is ignored; `calls` lists (lang, number of sentences) of each call."""

    def __init__(self, languages: list[str] | None = None, dim: int = 64, buckets: int = 4096):
        self.languages = languages
        self.table = np.random.default_rng(0).standard_normal((buckets, dim)).astype(np.float32)
        self.calls: list[tuple[str, int]] = []

    def encode(self, sentences: list[str], lang: str, batch_size: int = 128) -> np.ndarray:
        self.calls.append((lang, len(sentences)))
        out = np.zeros((len(sentences), self.table.shape[1]), dtype=np.float32)
        for i, sentence in enumerate(sentences):
            text = f"  {sentence.lower()} "
            rows = [zlib.crc32(text[j : j + 3].encode()) % len(self.table) for j in range(len(text) - 2)]
            out[i] = self.table[rows].sum(axis=0)
        return out


class TrigramCountEncoder:
    """Any sentence -> its character-trigram counts, hashed into 512 buckets, L2-normalised: a cheap
    deterministic stand-in whose vectors are sparse and non-negative (unlike TrigramEncoder's)."""

    languages = None

    def encode(self, sentences, lang):
        out = np.zeros((len(sentences), 512), dtype=np.float32)
        for row, sentence in enumerate(sentences):
            text = f" {sentence.lower()} "
            for i in range(len(text) - 2):
                out[row, zlib.crc32(text[i : i + 3].encode()) % 512] += 1
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class WordCountEncoder:
    """Any sentence -> its lower-cased words counted into 64 buckets (a word's bucket: the sum of its
    code points), not normalised: sentences that share words share dimensions, whatever the language."""

    languages = None

    def encode(self, sentences, lang):
        out = np.zeros((len(sentences), 64), dtype=np.float32)
        for row, sentence in enumerate(sentences):
            for word in sentence.lower().split():
                out[row, sum(map(ord, word)) % 64] += 1
        return out


class LanguageOffsetEncoder:
    """A sentence in `lang` -> a normal random vector of `dim` dimensions seeded by the sentence, plus
    `offsets[lang]` in every dimension: a strong language signal over content noise (a KeyError for a
    language without an offset). `seed_length`: the seed is the sum of the code points plus the length
    (else the sum alone)."""

    languages = None

    def __init__(self, offsets=None, dim: int = 8, seed_length: bool = True):
        self.offsets = {"en": 0.0, "de": 4.0, "es": -4.0} if offsets is None else offsets
        self.dim, self.seed_length = dim, seed_length

    def encode(self, sentences, lang):
        seeds = [sum(map(ord, s)) + (len(s) if self.seed_length else 0) for s in sentences]
        rows = [np.random.default_rng(seed).normal(size=self.dim) + self.offsets[lang] for seed in seeds]
        return np.array(rows, dtype=np.float32).reshape(len(sentences), self.dim)


class CallCountEncoder:
    """A sentence -> [its length, the number of encode calls so far, this one included]: which call
    encoded a row shows in the row (a cache that re-encodes is caught). `calls`: the count."""

    languages = None
    model_id = "counting"

    def __init__(self):
        self.calls = 0

    def encode(self, sentences, lang):
        self.calls += 1
        return np.array([[len(s), self.calls] for s in sentences], dtype=np.float32)


TEACHER_DIM = 24  # CharProjectionTeacher's default dimension


class CharProjectionTeacher:
    """A deterministic stand-in teacher (distillation): a sentence -> a fixed random projection to `dim`
    dimensions of its character codes' counts (mod 256), over its length. Counts its `calls` and the
    `sentences` it encoded; after `fail_after` calls the next one raises KeyboardInterrupt (a kill)."""

    model_id = "counting-projection"

    def __init__(self, dim=TEACHER_DIM, fail_after=None):
        self.dim, self.fail_after = dim, fail_after
        self.calls = self.sentences = 0
        self.projection = np.random.default_rng(0).standard_normal((256, dim)).astype(np.float32)

    def vector(self, sentence: str) -> np.ndarray:
        counts = np.bincount([ord(c) % 256 for c in sentence], minlength=256).astype(np.float32)
        return counts @ self.projection / max(len(sentence), 1)

    def encode(self, sentences, lang):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("killed")
        self.calls += 1
        self.sentences += len(sentences)
        return np.stack([self.vector(s) for s in sentences])


class SignEncoder:
    """Line i of a call gets (+1, i) when its text starts with "+", else (-1, i): a label that a
    linear probe reads off the first dimension."""

    languages = None

    def encode(self, sentences, lang):
        return np.array([[1.0 if s.startswith("+") else -1.0, i] for i, s in enumerate(sentences)], dtype=np.float32)


class ListedLanguagesEncoder:
    """An encoder with a `languages` list (de, en), as EMS models have: a code outside it fails an
    assertion. Line i of a call -> the unit vector i mod 8 of 8 dimensions."""

    languages = ["de", "en"]

    def encode(self, sentences, lang):
        assert lang in self.languages, lang
        return np.stack([np.eye(8)[i % 8] for i in range(len(sentences))]).astype(np.float32)


# --- small inputs --------------------------------------------------------------------------------


def tatoeba_config(languages: list[str] | str = "all", **keys) -> TatoebaConfig:
    """A Tatoeba task config read by the config system, as from a YAML file."""
    values = {"name": "tatoeba", "data_subdir": "tatoeba", "file_pattern": DEFAULT_FILE_PATTERN, "metric": "p_at_1"}
    return load_config(TatoebaConfig, values={**values, "languages": languages, **keys})


def write_tatoeba(directory: Path, code: str, pairs: list[tuple[str, str]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"tatoeba.{code}-eng.{code}").write_text("".join(f"{xx}\n" for xx, _ in pairs), encoding="utf-8")
    (directory / f"tatoeba.{code}-eng.eng").write_text("".join(f"{en}\n" for _, en in pairs), encoding="utf-8")


def write_pair(root: Path, pair: str, name: str, sides: dict[str, list[str]]) -> None:
    (root / pair).mkdir(parents=True, exist_ok=True)
    for lang, lines in sides.items():
        (root / pair / f"{name}.{lang}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


TINY = MlpSettings(hidden=(8, 6), epochs=20, batch_size=6, learning_rate=0.01)


def classification_config(seeds: list[int], mlp: MlpSettings = TINY, directions=("en2xx",)) -> ClassificationConfig:
    """A classification task config read by the config system (`mlp`: its settings as keys)."""
    values = {"name": "c", "data_subdir": "c", "format": "mldoc", "languages": "all", "seeds": seeds}
    return load_config(
        ClassificationConfig, values={**values, "mlp": dataclasses.asdict(mlp), "directions": list(directions)}
    )


MLQE_HEADER = "index\toriginal\ttranslation\tscores\tmean\tz_scores\tz_mean\tmodel_scores"


def mlqe_row(i, original, translation, z_mean):
    return f"{i}\t{original}\t{translation}\t[1, 2]\t1.5\t[0.1, 0.2]\t{z_mean}\t-0.3"


def write_lines(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def tiny_suite(tmp_path):
    data = tmp_path / "data"
    words = [f"w{i} {'x' * i}".strip() for i in range(12)]
    write_lines(data / "flores200" / "devtest" / "eng.devtest", [f"en {w}" for w in words])
    write_lines(data / "flores200" / "devtest" / "deu.devtest", [f"de {w}" for w in words])
    write_lines(data / "flores200" / "devtest" / "spa.devtest", [f"es {w}" for w in words])
    write_lines(
        data / "mlqe" / "en-de" / "test20.ende.df.short.tsv",
        [MLQE_HEADER] + [mlqe_row(i, f"src {i}", f"mt {i * i}", str(np.sin(i))) for i in range(6)],
    )
    write_lines(
        data / "sts2017" / "STS2017.track4a.es-en.sent1-sent2-gold.tsv",
        [f"uno {i}\tone {i % 3}\t{i % 5}" for i in range(7)],
    )
    configs = tmp_path / "configs"
    configs.mkdir()
    heads = (
        "heads: [centering, projection, not_a_head]\n"
        "head_training: {flores_subdir: flores200/devtest, valid_fraction: 0.25}\n"
    )
    (configs / "mlqe.yaml").write_text(
        f"type: qe\nname: mlqe\ndata_subdir: mlqe\nsplit: test20\npairs: [en-de, et-en]\n{heads}"
    )
    (configs / "sts.yaml").write_text(
        "type: sts\nname: sts\ndata_subdir: sts2017\ntracks:\n"
        "  - {name: 4a, file: STS2017.track4a.es-en.sent1-sent2-gold.tsv, langs: [es, en]}\n" + heads
    )
    (configs / "lid.yaml").write_text(
        "type: language_id\nname: lid\ndata_subdir: flores200/devtest\nlanguages: [de, es]\n"
        "heads: [centering]\nhead_lines: 4\nprobe_train_lines: 4\nprobe_test_lines: 4\npca_pair: de-en\n"
    )
    (configs / "suite.yaml").write_text("tasks: [mlqe.yaml, sts.yaml, lid.yaml]\n")
    return data, configs / "suite.yaml"


SRC = (
    "Der Hund bellt.\n\nDie Katze schläft.\r\nDer Hund bellt.\n   \nIch habe Hunger.\nWo ist der Bahnhof?\n"
    "Die Katze schläft.\nGuten Tag!"
)


TGT = "The dog barks.\nI am hungry.\n\nThe cat sleeps.\nWhere is the station?\nThe dog barks.\nGood day!\nA red car.\n"


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    src, tgt = tmp_path / "in.de", tmp_path / "in.en"
    src.write_bytes(SRC.encode("utf-8"))
    tgt.write_bytes(TGT.encode("utf-8"))
    return src, tgt


def mining_options(tmp_path: Path, src: Path, tgt: Path, **settings) -> MineOptions:
    """de -> en options of a run writing tmp_path/streamed.tsv."""
    return MineOptions(str(src), "de", str(tgt), "en", str(tmp_path / "streamed.tsv"), **settings)


def in_memory_mine(encoder, src_path: Path, tgt_path: Path, out: Path, **options) -> None:
    """What the miner did before streaming: read both files whole, keep each distinct non-empty
    line once, encode each side in one call, mine, write."""
    src = list(dict.fromkeys(line for line in read_lines(src_path) if line.strip()))
    tgt = list(dict.fromkeys(line for line in read_lines(tgt_path) if line.strip()))
    pairs = mine(encoder.encode(src, "de"), encoder.encode(tgt, "en"), **options)
    out.write_text(
        "".join(
            f"{score:.6f}\t{src[s]}\t{tgt[t]}\n"
            for s, t, score in zip(pairs.src.tolist(), pairs.tgt.tolist(), pairs.score.tolist())
        ),
        encoding="utf-8",
    )


def real_sides(data_dir: Path) -> tuple[list[str], list[str]]:
    """Tatoeba (LASER) German and French sentences against English ones: 150 German-English
    translations (the English reversed) among unrelated sentences, a repeated line and an empty one
    (300 and 260 distinct lines: enough to train IVF-PQ's 256 centroids)."""
    tatoeba = data_dir / "tatoeba"
    deu, eng = read_lines(tatoeba / "tatoeba.deu-eng.deu")[:150], read_lines(tatoeba / "tatoeba.deu-eng.eng")[:150]
    src = deu + read_lines(tatoeba / "tatoeba.fra-eng.fra")[:150] + ["", deu[3]]
    tgt = eng[::-1] + read_lines(tatoeba / "tatoeba.spa-eng.eng")[200:310]
    return src, tgt


# Eight short English UI strings (Django's): what an encoder of the tiny pipeline's vocabulary encodes.
UI_SENTENCES = [
    "Enter a valid date.",
    "This field is required.",
    "Save",
    "Delete the selected objects?",
    "Change password",
    "Enter a whole number.",
    "Log out",
    "Add another item",
]


ENGLISH = [
    "Enter a valid date.",
    "This field is required.",
    "Save changes",
    "Delete the selected objects?",
    "Change password",
    "Enter a whole number.",
    "Log out",
    "Add another item",
    "Mr. Smith saved it.",
]


GERMAN = [
    "Geben Sie ein gültiges Datum ein.",
    "Dieses Feld ist erforderlich.",
    "Änderungen speichern",
    "Ausgewählte Objekte löschen?",
    "Passwort ändern",
    "Geben Sie eine ganze Zahl ein.",
    "Abmelden",
    "Weiteres Element hinzufügen",
    "Herr Schmidt hat es gespeichert.",
]


CHINESE = [
    "請輸入有效的日期。",
    "這個欄位是必填的。",
    "儲存變更",
    "刪除所選的物件？",
    "變更密碼",
    "請輸入一個整數。",
    "登出",
    "新增另一個項目",
    "史密斯先生儲存了它。",
]


# --- shared runs and checks ----------------------------------------------------------------------


RUN = dict(
    batch_size=32,
    lr=2e-3,
    warmup_steps=10,
    max_steps=80,
    log_every=5,
    save_every=1000,
    seed=3,
    valid_every=1000,
    valid_pairs=128,
    bucket_batches=50,
)


def cli_args(pipeline, out, *settings: str) -> list[str]:
    return [
        "--set",
        f"data={pipeline / 'shards'}",
        f"vocab={pipeline / 'vocab'}",
        f"out={out}",
        "batch_size=32",
        "max_steps=4",
        "warmup_steps=2",
        "bucket_batches=50",
        "seed=3",
        *(f"model_overrides.{key}={value}" for key, value in SMALL_MODEL.items()),
        *settings,
    ]


def one_error_line(capsys) -> str:
    """The `error: ` line that ends stderr (after any progress bars); no traceback."""
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert "Traceback" not in err and len(errors) == 1 and err.rstrip().endswith(errors[0]), err[-3000:]
    return errors[0]


def copy_shards(pipeline: Path, tmp_path: Path) -> Path:
    shards = tmp_path / "shards"
    shutil.copytree(pipeline / "shards", shards)
    return shards


def no_deepspeed(monkeypatch):
    """Fails the test if training gets as far as starting DeepSpeed (the slow part of start-up)."""

    def refuse():
        raise AssertionError("DeepSpeed was started before the inputs were checked")

    monkeypatch.setattr("ems.training.train.init_distributed", refuse)


def untrained_model(pipeline: Path, out: Path) -> tuple[Path, int]:
    """An exported untrained SMALL_MODEL encoder of the pipeline's vocabulary: (its directory, d_model)."""
    from ems.encoder import export_encoder
    from ems.model import EMSModel
    from ems.model_config import config_from_preset
    from ems.text import Tokenizer

    tokenizer = Tokenizer.load(pipeline / "vocab")
    cfg = config_from_preset(
        "tiny", vocab_size=tokenizer.vocab_size, n_languages=len(tokenizer.languages), **SMALL_MODEL
    )
    return export_encoder(EMSModel(cfg).encoder, tokenizer, out), cfg.d_model


def launch(cfg: TrainConfig, nproc: int = 1) -> subprocess.Popen:
    """`python -m ems.training.train` (under torchrun with `nproc` > 1 processes) of `cfg`, given as
    the YAML file OUT.yaml beside its run directory."""
    config = Path(cfg.out).parent / f"{Path(cfg.out).name}.yaml"
    dump_config(cfg, config)
    # without the in-process runs' world-of-one variables (their MASTER_PORT is taken)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc)]
        if nproc > 1
        else [sys.executable]
    )
    return subprocess.Popen(
        [*launcher, "-m", "ems.training.train", "--config", str(config)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def logged_losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "loss" in r]
    assert len(steps) == len(set(steps)), "a step was logged twice"
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def parameters(model_dir) -> dict:
    return ems.load(model_dir).model.state_dict()


def assert_same_parameters(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=atol, msg=key)
