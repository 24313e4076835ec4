"""slurm/train.sh: the launch lines of its dry run for a 2-node x 4-GPU allocation (no cluster
needed), and real `sbatch` runs on a one-node SLURM cluster started on this machine by
tests/slurm/setup_cluster.sh: a training job (2 processes, torchrun) and a job pre-empted with
USR1 that checkpoints, requeues itself and resumes where it stopped (DeepSpeed's launcher).
slurm/mine.sh: the sbatch lines it submits (a stand-in sbatch, no cluster needed), and a real
mining run on the cluster, cancelled mid-way, resubmitted, equal to the local launcher's."""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, SMALL_MODEL

TRAIN_SH = REPO_ROOT / "slurm" / "train.sh"
SETUP_CLUSTER = REPO_ROOT / "tests" / "slurm" / "setup_cluster.sh"
PROCS = 2  # trainer processes on the test node


def dry_run(launcher: str, **env) -> list[str]:
    result = subprocess.run(
        ["bash", str(TRAIN_SH), "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
        env={
            "PATH": os.environ["PATH"],
            "NODES": "2",
            "GPUS_PER_NODE": "4",
            "DATA": "runs/x/shards",
            "VOCAB": "runs/x/vocab",
            "LAUNCHER": launcher,
            **env,
        },
    )
    return result.stdout.splitlines()


def node_lines(lines: list[str]) -> dict[str, list[str]]:
    """{'node1': argv, ...} from the dry run's `node R (HOST): COMMAND` lines, in node-rank order."""
    found = [re.fullmatch(r"node (\d+) \((\S+)\): (.*)", line) for line in lines]
    found = [m for m in found if m]
    assert [int(m[1]) for m in found] == list(range(len(found)))
    return {m[2]: shlex.split(m[3]) for m in found}


def test_dry_run_deepspeed_launch_lines_for_two_nodes_of_four_gpus():
    from deepspeed.launcher.runner import parse_args

    lines = dry_run("deepspeed")
    srun = next(line for line in lines if line.startswith("srun "))
    assert "--nodes=2 --ntasks-per-node=1 --cpus-per-task=16 --kill-on-bad-exit=1 bash -c" in srun
    assert [line for line in lines if "slots=" in line] == ["#   node1 slots=4", "#   node2 slots=4"]
    nodes = node_lines(lines)
    assert list(nodes) == ["node1", "node2"]
    for rank, argv in enumerate(nodes.values()):
        assert argv[:3] == ["python", "-m", "deepspeed.launcher.runner"]
        args = parse_args(argv[3:])  # what DeepSpeed's launcher will make of the line
        assert (args.no_ssh, args.node_rank, args.num_gpus, args.master_addr) == (True, rank, 4, "node1")
        assert args.hostfile == "runs/ems-train-12345/hostfile"
        assert (args.module, args.user_script) == (True, "ems.training.train")
        assert args.user_args == [
            "--config",
            "configs/train/ems-paper.yaml",
            "--set",
            "data=runs/x/shards",
            "vocab=runs/x/vocab",
            "out=runs/ems-train-12345",
        ]
    assert len({parse_args(argv[3:]).master_port for argv in nodes.values()}) == 1


def test_dry_run_torchrun_launch_lines_for_two_nodes_of_four_gpus():
    from torch.distributed.run import get_args_parser

    nodes = node_lines(dry_run("torchrun", SET="max_steps=10 save_every=5"))
    assert list(nodes) == ["node1", "node2"]
    for rank, argv in enumerate(nodes.values()):
        assert argv[:3] == ["python", "-m", "torch.distributed.run"]
        args = get_args_parser().parse_args(argv[3:])
        assert (args.nnodes, args.nproc_per_node, args.node_rank, args.master_addr) == ("2", "4", rank, "node1")
        assert (args.module, args.training_script) == (True, "ems.training.train")
        assert args.training_script_args[-2:] == ["max_steps=10", "save_every=5"]


def test_srun_line_runs_each_nodes_launch_line_with_usr1_ignored(tmp_path):
    """The srun line's `bash -c` command, run as SLURM would on node 1 (SLURM_NODEID=1), execs
    exactly the dry run's node-1 line, with USR1 ignored (so the launcher survives the stop signal)."""
    probe = tmp_path / "probe"
    probe.write_text('#!/bin/bash\necho "USR1:$(trap -p USR1)"\nprintf \'%s\\n\' "$@"\n')
    probe.chmod(0o755)
    lines = dry_run("deepspeed", PYTHON=str(probe))
    node_command = shlex.split(next(line for line in lines if line.startswith("srun ")))[-1]
    ran = subprocess.run(
        ["bash", "-c", node_command],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"], "SLURM_NODEID": "1"},
    ).stdout.splitlines()
    assert ran[0] == "USR1:trap -- '' SIGUSR1"
    assert ran[1:] == node_lines(lines)["node2"][1:]


def test_bad_launcher_missing_data_and_no_processes_are_clear_errors():
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", "VOCAB": "v"}
    missing = subprocess.run(["bash", str(TRAIN_SH)], capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and "set DATA to the shard directory" in missing.stderr
    bad = subprocess.run(
        ["bash", str(TRAIN_SH)], capture_output=True, text=True, env={**env, "DATA": "d", "LAUNCHER": "mpirun"}
    )
    assert bad.returncode == 2 and "LAUNCHER must be deepspeed or torchrun, not 'mpirun'" in bad.stderr
    no_gpus = subprocess.run(
        ["bash", str(TRAIN_SH)], capture_output=True, text=True, env={**env, "DATA": "d", "GPUS_PER_NODE": "0"}
    )
    assert no_gpus.returncode == 2 and "set PROCS_PER_NODE" in no_gpus.stderr


# --- a real one-node SLURM cluster -------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm_cluster():
    """The one-node test cluster, started (or found running) by tests/slurm/setup_cluster.sh."""
    if os.geteuid() != 0:
        pytest.skip("the SLURM cluster tests need root to start munged/slurmctld/slurmd (tests/slurm/setup_cluster.sh)")
    setup = subprocess.run(["bash", str(SETUP_CLUSTER)], capture_output=True, text=True, timeout=300)
    if setup.returncode != 0:
        pytest.skip(
            f"the test SLURM cluster did not start (tests/slurm/setup_cluster.sh):\n{setup.stdout}{setup.stderr}"
        )


def submit(pipeline: Path, run: Path, launcher: str, **train) -> str:
    """sbatch slurm/train.sh for PROCS processes on the node; returns the job id."""
    config = run.parent / f"{run.name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": "tiny",
                "model_overrides": SMALL_MODEL,
                "batch_size": 16,
                "lr": 2e-3,
                "warmup_steps": 5,
                **train,
            }
        )
    )
    env = {
        **os.environ,
        "DATA": str(pipeline / "shards"),
        "VOCAB": str(pipeline / "vocab"),
        "OUT": str(run),
        "CONFIG": str(config),
        "LAUNCHER": launcher,
        "PYTHON": sys.executable,
        "PROCS_PER_NODE": str(PROCS),
    }
    result = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--gpus-per-node=0",
            f"--cpus-per-task={PROCS}",
            f"--chdir={REPO_ROOT}",
            f"--output={run.parent}/%x-%j.out",
            str(TRAIN_SH),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return result.stdout.strip().split(";")[0]


