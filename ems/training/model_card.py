"""Model cards: the README.md with Hugging Face YAML front matter that every exported model
directory gets (the trainer's `model/` and each `python -m ems.apps.export` format).

    facts = model_facts(MODEL_DIR)            # what the directory and its run directory record
    write_model_card(OUT, facts, "sentence-transformers", default_language=None)

A model directory trained by ems.training.train sits in its run directory (`RUN/model`), which holds
`train_config.yaml` (the shard directory it trained on, whose `index.json` counts the pairs per
language pair), `metrics.jsonl` (the steps) and, after `python -m eval.run_all --model RUN/model`,
`RUN/model/eval/report.md`. What cannot be found is said to be unknown in the card.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ems.configs import read_yaml
from ems.encoder import CONFIG_FILE, read_config
from ems.losses import OBJECTIVES
from ems.model_config import EMSConfig
from ems.run_metadata import REPO_ROOT, RUN_METADATA_FILE
from ems.shards import INDEX_FILE, language_pair_counts, read_index
from ems.text import Tokenizer

CARD_FILE = "README.md"
TRAIN_CONFIG_FILE = "train_config.yaml"
METRICS_FILE = "metrics.jsonl"
CLEAN_REPORT = Path("clean") / "clean_report.json"  # beside the corpus's train/ folder (data_prep, ems.apps.demo)
EVAL_DIR = "eval"
FORMATS = ("ems", "sentence-transformers", "hf")
PAPER = "Mao, Chu, Kurohashi: Efficient and Effective Massively Multilingual Sentence Representation Learning"


@dataclass
class TrainingData:
    """The shards a model trained on (their index.json) and, where found, the clean stage's report."""

    shards: str
    n_pairs: int
    n_tokens: int
    pairs: dict[str, int]  # "de-en" -> pairs
    corpora: list[str]
    dropped: dict[str, int] = field(default_factory=dict)  # clean stage: reason -> pairs dropped, all pairs together
    read: int | None = None  # clean stage: pairs read


@dataclass
class ModelFacts:
    """What a model card says about a model."""

    languages: list[str]
    config: EMSConfig
    steps: int | None = None
    training_data: TrainingData | None = None
    evaluation: str | None = None  # the latest evaluation report, markdown
    license: str | None = None
    run: dict | None = None  # ems.run_metadata of the training run


def resolve_recorded_path(path: str) -> Path:
    """A path recorded in a config or report: absolute, relative to the working directory, or
    relative to the repository root (where the project's commands run)."""
    candidate = Path(path)
    return candidate if candidate.is_absolute() or candidate.exists() else REPO_ROOT / candidate


def training_data(shards_dir: Path) -> TrainingData | None:
    """The summary of the shards in `shards_dir` (None without their index.json), with the clean
    report of the corpus they were binarized from when it lies where data_prep puts it."""
    index_path = shards_dir / INDEX_FILE
    if not index_path.is_file():
        return None
    index = read_index(shards_dir)
    data = TrainingData(
        shards=str(shards_dir),
        n_pairs=index["n_pairs"],
        n_tokens=index["n_tokens"],
        pairs={f"{l1}-{l2}": n for (l1, l2), n in language_pair_counts(index).items()},
        corpora=sorted({entry["name"] for entry in index["files"]}),
    )
    first_file = index["files"][0]["read"].get("path_l1") if index["files"] else None
    if first_file:
        # <corpus>/<train>/<l1-l2>/<name>.<l1>: the clean report is <corpus>/clean/clean_report.json
        clean_report = resolve_recorded_path(first_file).parents[2] / CLEAN_REPORT
        if clean_report.is_file():
            report = json.loads(clean_report.read_text())
            dropped = Counter()
            for pair in report["pairs"]:
                for entry in pair["files"]:
                    dropped.update(entry["dropped"])
            data.dropped = dict(dropped)
            data.read = sum(entry["read"] for pair in report["pairs"] for entry in pair["files"])
    return data


