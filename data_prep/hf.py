"""Parallel text from Hugging Face `datasets`: a dataset on the Hub (streamed) or one on disk, written
in the aligned plain-text layout of ems.corpus.

    python -m data_prep import --format hf sentence-transformers/parallel-sentences-talks:en-de --out raw
    python -m data_prep import --format hf data/nllb.parquet --out raw --languages de en --min-score 1.06 \\
        --max-pairs 100000

In: a CorpusSpec whose `hf` is the source (data_prep.config; the command line's flags fill the same
fields), optionally a set of language pairs to keep. The source is a Hub id with an optional
`:config` (`owner/name:en-de`), or a local path: a `save_to_disk` directory, a directory of data
files (its README.md `configs:` block gives its configs, as on the Hub; else `:NAME` may name a
sub-folder, e.g. `parallel-sentences/:en-de`), or parquet / arrow / jsonl / json / csv / tsv files
(a file or a glob). Out: `OUT/<l1>-<l2>/<name>.<l1|l2>` per language pair (name: `name`, else the
dataset's with `.<config>`, and `.<split>` for a split other than train) and its entry in
`OUT/hf_import_report.json`: per language pair the rows read, the pairs kept and the skips by reason.

Column layouts, recognised in this order (`columns` names them instead: roles translation, source,
target, source_language, target_language, score):
- `translation`: a dict {language: text} per row (OPUS-100, opus_books, WMT): its two languages, the
  two that `languages` picks, or, when the dicts hold more (or JSON rows each their own), each
  row's two non-null ones (a row with more or fewer: `not_two_texts`).
- `english` / `non_english` (sentence-transformers' parallel-sentences-*): English and the other
  language of the config name (`en-de`) or of `languages`.
- `src` / `tgt`, `src` / `trg`, `source` / `target`, `sentence1` / `sentence2`: the languages
  `languages` gives, else each row's language columns (`src_lang` / `tgt_lang`, `lang1` / `lang2`,
  ...), else the config name's pair in its order (`de-en`: source de, target en).
- a score column (`laser_score`, `score`): `min_score` keeps the pairs scoring at least that.
Language codes go through ems.languages (`deu_Latn`, `zho_Hans`, `pt-br` and pair names such as
`en-de` or `eng_Latn-deu_Latn` all work). A named column the dataset lacks, no recognisable
layout, a language code that names no language, a text column that holds no text or `min_score`
without a score column is one HFImportError naming what the dataset has, raised on its first rows.

Skips: a pair whose side is null (`null`), not a str (`not_text`), empty once stripped (`empty`) or
holds a line break (`line_break`), whose score is missing or below min_score (`no_score`,
`below_min_score`), or that the cap leaves out (`over_cap`) is counted under its language pair;
a row whose language tag is no language (`unknown_language`, by tag), whose two sides are one
language (`same_language`), whose pair was not asked for (`pair_not_selected`) or whose translation
dict holds not exactly two texts (`not_two_texts`) is counted for the source. A source with no rows,
or none kept, is an HFImportError and writes nothing.

Caps (`max_pairs`, `max_pairs_for`; per language pair): `sample: reservoir` keeps a uniform sample
of exactly min(cap, eligible pairs) in one pass (Algorithm R, seeded by `seed` and the pair; the
sample, at most cap pairs, is held in memory), written in the source's order; `sample: first` keeps
the first cap eligible pairs, and stops reading a source of one known language pair once it is full.

Reading: hub ids stream by default (`streaming=False` prepares the dataset in the datasets cache
first), and so do local files; a `save_to_disk` directory is memory-mapped. Both give the same
corpus. A rerun whose entry in the report has the same settings and whose files are all there
reads nothing (no download); files are written under `.partial` names and renamed when the whole
source is read, so a killed import leaves no file that looks finished.

Offline: with HF_HUB_OFFLINE=1 (or HF_DATASETS_OFFLINE=1), or when the Hub does not answer within
HUB_PROBE_SECONDS, a hub id is read from the local datasets cache (a dataset loaded once with
`datasets.load_dataset`); one that is not there is one line naming the cache and the local-path
alternative, without the minutes of retries the libraries would spend.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import itertools
import json
import lzma
import math
import os
import random
import re
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from data_prep.config import CorpusSpec, PrepConfig, split_hf_source
from ems.artifacts import update_json
from ems.cli import UserError, one_line
from ems.corpus import OutsideRootError, ParallelWriter, has_line_break, pair_dir_name, resolve_inside
from ems.languages import ENGLISH, UnknownLanguageError, canonical_language, split_language_pair

REPORT_FILE = "hf_import_report.json"
BATCH_ROWS = 1000
HUB_PROBE_SECONDS = 5.0
TEXT_COLUMNS = (
    ("translation",),
    ("english", "non_english"),
    ("src", "tgt"),
    ("src", "trg"),
    ("source", "target"),
    ("sentence1", "sentence2"),
)
LANGUAGE_COLUMNS = (
    ("src_lang", "tgt_lang"),
    ("src_lang", "trg_lang"),
    ("source_lang", "target_lang"),
    ("src_language", "tgt_language"),
    ("source_language", "target_language"),
    ("lang1", "lang2"),
)
SCORE_COLUMNS = ("laser_score", "score")
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
HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")
NOT_TWO_TEXTS = "<not two texts>"  # the tags of a translation dict without exactly two texts (no language)


class HFImportError(UserError):
    """A Hugging Face dataset that cannot be read or imported as asked; the message says which and why."""


@dataclass(frozen=True)
class Layout:
    """Where a dataset's rows keep the two texts, their languages and the score."""

    name: str  # e.g. "english/non_english", for the report
    columns: dict[str, str]  # role -> column
    languages: tuple[str, str] | None = None  # canonical codes of the two sides, when fixed
    translation_keys: tuple[str, str] | None = None  # the translation dict's keys of the two sides, when fixed

    @property
    def pair(self) -> str | None:
        return None if self.languages is None else pair_dir_name(*self.languages)

    def rows(self, batch: dict) -> Iterator[tuple]:
        """(tag a, tag b, text a, text b, score) of each row of a batch (a dict of column lists)."""
        score_column = self.columns.get("score")
        if "translation" in self.columns:
            dicts = batch[self.columns["translation"]]
            scores = batch[score_column] if score_column else itertools.repeat(None)
            if self.translation_keys is not None:
                key_a, key_b = self.translation_keys
                tag_a, tag_b = self.languages
                for texts, score in zip(dicts, scores):
                    texts = texts if isinstance(texts, dict) else {}  # a JSON row's null, list or text: no texts
                    yield tag_a, tag_b, texts.get(key_a), texts.get(key_b), score
                return
            for texts, score in zip(dicts, scores):  # each row's own keys (JSON dicts, or more than two)
                texts = texts if isinstance(texts, dict) else {}
                present = sorted(key for key, text in texts.items() if text is not None)
                if self.languages is not None:  # the two asked for; a row lacking one counts as `null`
                    by_language = {_language_or_none(key): key for key in present}
                    key_a, key_b = (by_language.get(code) for code in self.languages)
                    yield (
                        *self.languages,
                        texts.get(key_a) if key_a else None,
                        texts.get(key_b) if key_b else None,
                        score,
                    )
                elif len(present) == 2:
                    yield present[0], present[1], texts[present[0]], texts[present[1]], score
                else:
                    yield NOT_TWO_TEXTS, NOT_TWO_TEXTS, None, None, score
            return
        n = len(batch[self.columns["source"]])
        if self.languages is not None:
            tags_a, tags_b = itertools.repeat(self.languages[0], n), itertools.repeat(self.languages[1], n)
        else:  # a missing or non-text tag (a mixed JSON column) counts under its repr, e.g. "None"
            tags_a, tags_b = (
                [tag if isinstance(tag, str) else repr(tag) for tag in batch[self.columns[role]]]
                for role in ("source_language", "target_language")
            )
        scores = batch[score_column] if score_column else itertools.repeat(None, n)
        yield from zip(tags_a, tags_b, batch[self.columns["source"]], batch[self.columns["target"]], scores)


