"""An EMS model directory -> a directory that sentence-transformers or transformers loads.

    python -m ems.apps.export MODEL_DIR OUT --format sentence-transformers [--language auto|xx] [--license ID]
    python -m ems.apps.export MODEL_DIR OUT --format hf

`sentence-transformers`: `SentenceTransformer(OUT, trust_remote_code=True).encode(sentences, lang="de")`
gives the vectors of `ems.load(MODEL_DIR).encode(sentences, "de")`. OUT is also an EMS model
directory (`ems.load(OUT)` works): its files (with a manifest.json of their own) plus `modules.json`,
`config_sentence_transformers.json`, `ems_sentence_transformers.json` (the default language) and the
module code. Both formats carry a manifest.json: the size and sha256 of their config.json,
model.safetensors and tokenizer files.

`hf`: `transformers.AutoModel.from_pretrained(OUT, trust_remote_code=True)`: `model(input_ids).pooler_output`
is the sentence vector of EMS token ids, `model.encode(sentences, lang=...)` does the text too; a
layout `huggingface_hub.upload_folder` can push as it is (config.json with model_type and auto_map,
model.safetensors, the code, the tokenizer files, README.md).

The language. EMS preprocesses each language its own way (Moses rules, jieba for zh, MeCab for
ja, traditional -> simplified Chinese), so the exported models take `lang=` per call (an extra
`encode` keyword that sentence-transformers passes to the module). Without it they use the
default language set with `--language` at export; the default `auto` picks the preprocessing
from each sentence's script (ems.text.guess_language): exact for ja and zh, language-neutral Moses
for the rest; a fixed wrong default costs far more than `auto` (measured with
benchmarks/export_language_benchmark.py: docs/results/throughput.md).

The shipped code is the modules of ems/apps/exported_code/ (real modules: ruff checks them, tests
import them). `ems_core.py` is assembled from its template there and this package's own source: the
definitions of ems.text, ems.losses, ems.packing, ems.model_config, ems.model, ems.encoder and ems.corpus
that the template imports take the place of those imports (core_source), so the exported model runs the
same preprocessing and network as `ems.load`, confines the files it reads to the model folder as
`ems.load` does (ems.corpus.inside_folder), and needs torch, safetensors, numpy, sentencepiece, sacremoses,
jieba, fugashi (+ unidic-lite) and opencc, not the `ems` package; the other modules are copied as they
are. Every output gets a model card (ems.training.model_card) and the training run's run_metadata.json
when the model has one.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import graphlib
import importlib
import json
import shutil
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ems.apps import exported_code
from ems.artifacts import replaced_hint, staged_directory
from ems.cli import add_debug_option, run_main
from ems.corpus import check_output_not_input
from ems.encoder import CONFIG_FILE, WEIGHTS_FILE, check_model_directory, read_config, write_model_manifest
from ems.run_metadata import RUN_METADATA_FILE, git_state
from ems.text import Tokenizer
from ems.training.model_card import model_facts, write_model_card

FORMATS = ("sentence-transformers", "hf")
AUTO_LANGUAGE = "auto"
CORE_FILE = "ems_core.py"
ST_MODULE_FILE = "ems_sentence_transformers.py"
ST_MODULE_CONFIG = "ems_sentence_transformers.json"
HF_MODELING_FILE = "modeling_ems.py"
SOURCE_PLACEHOLDER = "{source}"  # in the docstring of ems_core.py's template: what its definitions were taken from


def shipped_source(name: str) -> str:
    """The text of the module `name` (a file name) of ems/apps/exported_code/: the code an export ships."""
    return resources.files(exported_code).joinpath(name).read_text(encoding="utf-8")


def ems_imports(template: ast.Module) -> list[ast.ImportFrom]:
    """The top-level `from ems... import` statements of the ems_core.py template: one run of
    statements (the place of the definitions they name), else ValueError."""
    found = [
        (i, node)
        for i, node in enumerate(template.body)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "ems"
    ]
    if not found or [i for i, _ in found] != list(range(found[0][0], found[0][0] + len(found))):
        raise ValueError(f"the imports from ems of {CORE_FILE}'s template are not one block of statements")
    return [node for _, node in found]


def module_imports(module_name: str) -> set[str]:
    """The modules that module `module_name` imports at its top level."""
    tree = ast.parse(Path(importlib.import_module(module_name).__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    return imported


def core_definitions(template: ast.Module) -> dict[str, tuple[str, ...]]:
    """What ems_core.py holds of the package's source: the names that the template imports from ems,
    by module, the modules in dependency order (each after those of them it imports)."""
    names: dict[str, list[str]] = {}
    for node in ems_imports(template):
        names.setdefault(node.module, []).extend(alias.name for alias in node.names)
    graph = {module: sorted(module_imports(module) & set(names)) for module in names}
    return {module: tuple(names[module]) for module in graphlib.TopologicalSorter(graph).static_order()}


def top_level_source(module_name: str, names: tuple[str, ...]) -> str:
    """The source of the top-level definitions `names` (functions, classes, assignments, each with
    its decorators and the comment lines right above it) of module `module_name`, in file order."""
    path = Path(importlib.import_module(module_name).__file__)
    lines = path.read_text(encoding="utf-8").splitlines()
    wanted, found = set(names), []
    for node in ast.parse("\n".join(lines)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined = {node.name}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined = {target.id for target in targets if isinstance(target, ast.Name)}
        else:
            continue
        if defined & wanted:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1
            found.append((defined & wanted, "\n".join(lines[start : node.end_lineno])))
    missing = wanted - set().union(*(defined for defined, _ in found))
    if missing:
        raise ValueError(
            f"{module_name} no longer defines {', '.join(sorted(missing))}: "
            f"update the imports from ems of ems/apps/exported_code/{CORE_FILE}"
        )
    return "\n\n\n".join(source for _, source in found)


def check_runs_without_ems(name: str, source: str) -> None:
    """ValueError if the shipped module `name` imports the ems package (an exported model runs without it)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules = [node.module]
        else:
            continue
        if any(module.split(".")[0] == "ems" for module in modules):
            raise ValueError(f"the exported {name} imports the ems package (line {node.lineno})")