def job_info(job: str) -> dict[str, str]:
    text = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", text))


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.3)


# Generous: a fresh machine compiles DeepSpeed's CPU communication op in the first job (minutes).
JOB_TIMEOUT = 600


def wait_for_job(job: str, log: Path, timeout: float = JOB_TIMEOUT) -> dict[str, str]:
    try:
        wait_until(
            lambda: job_info(job)["JobState"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout, f"job {job}"
        )
    except TimeoutError:
        subprocess.run(["scancel", job])
        raise AssertionError(f"job {job} did not finish; its log:\n{log.read_text() if log.exists() else '(none)'}")
    return job_info(job)


def logged_steps(run: Path) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_sbatch_trains_with_two_processes(slurm_cluster, tiny_pipeline, tmp_path):
    import ems

    run = tmp_path / "run"
    job = submit(tiny_pipeline, run, "torchrun", max_steps=12, log_every=2, save_every=6)
    log = tmp_path / f"ems-train-{job}.out"
    info = wait_for_job(job, log)
    text = log.read_text()
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "0"), text
    assert f"job {job} start 1 on" in text and "1 nodes x 2 processes" in text
    assert "trained 12 steps" in text and "training ended with status 0" in text
    assert logged_steps(run) == [2, 4, 6, 8, 10, 12]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step12"
    assert {p.name for p in (run / "checkpoints").glob("step*")} == {"step6", "step12"}
    vectors = ems.load(run / "model").encode(["Enter a valid date."], lang="en")
    assert vectors.shape == (1, SMALL_MODEL["d_model"])