def steps_trained(run_dir: Path) -> int | None:
    """The last step logged in the run's metrics.jsonl (None without one)."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return None
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]
    return max(steps, default=None)


def evaluation_report(model_dir: Path, run_dir: Path | None) -> str | None:
    """The markdown of MODEL/eval/report.md (eval.run_all's default output), else RUN/eval/report.md,
    else the report rendered from a results.json there; None if there is none."""
    for directory in filter(None, (model_dir / EVAL_DIR, run_dir and run_dir / EVAL_DIR)):
        if (directory / "report.md").is_file():
            return (directory / "report.md").read_text().strip()
        if (directory / "results.json").is_file():
            from eval.report import report_markdown
            from eval.results import read_results

            return report_markdown(read_results(directory)).strip()
    return None


def model_facts(
    model_dir: str | Path, run_dir: str | Path | None = None, steps: int | None = None, license_id: str | None = None
) -> ModelFacts:
    """The facts about the EMS model in `model_dir` (an ems.encoder.export_encoder directory): its
    config and languages, and from `run_dir` (default: the parent directory when it holds a
    train_config.yaml) the training data, the steps (unless `steps` is given) and the evaluation;
    `license_id` is the license for the front matter (an SPDX id, e.g. cc-by-4.0), None if unknown."""
    model_dir = Path(model_dir)
    if run_dir is None and (model_dir.parent / TRAIN_CONFIG_FILE).is_file():
        run_dir = model_dir.parent
    run_dir = Path(run_dir) if run_dir is not None else None
    facts = ModelFacts(
        languages=Tokenizer.load(model_dir).languages,
        config=read_config(model_dir / CONFIG_FILE),
        license=license_id,
    )
    metadata_files = [directory / RUN_METADATA_FILE for directory in (model_dir, run_dir) if directory is not None]
    facts.run = next((json.loads(path.read_text()) for path in metadata_files if path.is_file()), None)
    if run_dir is not None:
        data = read_yaml(run_dir / TRAIN_CONFIG_FILE).get("data")
        facts.training_data = training_data(resolve_recorded_path(data)) if data else None
        facts.steps = steps if steps is not None else steps_trained(run_dir)
    else:
        facts.steps = steps
    facts.evaluation = evaluation_report(model_dir, run_dir)
    return facts


def _front_matter(facts: ModelFacts, export_format: str) -> str:
    tags = ["ems", "sentence-embeddings", "multilingual", "feature-extraction"]
    meta = {
        "library_name": {"ems": "ems", "sentence-transformers": "sentence-transformers", "hf": "transformers"}[
            export_format
        ],
        "language": facts.languages,
    }
    if export_format == "sentence-transformers":
        meta["pipeline_tag"] = "sentence-similarity"
        tags = ["sentence-transformers", "sentence-similarity", *tags]
    else:
        meta["pipeline_tag"] = "feature-extraction"
    meta["tags"] = tags
    if facts.license:
        meta["license"] = facts.license
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def _language_text(facts: ModelFacts, export_format: str, default_language: str | None) -> str:
    languages = ", ".join(facts.languages)
    text = (
        f"{len(facts.languages)} languages: {languages}. The text of each goes through its own preprocessing "
        "(NFKC, lowercase, Moses tokenization; jieba and traditional-to-simplified for zh, MeCab for ja) "
        "before SentencePiece, so `encode` takes the sentences' language."
    )
    if export_format == "ems":
        return text
    if default_language is not None:
        return text + f" Without one, the exported model treats text as `{default_language}` (its default)."
    return text + (
        " Without one, the exported model picks the preprocessing from each sentence's script (kana: ja, "
        "Han: zh, anything else: language-neutral Moses), which differs from the right language's "
        "in Moses's apostrophe and abbreviation rules only: give the language when you know it."
    )


def _training_text(facts: ModelFacts) -> list[str]:
    data = facts.training_data
    steps = f"{facts.steps} steps" if facts.steps is not None else "an unrecorded number of steps"
    if data is None:
        return [f"Trained for {steps}; the training data is not recorded with this model."]
    lines = [
        f"Trained for {steps} on {data.n_pairs:,} sentence pairs ({data.n_tokens:,} tokens) from "
        f"{', '.join(data.corpora)} (shards `{data.shards}`).",
        "",
        "| language pair | pairs |",
        "| :-- | --: |",
    ]
    lines += [f"| {pair} | {count:,} |" for pair, count in sorted(data.pairs.items())]
    if data.read is not None:
        dropped = ", ".join(f"{reason} {count:,}" for reason, count in sorted(data.dropped.items())) or "none"
        lines += [
            "",
            f"The clean stage read {data.read:,} pairs and dropped {sum(data.dropped.values()):,} ({dropped}); "
            "`in_eval_set` are pairs sharing a sentence with an evaluation set. Held-out pairs were then set aside.",
        ]
    return lines


def _config_lines(config: EMSConfig) -> list[str]:
    # Every objective of ems.losses.OBJECTIVES by its name there, with its weight and, where a term has
    # one, the setting that shapes it.
    xtr_softmax = "the batch's tokens" if config.xtr_vocabulary == "batch" else "the vocabulary"
    settings = {"xtr": f"softmax over {xtr_softmax}", "contrastive": f"temperature {config.contrastive_temperature:g}"}
    objectives = [
        f"{name} × {config.weight(name):g}" + (f" ({settings[name]})" if name in settings else "")
        for name in OBJECTIVES
    ]
    return [
        "| d_model | layers | heads | d_ffn | vocabulary | max_len | output dim |",
        "| --: | --: | --: | --: | --: | --: | --: |",
        f"| {config.d_model} | {config.n_layers} | {config.n_heads} | {config.d_ffn} | {config.vocab_size} | "
        f"{config.max_len} | {config.d_sentence} |",
        "",
        f"Objectives: {', '.join(objectives)}. Sentences longer than {config.max_len} tokens are cut to "
        f"their first {config.max_len}.",
    ]


def _usage_lines(export_format: str, lang: str) -> list[str]:
    ems_code = [
        "```python",
        "import ems",
        "",
        'model = ems.load("MODEL_DIR")',
        f'vectors = model.encode(["..."], lang="{lang}")   # float32 numpy (n, d)',
        "```",
    ]
    st_code = [
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        'model = SentenceTransformer("MODEL_DIR", trust_remote_code=True)',
        f'vectors = model.encode(["..."], lang="{lang}")   # lang= is optional, see Languages',
        "```",
    ]
    hf_code = [
        "```python",
        "from transformers import AutoModel",
        "",
        'model = AutoModel.from_pretrained("MODEL_DIR", trust_remote_code=True)',
        f'vectors = model.encode(["..."], lang="{lang}")   # or model(input_ids).pooler_output',
        "```",
    ]
    needs = (
        "The shipped code (`ems_core.py`) needs torch, safetensors, sentencepiece, sacremoses, jieba, fugashi "
        "with unidic-lite, and opencc; not the `ems` package."
    )
    if export_format == "sentence-transformers":
        return (
            st_code + ["", needs, "This directory is also an EMS model directory: `ems.load` reads it.", ""] + ems_code
        )
    if export_format == "hf":
        return hf_code + [
            "",
            needs,
            "`input_ids` are SentencePiece ids of the preprocessed text (`model.tokenize`, "
            "or `ems.text.Tokenizer.load(MODEL_DIR).encode`), padded with 0; `pooler_output` is the "
            "sentence vector.",
        ]
    return ems_code + [
        "",
        "The same model for other libraries: `python -m ems.apps.export MODEL_DIR OUT --format "
        "sentence-transformers` (or `--format hf` for transformers' AutoModel).",
    ]


def _provenance_lines(run: dict | None) -> list[str]:
    if run is None:
        return ["Not recorded (no run_metadata.json)."]
    git = run.get("git")
    code = (
        f"commit `{git['commit']}`{' with uncommitted changes' if git['dirty'] else ''}"
        if git
        else "code outside a git checkout"
    )
    versions = ", ".join(f"{name} {version}" for name, version in run["versions"].items() if version)
    return [
        f"Trained by {code} on `{run['host']}` from {run['utc']}: `{' '.join(run['command'])}`. Versions: {versions}."
    ]


def render_model_card(facts: ModelFacts, export_format: str = "ems", default_language: str | None = None) -> str:
    """The card's markdown for a directory in `export_format` (one of FORMATS); `default_language` is
    the exported model's language for text given without one (None: chosen by script)."""
    if export_format not in FORMATS:
        raise ValueError(f"unknown model card format {export_format!r}; expected one of {', '.join(FORMATS)}")
    config = facts.config
    example = next((lang for lang in facts.languages if lang != "en"), facts.languages[0])
    sections = [
        _front_matter(facts, export_format),
        "# EMS multilingual sentence encoder",
        "",
        f"A {config.n_layers}-layer transformer trained from scratch on parallel sentences with the EMS objectives "
        f"({PAPER}); it returns the mean of its token states, {config.d_sentence} dimensions a sentence, whose "
        "cosine similarity compares sentences across languages.",
        "",
        "## Languages",
        "",
        _language_text(facts, export_format, default_language),
        "",
        "## Training data",
        "",
        *_training_text(facts),
        "",
        "## Configuration",
        "",
        *_config_lines(config),
        "",
        "## Evaluation",
        "",
        facts.evaluation
        or "No evaluation report was found with this model (`python -m eval.run_all --model MODEL_DIR` writes one).",
        "",
        "## Usage",
        "",
        *_usage_lines(export_format, example),
        "",
        "## Provenance",
        "",
        *_provenance_lines(facts.run),
    ]
    return "\n".join(sections) + "\n"


def write_model_card(
    model_dir: str | Path, facts: ModelFacts, export_format: str = "ems", default_language: str | None = None
) -> Path:
    """Write render_model_card(...) as `model_dir`/README.md; returns its path."""
    path = Path(model_dir) / CARD_FILE
    path.write_text(render_model_card(facts, export_format, default_language))
    return path
