"""Download the public evaluation and training sets this project reads, into the data layout.

    ems-data list                                   # the sets, their files, sizes, licences, sources
    ems-data fetch tatoeba flores200 --out DATA     # or `all`; then: eval.run_all --data-dir DATA
    ems-data fetch all --out DATA --mirror file:///srv/mirror   # or EMS_DATA_MIRROR=...
    python -m data_prep.manifest_fetch manifest ../shared/data           # maintainers: rewrite the manifest

In: dataset names (`list` shows them: tatoeba, flores200, sib200, mlqe, sts2017,
tatoeba_challenge, tico19). Out: DIR/<folder>/... exactly as `../shared/data` holds it (its
PROVENANCE.md names each set's repository @ commit : path): every file of the manifest
`data_prep/data_manifest.tsv` (path, size, sha256 per file) for the named sets, each checked
against its size and sha256. Each set's files come from the pinned commit of its public
repository, in the form that repository serves them: single files over
raw.githubusercontent.com, or archives (the MLQE-PE `.tar.gz` files, the STS2017 zips) whose
members are unpacked by file name; the STS2017 `STS2017.trackN.xx-yy.sent1-sent2-gold.tsv`
tables are derived (input line, tab, gold line, for each gold line).

Resumable: a file already in DIR with the manifest's size and sha256 is skipped (`--force`
fetches it again); each file is written to `<file>.partial` and renamed once checked; archives
wait in DIR/.downloads/ until unpacked, so an interrupted run picks up where it stopped. It
prints each set's licence and a summary (files fetched, skipped, bytes).

Mirror: `--mirror URL` (or EMS_DATA_MIRROR) fetches `https://HOST/PATH` from `URL/HOST/PATH`
instead, e.g. `file:///srv/mirror/raw.githubusercontent.com/facebookresearch/LASER/74bc6ae7/
data/tatoeba/v1/tatoeba.afr-eng.afr`; a plain directory path works as well as a URL.

Errors are one line `error: ...` (ems.cli.run_main): an unknown set name names the closest
known ones (exit 2); a URL that cannot be read, or a file whose checksum differs from the
manifest's, names the URL or file (exit 1; the bad file is not kept); a manifest path that leads
outside DIR (absolute, `..`, a symlink out) is refused before anything is fetched (exit 2).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from ems.cli import UserError, add_debug_option, run_main
from ems.corpus import check_member_name, check_output_not_input, resolve_inside

MANIFEST = Path(__file__).with_name("data_manifest.tsv")
MIRROR_ENV = "EMS_DATA_MIRROR"
DOWNLOADS = ".downloads"
PARTIAL = ".partial"
ALL = "all"
RAW = "https://raw.githubusercontent.com"
OPUS_MT_TESTSETS = f"{RAW}/Helsinki-NLP/OPUS-MT-testsets/ac0f19c0"
MLQE_PE = f"{RAW}/sheffieldnlp/mlqe-pe/2a670a1140416cf80507b5a829659383c878feb8"
BLOCK = 1 << 20


class FetchError(UserError):
    """A download failed or gave other bytes than the manifest's; the message names the URL or file."""

    exit_code = 1


@dataclass(frozen=True)
class ManifestEntry:
    """One file of the data layout: its path under the data root, size in bytes and sha256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Archive:
    """An archive (.zip or .tar.gz) the source serves: its members whose file name matches
    `pattern` become the set's files `<into>/<file name>` (directories inside it do not matter)."""

    url: str
    into: str
    pattern: str = "*"


@dataclass(frozen=True)
class Derived:
    """Files of the set (names matching `pattern`) computed from its other files:
    make(set directory, path in the set) -> the file's bytes."""

    pattern: str
    make: Callable[[Path, str], bytes]


