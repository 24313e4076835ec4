"""Apply the encoder's text preprocessing to a whole corpus once, in worker processes.

In: a corpus root in the aligned-pair layout and an `ems.text.Preprocessing` (NFKC, lowercase,
per-language pre-tokenizer: Moses, jieba for zh, MeCab for ja). Out: the same layout under
`out_root`, plus `pretokenized.json`, the stage's marker: the preprocessing, and for every file pair
it wrote the fingerprints (ems.artifacts.file_fingerprint) of the two inputs it read and the two
outputs it wrote. `train_vocab` and `binarize` feed a marked corpus's lines to SentencePiece as they
are, after `corpus_preprocessing` has checked that every file of it is one the marker records, as
written (so a file the stage never tokenized is never taken for one it did).

The marker is written last, once every file of the run is written, and only names what this run or
an earlier one wrote: a file pair is skipped ("exists") only when the marker records it with inputs
of the same content and its outputs are still what was written (an interrupted run resumes); an
output there that the marker does not vouch for (another stage's file of the same name, say) is
written again ("redone"). Pair tasks (`pairs`) running side by side merge their records into the
marker under its lock.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from multiprocessing import get_context
from pathlib import Path

from ems.artifacts import file_fingerprint, same_file, update_json
from ems.corpus import (
    ParallelFiles,
    ReadReport,
    check_no_other_files,
    check_output_folder,
    list_parallel,
    read_parallel,
    write_parallel,
)
from ems.text import Preprocessing

MARKER_FILE = "pretokenized.json"
AGAIN = "pretokenize again into an empty folder"


def _key(files: ParallelFiles) -> str:
    """The marker's name of a file pair: PAIR/NAME."""
    return f"{files.l1}-{files.l2}/{files.name}"


def _read_marker(corpus_root: Path) -> dict | None:
    """The marker of `corpus_root` (None: there is none); ValueError naming it when it is not one."""
    marker = corpus_root / MARKER_FILE
    if not marker.is_file():
        return None
    try:
        value = json.loads(marker.read_text(encoding="utf-8"))
        settings = value["preprocessing"]
        missing = [field.name for field in fields(Preprocessing) if field.name not in settings]
        if missing:
            raise ValueError(f"no preprocessing setting {', '.join(missing)}")
        preprocessing = Preprocessing(**settings)
        files = value.get("files")
        if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
            raise ValueError("no record of the files it wrote")
    except (ValueError, TypeError, KeyError, RecursionError) as error:
        raise ValueError(f"{marker} is not a pretokenize marker ({' '.join(str(error).split())}): {AGAIN}") from None
    return {"preprocessing": preprocessing, "files": files}


def _unchanged(record: dict, paths: tuple[Path, Path], role: str) -> bool:
    """Whether both `paths` still have the contents the record's `role` ("inputs", "outputs") lists."""
    try:
        return all(same_file(fingerprint, path) for fingerprint, path in zip(record[role], paths, strict=True))
    except (OSError, KeyError, TypeError, ValueError):  # a file gone, a record of another shape
        return False


def corpus_preprocessing(corpus_root: str | Path, pairs: list[str] | None = None) -> Preprocessing | None:
    """The preprocessing a pretokenized corpus was made with; None for raw text (no marker). ValueError,
    naming the file, when a corpus file (of `pairs`, when given) is not one the marker records as
    written by pretokenize, or has changed since: the marker would say it is tokenized when it is not."""
    corpus_root = Path(corpus_root)
    marker = _read_marker(corpus_root)
    if marker is None:
        return None
    for files in list_parallel(corpus_root, pairs):
        record = marker["files"].get(_key(files))
        if record is None or not _unchanged(record, (files.path_l1, files.path_l2), "outputs"):
            what = "is not recorded" if record is None else "has changed since it was recorded"
            raise ValueError(
                f"{files.path_l1} {what} in {corpus_root / MARKER_FILE} as written by pretokenize: the folder "
                f"holds text the stage did not tokenize; {AGAIN}"
            )
    return marker["preprocessing"]


