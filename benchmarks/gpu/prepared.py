"""The GPU acceptance run's data, prepared on a CPU machine: `python -m benchmarks.gpu.acceptance prepare`.

In: the shared data directory (tatoeba_challenge/, tico19/ and the evaluation sets) and a data config
(configs/data/multilingual.yaml: every Tatoeba Challenge and TICO-19 language). Out: a directory small
enough to travel with the working tree to the GPU machine (the device tool's `carry`, 64 MiB with the
tree), holding nothing the GPU run does not read:

    manifest.json           what it holds: the data config, the corpus summary, the vocabulary's sha1,
                            each file's bytes and sha256, the size limit it was checked against
    train.tar.xz            vocab/ (spm.model, ems_tokenizer.json), shards/train/, shards/heldout/,
                            corpus/languages.json (and .md): what training reads
    eval.tar.xz             tatoeba/, flores200/devtest/, sib200/ (English train/dev/test and labels,
                            every other language's test: the zero-shot protocol reads no more)
    segmentation.json.xz    jieba, MeCab and OpenCC's answers for every evaluation sentence that can
                            reach them (text in Han or kana script, and every sentence of a file that
                            is mostly such text): benchmarks/gpu/standins/ answers from it where those
                            packages are not installed (the GPU image has none of them, and jieba's
                            and UniDic's dictionaries alone are over 60 MB)
    wheels/                 (--wheels) the Python packages the GPU run imports that the GPU image
                            lacks, built or downloaded here for its Python (cp312, x86-64)

The corpus, vocabulary and shards are made by the recipes' data stages (data_prep.recipe, as `ems-prep recipe`) in a
build directory beside the output (kept and reused when prepared with the same config); the archives
are xz-compressed (the 64k-vocabulary shards shrink ~2.5x: their uint16 tokens are far from uniform).
The GPU run checks the manifest (`open_prepared`) before anything slow and unpacks the archives
(`unpack`, seconds).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ems.cli import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
FORMAT = 1
MANIFEST = "manifest.json"
TRAIN_ARCHIVE = "train.tar.xz"
EVAL_ARCHIVE = "eval.tar.xz"
SEGMENTATION = "segmentation.json.xz"
WHEELS = "wheels"
MIB = 1 << 20
# The device tool carries 64 MiB in all, the working tree (~3 MiB) included.
DEFAULT_LIMIT_MIB = 60.0
DATA_CONFIG = REPO_ROOT / "configs" / "data" / "multilingual.yaml"
EVAL_SETS = ("tatoeba", "flores200/devtest", "sib200")
SIB_TRAIN_DIR = "eng_Latn"  # the zero-shot protocol's train language: its train/dev/test and labels
CJK = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9d\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")  # kana, Han
CJK_FILE_SHARE = 0.2  # a file with this share of Han/kana sentences has all its sentences recorded
SEGMENTER_LANGUAGES = ("zh", "yue", "wuu", "ja")  # ems.text.SEGMENTERS' languages (zh also goes through OpenCC)
# What the GPU run imports that the GPU image (/work/.library/device/KINDS.md's package list) lacks, at
# this environment's versions; jieba, fugashi, unidic-lite and opencc are replaced by the table above.
WHEEL_PACKAGES = (
    "faiss-cpu",  # xSIM's k-NN (ems.mining.search); 18 MB, the largest
    "sacremoses",
    "langcodes",
    "hjson",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
)
BUILT_WHEELS = ("deepspeed",)  # sdist only on the index: built here as a pure-Python wheel (DS_BUILD_OPS=0)
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
GPU_PYTHON = "3.12"


@dataclass(frozen=True)
class Prepared:
    """A checked prepared directory: its path and manifest."""

    path: Path
    manifest: dict


def mib(n_bytes: int) -> float:
    return n_bytes / MIB


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# -- the archives -----------------------------------------------------------------------------------


def train_members(build: Path) -> list[tuple[Path, str]]:
    """(file, name in the archive) of what training reads, from the data stage's build directory."""
    members = [(build / "vocab" / name, f"vocab/{name}") for name in ("spm.model", "ems_tokenizer.json")]
    for split in ("train", "heldout"):
        members += [
            (p, f"shards/{split}/{p.name}") for p in sorted((build / "shards" / split).iterdir()) if p.is_file()
        ]
    members += [(p, f"corpus/{p.name}") for p in sorted((build / "corpus").glob("languages.*")) if p.is_file()]
    return members


