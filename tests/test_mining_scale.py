"""benchmarks/mining_scale.py end to end on 2000 real lines a side (a smoke test of the script the
scale runs use): every stage measured in its own processes, recall against exact search, F1
against the gold and against the exact miner, and the projections."""

import json

from benchmarks import mining_scale


def test_mining_scale_measures_every_stage(data_dir, tmp_path, capsys):
    argv = ["--data-dir", str(data_dir), "--n", "2000", "--work", str(tmp_path), "--shard-lines", "1000"]
    argv += ["--index", "ivf:n_lists=16,nprobe=4", "--recall-sample", "300", "--f1-subset", "1500", "--workers", "2"]
    assert mining_scale.main(argv) == 0
    (report_path,) = tmp_path.glob("n2000/*/report.json")
    report = json.loads(report_path.read_text())
    stages = {row["stage"]: row for row in report["stages"]}
    assert list(stages) == ["plan", "embed", "train", "populate", "merge", "knn", "score", "write"]
    assert [stages[s]["units"] for s in stages] == [1, 4, 2, 4, 2, 4, 4, 1]
    for row in stages.values():
        assert row["wall_s"] > 0 and row["cpu_s"] > 0 and 20 < row["peak_rss_mib"] < 2000
    assert stages["embed"]["disk_mib"] > 2000 * 2 * 64 * 4 / 2**20  # float32 vectors of both sides
    # 4 of 16 lists probed: not every exact neighbour is found, most are
    assert all(50 < value < 100 for value in report["recall"].values())
    lines = (report_path.parent / "pairs.tsv").read_text(encoding="utf-8").splitlines()
    assert len(lines) > 1000 and 0 < report["gold"]["f1"] < 100 and report["gold"]["n_gold"] > 1000
    versus = report["versus_exact"]
    assert 50 < versus["all_pairs"]["f1"] < 100 and versus["all_pairs"]["n_gold"] > 1000
    assert report["cpu_hours_projected"]["1B"] > report["cpu_hours_projected"]["10M"] > 0
    assert "knn" in capsys.readouterr().out