@dataclass(frozen=True)
class Dataset:
    """One public set: its name on the command line, its folder in the data layout, licence and
    source (repository @ commit : path, as PROVENANCE.md), and where each of its files comes from:
    an archive, a derivation, or else `raw_base/<path in the folder>`."""

    name: str
    folder: str
    licence: str
    source: str
    raw_base: str | None = None
    archives: tuple[Archive, ...] = ()
    derived: tuple[Derived, ...] = ()

    def origin(self, relative: str) -> Archive | Derived | str:
        """Where the set's file `relative` (a path in its folder) comes from: an Archive, a Derived or a URL."""
        parent, name = str(PurePosixPath(relative).parent), PurePosixPath(relative).name
        for derived in self.derived:
            if fnmatch(relative, derived.pattern):
                return derived
        for archive in self.archives:
            if parent == archive.into and fnmatch(name, archive.pattern):
                return archive
        if self.raw_base is None:
            raise FetchError(f"{self.name}: no source for {relative}; the manifest lists a file this set does not make")
        return f"{self.raw_base}/{relative}"


def sts_table(set_dir: Path, relative: str) -> bytes:
    """`STS2017.<track>.sent1-sent2-gold.tsv`: each gold line after its input line (sent1 TAB
    sent2), tab-separated; only the lines with gold (track 6's input has 500 lines, its gold 250)."""
    track = relative.removeprefix("STS2017.").removesuffix(".sent1-sent2-gold.tsv")
    inputs = (set_dir / "STS2017.eval.v1.1" / f"STS.input.{track}.txt").read_bytes().splitlines()
    gold = (set_dir / "STS2017.gs" / f"STS.gs.{track}.txt").read_bytes().splitlines()
    return b"".join(pair + b"\t" + score + b"\n" for pair, score in zip(inputs, gold))


MLQE_PAIRS = ("en-de", "en-zh", "et-en", "ne-en", "ro-en", "si-en")

DATASETS = {
    dataset.name: dataset
    for dataset in (
        Dataset(
            "tatoeba",
            "tatoeba",
            "Tatoeba (CC-BY 2.0 FR)",
            "facebookresearch/LASER @ 74bc6ae7 : data/tatoeba/v1/",
            raw_base=f"{RAW}/facebookresearch/LASER/74bc6ae7/data/tatoeba/v1",
        ),
        Dataset(
            "flores200",
            "flores200",
            "CC-BY-SA 4.0",
            "Helsinki-NLP/OPUS-MT-testsets @ ac0f19c0 : testsets/flores200_dataset/",
            raw_base=f"{OPUS_MT_TESTSETS}/testsets/flores200_dataset",
        ),
        Dataset(
            "sib200",
            "sib200",
            "CC-BY-SA 4.0",
            "dadelani/sib-200 @ 593cea88 : data/annotated/",
            raw_base=f"{RAW}/dadelani/sib-200/593cea88519930f776c1a4a1980b6a35b39dca57/data/annotated",
        ),
        Dataset(
            "mlqe",
            "mlqe",
            "CC0 1.0",
            "sheffieldnlp/mlqe-pe @ 2a670a11 : data/direct-assessments/{test,dev}/",
            raw_base=MLQE_PE,  # LICENSE, at the repository's root
            archives=tuple(
                Archive(f"{MLQE_PE}/data/direct-assessments/{split}/{pair}-{split}.tar.gz", pair, f"{prefix}.*")
                for pair in MLQE_PAIRS
                for split, prefix in (("test", "test20"), ("dev", "dev"))
            ),
        ),
        Dataset(
            "sts2017",
            "sts2017",
            "CC-BY-SA 4.0",
            "eduardofv/sts_eval @ b4cd273e : data/sources/Sts2017.{eval.v1.1,gs}.zip",
            archives=(
                Archive(f"{RAW}/eduardofv/sts_eval/b4cd273e/data/sources/Sts2017.eval.v1.1.zip", "STS2017.eval.v1.1"),
                Archive(f"{RAW}/eduardofv/sts_eval/b4cd273e/data/sources/Sts2017.gs.zip", "STS2017.gs"),
            ),
            derived=(Derived("STS2017.track*.sent1-sent2-gold.tsv", sts_table),),
        ),
        Dataset(
            "tatoeba_challenge",
            "tatoeba_challenge",
            "Tatoeba (CC-BY 2.0 FR)",
            "Helsinki-NLP/OPUS-MT-testsets @ ac0f19c0 : datasets/helsinki_nlp/tatoeba/testsets/",
            raw_base=f"{OPUS_MT_TESTSETS}/datasets/helsinki_nlp/tatoeba/testsets",
        ),
        Dataset(
            "tico19",
            "tico19",
            "CC0 1.0",
            "Helsinki-NLP/OPUS-MT-testsets @ ac0f19c0 : datasets/tico19/testsets/",
            raw_base=f"{OPUS_MT_TESTSETS}/datasets/tico19/testsets",
        ),
    )
}


