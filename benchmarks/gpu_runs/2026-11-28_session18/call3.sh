#!/usr/bin/env bash
# Session 18, call 3: the paper DAG from scratch on one GPU (MPS, GPU_JOBS=14) with the
# generative AdamW arms' feature padding (69b1770's src/); session 16's call 4 is the before.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-565}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
GPU_JOBS=14 bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call3.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt logs.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
