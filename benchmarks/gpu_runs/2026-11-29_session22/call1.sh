#!/usr/bin/env bash
# Session 22, call 1 (a two-H200 host): the paper DAG from scratch on ONE of its GPUs
# (CUDA_VISIBLE_DEVICES=0, MPS, GPU_JOBS=20 as sessions 20-21's one-GPU builds), at the commit
# whose corpus, tokenize and image-decode jobs import no torch. Call 2 builds it on both GPUs.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"
CUDA_VISIBLE_DEVICES=${ONE_GPU-0} GPU_JOBS=${GPU_JOBS:-20} bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
