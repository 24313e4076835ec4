"""Fetch OPUS corpora into the aligned-pair layout, with `opustools` (the OPUS project's package).

In: a `PrepConfig` (languages, pairs, corpora with per-pair caps) and a source:
- `MirrorSource(root)`: a local directory in the OPUS layout, read offline:
  `ROOT/<Corpus>/<release>/xml/<a>-<b>.xml.gz` (sentence alignments) and
  `ROOT/<Corpus>/<release>/raw/<lang>.zip` (untokenized sentence files), as `opus_read -rd ROOT`.
  A document the alignment names (fromDoc, toDoc) must lie inside ROOT: an absolute name, a `..`
  or a symlink out of the mirror is a FetchError naming the alignment file and the name.
- `OnlineSource(download_dir)`: lists files through OPUS's API (or the catalogue shipped
  inside opustools, `catalog="local"`), downloads the Moses-format zip of each corpus and pair
  with resumable HTTP range requests, then reads it with `opustools.OpusRead`.
Out: `OUT/<l1>-<l2>/<Corpus>.<l1|l2>` (a `.<opus pair>` infix when OPUS codes differ from ours,
e.g. `OpenSubtitles.en-zh_TW.zh`) and `OUT/fetch_report.json`: one entry per corpus and pair
with its status, pairs written, whether the cap cut it, pairs left out for an empty side
(`empty_side`: OPUS's 1:0 links, or sentences a truncated document lacks) and the documents
the alignment names that the sentence archives lack (`documents_missing`).

Output files are written under temporary names and renamed when whole, and only once at least
one pair was read: a download or parse that yields nothing (an alignment file that is not XML,
an empty archive) is a FetchError and leaves no file behind, so the next run tries it again.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import re
import sqlite3
import sys
import urllib.error
import urllib.request
import xml.parsers.expat
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from opustools import OpusGet, OpusRead
from opustools.parse.alignment_parser import AlignmentParserError
from opustools.parse.block_parser import BlockParserError
from opustools.parse.sentence_parser import SentenceParserError

from data_prep.config import CorpusSpec, PrepConfig
from ems.artifacts import write_json
from ems.cli import UserError
from ems.corpus import CorpusError, OutsideRootError, check_member_name, resolve_inside, write_parallel

REPORT_FILE = "fetch_report.json"
# Any of these inside a sentence would split it over two lines in the Moses files.
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


class FetchError(UserError, RuntimeError):
    """A corpus could not be listed, downloaded or read; the message says which and why."""


class NothingRead(FetchError):
    """Reading a corpus-pair gave no pair with two non-empty sides."""


# What reading an OPUS file that is corrupt, truncated or not what it should be raises, inside
# opustools or below it (gzip, zipfile, expat; ValueError: bad UTF-8, CorpusError).
READ_ERRORS = (
    AlignmentParserError,
    SentenceParserError,
    BlockParserError,
    xml.parsers.expat.ExpatError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    KeyError,
    ValueError,
    IndexError,  # opustools: a link whose xtargets has no ";"
    NotImplementedError,  # zipfile: an unknown compression method
    RuntimeError,  # zipfile: an encrypted member
)
MISSING_DOCUMENTS_LISTED = 10  # names of missing documents kept in a report entry (all are counted)
# What opustools writes to stderr that is no message: terminal escapes (clear line, cursor up), its
# progress lines ("Measuring file ...", ended by a carriage return, not a newline), and what it says of a
# document an archive lacks (counted in documents_missing, and warned).
_TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_OPUSTOOLS_NOISE = re.compile(
    r"(Measuring file|Parsing file|Writing chunk) .*"
    r"|There is no item named .*"
    r"|Continuing from next sentence file pair\."
)


@contextlib.contextmanager
def _opustools_stderr(where: str) -> Iterator[None]:
    """What opustools prints to stderr inside the block (messages wrapped in blank lines, progress
    lines ended by a carriage return, terminal escapes): its messages printed afterwards as whole lines
    `note: WHERE: opustools: MESSAGE`, the rest dropped, so that no later line (an `error: ...`) starts
    mid-line."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    finally:
        for line in re.split(r"[\r\n]", _TERMINAL_ESCAPE.sub("", captured.getvalue())):
            if line.strip() and not _OPUSTOOLS_NOISE.fullmatch(line.strip()):
                print(f"note: {where}: opustools: {line.strip()}", file=sys.stderr)


