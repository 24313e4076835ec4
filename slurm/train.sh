#!/bin/bash
# Multi-node EMS training under SLURM: one launcher per node (DeepSpeed's or torchrun) started by
# srun, rendezvous at the allocation's first node. A job near its time limit (or pre-empted by
# hand) checkpoints, requeues itself and resumes from OUT/checkpoints/latest.
#
#   mkdir -p logs                                            # from the repository root (sbatch writes logs/ there)
#   DATA=runs/x/shards/train VOCAB=runs/x/vocab sbatch slurm/train.sh
#   DATA=... VOCAB=... CONFIG=configs/train/demo.yaml sbatch --nodes=4 slurm/train.sh   # options override #SBATCH
#   DRY_RUN=1 NODES=2 GPUS_PER_NODE=4 DATA=... VOCAB=... bash slurm/train.sh           # print the launch lines only
#   (or: bash slurm/train.sh --dry-run)
#
# What a user edits: the #SBATCH lines below (nodes, GPUs per node, CPUs, time; add --partition /
# --account for the cluster) and the settings under them, or sets those in the environment when
# submitting (sbatch passes the environment on):
#   DATA, VOCAB    shards and vocabulary from data_prep (required)
#   CONFIG         training YAML (default configs/train/ems-paper.yaml); SET="key=value ..." overrides keys
#   OUT            run directory (default runs/<job name>-<job id>; a requeued job keeps its id, so it resumes)
#   LAUNCHER       deepspeed (default) or torchrun; PYTHON: the interpreter with ems installed
#   PROCS_PER_NODE processes per node (default: the GPUs per node)
#
# Stopping and requeueing. `--signal=B:USR1@120` makes SLURM send USR1 to this batch shell only,
# 120 s before the time limit. The trap below passes the request on to every trainer rank on
# every node twice over: it touches OUT/STOP (rank 0 sees it; the trainer all-reduces the stop
# flag, so all ranks stop at the same step) and it sends USR1 to every process of the training
# step (`scancel --signal=USR1`, which reaches the processes on all nodes; the launchers ignore
# USR1, because torchrun's agent and DeepSpeed's runner would die of it and do not forward it).
# The trainer finishes its step, saves a checkpoint and exits 99 (ems.training.stopping.PREEMPTED_EXIT_CODE);
# this script then runs `scontrol requeue`: the job waits, starts again under the same id,
# appends to the same log and resumes from the checkpoint. To pre-empt a running job by hand:
#   scancel --batch --signal=USR1 JOBID       (or: touch OUT/STOP)
# A plain `scancel JOBID` cancels: SIGTERM makes the ranks checkpoint and exit, and there is no requeue.
#SBATCH --job-name=ems-train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=48:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=logs/%x-%j.out
set -euo pipefail

[[ ${1:-} == --dry-run ]] && DRY_RUN=1
[[ ${DRY_RUN:-0} == 0 ]] && DRY_RUN=
SIMULATED=
if [[ -n $DRY_RUN && -z ${SLURM_JOB_ID:-} ]]; then
    # Simulate an allocation of NODES x GPUS_PER_NODE to show the launch lines.
    SIMULATED=1
    SLURM_JOB_ID=12345
    SLURM_JOB_NAME=ems-train
    SLURM_NNODES=${NODES:-2}
    SLURM_GPUS_PER_NODE=${GPUS_PER_NODE:-4}
    SLURM_CPUS_PER_TASK=${CPUS_PER_TASK:-16}
    SLURM_JOB_NODELIST="node[1-$SLURM_NNODES]"
fi

CONFIG=${CONFIG:-configs/train/ems-paper.yaml}
DATA=${DATA:?set DATA to the shard directory written by data_prep binarize}
VOCAB=${VOCAB:?set VOCAB to the vocabulary directory}
OUT=${OUT:-runs/${SLURM_JOB_NAME:-ems-train}-${SLURM_JOB_ID:?submit with sbatch, or use DRY_RUN=1}}
SET=${SET:-}
LAUNCHER=${LAUNCHER:-deepspeed}
PYTHON=${PYTHON:-python}
PROCS_PER_NODE=${PROCS_PER_NODE:-${SLURM_GPUS_PER_NODE:-1}}
PROCS_PER_NODE=${PROCS_PER_NODE##*:}  # "a100:4" -> 4
[[ $PROCS_PER_NODE -ge 1 ]] || { echo "no GPUs per node in this allocation: set PROCS_PER_NODE (processes per node)" >&2; exit 2; }
CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}
NNODES=${SLURM_NNODES:-1}
MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 10000))}
PREEMPTED_EXIT_CODE=99  # ems.training.stopping.PREEMPTED_EXIT_CODE
HOSTFILE=$OUT/hostfile  # DeepSpeed's: every node's name and process count

