#!/usr/bin/env bash
# Session 22, call 3 (the one-H200 kind, 16 cores, as sessions 19-21's one-GPU builds): the paper
# DAG from scratch (MPS, GPU_JOBS=20) at the commit with SAFFU's loss-only held-out checks and
# the probe's replayed passes (both give the same values), beside calls 1-2's start-up changes.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"
GPU_JOBS=${GPU_JOBS:-20} bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