def test_usr1_preempts_checkpoints_requeues_and_resumes(slurm_cluster, tiny_pipeline, tmp_path):
    """`scancel --batch --signal=USR1` reaches the batch shell, as `#SBATCH --signal=B:USR1@120`
    does before the time limit; every rank stops at the same step, saves, exits 99; the job
    requeues itself (same id, same log) and the second start resumes from that checkpoint."""
    run = tmp_path / "run"
    max_steps = 40
    job = submit(tiny_pipeline, run, "deepspeed", max_steps=max_steps, log_every=1, save_every=1000)
    log = tmp_path / f"ems-train-{job}.out"
    metrics = run / "metrics.jsonl"
    wait_until(lambda: metrics.exists() and metrics.read_text().count("\n") >= 3, JOB_TIMEOUT, "step 3")
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)
    info = wait_for_job(job, log)
    text = log.read_text()
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "1"), text

    stopped = int(re.search(r"stopping at step (\d+)", text)[1])
    assert 3 <= stopped < max_steps, text
    assert "stop requested (USR1)" in text and f"checkpointed step {stopped}; exiting with status 99" in text
    # status 99 came back through srun and both launchers: they survived the USR1 sent to the step
    assert f"training stopped with a checkpoint (status 99): requeueing job {job}" in text
    assert text.index(f"job {job} start 2 on") > text.index("requeueing")
    assert f"resumed from {run / 'checkpoints' / f'step{stopped}'}" in text and f"at step {stopped}," in text
    assert "training ended with status 0" in text
    assert logged_steps(run) == list(range(1, max_steps + 1))  # every step once: none repeated or skipped
    assert {p.name for p in (run / "checkpoints").glob("step*")} == {f"step{stopped}", f"step{max_steps}"}
    assert not (run / "STOP").exists()


# --- slurm/prep.sh: pair tasks side by side, then the join ----------------------------------------

PREP_SH = REPO_ROOT / "slurm" / "prep.sh"
# PYTHON for prep.sh's jobs: a pair task's stage starts once every pair task has reached it (so that
# the tasks run each stage side by side), and its start and end go to $BARRIER/times.
BARRIER_PYTHON = """#!/bin/bash
stage=$3  # -m data_prep STAGE ...
if [[ -n "${SLURM_ARRAY_TASK_ID:-}" ]]; then
    touch "$BARRIER/$stage.$SLURM_ARRAY_TASK_ID"
    for _ in $(seq 300); do
        (( $(find "$BARRIER" -name "$stage.*" | wc -l) >= N_TASKS )) && break
        sleep 0.1
    done
    echo "$SLURM_ARRAY_TASK_ID $stage start $(date +%s.%N)" >> "$BARRIER/times"
fi
nice -n 19 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$REAL_PYTHON" "$@"
status=$?
[[ -n "${SLURM_ARRAY_TASK_ID:-}" ]] && echo "$SLURM_ARRAY_TASK_ID $stage end $(date +%s.%N)" >> "$BARRIER/times"
exit $status
"""


