#!/bin/bash
# Bitext mining at web scale under SLURM: one array job per step of ems.apps.mine's staged run (embed
# each shard -> train each side's index on a sample -> populate it per shard -> merge it on disk ->
# k nearest neighbours per shard -> margin scores per shard -> write the TSV), each step starting
# once the previous one has succeeded (--dependency=afterok). Run it where sbatch works; it plans
# the run (one pass over both inputs, ~70 bytes of memory per distinct line) and submits the steps:
#
#   WORK=/scratch/mine-de-en bash slurm/mine.sh --encoder ems:runs/x/model --src de.txt --src-lang de \
#       --tgt en.txt --tgt-lang en --out pairs.tsv --shard-lines 1000000 --dtype float16 --index ivf-sq8
#
# The arguments are those of `python -m ems.apps.mine` (--work-dir is $WORK). Every unit writes its files
# atomically and records itself as finished, so a pre-empted task (--requeue) just runs again, and
# after a failure or a scancel the same command submits only the units that are not finished (a
# step with none is left out). What a user edits: the #SBATCH lines, and extra sbatch options for
# every step in MINE_SBATCH_ARGS or for one step in <STEP>_SBATCH_ARGS, e.g.
# EMBED_SBATCH_ARGS="--gres=gpu:1 --cpus-per-task=8" KNN_SBATCH_ARGS="--gres=gpu:1" (faiss-gpu).
# MAX_PARALLEL caps the tasks of a step running at once; LOGS is where the task logs go.
#SBATCH --job-name=ems-mine
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --time=12:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=logs/%x-%A_%a.out
set -euo pipefail

WORK=${WORK:?set WORK to the work directory of the run (on a file system every node sees)}
PYTHON=${PYTHON:-python}

if [[ -z "${STEP:-}" ]]; then
    LOGS=${LOGS:-logs}
    mkdir -p "$LOGS"
    # one line per step: "STEP UNITS", UNITS an --array value of its unfinished units, "-" for none
    plan=$("$PYTHON" -m ems.apps.mine plan --work-dir "$WORK" "$@")
    dependency=()
    while read -r step units; do
        [[ $units == - ]] && continue
        step_args="${step^^}_SBATCH_ARGS"
        read -ra extra <<< "${MINE_SBATCH_ARGS:-} ${!step_args:-}"
        job=$(sbatch --parsable --array="$units%${MAX_PARALLEL:-64}" "${dependency[@]}" --kill-on-invalid-dep=yes \
            --job-name="ems-mine-$step" --output="$LOGS/%x-%A_%a.out" --export=ALL,STEP="$step",WORK="$WORK" \
            "${extra[@]}" "$0")
        job=${job%%;*}
        dependency=(--dependency="afterok:$job")
        echo "submitted $step (units $units): job $job"
    done <<< "$plan"
    exit 0
fi

exec "$PYTHON" -m ems.apps.mine stage "$STEP" --work-dir "$WORK" --unit "$SLURM_ARRAY_TASK_ID"
