"""No hyperparameter of the QE task is chosen on its test split: with the test20 scores of one
MLQE-PE pair replaced by random numbers, every selection the run makes (the projection head's
ridge strength, the trained heads' early-stopping epoch, the dev correlations) is unchanged while
the reported test Pearson moves."""

import shutil

import numpy as np
import pytest

from eval.evaluators.qe import read_mlqe
from eval.run_all import run_all
from tests.fakes import TrigramEncoder

ROWS = 150  # MLQE rows per file (max_sentences) and FLORES pairs (max_pairs): keeps the run to seconds


def poison_scores(path, seed=0):
    """Rewrite the z_mean column of an MLQE file with random numbers (header and texts kept)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    column = lines[0].split("\t").index("z_mean")
    rng = np.random.default_rng(seed)
    rows = []
    for line in lines[1:]:
        fields = line.split("\t")
        if len(fields) > column:
            fields[column] = f"{rng.normal():.6f}"
        rows.append("\t".join(fields))
    path.write_text("\n".join([lines[0], *rows]) + "\n", encoding="utf-8")


def qe_run(data, tmp_path, name):
    configs = tmp_path / f"configs_{name}"
    configs.mkdir()
    (configs / "mlqe.yaml").write_text(
        "type: qe\nname: mlqe\ndata_subdir: mlqe\nsplit: test20\ndev_split: dev\npairs: [en-de]\n"
        "heads: [centering, projection, dream]\n"
        f"head_training: {{flores_subdir: flores200/devtest, valid_fraction: 0.2, seed: 0, max_pairs: {ROWS}}}\n"
    )
    (configs / "suite.yaml").write_text("tasks: [mlqe.yaml]\n")
    return run_all(
        TrigramEncoder(),
        data,
        out_dir=tmp_path / f"out_{name}",
        suite_path=configs / "suite.yaml",
        max_sentences=ROWS,
        progress=False,
        print_tables=False,
    )["mlqe"]


def selections(result):
    """Everything the run chose: per head its training log without wall-clock time."""
    return {
        name: {key: value for key, value in log.items() if key != "seconds"} for name, log in result["heads"].items()
    }


def test_poisoned_test_split_changes_no_choice(data_dir, tmp_path, monkeypatch):
    import ems.heads.dream as dream

    monkeypatch.setattr(
        dream.DreamHead,
        "default_hyperparameters",
        dream.HeadHyperparameters(learning_rate=3e-3, max_epochs=8, patience=3),
    )
    clean, poisoned = tmp_path / "clean", tmp_path / "poisoned"
    for data in (clean, poisoned):
        (data / "flores200" / "devtest").mkdir(parents=True)
        for code in ("eng", "deu"):
            shutil.copy(data_dir / "flores200" / "devtest" / f"{code}.devtest", data / "flores200" / "devtest")
        shutil.copytree(data_dir / "mlqe" / "en-de", data / "mlqe" / "en-de")
    test_file = poisoned / "mlqe" / "en-de" / "test20.ende.df.short.tsv"
    poison_scores(test_file)
    assert not np.array_equal(
        read_mlqe(test_file, "en-de").gold, read_mlqe(clean / test_file.relative_to(poisoned), "en-de").gold
    )

    a, b = qe_run(clean, tmp_path, "clean"), qe_run(poisoned, tmp_path, "poisoned")
    assert a["views"] == b["views"] == ["raw", "centering", "projection", "dream"]
    # the choices: projection's ridge strength per language (with its held-out curve) and DREAM's epoch
    assert a["heads"]["projection"]["ridge"]["de"]["alpha"] == b["heads"]["projection"]["ridge"]["de"]["alpha"]
    assert a["heads"]["dream"]["best_epoch"] == b["heads"]["dream"]["best_epoch"]
    assert selections(a) == selections(b)
    assert a["dev"]["split"] == "dev" and a["dev"]["languages"] == b["dev"]["languages"]
    assert a["dev"]["languages"]["en-de"]["projection"]["pearson"] is not None
    # while what is reported on test20 does move with the poisoned scores
    for view in a["views"]:
        assert a["languages"]["en-de"][view]["pearson"] != pytest.approx(
            b["languages"]["en-de"][view]["pearson"], abs=1e-6
        )
    assert a["languages"]["en-de"]["n"] == b["languages"]["en-de"]["n"] == ROWS
