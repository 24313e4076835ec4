"""Build a local file:// mirror of the public data sources from the shared data copy, for the
offline tests of data_prep.manifest_fetch.

Layout, as `ems-data fetch --mirror` reads it: each public URL https://HOST/PATH at ROOT/HOST/PATH,
holding what the source serves there: single files as they are (links to the shared copy), the
MLQE-PE `<pair>-<split>.tar.gz` archives with `<pair>/<file>` members, the STS2017 zips with a
`<folder>/<file>` member per file and macOS resource forks (`__MACOSX/<folder>/._<file>`) beside
them, as zips made on a Mac carry. The derived STS2017 tables are not in the mirror.
"""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

from data_prep.manifest_fetch import Archive, Derived, read_manifest, resolve_names


def mirror_path(root: Path, url: str) -> Path:
    return root / url.split("://", 1)[1]


def write_archive(path: Path, members: dict[str, Path]) -> None:
    """A .zip or .tar.gz (by `path`'s name) holding `members` {name in the archive: file}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, source in members.items():
                archive.write(source, name)
                folder, _, file_name = name.rpartition("/")
                archive.writestr(f"__MACOSX/{folder}/._{file_name}", b"\x00\x05\x16\x07 resource fork")
        return
    with tarfile.open(path, "w:gz") as archive:
        for name, source in members.items():
            archive.add(source, name)


def build_mirror(root: Path, data_dir: Path, names: list[str]) -> str:
    """Mirror the sources of the data sets `names` (or `all`) under `root`; returns its file:// URL."""
    manifest = read_manifest()
    for dataset in resolve_names(names):
        archives: dict[Archive, dict[str, Path]] = {}
        for entry in manifest[dataset.folder]:
            origin = dataset.origin(entry.path.split("/", 1)[1])
            if isinstance(origin, Archive):
                archives.setdefault(origin, {})[f"{origin.into}/{Path(entry.path).name}"] = data_dir / entry.path
            elif not isinstance(origin, Derived):
                target = mirror_path(root, origin)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(data_dir / entry.path)
        for archive, members in archives.items():
            write_archive(mirror_path(root, archive.url), members)
    return root.as_uri()


def replace_in_mirror(root: Path, url: str, data: bytes) -> None:
    """Serve `data` at `url` in the mirror instead of the real file."""
    target = mirror_path(root, url)
    target.unlink()
    target.write_bytes(data)
