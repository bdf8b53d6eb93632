#!/usr/bin/env bash
# Session 19, call 6: the paper DAG from scratch on one GPU (MPS) with GPU_JOBS=20 instead of
# 14, same src/ as call 4 (421 s with 14): in call 4 the last 80 s were bound by the slots
# (start-up-bound LAMBADA, probe and SST-2 jobs, then the PIL generative fits), not the GPU.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-565}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
GPU_JOBS=20 bash benchmarks/gpu_dag_call.sh
tar czf "$OUT/saffu_metrics.tgz" $(find results/paper/saffu -name metrics.json) 2>/dev/null
cd "$OUT" && tar czf call6.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt logs.tgz saffu_metrics.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz saffu_metrics.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