def eval_members(data_dir: Path) -> list[tuple[Path, str]]:
    """(file, name in the archive) of the evaluation sets the GPU run reads: Tatoeba, FLORES-200
    devtest, and of SIB-200 what its zero-shot protocol reads (English train/dev/test and labels,
    every other language's test)."""
    missing = [name for name in EVAL_SETS if not (data_dir / name).is_dir()]
    if missing:
        raise UserError(
            f"{data_dir} lacks {', '.join(f'{name}/' for name in missing)}: point --data-dir (or EMS_DATA_DIR) at "
            "the directory of ../shared/data/PROVENANCE.md"
        )
    files = [p for name in EVAL_SETS[:2] for p in sorted((data_dir / name).iterdir()) if p.is_file()]
    sib = data_dir / "sib200"
    files += [p for p in sorted((sib / SIB_TRAIN_DIR).iterdir()) if p.is_file()]
    files += [p / "test.tsv" for p in sorted(sib.iterdir()) if p.name != SIB_TRAIN_DIR and (p / "test.tsv").is_file()]
    return [(p, p.relative_to(data_dir).as_posix()) for p in files]


def write_archive(path: Path, members: list[tuple[Path, str]], preset: int) -> None:
    """An xz tar of `members`, written whole or not at all (a temporary name, then renamed)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tarfile.open(tmp, "w:xz", preset=preset) as tar:
        for source, name in members:
            tar.add(source, arcname=name, recursive=False)
    os.replace(tmp, path)


def unpack(prepared: Prepared, into: Path) -> dict[str, Path]:
    """The archives unpacked under `into` ({"train": its data directory, "eval": the evaluation sets'
    root}); kept when `into` already holds this manifest's files (a rerun on the same machine)."""
    stamp = into / "unpacked.json"
    wanted = {name: prepared.manifest["files"][name]["sha256"] for name in (TRAIN_ARCHIVE, EVAL_ARCHIVE)}
    paths = {"train": into / "train", "eval": into / "eval"}
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return paths
    shutil.rmtree(into, ignore_errors=True)
    for key, archive in (("train", TRAIN_ARCHIVE), ("eval", EVAL_ARCHIVE)):
        with tarfile.open(prepared.path / archive, "r:xz") as tar:
            tar.extractall(paths[key], filter="data")
    stamp.write_text(json.dumps(wanted) + "\n")
    return paths


# -- the segmentation table -------------------------------------------------------------------------


