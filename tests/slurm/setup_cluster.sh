#!/usr/bin/env bash
# Start a one-node SLURM cluster on this machine for the tests (tests/test_slurm.py):
# munged + slurmctld + slurmd, this host as the only node of the partition "debug".
#
#   sudo bash tests/slurm/setup_cluster.sh      # .ci/run calls it before pytest
#
# Idempotent: installs Debian's slurm packages only when they are missing, and returns at once
# when the node already shows up idle in `sinfo`. Needs root and (for the install) apt-get.
# Exit status 0: the cluster is up; anything else: it is not, and the last lines say why.
set -euo pipefail

SLURM_CONF=/etc/slurm/slurm.conf
LOG_DIR=/var/log/slurm
SPOOL_CTLD=/var/spool/slurmctld
SPOOL_D=/var/spool/slurmd
# A requeued job waits this long before it may start again (Slurm's default is 120 s).
CRED_EXPIRE=${CRED_EXPIRE:-5}
MARKER="# Written by tests/slurm/setup_cluster.sh"

die() { echo "setup_cluster: $*" >&2; exit 1; }

node_is_idle() { sinfo --noheader --states=idle --format=%N 2>/dev/null | grep -qx "$(hostname -s)"; }

[[ $(id -u) -eq 0 ]] || die "needs root (it starts munged, slurmctld and slurmd as root)"
if [[ -f $SLURM_CONF ]] && ! grep -qx "$MARKER: a one-node test cluster." "$SLURM_CONF"; then
    die "$SLURM_CONF exists and was not written by this script: not touching a real SLURM installation"
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || die "slurm is not installed and apt-get is unavailable"
    echo "setup_cluster: installing slurmctld slurmd slurm-client munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null \
        || die "apt-get install slurmctld slurmd slurm-client munge failed"
fi

host=$(hostname -s)
# `slurmd -C` prints this node's line for slurm.conf (NodeName=... CPUs=... RealMemory=...).
node_line=$(slurmd -C | head -n 1)
[[ $node_line == NodeName=* ]] || die "slurmd -C printed no node line: $node_line"
conf=$(cat <<EOF
$MARKER: a one-node test cluster.
ClusterName=ems-test
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=$CRED_EXPIRE
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
# Test every pending job each second (default: 60 s), so a requeued job starts once its wait is over.
SchedulerParameters=sched_interval=1,bf_interval=1
ReturnToService=2
JobRequeue=1
MinJobAge=600
StateSaveLocation=$SPOOL_CTLD
SlurmdSpoolDir=$SPOOL_D
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$node_line State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
)
if [[ -f $SLURM_CONF && $(cat "$SLURM_CONF") == "$conf" ]] && node_is_idle; then
    echo "setup_cluster: already running"; sinfo; exit 0
fi
mkdir -p "$(dirname "$SLURM_CONF")" "$LOG_DIR" "$SPOOL_CTLD" "$SPOOL_D"
printf '%s\n' "$conf" > "$SLURM_CONF"

# munged runs as its own user; the Debian package created the key.
[[ -f /etc/munge/munge.key ]] || die "/etc/munge/munge.key is missing"
mkdir -p /run/munge && chown munge:munge /run/munge
if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
fi
munge -n | unmunge >/dev/null || die "munge round trip failed"

# (Re)start the daemons so that they read the slurm.conf written above.
for daemon in slurmctld slurmd; do
    pid=$(cat "/run/$daemon.pid" 2>/dev/null || true)
    if [[ -n $pid ]] && kill "$pid" 2>/dev/null; then
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
done
slurmctld || die "slurmctld did not start: $(tail -n 5 "$LOG_DIR/slurmctld.log")"
slurmd || die "slurmd did not start: $(tail -n 5 "$LOG_DIR/slurmd.log")"

for _ in $(seq 60); do
    if node_is_idle; then
        echo "setup_cluster: up"; sinfo; exit 0
    fi
    sleep 0.5
done
sinfo || true
die "node $host did not become idle in 30 s; slurmctld log: $(tail -n 5 "$LOG_DIR/slurmctld.log"); slurmd log: $(tail -n 5 "$LOG_DIR/slurmd.log")"
