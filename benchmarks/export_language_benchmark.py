"""What the language choice of an exported sentence-transformers model costs, on real sentences.

    python -m benchmarks.export_language_benchmark MODEL_DIR --languages de,fr,ja,zh,en [--data-dir ../shared/data]

For each language, LASER's Tatoeba sentences are encoded by `ems.load(MODEL_DIR)` with the right
language (the reference) and by the model exported with `ems.apps.export --format sentence-transformers`
without `lang=` (the by-script `auto` default) and with each wrong fixed default. Printed per row:
the cosine to the reference (mean, 5th percentile, min, share identical) and Tatoeba P@1 xx->en
(for en: en->de; eval.evaluators.retrieval.cosine_p_at_1). Its measured figures: docs/results/throughput.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

import ems
from ems.apps.export import export_sentence_transformers
from ems.languages import lang_to_tatoeba_code
from ems.text import guess_language
from eval.evaluators.retrieval import cosine_p_at_1, read_lines


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--languages", required=True, help="comma-separated model languages, e.g. de,fr,ja,zh,en")
    default_data = os.environ.get("EMS_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--data-dir", type=Path, default=Path(default_data))
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    tatoeba = args.data_dir / "tatoeba"
    out = Path(tempfile.mkdtemp()) / "st"
    export_sentence_transformers(args.model, out)
    exported = SentenceTransformer(str(out), trust_remote_code=True, device="cpu")
    reference = ems.load(args.model)
    for lang in args.languages.split(","):
        if lang == "en":  # English sentences, retrieved against their German translations
            xx = read_lines(tatoeba / "tatoeba.deu-eng.eng")
            targets = reference.encode(read_lines(tatoeba / "tatoeba.deu-eng.deu"), "de")
        else:
            code = lang_to_tatoeba_code(lang)
            xx = read_lines(tatoeba / f"tatoeba.{code}-eng.{code}")
            targets = reference.encode(read_lines(tatoeba / f"tatoeba.{code}-eng.eng"), "en")
        correct = reference.encode(xx, lang)
        rows = {"auto (no lang=)": exported.encode(xx)}
        for wrong in ["en"] + [other for other in reference.languages if other not in (lang, "en")]:
            rows[f"default {wrong}"] = exported.encode(xx, lang=wrong)
        guessed = [guess_language(sentence, reference.languages) for sentence in xx]
        counts = {guess: guessed.count(guess) for guess in sorted(set(guessed))}
        print(
            f"\n{lang} ({len(xx)} Tatoeba sentences; guessed {counts}); "
            f"P@1 with the right lang: {100 * cosine_p_at_1(correct, targets):.1f}"
        )
        for name, vectors in rows.items():
            cos = (unit(vectors) * unit(correct)).sum(1)
            print(
                f"  {name:16s} cos mean {cos.mean():.4f}  p5 {np.percentile(cos, 5):.4f}  min {cos.min():.4f}  "
                f"identical {100 * np.mean(cos > 0.99999):.0f}%  P@1 {100 * cosine_p_at_1(vectors, targets):.1f}"
            )


if __name__ == "__main__":
    main()