def import_hf(
    spec: CorpusSpec,
    out_root: str | Path,
    pairs: Iterable[str] | None = None,
    streaming: bool = True,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> dict:
    """Import the Hugging Face dataset `spec.hf` into `out_root` (see the module docstring), keeping
    only the language pairs `pairs` ("de-en") when given; returns its report entry, also written to
    `out_root/hf_import_report.json` under the corpus name (with `status` "imported", or "exists"
    when a previous import with the same settings is complete and nothing was read)."""
    started = time.time()
    out_root = Path(out_root)
    path, config = split_hf_source(spec.hf)
    selected = None if pairs is None else sorted(set(pairs))
    name = spec.name or default_name(path, config, spec.split)
    key = name if selected is None else f"{name} ({' '.join(selected)})"
    settings = {
        "source": spec.hf,
        "split": spec.split,
        "columns": spec.columns,
        "languages": spec.languages,
        "min_score": spec.min_score,
        "max_pairs": spec.max_pairs,
        "max_pairs_for": spec.max_pairs_for,
        "sample": spec.sample,
        "seed": spec.seed,
        "pairs": selected,
    }
    reports = read_reports(out_root)
    previous = reports.get(key)
    for file in _files(previous or {}):  # looked at, and unlinked when stale: never outside out_root
        _inside(out_root, file, out_root / REPORT_FILE)
    if (
        previous is not None
        and previous["settings"] == settings
        and all((out_root / file).is_file() for file in _files(previous))
    ):
        return {**previous, "status": "exists"}
    with _hub_access(path) as offline_reason:
        dataset, split, total = open_dataset(path, config, spec.split, streaming, cache_dir, offline_reason)
        where = f"{spec.hf} ({split})"
        entry = _import_rows(dataset, spec, config, name, selected, out_root, total, progress, where)
    entry = {"source": spec.hf, "split": split, "name": name, "settings": settings, **entry}
    entry["seconds"] = round(time.time() - started, 1)
    written = set(_files(entry))
    for stale in set(_files(previous or {})) - written:  # an earlier import of this name with other settings
        (out_root / stale).unlink(missing_ok=True)

    def add(reports: dict) -> None:  # to the report as it is now: pair tasks running beside add theirs
        reports[key] = entry

    update_json(out_root / REPORT_FILE, add)
    return {**entry, "status": "imported"}


def default_name(path: str, config: str | None, split: str | None) -> str:
    """The corpus files' name: the dataset's (a Hub id's last part, a local path's name without its
    data-file suffixes), then `.<config>` and `.<split>` unless train."""
    base = Path(path.rstrip("/")).name or "dataset"
    if "*" not in base:
        for suffix in reversed(Path(base).suffixes):
            if suffix in FILE_BUILDERS or suffix in COMPRESSIONS:
                base = base[: -len(suffix)]
    else:
        base = Path(path).parent.name or "dataset"
    return ".".join(part for part in (base, config, None if split in (None, "train") else split) if part)


def read_reports(out_root: Path) -> dict:
    path = Path(out_root) / REPORT_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _files(entry: dict) -> list[str]:
    return [file for pair in entry.get("pairs", {}).values() for file in pair.get("files", [])]


def _inside(root: Path, name, where: Path, links_within: Path | None = None) -> Path:
    """ems.corpus.resolve_inside as an HFImportError: `name`, read from `where`, stays inside `root`."""
    try:
        return resolve_inside(root, name, where, links_within=links_within)
    except OutsideRootError as error:
        raise HFImportError(str(error)) from None


def _check_saved_files(local: Path) -> None:
    """HFImportError unless every file a save_to_disk directory's JSON names lies inside it: the splits
    of dataset_dict.json (each a sub-directory) and the `_data_files` of each state.json, which
    datasets.load_from_disk joins to the directory and memory-maps as they are."""
    dataset_dict = local / "dataset_dict.json"
    directories = [local]
    if dataset_dict.is_file():
        splits = json.loads(dataset_dict.read_text(encoding="utf-8")).get("splits", [])
        directories = [_inside(local, split, dataset_dict) for split in splits]
    for directory in directories:
        state = directory / "state.json"
        if state.is_file():
            for data_file in json.loads(state.read_text(encoding="utf-8")).get("_data_files", []):
                _inside(directory, data_file.get("filename") if isinstance(data_file, dict) else data_file, state)


def _check_data_files(local: Path, arguments: dict) -> None:
    """HFImportError unless every data file datasets would read for a local directory (the paths and
    globs of its README.md `configs:` block, resolved as datasets resolves them) lies inside it."""
    import datasets

    builder = datasets.load_dataset_builder(str(local), **arguments)
    card = local / "README.md"
    # A snapshot of the hub's cache (REPO/snapshots/REV/) holds symlinks into REPO/blobs/: they stay in REPO.
    repository = local.resolve().parent.parent
    snapshot = local.resolve().parent.name == "snapshots" and (repository / "blobs").is_dir()
    for files in (builder.config.data_files or {}).values():
        for file in files:
            where = f"{card} (data_files)" if card.is_file() else local
            _inside(local, os.path.relpath(file, local), where, repository if snapshot else None)


# --- opening a dataset ---------------------------------------------------------------------------


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
            _check_saved_files(local)
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
            arguments = _local_dir_arguments(local, config)
            _check_data_files(local, {**arguments, "cache_dir": cache_dir})
            _check_json_rows(sorted(str(file) for file in local.rglob("*.json*") if _json_file(str(file))))
            dataset, name = load(str(local), **arguments)
        elif local.is_file() or glob.has_magic(path):
            if config is not None:
                raise HFImportError(f"{path}: data files have no configs; got :{config}")
            builder, arguments = _file_builder(path)
            if builder == "json":
                _check_json_rows(sorted(glob.glob(path)) if glob.has_magic(path) else [path])
            dataset, name = load(builder, data_files=path, **arguments)
        elif HUB_ID.fullmatch(path) and not path.startswith((".", "/")):
            dataset, name = _load_hub(load, path, config, cache_dir, offline_reason)
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


def _local_dir_arguments(local: Path, config: str | None) -> dict:
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


def _file_builder(path: str) -> tuple[str, dict]:
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


def _json_file(name: str) -> bool:
    parts = [suffix for suffix in Path(name).suffixes if suffix not in COMPRESSIONS]
    return bool(parts) and FILE_BUILDERS.get(parts[-1]) == "json"


def _check_json_rows(files: list[str]) -> None:
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


# --- the Hub, online or not -----------------------------------------------------------------------


@contextlib.contextmanager
def _hub_access(path: str) -> Iterator[str | None]:
    """For a Hub id: datasets' offline mode for the block when it is set, or when the Hub does not
    answer (then switched on here, and off again after); yields why the Hub is not used (None: it is)."""
    import datasets
    from huggingface_hub import constants

    if Path(path).exists() or not HUB_ID.fullmatch(path):
        yield None
        return
    if datasets.config.HF_HUB_OFFLINE:
        yield "offline mode is on (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE)"
        return
    reason = _hub_unreachable()
    if reason is None:
        yield None
        return
    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield reason
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def _hub_unreachable() -> str | None:
    """Why the Hub's endpoint does not answer within HUB_PROBE_SECONDS (None: it answers)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session, httpx

    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_SECONDS)
    except httpx.TransportError as error:  # no route, no DNS, refused, timed out, a proxy error
        return f"{constants.ENDPOINT} does not answer: {one_line(error)}"
    return None


def _load_hub(load, repo: str, config: str | None, cache_dir: str | None, offline_reason: str | None):
    import datasets

    try:
        return load(repo, name=config)
    except (ConnectionError, FileNotFoundError, ValueError) as error:
        if offline_reason is None:
            raise
        source = f"{repo}{f':{config}' if config else ''}"
        cache = cache_dir or datasets.config.HF_DATASETS_CACHE
        raise HFImportError(
            f"{source}: no such local path, the Hugging Face Hub is not used ({offline_reason}) and the "
            f"datasets cache {cache} does "
            f"not hold it ({one_line(error)}); where there is a network, save it "
            f"(datasets.load_dataset(...).save_to_disk(DIR), or `hf download {repo} --repo-type dataset "
            f"--local-dir DIR`) and import the local path: ems-prep import --format hf DIR"
            f"{f':{config}' if config else ''}"
        ) from None


# --- rows to pairs -----------------------------------------------------------------------------------


def _batches(dataset, where: str) -> Iterator[dict]:
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


@functools.cache
def _language_or_none(tag) -> str | None:
    try:
        return canonical_language(tag) if isinstance(tag, str) else None
    except UnknownLanguageError:
        return None


def _text(value) -> tuple[str | None, str | None]:
    """(the skip reason, None) or (None, the stripped text)."""
    if value is None:
        return "null", None
    if not isinstance(value, str):
        return "not_text", None
    text = value.strip()
    if not text:
        return "empty", None
    if has_line_break(text):
        return "line_break", None
    return None, text


class _Pair:
    """One language pair's counts and its output: a writer, or the reservoir of a sample. Its texts
    come in the pair folder's order (l1 < l2)."""

    def __init__(self, l1: str, l2: str, cap: int | None, sample: str, seed: int) -> None:
        self.langs = l1, l2
        self.read, self.eligible = 0, 0
        self.skipped: Counter = Counter()
        self.cap, self.sample = cap, sample
        self.writer: ParallelWriter | None = None
        self.reservoir: list[tuple[int, str, str]] = []
        self.rng = random.Random(f"{seed}:{l1}-{l2}")

    @property
    def full(self) -> bool:
        return self.cap is not None and self.sample == "first" and self.eligible >= self.cap

    def keep(self, row: int, text_1: str, text_2: str, open_writer) -> None:
        """A pair that passed every check: written, sampled (Algorithm R) or over the cap."""
        index = self.eligible
        self.eligible += 1
        if self.cap is not None and self.sample == "reservoir":
            if index < self.cap:
                self.reservoir.append((row, text_1, text_2))
            elif (slot := self.rng.randrange(index + 1)) < self.cap:
                self.reservoir[slot] = (row, text_1, text_2)
            return
        if self.cap is not None and index >= self.cap:
            return
        if self.writer is None:
            self.writer = open_writer(*self.langs)
        self.writer.write(text_1, text_2)

    def write_sample(self, open_writer) -> None:
        if self.reservoir:
            self.writer = open_writer(*self.langs)
            for _, text_1, text_2 in sorted(self.reservoir):  # the source's order
                self.writer.write(text_1, text_2)


def _import_rows(
    dataset,
    spec: CorpusSpec,
    config: str | None,
    name: str,
    selected: list[str] | None,
    out_root: Path,
    total: int | None,
    progress: bool,
    where: str,
) -> dict:
    """Read every row (or until a `first` sample is full), write the kept pairs; the report entry's counts."""
    from tqdm import tqdm

    batches = _batches(dataset, where)
    first = next(batches, None)
    if first is None or not any(len(column) for column in first.values()):
        raise HFImportError(f"{where} has no rows: nothing to import")
    layout = detect_layout(first, getattr(dataset, "features", None), spec, config, where)
    wanted = None if selected is None else set(selected)
    pairs: dict[str, _Pair] = {}
    source_skips: defaultdict[str, Counter] = defaultdict(Counter)

    def route(tag_a, tag_b) -> tuple[_Pair | None, bool, str | None, str | None]:
        """Where the rows of two language tags go: (their pair, whether its sides come swapped) or
        (None, _, the source-level skip reason, what to count it under)."""
        if tag_a == NOT_TWO_TEXTS:
            return None, False, "not_two_texts", layout.columns["translation"]
        lang_a, lang_b = _language_or_none(tag_a), _language_or_none(tag_b)
        if lang_a is None or lang_b is None:
            return None, False, "unknown_language", str(tag_a if lang_a is None else tag_b)
        if lang_a == lang_b:
            return None, False, "same_language", lang_a
        l1, l2 = sorted((lang_a, lang_b))
        name_ = pair_dir_name(l1, l2)
        if wanted is not None and name_ not in wanted:
            return None, False, "pair_not_selected", name_
        if name_ not in pairs:
            pairs[name_] = _Pair(l1, l2, spec.cap(name_), spec.sample, spec.seed)
        return pairs[name_], lang_a != l1, None, None

    routes: dict[tuple, tuple] = {}
    rows, stopped_early = 0, False
    with (
        contextlib.ExitStack() as writers,
        tqdm(total=total, desc=f"hf {name}", unit=" rows", disable=not progress, mininterval=1.0) as bar,
    ):

        def open_writer(l1: str, l2: str) -> ParallelWriter:
            return writers.enter_context(ParallelWriter(out_root, name, l1, l2))

        for batch in itertools.chain([first], batches):
            for tag_a, tag_b, text_a, text_b, score in layout.rows(batch):
                row = rows
                rows += 1
                pair, swap, reason, counted = routes.get((tag_a, tag_b)) or routes.setdefault(
                    (tag_a, tag_b), route(tag_a, tag_b)
                )
                if pair is None:
                    source_skips[reason][counted] += 1
                    continue
                pair.read += 1
                reason, text_a = _text(text_a)
                if reason is None:
                    reason, text_b = _text(text_b)
                if reason is None and spec.min_score is not None:
                    if not isinstance(score, (int, float)) or math.isnan(score):
                        reason = "no_score"
                    elif score < spec.min_score:
                        reason = "below_min_score"
                if reason is not None:
                    pair.skipped[reason] += 1
                    continue
                pair.keep(row, *((text_b, text_a) if swap else (text_a, text_b)), open_writer)
            bar.update(len(next(iter(batch.values()))))
            bar.set_postfix(kept=sum(min(p.eligible, p.cap or p.eligible) for p in pairs.values()), refresh=False)
            if layout.pair is not None and layout.pair in pairs and pairs[layout.pair].full:
                stopped_early = True
                break
        for pair in pairs.values():
            pair.write_sample(open_writer)
        if not any(pair.writer is not None for pair in pairs.values()):
            counts = [f"{reason} {sum(tags.values())}" for reason, tags in sorted(source_skips.items())]
            counts += [f"{name_}: {dict(pair.skipped)}" for name_, pair in sorted(pairs.items())]
            raise HFImportError(f"{where}: no pair kept of the {rows} rows read ({'; '.join(counts)}); nothing written")
    return {
        "layout": layout.name,
        "columns": layout.columns,
        "rows_read": rows,
        "stopped_early": stopped_early,
        "skipped": {reason: dict(sorted(tags.items())) for reason, tags in sorted(source_skips.items())},
        "pairs": {name_: _pair_report(pair) for name_, pair in sorted(pairs.items())},
    }


def _pair_report(pair: _Pair) -> dict:
    written = 0 if pair.writer is None else pair.writer.count
    skipped = dict(pair.skipped)
    if pair.eligible > written:
        skipped["over_cap"] = pair.eligible - written
    return {
        "read": pair.read,
        "kept": written,
        "skipped": dict(sorted(skipped.items())),
        "cap": pair.cap,
        "sample": pair.sample if pair.cap is not None else None,
        "files": [] if pair.writer is None else [f"{path.parent.name}/{path.name}" for path in pair.writer.paths],
    }


# --- column layouts ---------------------------------------------------------------------------------


def detect_layout(first: dict, features, spec: CorpusSpec, config: str | None, where: str) -> Layout:
    """The layout of a dataset whose first batch is `first` (see the module docstring); HFImportError
    naming the columns found when there is none, or a named column is missing or holds no text."""
    found = list(first)
    listing = f"its columns: {', '.join(found)}"
    columns = dict(spec.columns)
    missing = [f"{role}={column}" for role, column in columns.items() if column not in found]
    if missing:
        raise HFImportError(f"{where}: no column {', '.join(missing)}; {listing}")
    if "translation" in columns and ({"source", "target"} & columns.keys()):
        raise HFImportError(f"{where}: give the translation column or the source and target columns, not both")
    if ("source" in columns) != ("target" in columns):
        raise HFImportError(f"{where}: give both the source and the target column (columns source=A target=B)")
    layout_name = "columns given"
    if not ({"translation", "source"} & columns.keys()):
        for names in TEXT_COLUMNS:
            if all(column in found for column in names):
                roles = ("translation",) if len(names) == 1 else ("source", "target")
                columns.update(zip(roles, names))
                layout_name = "/".join(names)
                break
        else:
            raise HFImportError(
                f"{where}: no column layout recognised; {listing}. Expected translation, english/non_english, "
                "src/tgt (or trg), source/target or sentence1/sentence2; name yours with --columns source=A target=B "
                "(or translation=C), or columns: in the config"
            )
    if "score" not in columns:
        score = next((column for column in SCORE_COLUMNS if column in found), None)
        if score is not None:
            columns["score"] = score
    if spec.min_score is not None and "score" not in columns:
        raise HFImportError(f"{where}: min_score needs a score column ({' or '.join(SCORE_COLUMNS)}); {listing}")
    _check_types(features, columns, where)
    if "translation" in columns:
        return _translation_layout(first, features, columns, spec, layout_name, where)
    languages = spec.languages
    language_columns = [columns.get("source_language"), columns.get("target_language")]
    if any(language_columns) and not all(language_columns):
        raise HFImportError(f"{where}: give both language columns (source_language=A target_language=B)")
    if languages is None and not any(language_columns):
        present = next((names for names in LANGUAGE_COLUMNS if all(c in found for c in names)), None)
        if present is not None:
            columns["source_language"], columns["target_language"] = present
            language_columns = list(present)
    if languages is None and not any(language_columns):
        languages = _config_languages(config, layout_name, columns, where, listing)
    elif languages is not None:
        columns.pop("source_language", None)
        columns.pop("target_language", None)
    if languages is not None and layout_name == "english/non_english" and ENGLISH not in languages:
        raise HFImportError(f"{where}: english/non_english columns, but the languages {list(languages)} lack English")
    if languages is not None and layout_name == "english/non_english" and languages[0] != ENGLISH:
        languages = (languages[1], languages[0])
    return Layout(layout_name, columns, None if languages is None else tuple(languages))


def _config_languages(config: str | None, layout_name: str, columns: dict, where: str, listing: str) -> tuple:
    pair = split_language_pair(config) if config else None
    if pair is None or pair[0] == pair[1]:
        raise HFImportError(
            f"{where}: cannot tell the languages of the columns {columns['source']} and {columns['target']}: "
            f"no --languages (languages: in the config), no language columns "
            f"({', '.join('/'.join(names) for names in LANGUAGE_COLUMNS)}; {listing}) and "
            + (f"no language pair in the config name {config!r}" if config else "no config name")
            + " (such as en-de); give them as --languages SOURCE TARGET"
        )
    return pair


def _check_types(features, columns: dict, where: str) -> None:
    """HFImportError for a text column that holds no text or a score column that holds no numbers,
    where the dataset declares its features (a column of mixed JSON values has its rows checked)."""
    import datasets

    if not features:
        return
    for role, column in columns.items():
        feature = features.get(column)
        dtype = getattr(feature, "dtype", None)
        if isinstance(feature, datasets.Json):  # values of mixed types (JSON): each row is checked
            continue
        if role in ("source", "target", "source_language", "target_language"):
            if dtype not in ("string", "large_string"):
                raise HFImportError(f"{where}: the {role} column {column!r} holds {feature}, not text")
        elif role == "score" and not (dtype and re.fullmatch(r"u?int\d+|float\d+|double", dtype)):
            raise HFImportError(f"{where}: the score column {column!r} holds {feature}, not numbers")
        elif role == "translation" and not isinstance(feature, (dict, datasets.Translation)):
            raise HFImportError(f"{where}: the translation column {column!r} holds {feature}, not texts by language")


def _translation_layout(first: dict, features, columns: dict, spec: CorpusSpec, layout_name: str, where: str) -> Layout:
    """Fixed keys where the dataset declares two (a Translation feature, a struct), else each row's
    own: JSON dicts (datasets reads them as a Json feature, keys per row) or more than two languages."""
    import datasets

    column = columns["translation"]
    sample = next((value for value in first[column] if value is not None), None)
    if not isinstance(sample, dict):
        raise HFImportError(f"{where}: the translation column {column!r} holds {sample!r}, not texts by language")
    feature = features.get(column) if features else None
    keys = feature.languages if isinstance(feature, datasets.Translation) else feature
    keys = list(keys) if isinstance(keys, (list, dict)) else None
    if keys is None or (spec.languages is None and len(keys) > 2):
        return Layout(layout_name, columns, None if spec.languages is None else tuple(spec.languages))
    named = {key: _language_or_none(key) for key in keys}
    unknown = [key for key, code in named.items() if code is None]
    if unknown:
        raise HFImportError(
            f"{where}: the translation column's key(s) {unknown} name no language (its keys: {', '.join(keys)})"
        )
    wanted = spec.languages or [named[key] for key in keys]
    chosen = [next((key for key in keys if named[key] == code), None) for code in wanted]
    if None in chosen or len(chosen) != 2:
        raise HFImportError(
            f"{where}: the translation column has the languages {', '.join(keys)}, not {' and '.join(wanted)}"
        )
    if len(set(wanted)) != 2:
        raise HFImportError(f"{where}: the translation column's keys {keys} name one language twice")
    return Layout(layout_name, columns, tuple(wanted), tuple(chosen))


# --- the fetch stage ----------------------------------------------------------------------------------


def fetch_hf(
    config: PrepConfig, out_root: str | Path, pairs: list[str] | None = None, dry_run: bool = False, **options
) -> list[dict]:
    """Import every `hf:` corpus of `config` that can give one of `pairs` (default: the config's) into
    `out_root`, keeping only those pairs; returns one entry per corpus (status imported, exists,
    failed, or with `dry_run` planned, printing each). A corpus whose import fails is reported and the
    others go on; HFImportError at the end names the failures. `options`: import_hf's."""
    wanted = config.pair_names() if pairs is None else list(pairs)
    entries = []
    for spec in config.hf_corpora:
        known = spec.hf_pair()
        if known is not None and known not in wanted:
            continue
        if dry_run:
            cap = spec.max_pairs_for.get(known, spec.max_pairs) if known else spec.max_pairs
            print(f"hf\t{spec.hf}\t{known or 'pairs from its rows'}\tcap {cap if cap is not None else 'all'}")
            entries.append({"source": spec.hf, "status": "planned", "pairs": {known: {}} if known else {}})
            continue
        try:
            entries.append(import_hf(spec, out_root, None if known else wanted, **options))
        except HFImportError as error:
            entries.append({"source": spec.hf, "status": "failed", "reason": str(error), "pairs": {}})
    failed = [entry for entry in entries if entry["status"] == "failed"]
    if failed:
        raise HFImportError(
            f"{len(failed)} Hugging Face corpus import(s) failed: " + "; ".join(entry["reason"] for entry in failed)
        )
    return entries
