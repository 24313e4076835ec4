"""A Hugging Face source opened as one split, and read in batches.

In: a source path (a local path or a Hub id) and its `:config`, the split asked for (None: train, or the
only one), whether to stream; out: the split as a datasets Dataset or IterableDataset, its name and its
row count when known, then its rows in batches of BATCH_ROWS (dicts of column lists). Hub ids stream by
default (`streaming=False` prepares the dataset in the datasets cache first), and so do local files; a
`save_to_disk` directory is memory-mapped. Both give the same rows. A source that cannot be found,
opened or read is an HFImportError naming what there is.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path

from data_prep.hf.errors import HFImportError
from data_prep.hf.hub import HUB_ID, load_hub
from data_prep.hf.local import (
    check_columnar_files,
    check_data_files,
    check_json_rows,
    check_saved_files,
    file_builder,
    is_json_file,
    local_dir_arguments,
)
from ems.cli import one_line

BATCH_ROWS = 1000


def open_dataset(
    path: str,
    config: str | None,
    split: str | None,
    streaming: bool,
    cache_dir: str | Path | None = None,
    offline_reason: str | None = None,
):
    """(the split as a datasets Dataset or IterableDataset, its name, its row count or None) of the
    source `path` with config `config`; `split` None: train, else the only split. HFImportError for
    a source that cannot be found or read, naming what there is."""
    import datasets

    local = Path(path)
    cache_dir = None if cache_dir is None else str(cache_dir)

    def load(*args, **kwargs):
        kwargs.update(cache_dir=cache_dir)
        splits = datasets.load_dataset(*args, **kwargs, streaming=True)  # lazy: the split names only
        name = _pick_split(list(splits), split, f"{path}{f':{config}' if config else ''}")
        return splits[name] if streaming else datasets.load_dataset(*args, **kwargs, split=name), name

    try:
        if local.is_dir() and any((local / f).is_file() for f in ("dataset_dict.json", "state.json")):
            if config is not None:
                raise HFImportError(f"{path} is a save_to_disk directory, which has no configs; got :{config}")
            check_saved_files(local)
            loaded = datasets.load_from_disk(str(local))
            if isinstance(loaded, datasets.DatasetDict):
                name = _pick_split(list(loaded), split, path)
                loaded = loaded[name]
            elif split not in (None, "train"):
                raise HFImportError(f"{path} holds one dataset saved without splits, not a split {split!r}")
            else:
                name = "train"
            return (loaded.to_iterable_dataset() if streaming else loaded), name, len(loaded)
        if local.is_dir():
            arguments = local_dir_arguments(local, config)
            check_data_files(local, {**arguments, "cache_dir": cache_dir})
            check_json_rows(sorted(str(file) for file in local.rglob("*.json*") if is_json_file(str(file))))
            dataset, name = load(str(local), **arguments)
        elif local.is_file() or glob.has_magic(path):
            if config is not None:
                raise HFImportError(f"{path}: data files have no configs; got :{config}")
            builder, arguments = file_builder(path)
            files = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
            if builder == "json":
                check_json_rows(files)
            check_columnar_files(files)
            dataset, name = load(builder, data_files=path, **arguments)
        elif HUB_ID.fullmatch(path) and not path.startswith((".", "/")):
            dataset, name = load_hub(load, path, config, cache_dir, offline_reason)
        else:
            raise HFImportError(
                f"{path} is neither a local path (there is none) nor a Hugging Face Hub id (owner/name[:config])"
            )
    except HFImportError:
        raise
    except StopIteration:  # datasets' JSON reader, of a file with no row
        raise HFImportError(f"{path}{f':{config}' if config else ''}: no rows to import") from None
    except (ValueError, OSError, datasets.exceptions.DatasetsError) as error:
        raise HFImportError(f"{path}{f':{config}' if config else ''}: {one_line(error)}") from error
    total = len(dataset) if isinstance(dataset, datasets.Dataset) else _split_rows(dataset, name)
    return dataset, name, total


def _pick_split(names: list[str], split: str | None, where: str) -> str:
    if split is not None:
        if split not in names:
            raise HFImportError(f"{where} has no split {split!r}; its splits: {', '.join(names)}")
        return split
    if "train" in names or len(names) == 1:
        return "train" if "train" in names else names[0]
    raise HFImportError(f"{where} has the splits {', '.join(names)}: choose one (--split, or split: in the config)")


def _split_rows(dataset, split: str) -> int | None:
    splits = dataset.info.splits
    return splits[split].num_examples if splits and split in splits and splits[split].num_examples else None


def read_batches(dataset, where: str) -> Iterator[dict]:
    """The dataset's rows in batches of BATCH_ROWS (dicts of column lists); a read error is an HFImportError."""
    import datasets
    import pyarrow

    iterator = iter(dataset.iter(batch_size=BATCH_ROWS))
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except (ValueError, OSError, pyarrow.ArrowException, datasets.exceptions.DatasetsError) as error:
            raise HFImportError(f"{where}: reading it failed: {one_line(error)}") from error
        yield batch
