#!/usr/bin/env bash
# Session 22, call 2 (the same two-H200 host kind): the paper DAG from scratch on both GPUs
# (MPS, GPU_JOBS=40: 20 a GPU, as call 1's one-GPU build), same commit as call 1.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"
GPU_JOBS=${GPU_JOBS:-40} bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
