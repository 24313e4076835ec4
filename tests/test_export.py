"""`python -m ems.apps.export`: the real sentence-transformers and transformers packages load the
exported directories and give ems.load's vectors; old `tokenizer.json` directories still load."""

import ast
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import ems
from ems.apps.export import (
    CORE_FILE,
    HF_MODELING_FILE,
    ST_MODULE_FILE,
    check_runs_without_ems,
    core_definitions,
    export_hf,
    export_sentence_transformers,
    main,
    shipped_source,
    top_level_source,
)
from ems.cli import run_main
from ems.encoder import MANIFEST_FILE
from ems.text import TOKENIZER_FILE, Tokenizer
from tests.conftest import REPO_ROOT

LANGUAGES = ("de", "fr", "ja")


@pytest.fixture(scope="module")
def sentences(tiny_pipeline) -> dict[str, list[str]]:
    """Real held-out UI strings of each language (django's catalogs), 20 of each."""
    found = {}
    for path in sorted((tiny_pipeline / "corpus" / "heldout").glob("*/*.*")):
        found.setdefault(path.suffix[1:], [line for line in path.read_text().splitlines() if line.strip()][:20])
    return found


@pytest.fixture(scope="module")
def st_dir(model_dir, tmp_path_factory):
    return export_sentence_transformers(model_dir, tmp_path_factory.mktemp("export") / "ems-st")


@pytest.fixture(scope="module")
def hf_dir(model_dir, tmp_path_factory):
    return export_hf(model_dir, tmp_path_factory.mktemp("export") / "ems-hf")


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_sentence_transformers_loads_the_export_and_matches_ems_load(model_dir, st_dir, sentences):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(st_dir), trust_remote_code=True, device="cpu")
    reference = ems.load(model_dir)
    assert st.get_embedding_dimension() == reference.dim and "lang" in st.get_model_kwargs()
    for lang in LANGUAGES + ("en",):
        got = st.encode(sentences[lang], lang=lang, batch_size=7)
        assert row_cosines(got, reference.encode(sentences[lang], lang)).min() >= 0.9999, lang
    # without lang=, the default ("auto") picks MeCab for Japanese text by its script: the same ids
    np.testing.assert_allclose(st.encode(sentences["ja"]), st.encode(sentences["ja"], lang="ja"), atol=1e-6)
    # the other languages' preprocessing really differs: Japanese read as German is other tokens
    assert row_cosines(st.encode(sentences["ja"], lang="de"), st.encode(sentences["ja"], lang="ja")).min() < 0.999
    with pytest.raises(ValueError, match="unknown language 'xx': this model has de, en, fr, ja"):
        st.encode(["Hallo"], lang="xx")
    assert ems.load(st_dir).encode(sentences["de"], "de").shape == (20, reference.dim)  # still an EMS model directory