@dataclass(frozen=True)
class FetchJob:
    """One corpus for one language pair, in project codes (l1 < l2) and in OPUS codes."""

    corpus: CorpusSpec
    l1: str
    l2: str
    opus_l1: str
    opus_l2: str

    @property
    def pair(self) -> str:
        return f"{self.l1}-{self.l2}"

    @property
    def opus_pair(self) -> tuple[str, str]:
        """The OPUS codes in OPUS's order (sorted), as in its file names."""
        return tuple(sorted((self.opus_l1, self.opus_l2)))

    @property
    def output_name(self) -> str:
        if (self.opus_l1, self.opus_l2) == (self.l1, self.l2):
            return self.corpus.name
        return f"{self.corpus.name}.{self.opus_l1}-{self.opus_l2}"

    def output_paths(self, out_root: Path) -> tuple[Path, Path]:
        pair_dir = out_root / self.pair
        return pair_dir / f"{self.output_name}.{self.l1}", pair_dir / f"{self.output_name}.{self.l2}"


@dataclass
class MirrorSource:
    """A local OPUS-layout directory (untokenized `raw` sentence files + `xml` alignments)."""

    root: Path
    preprocess: str = "raw"

    def _files(self, job: FetchJob) -> list[Path]:
        base = self.root / job.corpus.name / job.corpus.release
        a, b = job.opus_pair
        return [
            base / "xml" / f"{a}-{b}.xml.gz",
            base / self.preprocess / f"{a}.zip",
            base / self.preprocess / f"{b}.zip",
        ]

    def describe(self, job: FetchJob) -> str | None:
        """What would be read, or None when the mirror lacks the corpus for this pair."""
        files = self._files(job)
        if not all(path.is_file() for path in files):
            return None
        return f"{sum(path.stat().st_size for path in files) // 1024} KB in {files[0].parent.parent}"

    def missing_reason(self, job: FetchJob) -> str:
        missing = [str(path) for path in self._files(job) if not path.is_file()]
        return f"not in the mirror: {', '.join(missing)}"

    def prepare(self, job: FetchJob) -> None:
        """Nothing to download: the mirror is read in place."""

    def reader(self, job: FetchJob) -> OpusRead:
        reader = OpusRead(
            directory=job.corpus.name,
            source=job.opus_l1,
            target=job.opus_l2,
            release=job.corpus.release,
            preprocess=self.preprocess,
            root_directory=str(self.root),
            download_dir=str(self.root),
            suppress_prompts=True,
            chunk_size=100_000,
        )
        _documents_inside(reader, self.root, self._files(job)[0])
        return reader


