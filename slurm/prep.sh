#!/bin/bash
# Data prep at OPUS scale under SLURM: an array job with one task per language pair
# (fetch -> clean -> pretokenize), then a join job (vocab -> binarize) that runs once every
# pair task has succeeded. Run it on the login node; it submits both jobs itself:
#
#   CONFIG=configs/prep/ems62.yaml OUT=runs/ems62 DOWNLOADS=/scratch/opus bash slurm/prep.sh
#   CONFIG=configs/prep/small.yaml OUT=runs/small MIRROR=/data/OPUS bash slurm/prep.sh   # offline mirror
#   CONFIG=configs/prep/distill_hf.yaml OUT=runs/dh bash slurm/prep.sh   # hf: corpora only: no OPUS source
#
# A pair task fetches the config's OPUS corpora and its hf: corpora (Hugging Face datasets) of that
# pair; an hf: corpus whose pair is not known before reading (language columns) is read by every
# task, each keeping its own pair. HF_DATASETS_CACHE / HF_HUB_OFFLINE reach the tasks (--export=ALL).
#
# Up to MAX_PARALLEL (16) pair tasks run at once, into the same OUT/raw, OUT/clean and OUT/pretok:
# a stage with --pair locks only its pair's folder and merges its entries into shared reports
# (data_prep/__main__.py), while a stage run on the whole directory refuses to start beside them.
# Every stage resumes: a resubmitted task keeps finished downloads, files and shard parts.
# What a user edits: the #SBATCH lines (time, partition, CPUs) and CONFIG/OUT/DOWNLOADS|MIRROR/DATA_DIR
# (PAIR_CPUS/PAIR_MEM and JOIN_CPUS/JOIN_MEM override the pair tasks' and the join's resources).
#SBATCH --job-name=ems-prep
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=8G
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%A_%a.out
set -euo pipefail

CONFIG=${CONFIG:?set CONFIG to a data-prep plan (configs/prep/*.yaml)}
OUT=${OUT:?set OUT to the output directory}
DATA_DIR=${DATA_DIR:-${EMS_DATA_DIR:-../shared/data}}
if [[ -n "${MIRROR:-}" ]]; then
    SOURCE=(--mirror "$MIRROR")
elif [[ -n "${DOWNLOADS:-}" ]]; then
    SOURCE=(--downloads "$DOWNLOADS" --catalog "${CATALOG:-online}")
else
    SOURCE=()  # fetch refuses a config with OPUS corpora: set DOWNLOADS (online) or MIRROR (local OPUS layout)
fi
PYTHON=${PYTHON:-python}

if [[ -z "${SLURM_JOB_ID:-}" ]]; then
    mkdir -p logs "$OUT"
    "$PYTHON" -m data_prep pairs --config "$CONFIG" > "$OUT/pairs.txt"
    n_pairs=$(wc -l < "$OUT/pairs.txt")
    array=$(sbatch --parsable --array="0-$((n_pairs - 1))%${MAX_PARALLEL:-16}" ${PAIR_CPUS:+--cpus-per-task="$PAIR_CPUS"} \
        ${PAIR_MEM:+--mem="$PAIR_MEM"} --export=ALL,STAGE=pair "$0")
    sbatch --dependency="afterok:$array" --cpus-per-task="${JOIN_CPUS:-16}" --mem="${JOIN_MEM:-64G}" \
        --export=ALL,STAGE=join "$0"
    echo "submitted $n_pairs pair tasks (job $array) and the join step"
    exit 0
fi

if [[ "${STAGE:?}" == pair ]]; then
    pair=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "$OUT/pairs.txt")
    "$PYTHON" -m data_prep fetch --config "$CONFIG" ${SOURCE[@]+"${SOURCE[@]}"} --out "$OUT/raw" --pair "$pair"
    "$PYTHON" -m data_prep clean --config "$CONFIG" --data-dir "$DATA_DIR" --in "$OUT/raw" --out "$OUT/clean" --pair "$pair"
    "$PYTHON" -m data_prep pretokenize --in "$OUT/clean" --out "$OUT/pretok" --pair "$pair" --workers "$SLURM_CPUS_PER_TASK"
else
    "$PYTHON" -m data_prep vocab --config "$CONFIG" --in "$OUT/pretok" --out "$OUT/vocab"
    "$PYTHON" -m data_prep binarize --in "$OUT/pretok" --vocab "$OUT/vocab" --out "$OUT/shards" --workers "$SLURM_CPUS_PER_TASK"
fi