def eval_sentences(path: Path) -> list[str]:
    """The sentences of one evaluation file as its reader sees them (SIB-200: the text column)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".tsv":
        return [cells[2].strip() for cells in (line.split("\t") for line in lines[1:]) if len(cells) == 3]
    return lines


def cjk_sentences(files: list[Path]) -> list[str]:
    """Every sentence that jieba, MeCab or OpenCC can see when these files are encoded: those with Han or
    kana characters (ems.text.guess_language sends them to a segmenter), and all of a file whose share of
    such sentences is at least CJK_FILE_SHARE (a Chinese or Japanese file: its Latin-only lines too)."""
    sentences: dict[str, None] = {}
    for path in files:
        lines = eval_sentences(path)
        flagged = [bool(CJK.search(line)) for line in lines]
        whole = bool(lines) and sum(flagged) >= CJK_FILE_SHARE * len(lines)
        sentences.update(dict.fromkeys(line for line, cjk in zip(lines, flagged) if whole or cjk))
    return list(sentences)


@contextmanager
def recorded_segmenters(table: dict[str, dict]):
    """ems.text's jieba, MeCab and OpenCC (the installed packages) with every answer recorded in
    table["jieba" | "mecab" | "opencc"][input]; restored on exit."""
    import ems.text as text

    jieba, mecab, opencc = text._jieba(), text._mecab(), text._opencc()

    class Jieba:
        def cut(self, sentence: str) -> list[str]:
            if sentence not in table["jieba"]:  # yue and wuu send the same text as zh does, unless OpenCC changed it
                table["jieba"][sentence] = list(jieba.cut(sentence))
            return table["jieba"][sentence]

    class Mecab:
        def parse(self, sentence: str) -> str:
            parsed = table["mecab"][sentence] = mecab.parse(sentence)
            return parsed

    class OpenCC:
        def convert(self, sentence: str) -> str:
            converted = table["opencc"][sentence] = opencc.convert(sentence)
            return converted

    saved = text._jieba, text._mecab, text._opencc
    text._jieba, text._mecab, text._opencc = Jieba, Mecab, OpenCC
    try:
        yield table
    finally:
        text._jieba, text._mecab, text._opencc = saved


def segmentation_table(sentences: list[str], vocab: Path) -> dict:
    """{"jieba", "mecab", "opencc": {input: answer}} for `sentences` preprocessed (with the vocabulary's
    preprocessing settings) as each of SEGMENTER_LANGUAGES."""
    from ems.text import Tokenizer

    preprocessing = Tokenizer.load(vocab).preprocessing
    table: dict[str, dict] = {"jieba": {}, "mecab": {}, "opencc": {}}
    with recorded_segmenters(table):
        for sentence in sentences:
            for lang in SEGMENTER_LANGUAGES:
                preprocessing(sentence, lang)
    return table


def write_segmentation(path: Path, table: dict, preset: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with lzma.open(tmp, "wt", encoding="utf-8", preset=preset) as f:
        json.dump({"format": FORMAT, **table}, f, ensure_ascii=False)
    os.replace(tmp, path)


# -- wheels -----------------------------------------------------------------------------------------


def installed_version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def build_wheels(out: Path) -> list[str]:
    """WHEEL_PACKAGES downloaded for the GPU image's Python, BUILT_WHEELS built here, into `out`, at this
    environment's versions (pip; UserError with pip's last line when it fails)."""
    out.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={installed_version(name)}" for name in WHEEL_PACKAGES]
    platforms = [arg for platform in WHEEL_PLATFORMS for arg in ("--platform", platform)]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    commands = [
        [*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", GPU_PYTHON, "--implementation",
         "cp", *platforms, "-d", str(out), *pins],
        *[[*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), f"{name}=={installed_version(name)}"]
          for name in BUILT_WHEELS],
    ]  # fmt: skip
    for command in commands:
        done = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, "DS_BUILD_OPS": "0"}, check=False
        )
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise UserError(f"pip {command[4]} failed (status {done.returncode}): {last}")
    return sorted(p.name for p in out.glob("*.whl"))


# -- prepare and check ------------------------------------------------------------------------------


def prepare(
    out: Path,
    data_dir: Path,
    data_config: Path,
    overrides: list[str],
    limit_mib: float = DEFAULT_LIMIT_MIB,
    preset: int = 6,
    wheels: bool = False,
    build: Path | None = None,
) -> Prepared:
    """The data stage on this machine, then `out` as the module docstring says; UserError (one line) for a
    missing data directory or an `out` over `limit_mib` (then it holds no manifest: the GPU run refuses it)."""
    from data_prep.recipe import RecipeDataConfig, trained_languages
    from ems.apps.demo import Stages, prepared_corpus
    from ems.configs import load_config
    from ems.shards import PairShards
    from ems.text import Tokenizer

    data_dir, out = Path(data_dir).resolve(), Path(out)
    eval_files = eval_members(data_dir)  # checks the evaluation sets before anything slow
    cfg = load_config(RecipeDataConfig, data_config, overrides)
    build = out.with_name(out.name + ".build") if build is None else Path(build)
    stages = Stages()
    corpus = prepared_corpus(cfg, data_dir, build, stages)
    (out / MANIFEST).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    seconds = dict(stages.seconds)

    started = time.monotonic()
    print(f"\n== pack ({out}) ==", flush=True)
    write_archive(out / TRAIN_ARCHIVE, train_members(build), preset)
    write_archive(out / EVAL_ARCHIVE, eval_files, preset)
    seconds["pack"] = round(time.monotonic() - started, 1)

    started = time.monotonic()
    sentences = cjk_sentences([source for source, _ in eval_files])
    table = segmentation_table(sentences, build / "vocab")
    write_segmentation(out / SEGMENTATION, table, preset)
    seconds["segmentation"] = round(time.monotonic() - started, 1)
    print(f"segmentation table: {len(sentences)} sentences, {sum(map(len, table.values()))} answers", flush=True)

    shutil.rmtree(out / WHEELS, ignore_errors=True)
    if wheels:
        started = time.monotonic()
        print(f"wheels: {', '.join(build_wheels(out / WHEELS))}", flush=True)
        seconds["wheels"] = round(time.monotonic() - started, 1)

    shards, tokenizer = PairShards(build / "shards" / "train"), Tokenizer.load(build / "vocab")
    files = {
        p.relative_to(out).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)}
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    manifest = {
        "format": FORMAT,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "data_dir": str(data_dir),
        "data_config": asdict(cfg),
        "corpus": corpus,
        "languages": trained_languages(build),  # the non-English ones
        "vocab": {"size": tokenizer.vocab_size, "sha1": tokenizer.sha1, "languages": len(tokenizer.languages)},
        "train_pairs": len(shards),
        "train_tokens": int(shards.index["n_tokens"]),
        "unpacked_bytes": {
            "train": sum(source.stat().st_size for source, _ in train_members(build)),
            "eval": sum(source.stat().st_size for source, _ in eval_files),
        },
        "segmentation": {"sentences": len(sentences), **{kind: len(answers) for kind, answers in table.items()}},
        "seconds": seconds,
        "limit_mib": limit_mib,
        "files": files,
    }
    manifest["total_bytes"] = sum(f["bytes"] for f in files.values())
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    total = directory_bytes(out)
    if total > limit_mib * MIB:
        (out / MANIFEST).unlink()
        raise UserError(
            f"{out} holds {mib(total):.1f} MiB, over the {limit_mib:g} MiB limit (--max-mib; the device tool "
            "carries 64 MiB with the working tree): not marked prepared"
        )
    print(
        f"{out}: {mib(total):.1f} MiB of {limit_mib:g} ({json.dumps({k: mib(v['bytes']) for k, v in files.items()})})"
    )
    return Prepared(out, manifest)


def open_prepared(path: Path, limit_mib: float = DEFAULT_LIMIT_MIB) -> Prepared:
    """The prepared directory at `path`, checked: its manifest, every file it lists at its size and
    sha256, nothing over `limit_mib` in all; UserError (one line) otherwise."""
    path = Path(path)
    hint = "run `python -m benchmarks.gpu.acceptance prepare` on the CPU machine, and carry its --out"
    if not (path / MANIFEST).is_file():
        raise UserError(f"{path} is no prepared directory (no {MANIFEST}; incomplete or over its limit): {hint}")
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path / MANIFEST} is not a manifest of `benchmarks.gpu.acceptance prepare`: {hint}") from None
    if manifest.get("format") != FORMAT:
        raise UserError(f"{path} was prepared in format {manifest.get('format')}, this run reads {FORMAT}: {hint}")
    problems = []
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            problems.append(f"{name} missing")
        elif file.stat().st_size != expected["bytes"]:
            problems.append(f"{name} has {file.stat().st_size} bytes, not {expected['bytes']}")
        elif sha256(file) != expected["sha256"]:
            problems.append(f"{name} differs from its sha256")
    absent = [name for name in (TRAIN_ARCHIVE, EVAL_ARCHIVE, SEGMENTATION) if name not in files]
    problems += [f"{name} not listed" for name in absent]
    if problems:
        raise UserError(f"{path} is incomplete: {'; '.join(problems[:3])}{' ...' if len(problems) > 3 else ''}: {hint}")
    total = directory_bytes(path)
    if total > limit_mib * MIB:
        raise UserError(f"{path} holds {mib(total):.1f} MiB, over the {limit_mib:g} MiB limit (--max-mib): {hint}")
    return Prepared(path, manifest)