@dataclass
class OnlineSource:
    """OPUS over the network: Moses-format zips downloaded to `download_dir`, resumably."""

    download_dir: Path
    catalog: str = "online"  # "online": OPUS's API; "local": the catalogue shipped in opustools

    def _listing(self, job: FetchJob) -> list[dict]:
        a, b = job.opus_pair
        getter = OpusGet(
            source=a,
            target=b,
            directory=job.corpus.name,
            release=job.corpus.release,
            preprocess="moses",
            download_dir=str(self.download_dir),
            local_db=self.catalog == "local",
            database=str(self.download_dir / "opusdata.db"),
            suppress_prompts=True,
        )
        try:
            if getter.local_db:
                return getter.dbo.get_corpora(getter.parameters)
            return getter.get_response(getter.url)["corpora"]
        except (urllib.error.URLError, OSError, sqlite3.Error, KeyError, ValueError) as error:
            raise FetchError(f"cannot list {job.corpus.name} {a}-{b} from OPUS ({self.catalog}): {error}") from error

    def zip_path(self, job: FetchJob) -> Path:
        """Where opustools looks for an already downloaded Moses zip."""
        a, b = job.opus_pair
        return self.download_dir / f"{job.corpus.name}_{job.corpus.release}_moses_{a}-{b}.txt.zip"

    def describe(self, job: FetchJob) -> str | None:
        if self.zip_path(job).is_file():
            return f"downloaded: {self.zip_path(job)}"
        files = [f for f in self._listing(job) if f["url"].endswith(".txt.zip")]
        if not files:
            return None
        return f"{files[0]['size']} KB, {files[0]['alignment_pairs']} pairs: {files[0]['url']}"

    def missing_reason(self, job: FetchJob) -> str:
        a, b = job.opus_pair
        return f"OPUS lists no Moses file of {job.corpus.name} {job.corpus.release} for {a}-{b}"

    def prepare(self, job: FetchJob) -> None:
        """Download the corpus's Moses zip unless a readable one is already there; a download that is not a
        zip (an error page, a truncated file) is removed, so that the next run downloads it again. The
        zip's members are checked by name before opustools reads it (check_moses_members)."""
        path = self.zip_path(job)
        if path.is_file() and zipfile.is_zipfile(path):
            check_moses_members(path, job)
            return
        path.unlink(missing_ok=True)
        files = [f for f in self._listing(job) if f["url"].endswith(".txt.zip")]
        if not files:
            raise FetchError(self.missing_reason(job))
        download(files[0]["url"], path)
        if not zipfile.is_zipfile(path):
            path.unlink()
            raise FetchError(
                f"download of {files[0]['url']} is not a zip file ({path} removed: rerun to download again)"
            )
        check_moses_members(path, job)

    def reader(self, job: FetchJob) -> OpusRead:
        return OpusRead(
            directory=job.corpus.name,
            source=job.opus_l1,
            target=job.opus_l2,
            release=job.corpus.release,
            preprocess="moses",
            write_mode="moses",
            download_dir=str(self.download_dir),
            suppress_prompts=True,
        )


def check_moses_members(path: Path, job: FetchJob) -> None:
    """FetchError unless the Moses zip's members ending in either language are exactly OPUS's two
    `<corpus>.<a>-<b>.<a|b>` files, and no member is named outside the archive. opustools joins each
    member name it picks (by its last suffix) to its own directory and reads what is there, so a
    member named `../../x.de` would make a local file the corpus."""
    a, b = job.opus_pair
    expected = {f"{job.corpus.name}.{a}-{b}.{a}", f"{job.corpus.name}.{a}-{b}.{b}"}
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as error:
        raise FetchError(f"{path} is not a readable zip file ({error}): remove it to download again") from None
    try:
        for name in names:
            check_member_name(name, path)
    except CorpusError as error:
        raise FetchError(str(error)) from None
    language_files = {name for name in names if name.rsplit(".", 1)[-1] in (a, b)}
    if language_files != expected:
        unexpected = sorted(language_files - expected) or sorted(expected - language_files)
        raise FetchError(
            f"{path} does not hold exactly {' and '.join(sorted(expected))} "
            f"({'unexpected' if language_files - expected else 'missing'}: {', '.join(unexpected)}); "
            f"refused before reading it: remove it to download again"
        )


