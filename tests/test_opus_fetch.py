"""Fetching OPUS corpora with opustools: offline from a local OPUS-layout mirror built from real
FLORES-200 text, the online path's reading of a downloaded Moses zip, and resumable downloads."""

import http.server
import json
import threading
import zipfile

import pytest

from data_prep.__main__ import main
from data_prep.config import PrepConfig
from data_prep.opus import FetchError, MirrorSource, OnlineSource, check_opus_codes, download, fetch
from ems.cli import run_main
from ems.configs import ConfigError, load_config
from fixtures.opus_mirror import build_mirror, flores_lines


def make_config(**overrides):
    raw = {
        "languages": ["de", "en", "fr", "ja"],
        "pivot": "en",
        "corpora": [
            {"name": "TED2020", "release": "v1", "max_pairs": 250, "max_pairs_for": {"en-fr": 120}},
            {"name": "Tatoeba", "release": "v2", "only_uncovered": True},
        ],
    }
    return load_config(PrepConfig, values={**raw, **overrides})


@pytest.fixture(scope="module")
def mirror(data_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("opus")
    build_mirror(root, "TED2020", "v1", data_dir, [("de", "en"), ("en", "fr")], lines=slice(0, 300))
    build_mirror(root, "Tatoeba", "v2", data_dir, [("en", "ja"), ("de", "en")], lines=slice(300, 400), docs=1)
    return root


def read_lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_offline_fetch_writes_aligned_files_with_caps_and_tatoeba_only_where_needed(mirror, data_dir, tmp_path):
    report = fetch(make_config(), MirrorSource(mirror), tmp_path)

    assert read_lines(tmp_path / "de-en" / "TED2020.de") == flores_lines(data_dir, "de")[:250]
    assert read_lines(tmp_path / "de-en" / "TED2020.en") == flores_lines(data_dir, "en")[:250]
    assert read_lines(tmp_path / "en-fr" / "TED2020.fr") == flores_lines(data_dir, "fr")[:120]
    assert read_lines(tmp_path / "en-ja" / "Tatoeba.ja") == flores_lines(data_dir, "ja")[300:400]
    assert not (tmp_path / "de-en" / "Tatoeba.de").exists()
    by_pair = {(e["corpus"], e["pair"]): e for e in report["fetched"]}
    assert by_pair["TED2020", "de-en"]["pairs"] == 250 and by_pair["TED2020", "de-en"]["capped"]
    assert by_pair["TED2020", "en-fr"]["pairs"] == 120 and by_pair["TED2020", "en-fr"]["cap"] == 120
    assert by_pair["Tatoeba", "en-ja"] | {"pairs": 100, "capped": False} == by_pair["Tatoeba", "en-ja"]
    statuses = {(e["corpus"], e["pair"]): e["status"] for e in report["skipped"]}
    assert statuses["Tatoeba", "de-en"] == "skipped: pair covered by another corpus"
    assert statuses["TED2020", "en-ja"] == "missing"
    assert report["pairs_without_data"] == []
    assert json.loads((tmp_path / "fetch_report.json").read_text()) == report

    again = fetch(make_config(), MirrorSource(mirror), tmp_path)
    assert {e["status"] for e in again["fetched"]} == {"exists"}


def test_dry_run_prints_the_plan_and_writes_nothing(mirror, tmp_path, capsys):
    fetch(make_config(), MirrorSource(mirror), tmp_path / "out", dry_run=True)
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("TED2020\tv1\tde-en\tde-en\tcap 250\t") for line in printed)
    assert any(line.startswith("TED2020\tv1\ten-fr\ten-fr\tcap 120\t") for line in printed)
    assert "Tatoeba\tv2\ten-ja\ten-ja\tcap all\t" in "\n".join(printed)
    assert not (tmp_path / "out").exists()