def test_a_default_language_set_at_export_is_used_without_lang(model_dir, sentences, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = export_sentence_transformers(model_dir, tmp_path / "ems-st-fr", language="fra")  # aliases resolve
    assert json.loads((out / "ems_sentence_transformers.json").read_text()) == {"default_language": "fr"}
    st = SentenceTransformer(str(out), trust_remote_code=True, device="cpu")
    np.testing.assert_array_equal(st.encode(sentences["fr"]), st.encode(sentences["fr"], lang="fr"))


def test_transformers_automodel_loads_the_export_and_matches_ems_load(model_dir, hf_dir, sentences):
    from huggingface_hub import ModelCard
    from transformers import AutoModel

    config = json.loads((hf_dir / "config.json").read_text())
    assert config["model_type"] == "ems" and config["ems"] == json.loads((model_dir / "config.json").read_text())
    for ref in config["auto_map"].values():  # the trust_remote_code files the Hub repo must hold
        assert (hf_dir / f"{ref.split('.')[0]}.py").is_file()
    assert {p.name for p in hf_dir.iterdir()} == {
        "README.md",
        "config.json",
        MANIFEST_FILE,
        "model.safetensors",
        "modeling_ems.py",
        CORE_FILE,
        "spm.model",
        TOKENIZER_FILE,
    }
    card = ModelCard.load(hf_dir / "README.md")
    assert card.data.library_name == "transformers" and card.data.language == ["de", "en", "fr", "ja"]

    model = AutoModel.from_pretrained(str(hf_dir), trust_remote_code=True).eval()
    reference = ems.load(model_dir)
    tokenizer = Tokenizer.load(hf_dir)
    for lang in LANGUAGES:
        ids = tokenizer.encode(sentences[lang], lang)
        input_ids = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
        for row, seq in enumerate(ids):
            input_ids[row, : len(seq)] = torch.tensor(seq)
        with torch.no_grad():
            pooled = model(input_ids=input_ids, attention_mask=(input_ids != 0).long()).pooler_output.numpy()
        expected = reference.encode(sentences[lang], lang)
        assert row_cosines(pooled, expected).min() >= 0.9999, lang
        assert row_cosines(model.encode(sentences[lang], lang=lang), expected).min() >= 0.9999, lang


def test_the_exported_code_runs_without_the_ems_package(st_dir, hf_dir, sentences, tmp_path):
    # the exported models run in fp32
    np.save(tmp_path / "expected.npy", ems.load(st_dir, precision="fp32").encode(sentences["ja"], "ja"))
    (tmp_path / "ja.json").write_text(json.dumps(sentences["ja"]))
    script = f"""
import json, sys
sys.modules["ems"] = None  # importing ems now fails
import numpy as np
from sentence_transformers import SentenceTransformer
from transformers import AutoModel
sentences = json.loads(open({str(tmp_path / "ja.json")!r}).read())
expected = np.load({str(tmp_path / "expected.npy")!r})
st = SentenceTransformer({str(st_dir)!r}, trust_remote_code=True, device="cpu").encode(sentences, lang="ja")
hf = AutoModel.from_pretrained({str(hf_dir)!r}, trust_remote_code=True).encode(sentences, lang="ja")
assert np.abs(st - expected).max() < 1e-5 and np.abs(hf - expected).max() < 1e-5
# the Chinese path (OpenCC, jieba) of the shipped preprocessing, which this model's languages do not reach
sys.path.insert(0, {str(st_dir)!r})
import ems_core
print(json.dumps(ems_core.Preprocessing()("我們在學習漢語。", "zh")))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    from ems.text import Preprocessing

    assert json.loads(result.stdout.strip().splitlines()[-1]) == Preprocessing()("我們在學習漢語。", "zh")


def test_cli_writes_the_export_and_reports_bad_input_in_one_line(model_dir, tmp_path, capsys):
    assert run_main(main, [str(model_dir), str(tmp_path / "out"), "--format", "hf"]) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "out" / "modeling_ems.py").is_file()
    cases = {
        "is not a directory": [str(tmp_path / "missing"), str(tmp_path / "a"), "--format", "hf"],
        "is not an EMS model directory: model.safetensors is missing": [
            str(tmp_path),
            str(tmp_path / "b"),
            "--format",
            "hf",
        ],
        "unknown format 'onnx'; expected one of sentence-transformers, hf": [
            str(model_dir),
            str(tmp_path / "c"),
            "--format",
            "onnx",
        ],
        "exists and is not an empty directory": [
            str(model_dir),
            str(tmp_path / "out"),
            "--format",
            "sentence-transformers",
        ],
        "is the input MODEL_DIR": [str(model_dir), str(model_dir), "--format", "hf"],
        "xx": [str(model_dir), str(tmp_path / "d"), "--format", "hf", "--language", "xx"],
    }
    for message, argv in cases.items():
        assert run_main(main, argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_core_definitions_that_went_missing_are_named():
    assert "def guess_language" in top_level_source("ems.text", ("guess_language",))
    with pytest.raises(ValueError, match="ems.text no longer defines no_such_function"):
        top_level_source("ems.text", ("guess_language", "no_such_function"))


def test_exported_code_is_generated_from_the_package_source(st_dir):
    core = (st_dir / CORE_FILE).read_text()
    source = (REPO_ROOT / "ems" / "model.py").read_text()
    start = source.index("class EncoderNetwork")
    assert source[start : source.index("\nclass XTRHead")].strip() in core
    assert "import ems" not in core and "from ems" not in core
    compile(core, CORE_FILE, "exec")


def test_the_shipped_modules_are_the_package_modules_and_the_core_template_fills_in_the_source(st_dir, hf_dir):
    """ems/apps/exported_code/ holds the shipped code as real modules: the two entry modules are copied
    as they are, ems_core.py is its template with the definitions its imports from ems name in their place."""
    assert (st_dir / ST_MODULE_FILE).read_text() == shipped_source(ST_MODULE_FILE)
    assert (hf_dir / HF_MODELING_FILE).read_text() == shipped_source(HF_MODELING_FILE)
    template, core = shipped_source(CORE_FILE), (st_dir / CORE_FILE).read_text()
    assert core == (hf_dir / CORE_FILE).read_text() and "{source}" in ast.get_docstring(ast.parse(template))
    origin = "source (ems.corpus, ems.losses, ems.packing, ems.text, ems.model_config, ems.model, ems.encoder"
    assert origin in ast.get_docstring(ast.parse(core))
    glue = template[template.index("\nclass EMSTextTokenizer") :]
    assert glue in core and "from ems." in template  # the glue as it is; the imports from ems replaced
    definitions = core_definitions(ast.parse(template))
    assert list(definitions) == [
        "ems.corpus",
        "ems.losses",
        "ems.packing",
        "ems.text",
        "ems.model_config",
        "ems.model",
        "ems.encoder",
    ]  # dependency order
    assert "read_tokenizer_file" in definitions["ems.text"] and "EncoderNetwork" in definitions["ems.model"]
    assert core.index("def read_tokenizer_file") < core.index("class EncoderNetwork") < core.index(glue)
    with pytest.raises(ValueError, match="the exported x.py imports the ems package \\(line 2\\)"):
        check_runs_without_ems("x.py", "import torch\nfrom ems.text import PAD_ID\n")


def test_the_shipped_modules_import_from_the_package_with_ems_definitions(model_dir, sentences):
    """Imported from the package, the template ems_core uses the package's own definitions, and its glue
    reads a model as the exported copy does."""
    import ems.text
    from ems.apps.exported_code import ems_core
    from ems.apps.exported_code.ems_sentence_transformers import EMSSentenceEncoder

    assert ems_core.Preprocessing is ems.text.Preprocessing
    encoder, tokenizer = ems_core.load_model(
        model_dir / "config.json", model_dir / "model.safetensors", model_dir / "spm.model", model_dir / TOKENIZER_FILE
    )
    assert tokenizer.encode(sentences["ja"], "ja") == Tokenizer.load(model_dir).encode(sentences["ja"], "ja")
    module = EMSSentenceEncoder(encoder, tokenizer)
    with torch.no_grad():
        got = module(module.preprocess(sentences["de"], lang="de"))["sentence_embedding"].numpy()
    assert row_cosines(got, ems.load(model_dir).encode(sentences["de"], "de")).min() >= 0.9999


def test_the_evaluation_loads_the_export_as_an_st_encoder_with_its_languages(model_dir, st_dir, sentences):
    from ems.encoder_kinds import load_encoder

    encoder = load_encoder(f"st:{st_dir},trust_remote_code=true")
    reference = ems.load(model_dir)
    assert encoder.languages == reference.languages  # so tasks skip what the model lacks, with the reason
    for lang in ("ja", "de"):  # each call's language reaches the model's preprocessing
        assert (
            row_cosines(encoder.encode(sentences[lang], lang), reference.encode(sentences[lang], lang)).min() >= 0.9999
        )
