"""Local layouts of a Hugging Face dataset: what `datasets` needs to read one, and the checks before it does.

In: a local path (a `save_to_disk` directory, a directory of data files, a data file or a glob) and its
`:config`; out: load_dataset's builder and arguments for it (a README.md config or a sub-folder; a data
file's builder by its suffix, a compression suffix after it allowed; a CSV / TSV read as text), or an
HFImportError for a layout that names a file outside itself (a save_to_disk directory's JSON, a README's
data_files) or a JSON Lines row that is `null`, before `datasets` reads any of it.
"""

from __future__ import annotations

import glob
import json
import lzma
import os
import zlib
from pathlib import Path

from data_prep.hf.errors import HFImportError, inside
from data_prep.hf.layout import SCORE_COLUMNS
from ems.cli import one_line

# data-file suffix -> the datasets builder that reads it (a compression suffix after it is fine)
FILE_BUILDERS = {
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".jsonl": "json",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "csv",
}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".zstd")


def check_saved_files(local: Path) -> None:
    """HFImportError unless every file a save_to_disk directory's JSON names lies inside it (the splits
    of dataset_dict.json, each a sub-directory, and the `_data_files` of each state.json, which
    datasets.load_from_disk joins to the directory and memory-maps as they are) and is whole
    (check_columnar_files)."""
    dataset_dict = local / "dataset_dict.json"
    directories = [local]
    if dataset_dict.is_file():
        splits = json.loads(dataset_dict.read_text(encoding="utf-8")).get("splits", [])
        directories = [inside(local, split, dataset_dict) for split in splits]
    for directory in directories:
        state = directory / "state.json"
        if state.is_file():
            for data_file in json.loads(state.read_text(encoding="utf-8")).get("_data_files", []):
                name = data_file.get("filename") if isinstance(data_file, dict) else data_file
                check_columnar_files([inside(directory, name, state)])


def check_columnar_files(files) -> None:
    """HFImportError naming the first .arrow or .parquet file of `files` that is damaged, whatever the
    damage: every record batch is read and fully validated (offsets within the data, text UTF-8)
    before datasets reads the file, since pyarrow takes a file's offsets on trust and a byte
    overwritten among them ends in a SystemError, or a SIGBUS, deep inside it. One batch in memory
    at a time; other files are left to their readers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in map(str, files):
        kind = Path(file).suffix.lstrip(".")
        if kind not in ("arrow", "parquet"):
            continue
        try:
            if kind == "parquet":
                for batch in pq.ParquetFile(file).iter_batches():
                    batch.validate(full=True)
                continue
            with pa.memory_map(file) as source:
                try:  # datasets writes the streaming format; the file format is read too
                    batches = iter(pa.ipc.open_stream(source))
                except pa.ArrowInvalid:
                    source.seek(0)
                    reader = pa.ipc.open_file(source)
                    batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
                for batch in batches:
                    batch.validate(full=True)
        except (pa.ArrowException, OSError, ValueError, EOFError) as error:
            problem = f"cannot be read ({one_line(error)}): it is damaged, or not {kind} data"
            raise HFImportError(f"{file}: {problem}") from None


def check_data_files(local: Path, arguments: dict) -> None:
    """HFImportError unless every data file datasets would read for a local directory (the paths and
    globs of its README.md `configs:` block, resolved as datasets resolves them) lies inside it and,
    an .arrow or .parquet file, is whole (check_columnar_files)."""
    import datasets

    builder = datasets.load_dataset_builder(str(local), **arguments)
    card = local / "README.md"
    # A snapshot of the hub's cache (REPO/snapshots/REV/) holds symlinks into REPO/blobs/: they stay in REPO.
    repository = local.resolve().parent.parent
    snapshot = local.resolve().parent.name == "snapshots" and (repository / "blobs").is_dir()
    for files in (builder.config.data_files or {}).values():
        for file in files:
            where = f"{card} (data_files)" if card.is_file() else local
            inside(local, os.path.relpath(file, local), where, repository if snapshot else None)
        check_columnar_files(files)


def local_dir_arguments(local: Path, config: str | None) -> dict:
    """load_dataset's arguments for a config of a local directory: a README.md config, or a sub-folder."""
    if config is None:
        return {}
    import datasets

    try:
        names = datasets.get_dataset_config_names(str(local))
    except (TypeError, AttributeError, KeyError, IndexError) as error:  # datasets' reading of a broken card
        raise HFImportError(
            f"{local / 'README.md'}: its `configs:` block is not what datasets reads ({one_line(error)})"
        ) from None
    if config in names:
        return {"name": config}
    if (local / config).is_dir():
        return {"data_dir": config}
    raise HFImportError(
        f"{local} has no config {config!r}: its configs (README.md `configs:`) are {', '.join(names)}, "
        f"and it has no folder {config}/"
    )


def file_builder(path: str) -> tuple[str, dict]:
    """The datasets builder reading the data files `path` (a file or a glob) and its arguments."""
    files = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
    if not files:
        raise HFImportError(f"no file matches {path}")
    suffixes = set()
    for file in files:
        parts = [suffix for suffix in Path(file).suffixes if suffix not in COMPRESSIONS]
        suffixes.add(parts[-1] if parts else "")
    builders = {FILE_BUILDERS.get(suffix) for suffix in suffixes}
    if len(suffixes) != 1 or None in builders:
        raise HFImportError(
            f"{path}: expected data files of one kind ({', '.join(FILE_BUILDERS)}), got {', '.join(sorted(suffixes))}"
        )
    suffix = suffixes.pop()
    if FILE_BUILDERS[suffix] != "csv":
        return FILE_BUILDERS[suffix], {}
    return "csv", _csv_arguments(files[0], "\t" if suffix == ".tsv" else ",")


def is_json_file(name: str) -> bool:
    parts = [suffix for suffix in Path(name).suffixes if suffix not in COMPRESSIONS]
    return bool(parts) and FILE_BUILDERS.get(parts[-1]) == "json"


def check_json_rows(files: list[str]) -> None:
    """HFImportError naming the file and line of a JSON Lines row that is `null` (a row is an object
    of columns): pyarrow's JSON reader, which datasets reads these files with, kills the process
    (a segmentation fault, pyarrow 26) on a block of lines that starts with one. Read before the
    dataset, one pass over each file."""
    import datasets

    for file in files:
        opener = datasets.utils.file_utils.xopen if file.endswith(COMPRESSIONS) else open
        try:
            with opener(file, "rb") as lines:
                for number, line in enumerate(lines, 1):
                    if line.lstrip().startswith(b"null"):
                        raise HFImportError(f"{file}: line {number} is null, not a JSON object of the row's columns")
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:  # a compressed file cut short or damaged
            raise HFImportError(f"{file}: cannot be read ({one_line(error)})") from None


def _csv_arguments(first_file: str, sep: str) -> dict:
    """Every column read as text (pandas would read `007` as 7 and `NA` or `None` as missing), but a
    score column as a number; only an empty cell is missing. A TSV's quotes are text."""
    import csv

    import datasets

    opener = datasets.utils.file_utils.xopen if first_file.endswith(COMPRESSIONS) else open
    with opener(first_file, encoding="utf-8", newline="") as file:
        header = next(csv.reader(file, delimiter=sep), [])
    features = datasets.Features(
        {column: datasets.Value("float64" if column in SCORE_COLUMNS else "string") for column in header}
    )
    arguments = {"sep": sep, "features": features, "keep_default_na": False, "na_values": [""]}
    if sep == "\t":
        arguments["quoting"] = csv.QUOTE_NONE
    return arguments