def test_a_pair_no_corpus_has_is_reported_not_silently_dropped(mirror, tmp_path, capsys):
    config = make_config(languages=["de", "en", "fr", "ru"])
    report = fetch(config, MirrorSource(mirror), tmp_path)
    assert report["pairs_without_data"] == ["en-ru"]
    missing = [e for e in report["skipped"] if e["pair"] == "en-ru"]
    assert {e["status"] for e in missing} == {"missing"}
    assert "not in the mirror" in missing[0]["reason"] and "en-ru.xml.gz" in missing[0]["reason"]


def test_language_codes_are_checked_against_opus(tmp_path):
    with pytest.raises(FetchError, match=r"unknown language code\(s\) for OPUS: \{'due'"):
        fetch(make_config(languages=["en", "fr", "due"]), MirrorSource(tmp_path), tmp_path)
    with pytest.raises(ConfigError, match="unknown language code 'deuu'.*closest known codes: deu \\(German\\)"):
        load_config(PrepConfig, values={"languages": ["en", "deuu"], "pivot": "en"})
    # any code of the one table names the same language: folders and OPUS codes use the canonical one
    assert load_config(PrepConfig, values={"languages": ["EN", "deu", "zho_Hans"], "pivot": "eng"}).languages == [
        "en",
        "de",
        "zh",
    ]
    with pytest.raises(ConfigError, match=r"^PrepConfig: corpora\[0\]: unknown key\(s\) \['maxpairs'\]"):
        load_config(
            PrepConfig,
            values={
                "languages": ["en", "de"],
                "pivot": "en",
                "corpora": [{"name": "A", "release": "v1", "maxpairs": 3}],
            },
        )


def test_online_source_reads_a_downloaded_moses_zip_without_network(data_dir, tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    de, en = flores_lines(data_dir, "de")[:50], flores_lines(data_dir, "en")[:50]
    with zipfile.ZipFile(downloads / "TED2020_v1_moses_de-en.txt.zip", "w") as archive:
        archive.writestr("TED2020.de-en.de", "\n".join(de) + "\n")
        archive.writestr("TED2020.de-en.en", "\n".join(en) + "\n")
        archive.writestr("README", "not a corpus file")
    config = load_config(
        PrepConfig,
        values={
            "languages": ["de", "en"],
            "pivot": "en",
            "corpora": [{"name": "TED2020", "release": "v1", "max_pairs": 40}],
        },
    )
    report = fetch(config, OnlineSource(downloads, catalog="local"), tmp_path / "out")
    assert report["fetched"][0]["pairs"] == 40
    assert read_lines(tmp_path / "out" / "de-en" / "TED2020.de") == de[:40]
    assert read_lines(tmp_path / "out" / "de-en" / "TED2020.en") == en[:40]


def test_online_dry_run_lists_real_opus_files_from_the_shipped_catalogue(tmp_path, capsys):
    config = load_config(
        PrepConfig,
        values={
            "languages": ["de", "en"],
            "pivot": "en",
            "corpora": [{"name": "Europarl", "release": "v8"}, {"name": "NoSuchCorpus", "release": "v1"}],
        },
    )
    fetch(config, OnlineSource(tmp_path, catalog="local"), tmp_path / "out", dry_run=True)
    printed = capsys.readouterr().out
    assert "https://object.pouta.csc.fi/OPUS-Europarl/v8/moses/de-en.txt.zip" in printed
    assert "NoSuchCorpus\tv1\tde-en\tde-en\tmissing" in printed


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves one payload, honouring `Range: bytes=N-` as OPUS's object store does."""

    payload = bytes(range(256)) * 4000
    ranges: list = []
    cut_at: int | None = None  # drop the connection after this many bytes of the file

    def do_GET(self):
        start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers.get("Range") else 0
        type(self).ranges.append(start)
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(self.payload) - start))
        self.end_headers()
        self.wfile.write(self.payload[start : self.cut_at])

    def log_message(self, *args):
        pass


