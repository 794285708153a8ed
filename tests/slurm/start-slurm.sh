#!/usr/bin/env bash
# A one-node Slurm for the cluster tests (Debian's slurm-wlm and munge; `make test-tools` installs
# them): munged, slurmctld and slurmd as root, no systemd, no cgroups, no accounting (sacct refuses,
# as on many real clusters). The node offers stand-in GPU types gpu:h100:1 and gpu:a100:1 (any
# existing file stands in for a device) and claims 4 CPUs so that tasks run side by side.
# Idempotent; prints `slurm ready` once sinfo shows the node. Stop it with `pkill -x slurmd; pkill -x slurmctld`.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "start-slurm.sh: needs root (Slurm's daemons run as root here)" >&2; exit 1; }
for tool in munged slurmctld slurmd sbatch; do
  command -v $tool >/dev/null || { echo "start-slurm.sh: $tool is missing; run \`make test-tools\` (Debian's slurm-wlm, munge)" >&2; exit 1; }
done
state=/var/tmp/kernellab-slurm
mkdir -p $state/state $state/spool $state/log /run/munge /etc/slurm /etc/munge /var/log/munge /var/lib/munge
if ! munge -n >/dev/null 2>&1; then
  if ! [ -s /etc/munge/munge.key ]; then
    head -c 1024 /dev/urandom > /etc/munge/munge.key
  fi
  chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  # --force: the sandbox's / is not owned the way munged likes; run as root so it can read its key.
  munged --force
  for _ in $(seq 40); do munge -n >/dev/null 2>&1 && break; sleep 0.25; done
fi
host=$(hostname -s)
cat > /etc/slurm/slurm.conf.new <<CONF
ClusterName=kernellab-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state/state
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# Time limits are enforced within seconds (the default checks every 30 s).
InactiveLimit=0
KillWait=5
MinJobAge=600
SlurmdParameters=config_overrides
NodeName=$host CPUs=4 Gres=gpu:h100:1,gpu:a100:1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
printf 'Name=gpu Type=h100 File=/dev/null\nName=gpu Type=a100 File=/dev/zero\n' > /etc/slurm/gres.conf
if ! cmp -s /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf; then
  mv /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf
  pkill -x slurmctld 2>/dev/null || true; pkill -x slurmd 2>/dev/null || true; sleep 1
else
  rm /etc/slurm/slurm.conf.new
fi
pgrep -x slurmctld >/dev/null || slurmctld
# slurmd, and so every task it starts, at nice 10: beside CI's image builds (.ci/run's lanes) the tasks take mostly
# what the builds leave, yet a task that should end in seconds still gets a tenth of a core under full load.
pgrep -x slurmd >/dev/null || nice -n 10 slurmd
for _ in $(seq 60); do sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break; sleep 0.5; done
if ! sinfo -h -o %t | grep -qE '^(idle|mix|alloc)'; then
  scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 2
fi
sinfo -h -o %t | grep -qE '^(idle|mix|alloc)' || { tail -n 20 $state/log/slurmctld.log $state/log/slurmd.log >&2; exit 1; }
echo "slurm ready: node $host, gres gpu:h100:1,gpu:a100:1"
