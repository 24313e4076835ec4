"""Train a SentencePiece vocabulary with pad/unk and one `<2xx>` token per language.

In: a corpus root in the aligned-pair layout (see ems.corpus), raw or pretokenized
(data_prep.pretokenize). Out: a vocabulary directory (`spm.model` + `ems_tokenizer.json`) loadable
with `ems.text.Tokenizer.load`, and `vocab_report.json`. The training text goes through the
same `Preprocessing` that encoding uses. Languages are balanced by sampling
q_l ∝ n_l^α (`sampling_alpha`, XLM's α) within a cap on the number of sentences SentencePiece is given.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from data_prep.clean import text_hash
from data_prep.pretokenize import corpus_preprocessing
from ems.artifacts import staged_directory
from ems.corpus import ReadReport, list_parallel, read_parallel
from ems.text import FIRST_LANG_ID, PAD_ID, SPM_FILE, UNK_ID, Preprocessing, Tokenizer, lang_token


def corpus_languages(corpus_root: str | Path) -> list[str]:
    """Sorted language codes found in a corpus root."""
    return sorted({lang for files in list_parallel(corpus_root) for lang in (files.l1, files.l2)})


def count_sentences(corpus_root: str | Path) -> dict[str, int]:
    """Lines per language over every file of the corpus (a cheap pass that reads no text)."""
    counts: dict[str, int] = {}
    for files in list_parallel(corpus_root):
        with open(files.path_l1, "rb") as file:
            lines = sum(1 for _ in file)
        for lang in (files.l1, files.l2):
            counts[lang] = counts.get(lang, 0) + lines
    return counts


def language_quotas(counts: dict[str, int], alpha: float, budget: int) -> dict[str, int]:
    """Sentences to sample per language: shares ∝ n_l^alpha summing to min(budget, total), none above n_l.

    A language whose share exceeds what it has gives all it has; the rest of the budget is
    shared again among the others.
    """
    quotas: dict[str, int] = {}
    # A list in counts' order, not a set: the float sums and the report's key order are then the same
    # in every process (a set of strings iterates in an order that changes with PYTHONHASHSEED).
    open_langs = [lang for lang, n in counts.items() if n > 0]
    left = min(budget, sum(counts.values()))
    while open_langs:
        weights = {lang: counts[lang] ** alpha for lang in open_langs}
        total = sum(weights.values())
        share = {lang: left * w / total for lang, w in weights.items()}
        full = [lang for lang in open_langs if share[lang] >= counts[lang]]
        if not full:
            quotas.update({lang: int(round(share[lang])) for lang in open_langs})
            break
        for lang in full:
            quotas[lang] = counts[lang]
            left -= counts[lang]
        open_langs = [lang for lang in open_langs if lang not in full]
    return {lang: quotas[lang] for lang in counts if lang in quotas}


def forget_paths(spm_path: Path) -> None:
    """SentencePiece records the paths of its input file (a fresh temporary name on each run) and of its output
    (the staging directory) in the model; drop both, so that the same corpus and settings give the same
    spm.model bytes (and spm_sha1) wherever they are written, and an exported model names no local path."""
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(spm_path.read_bytes())
    del model.trainer_spec.input[:]
    model.trainer_spec.ClearField("model_prefix")
    spm_path.write_bytes(model.SerializeToString())


def train_vocab(
    corpus_root: str | Path,
    out_dir: str | Path,
    vocab_size: int = 8000,
    languages: list[str] | None = None,
    preprocessing: Preprocessing = Preprocessing(),
    character_coverage: float = 0.9995,
    max_sentences: int = 2_000_000,
    seed: int = 0,
    sampling_alpha: float = 0.5,
) -> Tokenizer:
    """Train SentencePiece (unigram) on a language-balanced sample of the corpus's unique sentences.

    `vocab_size` counts every piece, the pad, unk and language tokens included. At most
    `max_sentences` sentences are sampled (all of them when the corpus is smaller). A
    pretokenized corpus is used as it is, and its preprocessing is the one saved. Returns the
    Tokenizer and writes `vocab_report.json` (sentences per language, sampled and written).
    """
    final = Path(out_dir)
    # whole or absent: a killed run leaves no spm.model without its tokenizer.json (ems.artifacts)
    with staged_directory(final, "vocabulary", replace=True) as out_dir:
        languages = sorted(languages or corpus_languages(corpus_root))
        made_with = corpus_preprocessing(corpus_root)
        if made_with is not None:
            preprocessing = made_with
        counts = count_sentences(corpus_root)
        quotas = language_quotas(counts, sampling_alpha, max_sentences)
        rng = np.random.default_rng(seed)
        seen: set[int] = set()
        written: dict[str, int] = {}
        reports = []
        with tempfile.TemporaryDirectory() as tmp:
            text_path = Path(tmp) / "spm_input.txt"
            with text_path.open("w", encoding="utf-8") as text:
                for files in list_parallel(corpus_root):
                    report = ReadReport()
                    for s1, s2 in read_parallel(files.path_l1, files.path_l2, report):
                        for sentence, lang in ((s1, files.l1), (s2, files.l2)):
                            if quotas[lang] < counts[lang] and rng.random() * counts[lang] >= quotas[lang]:
                                continue
                            line = sentence if made_with is not None else preprocessing(sentence, lang)
                            key = text_hash(line)
                            if key in seen:
                                continue
                            seen.add(key)
                            written[lang] = written.get(lang, 0) + 1
                            text.write(line + "\n")
                    reports.append(report.to_dict())
            if not seen:
                raise ValueError(f"{corpus_root}: no sentences to train a vocabulary on")
            spm.set_random_generator_seed(seed)
            try:
                spm.SentencePieceTrainer.train(
                    input=str(text_path),
                    model_prefix=str(out_dir / Path(SPM_FILE).stem),
                    vocab_size=vocab_size,
                    model_type="unigram",
                    character_coverage=character_coverage,
                    pad_id=PAD_ID,
                    unk_id=UNK_ID,
                    bos_id=-1,
                    eos_id=-1,
                    user_defined_symbols=[lang_token(lang) for lang in languages],
                    input_sentence_size=max_sentences,
                    shuffle_input_sentence=True,
                    seed_sentencepiece_size=1_000_000,
                    num_threads=2,
                    minloglevel=2,
                )
            except RuntimeError as error:  # SentencePiece's refusal, e.g. more pieces than the corpus allows
                reason = " ".join(str(error).split())
                raise ValueError(
                    f"SentencePiece cannot train a {vocab_size}-piece vocabulary on {corpus_root} ({reason}); "
                    f"lower vocab_size or add text"
                ) from None
        forget_paths(out_dir / SPM_FILE)
        tokenizer = Tokenizer(str(out_dir / SPM_FILE), languages, preprocessing)
        tokenizer.save(out_dir)
        report = {
            "vocab_size": tokenizer.vocab_size,
            "languages": languages,
            "first_language_token_id": FIRST_LANG_ID,
            "sampling_alpha": sampling_alpha,
            "max_sentences": max_sentences,
            "sentences_per_language": counts,
            "sample_quota_per_language": quotas,
            "unique_sentences_per_language": written,
            "pretokenized_corpus": made_with is not None,
            "read": reports,
        }
        (out_dir / "vocab_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return Tokenizer.load(final)