def read_manifest(path: Path = MANIFEST) -> dict[str, list[ManifestEntry]]:
    """The manifest's entries grouped by top folder ({folder: entries}); `#` lines are comments."""
    by_folder: dict[str, list[ManifestEntry]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            relative, size, sha = line.split("\t")
            by_folder.setdefault(relative.split("/", 1)[0], []).append(ManifestEntry(relative, int(size), sha))
    return by_folder


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(data_dir: Path, out: Path = MANIFEST) -> int:
    """Write the manifest of every file under the data sets' folders of `data_dir` to `out`; returns the
    file count. OutputIsInputError, before anything is read, when `out` is one of those files."""
    files = []
    for dataset in DATASETS.values():
        folder = data_dir / dataset.folder
        if not folder.is_dir():
            raise FetchError(f"{folder} is missing: the manifest is made from a complete data directory")
        files += sorted(p for p in folder.rglob("*") if p.is_file())
    check_output_not_input(("--manifest", out), [("data file", path) for path in files])  # before any is hashed
    lines = [f"{path.relative_to(data_dir).as_posix()}\t{path.stat().st_size}\t{sha256_of(path)}\n" for path in files]
    header = (
        "# path\tsize\tsha256 of every file `ems-data fetch` writes; "
        "made by `python -m data_prep.manifest_fetch manifest DATA_DIR`\n"
    )
    out.write_text(header + "".join(lines), encoding="utf-8")
    return len(lines)


def mirrored(url: str, mirror: str | None) -> str:
    """`url` (https://HOST/PATH) as found in `mirror` (URL/HOST/PATH); a mirror without a scheme is a
    local directory."""
    if not mirror:
        return url
    if "://" not in mirror:
        mirror = Path(mirror).resolve().as_uri()
    return f"{mirror.rstrip('/')}/{url.split('://', 1)[1]}"


def download(url: str, target: Path) -> None:
    """`url` -> `target`, through `<target>.partial`; FetchError naming the URL if it cannot be read."""
    partial = target.with_name(target.name + PARTIAL)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out, BLOCK)
    except (urllib.error.URLError, OSError) as error:
        partial.unlink(missing_ok=True)
        reason = getattr(error, "reason", None) or error
        raise FetchError(f"cannot download {url}: {reason}") from error
    partial.replace(target)


def is_intact(path: Path, entry: ManifestEntry) -> bool:
    return path.is_file() and path.stat().st_size == entry.size and sha256_of(path) == entry.sha256


def checked(partial: Path, entry: ManifestEntry, origin: str) -> None:
    """Rename `partial` to its file if it matches the manifest; else delete it and raise FetchError."""
    got = sha256_of(partial)
    if got != entry.sha256:
        partial.unlink()
        raise FetchError(f"checksum mismatch for {entry.path} (from {origin}): sha256 {got}, manifest {entry.sha256}")
    partial.replace(partial.with_name(partial.name.removesuffix(PARTIAL)))