def test_download_resumes_a_partial_file(tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), RangeHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = tmp_path / "corpus.zip"
        (tmp_path / "corpus.zip.part").write_bytes(RangeHandler.payload[:300_000])
        download(f"http://127.0.0.1:{server.server_port}/corpus.zip", target)
        assert target.read_bytes() == RangeHandler.payload
        assert RangeHandler.ranges == [300_000]
        assert not (tmp_path / "corpus.zip.part").exists()

        RangeHandler.cut_at = 500_000  # a connection that drops mid-file leaves a .part, not a corrupt file
        with pytest.raises(FetchError, match="rerun to resume"):
            download(f"http://127.0.0.1:{server.server_port}/cut.zip", tmp_path / "cut.zip")
        assert not (tmp_path / "cut.zip").exists() and (tmp_path / "cut.zip.part").stat().st_size == 500_000
        RangeHandler.cut_at = None
        download(f"http://127.0.0.1:{server.server_port}/cut.zip", tmp_path / "cut.zip")
        assert (tmp_path / "cut.zip").read_bytes() == RangeHandler.payload
        assert RangeHandler.ranges == [300_000, 0, 500_000]
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(FetchError, match="rerun to resume"):
        download(f"http://127.0.0.1:{server.server_port}/gone.zip", tmp_path / "gone.zip")


def test_cli_fetch_reports_bad_input_without_a_traceback(tmp_path, capsys):
    assert (
        run_main(
            main,
            [
                "fetch",
                "--config",
                str(tmp_path / "none.yaml"),
                "--mirror",
                str(tmp_path),
                "--out",
                str(tmp_path / "out"),
            ],
        )
        == 2
    )
    assert "none.yaml does not exist" in capsys.readouterr().err


def test_paper_config_plans_62_languages_with_the_papers_caps(capsys):
    from tests.conftest import REPO_ROOT

    config = load_config(PrepConfig, REPO_ROOT / "configs" / "prep" / "ems62.yaml")
    assert (
        len(config.languages) == 62
        and len(config.pairs) == 61
        and all("en" in pair.split("-") for pair in config.pairs)
    )
    caps = {spec.name: spec for spec in config.corpora}
    assert caps["UNPC"].cap("en-ru") == 5_000_000 and caps["UNPC"].cap("en-zh") == 2_000_000
    assert caps["OpenSubtitles"].cap("de-en") == 2_000_000 and caps["Europarl"].cap("de-en") is None
    assert caps["Tatoeba"].only_uncovered and {"zh_CN", "zh_TW"} <= set(config.opus_codes_of("zh"))
    assert set(config.clean.eval_sets) == {"tatoeba", "bucc", "mldoc", "qe", "sts", "flores", "sib200"}
    assert config.vocab.vocab_size == 60_000 + 2 + 62
    check_opus_codes(config)

    assert main(["pairs", "--config", str(REPO_ROOT / "configs" / "prep" / "ems62.yaml")]) == 0
    assert capsys.readouterr().out.split() == config.pair_names()


@pytest.mark.parametrize(
    "cap, problem",
    [
        (0, "a positive integer or absent, got 0"),
        (-5, "a positive integer or absent, got -5"),
        ("2M", "an integer or null, got '2M'"),
        (1.5, "an integer or null, got 1.5"),
    ],
)
def test_bad_caps_are_rejected_with_the_corpus_named(cap, problem):
    raw = {"languages": ["en", "de"], "pivot": "en", "corpora": [{"name": "UNPC", "release": "v1.0", "max_pairs": cap}]}
    with pytest.raises(ConfigError) as error:
        load_config(PrepConfig, values=raw)
    assert str(error.value) == f"PrepConfig: corpora[0]: max_pairs must be {problem}"
    with pytest.raises(ConfigError) as error:
        load_config(PrepConfig, values={**raw, "corpora": [{"name": "UNPC"}]})
    assert str(error.value) == (
        "PrepConfig: corpora[0]: an OPUS corpus needs a name and a release (a Hugging Face dataset: hf); "
        "missing: release"
    )
