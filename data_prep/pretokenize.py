"""Apply the encoder's text preprocessing to a whole corpus once, in worker processes.

In: a corpus root in the aligned-pair layout and an `ems.text.Preprocessing` (NFKC, lowercase,
per-language pre-tokenizer: Moses, jieba for zh, MeCab for ja). Out: the same layout under
`out_root`, plus `pretokenized.json` recording the preprocessing, so that `train_vocab` and
`binarize` feed these lines to SentencePiece as they are (and check they were made with the
vocabulary's preprocessing). A file whose outputs exist is skipped: an interrupted run resumes.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path

from ems.artifacts import write_json
from ems.corpus import ParallelFiles, ReadReport, list_parallel, read_parallel, write_parallel
from ems.text import Preprocessing

MARKER_FILE = "pretokenized.json"


def corpus_preprocessing(corpus_root: str | Path) -> Preprocessing | None:
    """The preprocessing a pretokenized corpus was made with; None for raw text."""
    marker = Path(corpus_root) / MARKER_FILE
    if not marker.is_file():
        return None
    return Preprocessing(**{"simplify_chinese": False, **json.loads(marker.read_text())["preprocessing"]})


def _pretokenize_files(task: tuple[ParallelFiles, str, Preprocessing]) -> dict:
    files, out_root, preprocessing = task
    out_pair = Path(out_root) / f"{files.l1}-{files.l2}"
    entry = {"pair": f"{files.l1}-{files.l2}", "name": files.name}
    if (out_pair / f"{files.name}.{files.l1}").is_file() and (out_pair / f"{files.name}.{files.l2}").is_file():
        return {**entry, "status": "exists"}
    read = ReadReport()
    pairs = (
        (preprocessing(a, files.l1), preprocessing(b, files.l2))
        for a, b in read_parallel(files.path_l1, files.path_l2, read)
    )
    write_parallel(out_root, files.name, files.l1, files.l2, pairs)
    return {**entry, "status": "done", **{k: v for k, v in read.to_dict().items() if not k.startswith("path")}}


def pretokenize_corpus(
    corpus_root: str | Path,
    out_root: str | Path,
    preprocessing: Preprocessing = Preprocessing(),
    workers: int = 1,
    pairs: list[str] | None = None,
) -> list[dict]:
    """Preprocess every file (of the named pairs) into `out_root`; returns one report entry per file."""
    out_root = Path(out_root)
    existing = corpus_preprocessing(out_root)
    if existing is not None and existing != preprocessing:
        raise ValueError(f"{out_root} was pretokenized with {existing}, not {preprocessing}; use another directory")
    write_json(out_root / MARKER_FILE, {"preprocessing": asdict(preprocessing)})  # whole: other pair tasks read it
    tasks = [(files, str(out_root), preprocessing) for files in list_parallel(corpus_root, pairs)]
    if workers <= 1:
        return [_pretokenize_files(task) for task in tasks]
    with get_context().Pool(workers) as pool:
        return list(pool.imap(_pretokenize_files, tasks))