def archive_members(path: Path) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """(file name, reader) of each regular member of a zip or tar.gz; CorpusError, before any member is read,
    if one is named outside the archive (ems.corpus.check_member_name)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                check_member_name(info.filename, path)
            for info in archive.infolist():
                if not info.is_dir():
                    yield info.filename, lambda info=info: archive.read(info)
        return
    with tarfile.open(path) as archive:
        members = archive.getmembers()
        for member in members:
            check_member_name(member.name, path)
        for member in members:
            if member.isfile():
                yield member.name, lambda member=member: archive.extractfile(member).read()


@dataclass
class Summary:
    """What a fetch did: files written and their bytes, files that were already there."""

    fetched: int = 0
    skipped: int = 0
    bytes: int = 0

    def add(self, entry: ManifestEntry, bar: tqdm) -> None:
        self.fetched += 1
        self.bytes += entry.size
        bar.update(entry.size)


class Fetcher:
    """Fetches data sets into `out` from their public URLs (or `mirror`), `jobs` downloads at a time."""

    def __init__(
        self, out: Path, mirror: str | None = None, force: bool = False, jobs: int = 8, manifest: Path = MANIFEST
    ) -> None:
        self.out, self.mirror, self.force, self.jobs = out, mirror, force, jobs
        self.manifest = read_manifest(manifest)
        for entries in self.manifest.values():  # each path is written under out and fetched from its URL
            for entry in entries:
                resolve_inside(out, entry.path, manifest, home=f"the data directory {out}")
        self.summary = Summary()

    def fetch(self, dataset: Dataset) -> None:
        """Every manifest file of `dataset` into out/<folder>, checked; those already intact are skipped."""
        entries = self.manifest.get(dataset.folder, [])
        todo = [e for e in entries if self.force or not is_intact(self.out / e.path, e)]
        self.summary.skipped += len(entries) - len(todo)
        print(
            f"{dataset.name}: {len(todo)} of {len(entries)} files to fetch; licence {dataset.licence}; "
            f"source {dataset.source}",
            flush=True,
        )
        by_origin: dict[Archive | Derived | str, list[ManifestEntry]] = {}
        for entry in todo:
            by_origin.setdefault(dataset.origin(entry.path.split("/", 1)[1]), []).append(entry)
        with tqdm(total=sum(e.size for e in todo), unit="B", unit_scale=True, desc=dataset.name, disable=None) as bar:
            self._raw([(url, found[0]) for url, found in by_origin.items() if isinstance(url, str)], bar)
            for archive in (o for o in by_origin if isinstance(o, Archive)):
                self._unpack(archive, dataset.folder, by_origin[archive], bar)
            for derived in (o for o in by_origin if isinstance(o, Derived)):
                for entry in by_origin[derived]:
                    partial = self.out / (entry.path + PARTIAL)
                    partial.write_bytes(derived.make(self.out / dataset.folder, entry.path.split("/", 1)[1]))
                    checked(partial, entry, "derived from the set's files")
                    self.summary.add(entry, bar)

    def _raw(self, jobs: list[tuple[str, ManifestEntry]], bar: tqdm) -> None:
        def one(job: tuple[str, ManifestEntry]) -> ManifestEntry:
            url, entry = job
            source = mirrored(url, self.mirror)
            download(source, self.out / (entry.path + PARTIAL))
            checked(self.out / (entry.path + PARTIAL), entry, source)
            return entry

        with ThreadPoolExecutor(self.jobs) as pool:
            for entry in pool.map(one, jobs):
                self.summary.add(entry, bar)

    def _unpack(self, archive: Archive, folder: str, entries: list[ManifestEntry], bar: tqdm) -> None:
        """Download `archive` (kept in out/.downloads until unpacked) and write the `entries` it holds."""
        source = mirrored(archive.url, self.mirror)
        local = self.out / DOWNLOADS / folder / PurePosixPath(archive.url).name
        if self.force or not local.is_file():
            download(source, local)
        wanted = {PurePosixPath(e.path).name: e for e in entries}
        try:
            for name, read in archive_members(local):
                entry = wanted.get(PurePosixPath(name).name)
                if entry is None or "__MACOSX" in name:
                    continue
                partial = self.out / (entry.path + PARTIAL)
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_bytes(read())
                checked(partial, entry, f"{source} member {name}")
                self.summary.add(entry, bar)
                del wanted[PurePosixPath(name).name]
        except (tarfile.TarError, zipfile.BadZipFile, EOFError) as error:
            local.unlink()
            raise FetchError(f"cannot unpack {source}: {error}") from error
        except FetchError:
            local.unlink()
            raise
        if wanted:
            raise FetchError(f"{source} lacks {', '.join(sorted(wanted))}")
        local.unlink()
        for empty in (local.parent, local.parent.parent):
            if not any(empty.iterdir()):
                empty.rmdir()


def resolve_names(names: list[str]) -> list[Dataset]:
    """The data sets named (`all`: every one), in order, each once; UserError naming the closest known names."""
    chosen: list[Dataset] = []
    for name in names:
        if name == ALL:
            chosen.extend(DATASETS.values())
        elif name in DATASETS:
            chosen.append(DATASETS[name])
        else:
            close = difflib.get_close_matches(name, list(DATASETS), n=3)
            hint = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(DATASETS)}, {ALL}"
            raise UserError(f"unknown data set {name!r}; {hint}")
    return list(dict.fromkeys(chosen))


def run_fetch(args: argparse.Namespace) -> int:
    fetcher = Fetcher(args.out, args.mirror or os.environ.get(MIRROR_ENV), args.force, args.jobs)
    for dataset in resolve_names(args.names):
        fetcher.fetch(dataset)
    done = fetcher.summary
    print(
        f"fetched {done.fetched} files ({done.bytes / 1e6:.1f} MB), skipped {done.skipped} already present; "
        f"data in {args.out}",
        flush=True,
    )
    return 0


def run_list(_args: argparse.Namespace) -> int:
    manifest = read_manifest()
    for dataset in DATASETS.values():
        entries = manifest.get(dataset.folder, [])
        print(
            f"{dataset.name}\t{dataset.folder}/\t{len(entries)} files\t{sum(e.size for e in entries) / 1e6:.1f} MB\t"
            f"{dataset.licence}\t{dataset.source}"
        )
    return 0


def run_manifest(args: argparse.Namespace) -> int:
    count = write_manifest(args.data_dir, args.manifest)
    print(f"wrote {count} entries to {args.manifest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`fetch NAMES... --out DIR [--mirror URL] [--force] [--jobs N]`, `list` or `manifest DATA_DIR`; exit status."""
    parser = argparse.ArgumentParser(prog="ems-data", description=__doc__.split("\n\n")[0])
    add_debug_option(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_help = (
        f"download data sets of {MANIFEST.name} (evaluation and training sets) into the data layout, each file "
        "checked by size and sha256 (a data-prep plan's corpora: ems-prep fetch)"
    )
    fetch = commands.add_parser("fetch", help=fetch_help, description=fetch_help)
    fetch.add_argument("names", nargs="+", metavar="NAME", help=f"data sets ({', '.join(DATASETS)}) or {ALL}")
    fetch.add_argument("--out", type=Path, required=True, help="data root to fill (the --data-dir of eval.run_all)")
    fetch.add_argument("--mirror", help=f"fetch https://HOST/PATH from MIRROR/HOST/PATH (also: {MIRROR_ENV})")
    fetch.add_argument("--force", action="store_true", help="fetch files again even if present and intact")
    fetch.add_argument("--jobs", type=int, default=8, help="downloads at a time (default 8)")
    fetch.set_defaults(run=run_fetch)
    commands.add_parser("list", help="the data sets, their size, licence and source").set_defaults(run=run_list)
    manifest = commands.add_parser("manifest", help="maintainers: rewrite the manifest from a complete data directory")
    manifest.add_argument("data_dir", type=Path)
    manifest.add_argument(
        "--manifest", type=Path, default=MANIFEST, help=f"where to write it (default {MANIFEST.name})"
    )
    manifest.set_defaults(run=run_manifest)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(run_main(main))