def core_source() -> str:
    """The text of ems_core.py: its template (ems/apps/exported_code/ems_core.py, the exported models'
    shared glue: EMSTextTokenizer, check_tokenizer, load_model, pad_token_ids) with the source of the
    definitions it imports from ems (core_definitions) in place of those imports and of the comment
    lines above them, and the source's origin in its docstring."""
    template = shipped_source(CORE_FILE)
    tree = ast.parse(template)
    definitions = core_definitions(tree)
    block = ems_imports(tree)
    lines = template.splitlines()
    start = block[0].lineno - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    git = git_state()
    origin = ", ".join(definitions)
    if git is not None:
        origin += f" at commit {git['commit'][:12]}{' with uncommitted changes' if git['dirty'] else ''}"
    head = "\n".join(lines[:start]).rstrip().replace(SOURCE_PLACEHOLDER, origin, 1)
    body = "\n\n\n".join(top_level_source(module, names) for module, names in definitions.items())
    tail = "\n".join(lines[block[-1].end_lineno :]).strip()
    source = f"{head}\n\n\n{body}\n\n\n{tail}\n"
    check_runs_without_ems(CORE_FILE, source)
    return source


def write_shipped_code(out: Path, names: tuple[str, ...]) -> None:
    """Write ems_core.py (core_source) and the modules `names` of ems/apps/exported_code/ (as they are) into `out`."""
    (out / CORE_FILE).write_text(core_source(), encoding="utf-8")
    for name in names:
        source = shipped_source(name)
        check_runs_without_ems(name, source)
        (out / name).write_text(source, encoding="utf-8")


def check_model_dir(model_dir: Path) -> Tokenizer:
    """The tokenizer of the EMS model directory `model_dir`, checked as ems.load checks it (config,
    tokenizer, weights: ems.encoder.check_model_directory) so that no broken model is exported;
    FileNotFoundError or ValueError (one line) otherwise."""
    if not model_dir.is_dir():
        raise FileNotFoundError(
            f"{model_dir} is not a directory (expected an EMS model directory, e.g. RUN/model)"
            f"{replaced_hint(model_dir)}"
        )
    return check_model_directory(model_dir)[1]


def check_language(language: str, tokenizer: Tokenizer) -> str | None:
    """The default language to store: None for AUTO_LANGUAGE, else `language` resolved to one of the
    model's languages (UnknownLanguageError, a ValueError, otherwise)."""
    return None if language == AUTO_LANGUAGE else tokenizer.resolve_language(language)


def check_out_dir(out: Path, model_dir: Path) -> None:
    """ValueError if `out` is the model directory itself (ems.corpus.check_output_not_input) or a
    non-empty directory."""
    check_output_not_input(("OUT", out), [("MODEL_DIR", model_dir)])
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory; choose a new output directory")


def _copy_run_metadata(model_dir: Path, out: Path) -> None:
    if (model_dir / RUN_METADATA_FILE).is_file():
        shutil.copyfile(model_dir / RUN_METADATA_FILE, out / RUN_METADATA_FILE)