# The allocation's hosts, one a line (scontrol expands node[1-2]; the dry run without SLURM does it here).
hostnames() {
    if [[ -z $SIMULATED ]]; then
        scontrol show hostnames "$SLURM_JOB_NODELIST"
    else
        seq -f "node%g" 1 "$NNODES"
    fi
}
HOSTS=$(hostnames)
MASTER_ADDR=$(head -n 1 <<< "$HOSTS")

# shellcheck disable=SC2206  # SET is split into key=value words on purpose
TRAIN_ARGS=(--config "$CONFIG" --set data="$DATA" vocab="$VOCAB" out="$OUT" $SET)

# The command one node runs, as a shell line; $1 is the node rank (a number, or "$SLURM_NODEID"
# to be expanded on the node).
launch_deepspeed() {
    printf '%q ' "$PYTHON" -m deepspeed.launcher.runner --hostfile "$HOSTFILE" --no_ssh
    printf -- '--node_rank=%s ' "$1"
    printf '%q ' --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --num_gpus "$PROCS_PER_NODE" \
        --module ems.training.train "${TRAIN_ARGS[@]}"
}

launch_torchrun() {
    printf '%q ' "$PYTHON" -m torch.distributed.run --nnodes "$NNODES" --nproc_per_node "$PROCS_PER_NODE"
    printf -- '--node_rank=%s ' "$1"
    printf '%q ' --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" -m ems.training.train "${TRAIN_ARGS[@]}"
}

declare -F "launch_$LAUNCHER" >/dev/null || { echo "LAUNCHER must be deepspeed or torchrun, not '$LAUNCHER'" >&2; exit 2; }
node_line() { local line; line=$(launch_"$LAUNCHER" "$1"); printf '%s' "${line% }"; }
# Launchers ignore USR1 (an ignored signal stays ignored across exec); the trainer installs its own handler.
NODE_COMMAND="trap \"\" USR1; exec $(node_line '"$SLURM_NODEID"')"
SRUN=(srun --nodes="$NNODES" --ntasks-per-node=1 --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1 bash -c)
# Processes on a node share its CPUs (torchrun sets this too; DeepSpeed's launcher does not).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( CPUS_PER_TASK / PROCS_PER_NODE > 0 ? CPUS_PER_TASK / PROCS_PER_NODE : 1 ))}

if [[ -n $DRY_RUN ]]; then
    echo "# dry run: $NNODES nodes x $PROCS_PER_NODE processes, LAUNCHER=$LAUNCHER, master $MASTER_ADDR:$MASTER_PORT, OMP_NUM_THREADS=$OMP_NUM_THREADS"
    [[ $LAUNCHER == deepspeed ]] && echo "# $HOSTFILE:" && sed "s/\$/ slots=$PROCS_PER_NODE/; s/^/#   /" <<< "$HOSTS"
    printf '%q ' "${SRUN[@]}"; printf "'%s'\n" "$NODE_COMMAND"
    node_rank=0
    while read -r host; do
        echo "node $node_rank ($host): $(node_line "$node_rank")"
        node_rank=$((node_rank + 1))
    done <<< "$HOSTS"
    exit 0
fi

echo "=== $(date '+%F %T') job $SLURM_JOB_ID start $(( ${SLURM_RESTART_COUNT:-0} + 1 )) on $SLURM_JOB_NODELIST: $NNODES nodes x $PROCS_PER_NODE processes, out=$OUT"
mkdir -p "$OUT"
[[ $LAUNCHER == deepspeed ]] && sed "s/\$/ slots=$PROCS_PER_NODE/" <<< "$HOSTS" > "$HOSTFILE"

stop_requested=
request_stop() {
    stop_requested=1
    printf '\n=== %s stop requested (USR1): asking every rank to checkpoint and exit\n' "$(date '+%F %T')"  # \n: after tqdm's \r
    touch "$OUT/STOP"
    scancel --signal=USR1 "$SLURM_JOB_ID" || true  # all non-batch steps, on all nodes
}
trap request_stop USR1

# srun runs in the background: bash runs a trap only once the foreground command returns, and
# `wait` returns at once on a trapped signal, so wait again until srun has really finished.
"${SRUN[@]}" "$NODE_COMMAND" &
srun_pid=$!
status=0
wait "$srun_pid" || status=$?
while kill -0 "$srun_pid" 2>/dev/null; do
    status=0
    wait "$srun_pid" || status=$?
done

# Requeue on the trainer's pre-emption status, or on any failure after a stop this shell asked
# for (torchrun reports a worker's 99 as 1).
if [[ $status -eq $PREEMPTED_EXIT_CODE || ( -n $stop_requested && $status -ne 0 ) ]]; then
    echo "=== $(date '+%F %T') training stopped with a checkpoint (status $status): requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
fi
echo "=== $(date '+%F %T') training ended with status $status"
exit "$status"
