#!/bin/bash
# Multi-node EMS training with DeepSpeed under SLURM: one torchrun launcher per node (srun),
# rendezvous at the first node of the allocation.
#
#   sbatch slurm/train.sh                      # paper config on the nodes requested below
#   CONFIG=configs/train/demo.yaml DATA=... VOCAB=... sbatch --nodes=1 slurm/train.sh
#
# What a user edits: the #SBATCH lines (nodes, GPUs, time, partition) and DATA/VOCAB/OUT/CONFIG.
#SBATCH --job-name=ems-train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=48:00:00
#SBATCH --output=logs/%x-%j.out
set -euo pipefail

CONFIG=${CONFIG:-configs/train/ems-paper.yaml}
DATA=${DATA:?set DATA to the shard directory written by data_prep binarize}
VOCAB=${VOCAB:?set VOCAB to the vocabulary directory}
OUT=${OUT:-runs/${SLURM_JOB_NAME:-ems}-${SLURM_JOB_ID:-local}}
PROCS_PER_NODE=${PROCS_PER_NODE:-${SLURM_GPUS_PER_NODE:-1}}

MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=${MASTER_PORT:-29500}
mkdir -p logs "$OUT"

srun --kill-on-bad-exit=1 torchrun \
    --nnodes "$SLURM_NNODES" --nproc_per_node "$PROCS_PER_NODE" \
    --rdzv_id "$SLURM_JOB_ID" --rdzv_backend c10d --rdzv_endpoint "$MASTER_ADDR:$MASTER_PORT" \
    -m ems.train --config "$CONFIG" --set data="$DATA" vocab="$VOCAB" out="$OUT"
