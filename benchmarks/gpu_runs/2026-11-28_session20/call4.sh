#!/usr/bin/env bash
# Session 20, call 4 (both GPUs of a two-H200 host): the GPU tests (gpu_run.sh's list, before
# the DAG and outside its clock), then the paper DAG from scratch on both GPUs (MPS, GPU_JOBS=40,
# 20 a GPU as call 2's one-GPU build), at 747247f (bytecode cache; the image decodes without
# torch).
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
GPU_TESTS=1 GPU_JOBS=40 bash benchmarks/gpu_dag_call.sh
tar czf "$OUT/saffu_metrics.tgz" $(find results/paper/saffu -name metrics.json) 2>/dev/null
cd "$OUT" && tar czf call4.tgz gpu.txt pytest_gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz saffu_metrics.tgz \
  && rm -f gpu.txt pytest_gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz saffu_metrics.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