def job_states(job: str) -> list[str]:
    """The JobState of every record of `job` (an array job: one per task)."""
    text = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, check=True).stdout
    return re.findall(r"JobState=(\S+)", text)


def test_prep_pair_tasks_run_side_by_side_and_the_join_makes_shards(slurm_cluster, data_dir, tmp_path):
    from fixtures.hf_datasets import pairs_config

    caps = {"de": "max_pairs: 250", "fr": "max_pairs: 200"}
    config = pairs_config(tmp_path, data_dir, 300, caps, "vocab: {vocab_size: 300, max_sentences: 10000}\n")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    python = tmp_path / "python"
    python.write_text(BARRIER_PYTHON.replace("N_TASKS", "2"))
    python.chmod(0o755)
    out = tmp_path / "out"
    env = {
        **os.environ,
        "CONFIG": str(config),
        "OUT": str(out),
        "PYTHON": str(python),
        "REAL_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO_ROOT),
        "EMS_DATA_DIR": str(data_dir),
        "BARRIER": str(barrier),
        "PAIR_CPUS": "1",
        "PAIR_MEM": "1G",
        "JOIN_CPUS": "1",
        "JOIN_MEM": "1G",
    }
    submitted = subprocess.run(
        ["bash", str(PREP_SH)], cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    array = re.search(r"submitted 2 pair tasks \(job (\d+)\)", submitted)[1]
    join = re.search(r"Submitted batch job (\d+)", submitted)[1]
    logs = tmp_path / "logs"

    def log_text() -> str:
        return "\n".join(f"== {log.name}\n{log.read_text()}" for log in sorted(logs.glob("*.out")))

    done = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
    try:
        wait_until(lambda: all(state in done for state in job_states(array)), 120, "the pair tasks")
        assert job_states(array) == ["COMPLETED", "COMPLETED"], log_text()
        wait_until(lambda: job_states(join)[0] in done, 120, "the join")
    finally:
        subprocess.run(["scancel", array, join])
    assert job_states(join) == ["COMPLETED"], log_text()

    times: dict[tuple[str, str], dict[str, float]] = {}
    for line in (barrier / "times").read_text().splitlines():
        task, stage, event, when = line.split()
        times.setdefault((stage, event), {})[task] = float(when)
    for stage in ("fetch", "clean", "pretokenize"):  # each ran in both tasks at once
        assert max(times[stage, "start"].values()) < min(times[stage, "end"].values()), times
    assert sorted(json.loads((out / "raw" / "hf_import_report.json").read_text())) == [
        "parallel-sentences.en-de",
        "parallel-sentences.en-fr",
    ]
    kept = sum(
        len(path.read_text(encoding="utf-8").splitlines())
        for path in (
            out / "pretok" / "de-en" / "parallel-sentences.en-de.de",
            out / "pretok" / "en-fr" / "parallel-sentences.en-fr.fr",
        )
    )
    index = json.loads((out / "shards" / "index.json").read_text())
    assert index["n_pairs"] == kept > 400, (index["n_pairs"], kept)


# --- mining: slurm/mine.sh, one array job per step ----------------------------------------------

MINE_SH = REPO_ROOT / "slurm" / "mine.sh"
MINING = ["--encoder", "ngram:dim=64", "--shard-lines", "5000", "--index", "ivf:n_lists=64,nprobe=8"]


def mining_sides(data_dir: Path, folder: Path) -> list[str]:
    """20k x 20k real lines (Tatoeba Challenge): German then French sentences against English ones,
    the English reversed; ~19k distinct a side, 4 shards of 5000. The --src/--tgt arguments."""
    challenge = data_dir / "tatoeba_challenge"
    deu, fra = challenge / "deu-eng" / "tatoeba-test-v2021-08-07", challenge / "eng-fra" / "tatoeba-test-v2021-08-07"
    src = (deu.with_suffix(".deu").read_text() + fra.with_suffix(".fra").read_text()).splitlines()[:20_000]
    tgt = (fra.with_suffix(".eng").read_text() + deu.with_suffix(".eng").read_text()).splitlines()[::-1][:20_000]
    (folder / "src.txt").write_text("\n".join(src) + "\n")
    (folder / "tgt.txt").write_text("\n".join(tgt) + "\n")
    return ["--src", str(folder / "src.txt"), "--src-lang", "de", "--tgt", str(folder / "tgt.txt"), "--tgt-lang", "en"]


def submit_mining(sides: list[str], out: Path, work: Path, parallel: int) -> dict[str, tuple[str, str]]:
    """bash slurm/mine.sh; returns {step: (job id, its units)} of the steps it submitted."""
    env = {
        **os.environ,
        "WORK": str(work),
        "LOGS": str(work.parent / "logs"),
        "PYTHON": sys.executable,
        "PYTHONPATH": str(REPO_ROOT),
        "OMP_NUM_THREADS": "1",
        "MAX_PARALLEL": str(parallel),
        "MINE_SBATCH_ARGS": "--cpus-per-task=1 --mem=1G",
    }
    result = subprocess.run(
        ["bash", str(MINE_SH), *sides, "--out", str(out), *MINING],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        check=True,
    )
    found = re.findall(r"submitted (\w+) \(units (\S+)\): job (\d+)", result.stdout)
    return {step: (job, units) for step, units, job in found}


def test_mine_sh_submits_one_array_per_step_each_after_the_last(tmp_path):
    """A stand-in sbatch records each call: steps with no unit (a flat index: no train, populate
    or merge) are left out, each array depends on the one before, extra options reach every step
    (MINE_SBATCH_ARGS) or one (KNN_SBATCH_ARGS); a second run submits only unfinished units."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/bash\necho "$*" >> {calls}\necho $(( $(wc -l < {calls}) + 100 ))\n')
    fake.chmod(0o755)
    (tmp_path / "a.txt").write_text("Der Hund bellt.\nDie Katze schläft.\nGuten Tag!\n")
    (tmp_path / "b.txt").write_text("The dog barks.\nThe cat sleeps.\n")
    env = {
        **os.environ,
        "PATH": f"{fake.parent}:{os.environ['PATH']}",
        "WORK": str(tmp_path / "work"),
        "LOGS": str(tmp_path / "logs"),
        "PYTHON": sys.executable,
        "PYTHONPATH": str(REPO_ROOT),
        "MINE_SBATCH_ARGS": "--mem=4G",
        "KNN_SBATCH_ARGS": "--gres=gpu:1 --cpus-per-task=8",
    }
    mining = ["--src", str(tmp_path / "a.txt"), "--src-lang", "de", "--tgt", str(tmp_path / "b.txt")]
    mining += ["--tgt-lang", "en", "--out", str(tmp_path / "pairs.tsv"), "--encoder", "ngram", "--shard-lines", "2"]
    result = subprocess.run(["bash", str(MINE_SH), *mining], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.splitlines() == [
        "submitted embed (units 0-2): job 101",
        "submitted knn (units 0-2): job 102",
        "submitted score (units 0-2): job 103",
        "submitted write (units 0): job 104",
    ]
    lines = calls.read_text().splitlines()
    common = f"--kill-on-invalid-dep=yes --job-name=ems-mine-{{}} --output={tmp_path / 'logs'}/%x-%A_%a.out"
    common += f" --export=ALL,STEP={{}},WORK={tmp_path / 'work'} --mem=4G"
    assert lines[0] == f"--parsable --array=0-2%64 {common.format('embed', 'embed')} {MINE_SH}"
    assert lines[1] == (
        f"--parsable --array=0-2%64 --dependency=afterok:101 {common.format('knn', 'knn')} "
        f"--gres=gpu:1 --cpus-per-task=8 {MINE_SH}"
    )
    assert lines[3].startswith("--parsable --array=0%64 --dependency=afterok:103 ")

    # the stage a task runs (SLURM sets STEP and the array task id), then a second submission
    task = {**env, "STEP": "embed", "SLURM_ARRAY_TASK_ID": "1"}
    subprocess.run(["bash", str(MINE_SH)], capture_output=True, text=True, env=task, check=True)
    result = subprocess.run(["bash", str(MINE_SH), *mining], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.splitlines()[0] == "submitted embed (units 0,2): job 105"


def queued(jobs: list[str]) -> str:
    return subprocess.run(["squeue", "-h", "-j", ",".join(jobs)], capture_output=True, text=True).stdout.strip()


def done_records(work: Path) -> dict[str, int]:
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in work.glob("*/done/*.json")}


@pytest.mark.slow
def test_sbatch_mining_resumes_after_a_scancel_and_writes_the_local_launchers_bytes(slurm_cluster, data_dir, tmp_path):
    """slurm/mine.sh submits 7 dependent array jobs (37 tasks); a scancel of embed tasks (one
    running, if any, and the last) makes the later steps' dependencies fail (--kill-on-invalid-dep);
    the same command again submits only what is unfinished, and the TSV equals, byte for byte,
    the local launcher's (2 worker processes) on the same input."""
    sides = mining_sides(data_dir, tmp_path)
    local = tmp_path / "local.tsv"
    subprocess.run(
        [sys.executable, "-m", "ems.apps.mine", *sides, "--out", str(local), *MINING, "--workers", "2"],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"},
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    work, out = tmp_path / "work", tmp_path / "slurm.tsv"

    first = submit_mining(sides, out, work, parallel=1)
    assert {step: units for step, (_, units) in first.items()} == {
        "embed": "0-7",
        "train": "0-1",
        "populate": "0-7",
        "merge": "0-1",
        "knn": "0-7",
        "score": "0-7",
        "write": "0",
    }
    embed = first["embed"][0]
    wait_until(lambda: (work / "embed" / "done" / "embed-src-00000.json").exists(), JOB_TIMEOUT, "embed shard 0")
    running: list[str] = []  # an embed task in the middle of its shard (one runs at a time: MAX_PARALLEL=1)

    def one_running() -> bool:
        command = ["squeue", "-h", "-j", embed, "-t", "RUNNING", "-o", "%i"]
        tasks = subprocess.run(command, capture_output=True, text=True).stdout.split()
        running[:] = [task for task in tasks if task != f"{embed}_0"]  # task 0 may still be exiting
        return bool(running)

    wait_until(one_running, JOB_TIMEOUT, "a running embed task")
    subprocess.run(["scancel", *running, f"{embed}_7"], check=True)
    jobs = [job for job, _ in first.values()]
    wait_until(lambda: not queued(jobs), JOB_TIMEOUT, "the first submission's jobs to end")
    assert not out.exists() and not (work / "embed" / "done" / "embed-tgt-00003.json").exists()
    before = done_records(work)
    assert "embed/done/embed-src-00000.json" in before

    second = submit_mining(sides, out, work, parallel=2)
    assert "0" not in second["embed"][1].replace("-", ",").split(",")  # finished shards are not submitted
    write = second["write"][0]
    info = wait_for_job(write, work.parent / "logs" / f"ems-mine-write-{write}_0.out")
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0")
    assert out.read_bytes() == local.read_bytes() and out.stat().st_size > 100_000
    after = done_records(work)
    assert {name: after[name] for name in before} == before  # no finished unit was done again
    assert not list(work.rglob("*.partial"))
