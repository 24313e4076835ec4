"""Hugging Face datasets in the layouts users download, built from the real pairs of the shared data,
for the offline tests of data_prep.hf, its benchmark and the distillation example of docs/data.md.

- `tatoeba_challenge_pairs(data_dir, code)`: the (English, other) pairs of one Tatoeba Challenge
  folder (`tatoeba_challenge/<a>-<b>/`, ISO 639-3 code such as `deu`), line by line.
- `write_parallel_sentences(root, pairs)`: sentence-transformers' `parallel-sentences-*` layout,
  `root/en-<xx>/train-0000k-of-0000n.parquet` with columns `english` and `non_english`, and a
  README.md whose `configs:` block names each `en-<xx>` (as the Hub repositories have it), so that
  `datasets.load_dataset(root, "en-de")` reads it as it reads the Hub's.
- `pairs_config(root, data_dir, n, caps)`: a data-prep config whose hf: corpora are such a dataset of
  the first `n` Tatoeba Challenge pairs of de-en and fr-en (slurm/prep.sh's pair tasks, in tests).
"""

from __future__ import annotations

import math
from pathlib import Path

TATOEBA_CHALLENGE_RELEASE = "tatoeba-test-v2021-08-07"


def tatoeba_challenge_pairs(data_dir: Path, code: str, n: int | None = None) -> list[tuple[str, str]]:
    """The first `n` (all: None) (English, other) line pairs of the Tatoeba Challenge folder of `code`."""
    root = Path(data_dir) / "tatoeba_challenge"
    folder = root / (f"{code}-eng" if (root / f"{code}-eng").is_dir() else f"eng-{code}")

    def lines(side: str) -> list[str]:
        text = (folder / f"{TATOEBA_CHALLENGE_RELEASE}.{side}").read_text(encoding="utf-8")
        return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")

    return list(zip(lines("eng"), lines(code)))[:n]


def write_parallel_sentences(root: Path, pairs: dict[str, list[tuple[str, str]]], shards: int = 2) -> Path:
    """`pairs`: {xx: [(English, other), ...]} -> the parallel-sentences layout under `root` (see the module
    docstring), each config's pairs split over `shards` parquet files in order. Returns `root`."""
    from datasets import Dataset

    root = Path(root)
    card = ["---", "configs:"]
    for lang, lang_pairs in pairs.items():
        folder = root / f"en-{lang}"
        folder.mkdir(parents=True)
        step = math.ceil(len(lang_pairs) / shards)
        for shard in range(shards):
            part = lang_pairs[shard * step : (shard + 1) * step]
            Dataset.from_dict({"english": [e for e, _ in part], "non_english": [o for _, o in part]}).to_parquet(
                folder / f"train-{shard:05d}-of-{shards:05d}.parquet"
            )
        card += [f"- config_name: en-{lang}", "  data_files:", "  - split: train", f"    path: en-{lang}/train-*"]
    card += ["---", "", "English and its translations, from the Tatoeba Challenge release (CC-BY 2.0 FR).", ""]
    (root / "README.md").write_text("\n".join(card))
    return root


def pairs_config(root: Path, data_dir: Path, n: int, caps: dict[str, str], extra: str = "") -> Path:
    """`root/data.yaml`: languages en, de, fr (pivot en), one hf: corpus per pair from a parallel-sentences
    dataset of the first `n` Tatoeba Challenge pairs written under `root`; `caps`: {xx: the corpus's
    further YAML settings (e.g. "max_pairs: 100")}; `extra`: YAML lines after the corpora."""
    dataset = write_parallel_sentences(
        Path(root) / "parallel-sentences",
        {lang: tatoeba_challenge_pairs(data_dir, code, n) for lang, code in (("de", "deu"), ("fr", "fra"))},
    )
    config = Path(root) / "data.yaml"
    config.write_text(
        "languages: [en, de, fr]\npivot: en\ncorpora:\n"
        + "".join(f"  - {{hf: '{dataset}:en-{lang}', {settings}}}\n" for lang, settings in caps.items())
        + extra
    )
    return config