def download(url: str, target: Path, block_bytes: int = 1 << 20) -> None:
    """Download `url` to `target`, resuming a `<target>.part` left by an interrupted run."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            resumed = have and response.status == 206  # a server that ignores Range sends it all again
            expected = response.headers.get("Content-Length")
            received = 0
            with open(part, "ab" if resumed else "wb") as out:
                while block := response.read(block_bytes):
                    out.write(block)
                    received += len(block)
            if expected is not None and received < int(expected):
                raise http.client.IncompleteRead(b"", int(expected) - received)
    except urllib.error.HTTPError as error:
        if error.code != 416:  # 416: nothing left past `have` bytes, the .part is complete
            raise FetchError(f"download of {url} failed: {error}") from error
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:  # IncompleteRead: cut short
        raise FetchError(f"download of {url} failed (rerun to resume from {part}): {error}") from error
    part.replace(target)


@lru_cache(maxsize=1)
def opus_language_codes() -> frozenset[str]:
    """Every language code in the OPUS catalogue that ships with opustools (read offline)."""
    getter = OpusGet(local_db=True, database=str(Path.home() / ".OpusTools" / "opusdata.db"))
    return frozenset(getter.dbo.run_languages_query({}))


def check_opus_codes(config: PrepConfig) -> None:
    """Raise FetchError naming every configured language whose OPUS codes OPUS does not know."""
    known = opus_language_codes()
    unknown = {lang: codes for lang in config.languages if not set(codes := config.opus_codes_of(lang)) & known}
    if unknown:
        raise FetchError(f"unknown language code(s) for OPUS: {unknown}; map them to OPUS codes under `opus_codes`")


def plan_jobs(config: PrepConfig, source, pairs: list[str] | None = None) -> tuple[list[FetchJob], list[dict]]:
    """The jobs to run and one report entry for every corpus-pair left out (missing or covered)."""
    wanted = config.pair_names() if pairs is None else pairs
    unknown = sorted(set(wanted) - set(config.pair_names()))
    if unknown:
        raise FetchError(f"pair(s) {unknown} are not in the config; its pairs: {' '.join(config.pair_names())}")
    jobs, skipped = [], []
    for pair in wanted:
        l1, l2 = pair.split("-")
        covered = False
        for spec in sorted(config.opus_corpora, key=lambda spec: spec.only_uncovered):
            for opus_l1 in config.opus_codes_of(l1):
                for opus_l2 in config.opus_codes_of(l2):
                    job = FetchJob(spec, l1, l2, opus_l1, opus_l2)
                    entry = {
                        "corpus": spec.name,
                        "release": spec.release,
                        "pair": pair,
                        "opus_pair": "-".join(job.opus_pair),
                    }
                    if spec.only_uncovered and covered:
                        skipped.append({**entry, "status": "skipped: pair covered by another corpus"})
                        continue
                    if source.describe(job) is None:
                        skipped.append({**entry, "status": "missing", "reason": source.missing_reason(job)})
                        continue
                    covered = True
                    jobs.append(job)
    return jobs, skipped


def _documents_inside(reader: OpusRead, root: Path, alignment: Path) -> None:
    """Make `reader` refuse (FetchError naming `alignment` and the name) a sentence document whose name
    in the alignment file (fromDoc, toDoc) leads outside the mirror `root`: opustools opens
    `root/<name>` when that file exists, so `/etc/x.xml.gz` or `../../x.xml.gz` (or a symlink out of
    the mirror) would make a local file the corpus. Checked as each document is opened, before it is
    read; a name inside the mirror is opened as before (that file, else the raw zip's member)."""
    handler = reader.of_handler
    open_sentence_file = handler.open_sentence_file

    def open_inside(doc_name: str, direction: str):
        try:
            resolve_inside(root, doc_name, alignment, home=f"the mirror {root}")
        except OutsideRootError as error:
            raise FetchError(str(error)) from None
        return open_sentence_file(doc_name, direction)

    handler.open_sentence_file = open_inside


def _count_missing_documents(reader: OpusRead, missing: set[str]) -> None:
    """Record in `missing` every sentence document that the alignment names and its archive lacks
    (opustools itself only prints it to stderr and goes on with the next document)."""
    handler = reader.of_handler
    open_sentence_file = handler.open_sentence_file

    def open_counted(doc_name: str, direction: str):
        try:
            return open_sentence_file(doc_name, direction)
        except KeyError:
            missing.add(doc_name)
            raise

    handler.open_sentence_file = open_counted


def _pairs(reader: OpusRead, cap: int | None, counts: dict, where: str) -> Iterator[tuple[str, str]]:
    """OpusRead's first `cap` pairs with two non-empty sides, in-sentence line breaks replaced by spaces
    (counted); a pair with an empty side is counted, not yielded. NothingRead when there is no pair.

    The cap is applied here: opustools 1.9.0 ignores `maximum` for Moses-format corpora, and counts
    the pairs with an empty side.
    """
    for src, trg in reader.yieldPairs():
        clean_src, clean_trg = src.translate(_LINE_BREAKS), trg.translate(_LINE_BREAKS)
        if not clean_src.strip() or not clean_trg.strip():
            counts["empty_side"] += 1
            continue
        counts["line_breaks_replaced"] += (clean_src != src) + (clean_trg != trg)
        counts["pairs"] += 1
        yield clean_src, clean_trg
        if counts["pairs"] == cap:
            return
    if not counts["pairs"]:
        raise NothingRead(
            f"{where}: no sentence pair read from OPUS ({counts['empty_side']} with an empty side, "
            f"{len(counts['missing'])} document(s) missing); nothing written, the next run tries again"
        )


def _is_whole(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def fetch_job(job: FetchJob, source, out_root: Path) -> dict:
    """Read one corpus-pair into `out_root` (skipped when its files exist); returns its report entry.

    FetchError when nothing could be read; no output file is then left behind.
    """
    entry = {
        "corpus": job.corpus.name,
        "release": job.corpus.release,
        "pair": job.pair,
        "opus_pair": "-".join(job.opus_pair),
    }
    path_l1, path_l2 = job.output_paths(out_root)
    if _is_whole(path_l1) and _is_whole(path_l2):
        return {**entry, "status": "exists", "path": str(path_l1.parent)}
    cap = job.corpus.cap(job.pair)
    source.prepare(job)
    counts = {"pairs": 0, "line_breaks_replaced": 0, "empty_side": 0, "missing": set()}
    where = f"{job.corpus.name} {job.corpus.release} {job.pair}"
    try:
        with _opustools_stderr(where):
            reader = source.reader(job)
            _count_missing_documents(reader, counts["missing"])
            # OpusRead yields (opus_l1 text, opus_l2 text), whatever OPUS's own file order.
            write_parallel(out_root, job.output_name, job.l1, job.l2, _pairs(reader, cap, counts, where))
    except FetchError:
        raise
    except READ_ERRORS as error:  # write_parallel removed its partial files and the emptied pair folder
        raise FetchError(f"{where}: reading from OPUS failed: {error}") from error
    missing = sorted(counts["missing"])
    return {
        **entry,
        "status": "fetched",
        "pairs": counts["pairs"],
        "cap": cap,
        "capped": cap is not None and counts["pairs"] >= cap,
        "line_breaks_replaced": counts["line_breaks_replaced"],
        "empty_side": counts["empty_side"],
        "documents_missing": len(missing),
        "missing_documents": missing[:MISSING_DOCUMENTS_LISTED],
        "path": str(path_l1.parent),
    }


def fetch(
    config: PrepConfig, source, out_root: str | Path, pairs: list[str] | None = None, dry_run: bool = False
) -> dict:
    """Fetch every planned corpus-pair into `out_root` and write `fetch_report.json`; returns the report.

    With `dry_run`, prints what would be fetched and writes nothing. A corpus-pair whose
    reading fails is reported (status "failed") and the others go on; FetchError is raised
    at the end naming the failures.
    """
    check_opus_codes(config)
    out_root = Path(out_root)
    jobs, skipped = plan_jobs(config, source, pairs)
    if dry_run:
        for job in jobs:
            cap = job.corpus.cap(job.pair)
            print(
                f"{job.corpus.name}\t{job.corpus.release}\t{job.pair}\t{'-'.join(job.opus_pair)}\t"
                f"cap {cap if cap is not None else 'all'}\t{source.describe(job)}"
            )
        for entry in skipped:
            print(f"{entry['corpus']}\t{entry['release']}\t{entry['pair']}\t{entry['opus_pair']}\t{entry['status']}")
        return {"jobs": [asdict(job) for job in jobs], "skipped": skipped}
    entries = []
    for job in jobs:
        try:
            entries.append(fetch_job(job, source, out_root))
        except FetchError as error:
            entries.append({"corpus": job.corpus.name, "pair": job.pair, "status": "failed", "reason": str(error)})
    fetched_pairs = {e["pair"] for e in entries if e["status"] in ("fetched", "exists")}
    wanted = config.pair_names() if pairs is None else pairs
    report = {
        "fetched": entries,
        "skipped": skipped,
        "pairs_without_data": [p for p in wanted if p not in fetched_pairs],
    }
    report_path = out_root / (REPORT_FILE if pairs is None else f"fetch_report.{'_'.join(pairs)}.json")
    write_json(report_path, report)
    failed = [e for e in entries if e["status"] == "failed"]
    if failed:
        raise FetchError(
            f"{len(failed)} corpus-pair(s) failed (see {report_path}): " + "; ".join(e["reason"] for e in failed)
        )
    return report