def _export(
    write: Callable[[Path, Tokenizer, Path, str | None, str | None], None],
    model_dir: str | Path,
    out: str | Path,
    language: str,
    license_id: str | None,
) -> Path:
    """Check the model directory, the language and `out`, then `write` the export into a staging
    directory that becomes `out` whole (or not at all)."""
    model_dir, out = Path(model_dir), Path(out)
    tokenizer = check_model_dir(model_dir)
    default_language = check_language(language, tokenizer)
    check_out_dir(out, model_dir)
    with staged_directory(out, "export") as staging:
        write(model_dir, tokenizer, staging, default_language, license_id)
    return out


def export_sentence_transformers(
    model_dir: str | Path, out: str | Path, language: str = AUTO_LANGUAGE, license_id: str | None = None
) -> Path:
    """Write the sentence-transformers directory of the EMS model in `model_dir` to `out` (new or
    empty); `language`: the default language of `encode` without `lang=` (AUTO_LANGUAGE: by script)."""
    return _export(write_sentence_transformers, model_dir, out, language, license_id)


def write_sentence_transformers(
    model_dir: Path, tokenizer: Tokenizer, out: Path, default_language: str | None, license_id: str | None
) -> None:
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        shutil.copyfile(model_dir / name, out / name)
    tokenizer.save(out)
    write_model_manifest(out)
    write_shipped_code(out, (ST_MODULE_FILE,))
    (out / ST_MODULE_CONFIG).write_text(json.dumps({"default_language": default_language}, indent=2) + "\n")
    modules = [{"idx": 0, "name": "0", "path": "", "type": f"{Path(ST_MODULE_FILE).stem}.EMSSentenceEncoder"}]
    (out / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    st_config = {
        "model_type": "SentenceTransformer",
        "prompts": {},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
        "__version__": {"pytorch": torch.__version__},
    }
    (out / "config_sentence_transformers.json").write_text(json.dumps(st_config, indent=2) + "\n")
    _copy_run_metadata(model_dir, out)
    write_model_card(out, model_facts(model_dir, license_id=license_id), "sentence-transformers", default_language)


def export_hf(
    model_dir: str | Path, out: str | Path, language: str = AUTO_LANGUAGE, license_id: str | None = None
) -> Path:
    """Write the transformers (trust_remote_code) directory of the EMS model in `model_dir` to `out`
    (new or empty); `language` as for export_sentence_transformers."""
    return _export(write_hf, model_dir, out, language, license_id)


def write_hf(
    model_dir: Path, tokenizer: Tokenizer, out: Path, default_language: str | None, license_id: str | None
) -> None:
    ems_config = read_config(model_dir / CONFIG_FILE)
    state = {f"encoder.{name}": tensor for name, tensor in load_file(str(model_dir / WEIGHTS_FILE)).items()}
    save_file(state, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    modeling = Path(HF_MODELING_FILE).stem
    config = {
        "model_type": "ems",
        "architectures": ["EMSHFModel"],
        "auto_map": {"AutoConfig": f"{modeling}.EMSHFConfig", "AutoModel": f"{modeling}.EMSHFModel"},
        "ems": dataclasses.asdict(ems_config),
        "default_language": default_language,
        "dtype": "float32",
    }
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save(out)
    write_model_manifest(out)
    write_shipped_code(out, (HF_MODELING_FILE,))
    _copy_run_metadata(model_dir, out)
    write_model_card(out, model_facts(model_dir, license_id=license_id), "hf", default_language)


EXPORTERS = {"sentence-transformers": export_sentence_transformers, "hf": export_hf}


def main(argv: list[str] | None = None) -> int:
    """The command line: 0 when OUT is written (user errors: ems.cli.run_main's one line, status 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m ems.apps.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model_dir", type=Path, help="an EMS model directory (ems.load reads it), e.g. RUN/model")
    parser.add_argument("out", type=Path, help="the directory to write (new or empty)")
    parser.add_argument("--format", required=True, help=f"one of: {', '.join(FORMATS)}")
    parser.add_argument(
        "--language",
        default=AUTO_LANGUAGE,
        help=f"the language of text encoded without lang=: one of the model's, or {AUTO_LANGUAGE} "
        "(default: each sentence's script picks the preprocessing)",
    )
    parser.add_argument("--license", dest="license_id", help="license id for the model card (e.g. cc-by-4.0)")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    if args.format not in EXPORTERS:
        raise ValueError(f"unknown format {args.format!r}; expected one of {', '.join(FORMATS)}")
    out = EXPORTERS[args.format](args.model_dir, args.out, args.language, args.license_id)
    print(f"wrote {out} ({args.format})")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
