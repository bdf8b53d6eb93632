#!/usr/bin/env bash
# A throwaway single-node SLURM cluster on 127.0.0.1, every file under one directory.
#
#   tests/slurm/cluster.sh start DIR   write DIR/etc/slurm.conf (this machine's CPUs and memory,
#                                      no accounting: job status comes from squeue), start munged,
#                                      slurmctld and slurmd, wait until the node is idle, and write
#                                      DIR/env.sh (source it: it exports SLURM_CONF and puts
#                                      DIR/bin, with an srun that keeps it, first on PATH)
#   tests/slurm/cluster.sh stop DIR    stop the daemons started by `start DIR` (by their pid files)
#
# Needs Debian's slurm-wlm and munge (apt-get install slurm-wlm munge) and root, as slurmd does.
# Nothing listens beyond loopback; ports are picked free at start.
set -euo pipefail

usage() { echo "usage: $0 {start|stop} DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
cmd=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)

# Pid files of the daemons, in the order they are stopped.
PIDFILES=("$dir/run/slurmd.pid" "$dir/run/slurmctld.pid" "$dir/run/munged.pid")

stop() {
  local pidfile pid
  # Jobs first: their processes outlive slurmd.
  if [[ -s $dir/run/slurmctld.pid && -f $dir/etc/slurm.conf ]]; then
    SLURM_CONF="$dir/etc/slurm.conf" scancel --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 30); do
      [[ -z $(SLURM_CONF="$dir/etc/slurm.conf" squeue --noheader --states=RUNNING,COMPLETING 2>/dev/null) ]] && break
      sleep 1
    done
  fi
  for pidfile in "${PIDFILES[@]}"; do
    [[ -s $pidfile ]] || continue
    pid=$(<"$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

fail() {
  echo "slurm test cluster: $1" >&2
  for log in "$dir"/log/*.log; do
    [[ -s $log ]] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }
  done
  stop
  exit 1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local tool
  for tool in munged slurmctld slurmd sbatch srun squeue scontrol; do
    command -v "$tool" >/dev/null || fail "$tool not found: apt-get install -y slurm-wlm munge"
  done
  [[ $(id -u) -eq 0 ]] || fail "slurmd must run as root (uid 0), this is uid $(id -u)"
  stop  # leftovers of an earlier start in the same DIR
  mkdir -p "$dir"/{etc,run,log,state,spool,munge}
  chmod 700 "$dir/munge"

  # munge: a fresh key and a private socket.
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  local socket="$dir/munge/munge.socket"
  munged --force --socket="$socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" || fail "munged did not start"

  # One node named pillm-node: this machine's CPUs and memory as slurmd -C reports them.
  local hw cpus mem
  hw=$(slurmd -C | head -n 1)
  cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
  [[ -n $cpus && -n $mem ]] || fail "could not read CPUs/RealMemory from 'slurmd -C': $hw"
  cat >"$dir/etc/slurm.conf" <<EOF
# Written by tests/slurm/cluster.sh: one node on loopback, no accounting database.
ClusterName=pillmtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# No cgroups inside containers: track processes by parent pid, bind no tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# No slurmdbd: sacct has nothing to read, so job status must come from squeue, which keeps a
# finished job visible for MinJobAge seconds.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
ReturnToService=2
SchedulerParameters=sched_interval=2
NodeName=pillm-node NodeAddr=127.0.0.1 NodeHostname=$(hostname) CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=pillm-node Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$dir/etc/cgroup.conf" <<EOF
# Written by tests/slurm/cluster.sh: proctrack/linuxproc and task/none use no cgroups.
CgroupPlugin=autodetect
IgnoreSystemd=yes
EOF
  export SLURM_CONF="$dir/etc/slurm.conf"
  # Inside a job, snakemake-executor-plugin-slurm-jobstep drops every SLURM_* variable before its
  # nested srun, SLURM_CONF included; a real cluster keeps slurm.conf where srun looks by default
  # (/etc/slurm or configless), this one does not, so srun on the PATH puts it back.
  local srun_bin
  srun_bin=$(PATH=${PATH//"$dir/bin:"/} command -v srun) || fail "srun not found"
  mkdir -p "$dir/bin"
  printf '#!/bin/sh\nSLURM_CONF=%q exec %q "$@"\n' "$SLURM_CONF" "$srun_bin" >"$dir/bin/srun"
  chmod +x "$dir/bin/srun"
  printf 'export SLURM_CONF=%q\nexport PATH=%q:"$PATH"\n' "$SLURM_CONF" "$dir/bin" >"$dir/env.sh"

  slurmctld -i || fail "slurmctld did not start"
  slurmd -N pillm-node || fail "slurmd did not start"
  local state=""
  for _ in $(seq 60); do
    state=$(sinfo --noheader --nodes=pillm-node --format=%T 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 1
  done
  [[ $state == idle ]] || fail "node pillm-node not idle after 60 s (state: '${state:-none}')"
  echo "slurm test cluster up: $cpus CPUs, $mem MB; source $dir/env.sh"
}

case $cmd in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