def record_pretokenized(out_root: str | Path, preprocessing: Preprocessing, records: dict[str, dict]) -> None:
    """Merge `records` ({PAIR/NAME: {"inputs": [fingerprint, fingerprint], "outputs": [...]}}) into the
    marker of `out_root`, with `preprocessing`, under the marker's lock (pair tasks run side by side)."""

    present = {_key(files) for files in list_parallel(out_root)}

    def merge(marker: dict) -> None:
        marker["preprocessing"] = asdict(preprocessing)
        # records of files no longer there (a stale marker's) are dropped; other pair tasks' are kept
        merged = {**marker.get("files", {}), **records}
        marker["files"] = {key: record for key, record in merged.items() if key in present or key in records}

    update_json(Path(out_root) / MARKER_FILE, merge)


def mark_pretokenized(corpus_root: str | Path, preprocessing: Preprocessing) -> None:
    """Record every file of `corpus_root` in its marker as text already preprocessed with `preprocessing`
    (the inputs and outputs of each: the files themselves), for a corpus that other code made that way
    (a benchmark's synthetic corpus)."""
    records = {}
    for files in list_parallel(corpus_root):
        fingerprints = [file_fingerprint(path) for path in (files.path_l1, files.path_l2)]
        records[_key(files)] = {"inputs": fingerprints, "outputs": fingerprints}
    record_pretokenized(corpus_root, preprocessing, records)


def _pretokenize_files(task: tuple[ParallelFiles, str, Preprocessing, dict | None]) -> dict:
    files, out_root, preprocessing, record = task
    out_pair = Path(out_root) / f"{files.l1}-{files.l2}"
    outputs = (out_pair / f"{files.name}.{files.l1}", out_pair / f"{files.name}.{files.l2}")
    inputs = (files.path_l1, files.path_l2)
    entry = {"pair": f"{files.l1}-{files.l2}", "name": files.name}
    if record is not None and _unchanged(record, inputs, "inputs") and _unchanged(record, outputs, "outputs"):
        return {**entry, "status": "exists", "record": record}
    # an output there that no record vouches for is not trusted by its name: written again
    status = "redone" if any(path.exists() for path in outputs) else "done"
    record = {"inputs": [file_fingerprint(path) for path in inputs]}
    read = ReadReport()
    pairs = (
        (preprocessing(a, files.l1), preprocessing(b, files.l2))
        for a, b in read_parallel(files.path_l1, files.path_l2, read)
    )
    write_parallel(out_root, files.name, files.l1, files.l2, pairs)
    record["outputs"] = [file_fingerprint(path) for path in outputs]
    counts = {k: v for k, v in read.to_dict().items() if not k.startswith("path")}
    return {**entry, "status": status, **counts, "record": record}


def pretokenize_corpus(
    corpus_root: str | Path,
    out_root: str | Path,
    preprocessing: Preprocessing = Preprocessing(),
    workers: int = 1,
    pairs: list[str] | None = None,
) -> list[dict]:
    """Preprocess every file (of the named pairs) into `out_root`; returns one report entry per file
    (status "done", "redone" or "exists"). The marker is written when every file is."""
    corpus_root, out_root = Path(corpus_root), Path(out_root)
    check_output_folder(corpus_root, out_root)
    marker = _read_marker(out_root) if (out_root / MARKER_FILE).is_file() else None
    if marker is not None and marker["preprocessing"] != preprocessing:
        raise ValueError(
            f"{out_root} was pretokenized with {marker['preprocessing']}, not {preprocessing}; use another directory"
        )
    recorded = {} if marker is None else marker["files"]
    inputs = list_parallel(corpus_root, pairs)
    check_no_other_files(out_root, inputs, corpus_root, pairs)
    tasks = [(files, str(out_root), preprocessing, recorded.get(_key(files))) for files in inputs]
    if workers <= 1:
        entries = [_pretokenize_files(task) for task in tasks]
    else:
        with get_context().Pool(workers) as pool:
            entries = list(pool.imap(_pretokenize_files, tasks))
    record_pretokenized(out_root, preprocessing, {f"{e['pair']}/{e['name']}": e.pop("record") for e in entries})
    return entries
