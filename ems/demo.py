"""The whole system, offline, on the embedded default corpus:

    gettext catalogs in django/wagtail/sphinx -> aligned corpus -> SentencePiece vocab
    -> shards -> EMS training through DeepSpeed -> Tatoeba + held-out retrieval,
    for the untrained and the trained model side by side.

    python -m ems.demo [--out runs/demo] [--data-dir ../shared/data] [--set max_steps=300 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ems.configs import load_config, parse_overrides
from ems.train import REPO_ROOT, TrainConfig

DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"


@dataclass
class DemoDataConfig:
    packages: list[str] = field(default_factory=lambda: ["django", "wagtail", "sphinx"])
    min_pairs: int = 500
    heldout_size: int = 200
    vocab_size: int = 16000
    flores_split: str | None = "flores200/devtest"  # relative to --data-dir; added to training when present
    tatoeba_max_sentences: int | None = 300


def comparison_table(before: dict, after: dict, task: str) -> str:
    """Markdown: mean P@1 per language, untrained vs trained, for one task."""
    if "error" in before or "error" in after:
        return f"### {task}\n\nNot run: {before.get('error') or after.get('error')}\n"
    lines = [f"### {task}: mean P@1 (%) of xx→en and en→xx", "", "| lang | n | untrained | trained |", "|:--|--:|--:|--:|"]
    for lang, row in after["languages"].items():
        lines.append(f"| {lang} | {row['n']} | {before['languages'][lang]['mean']:.1f} | {row['mean']:.1f} |")
    b, a = before["average"], after["average"]
    lines.append(f"| **average** ({a['n_languages']} languages) | {a['n']} | **{b['mean']:.1f}** | **{a['mean']:.1f}** |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/demo"))
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("EMS_DATA_DIR", DEFAULT_DATA_DIR)),
                        help="directory with tatoeba/ (default: $EMS_DATA_DIR or ../shared/data)")
    parser.add_argument("--data-config", default=str(REPO_ROOT / "configs/data/demo.yaml"))
    parser.add_argument("--train-config", default=str(REPO_ROOT / "configs/train/demo.yaml"))
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override training config keys")
    args = parser.parse_args(argv)

    from data_prep.binarize import binarize
    from data_prep.gettext_corpus import build_gettext_corpus
    from data_prep.flores import build_flores_corpus
    from data_prep.vocab import corpus_languages, train_vocab
    from ems.encoder import load
    from ems.train import train
    from eval.run_all import run_all

    out = args.out
    data_cfg = load_config(DemoDataConfig, args.data_config)
    timings: dict[str, float] = {}

    def stage(name: str):
        timings[name] = time.time()
        print(f"\n== {name} ==", flush=True)

    stage("corpus")
    report = build_gettext_corpus(out / "corpus", packages=data_cfg.packages, min_pairs=data_cfg.min_pairs,
                                  heldout_size=data_cfg.heldout_size, overwrite=True)
    print(f"{report['totals']}")
    flores_dir = args.data_dir / data_cfg.flores_split if data_cfg.flores_split else None
    if flores_dir is not None and flores_dir.is_dir():
        flores = build_flores_corpus(flores_dir, out / "corpus" / "train", corpus_languages(out / "corpus" / "train"))
        print(f"added FLORES-200 ({flores_dir}) pairs for {len(flores['pairs'])} languages to training; "
              f"not in FLORES: {' '.join(flores['not_in_flores'])}. This model has seen FLORES/SIB-200 sentences.")
    else:
        print(f"no FLORES-200 split at {flores_dir}: training on the gettext pairs only")
    stage("vocab")
    tokenizer = train_vocab(out / "corpus" / "train", out / "vocab", vocab_size=data_cfg.vocab_size)
    print(f"{tokenizer.vocab_size} pieces, {len(tokenizer.languages)} languages")
    stage("binarize")
    index = binarize(out / "corpus" / "train", out / "vocab", out / "shards" / "train")
    binarize(out / "corpus" / "heldout", out / "vocab", out / "shards" / "heldout")
    print(f"{index['n_pairs']} training pairs, {index['n_tokens']} tokens")

    stage("train")
    overrides = {"data": str(out / "shards" / "train"), "vocab": str(out / "vocab"), "out": str(out / "run"),
                 "valid_data": str(out / "shards" / "heldout")}
    train_cfg = load_config(TrainConfig, args.train_config, {**overrides, **parse_overrides(args.set)})
    shutil.rmtree(out / "run", ignore_errors=True)  # the demo always trains from scratch
    result = train(train_cfg)

    stage("eval")
    evaluations = {}
    for name, model_dir in (("untrained", out / "run" / "model-init"), ("trained", Path(result["model_dir"]))):
        print(f"\n-- {name} model ({model_dir}) --")
        evaluations[name] = run_all(load(model_dir), args.data_dir, heldout_dir=out / "corpus" / "heldout",
                                    out_dir=out / "eval" / name, max_sentences=data_cfg.tatoeba_max_sentences,
                                    progress=False)
    timings["end"] = time.time()

    names = list(timings)
    durations = {names[i]: round(timings[names[i + 1]] - timings[names[i]], 1) for i in range(len(names) - 1)}
    tables = "\n".join(comparison_table(evaluations["untrained"][task], evaluations["trained"][task], task)
                       for task in evaluations["trained"])
    valid = [h for h in result["history"] if "valid_loss" in h]
    summary = (
        f"# EMS demo\n\ntrained {result['steps']} steps; held-out loss {valid[0]['valid_loss']:.3f} -> "
        f"{valid[-1]['valid_loss']:.3f} (xtr {valid[0]['valid_xtr']:.3f} -> {valid[-1]['valid_xtr']:.3f}, "
        f"contrastive {valid[0]['valid_contrastive']:.3f} -> {valid[-1]['valid_contrastive']:.3f})\n\n"
        f"stage seconds: {json.dumps(durations)}\n\n{tables}"
    )
    (out / "demo_report.md").write_text(summary)
    print("\n" + summary)
    print(f"""where everything is:
  corpus      {out / 'corpus'}  (corpus_report.json)
  vocabulary  {out / 'vocab'}
  shards      {out / 'shards'}
  checkpoints {out / 'run' / 'checkpoints'}   TensorBoard: tensorboard --logdir {out / 'run' / 'tb'}
  model       {out / 'run' / 'model'}   (ems.load(...).encode(sentences, lang=...))
  evaluation  {out / 'eval'}/{{untrained,trained}}/results.json, report.md
  this report {out / 'demo_report.md'}""")


if __name__ == "__main__":
    main()
