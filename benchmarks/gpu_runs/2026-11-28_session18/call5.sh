#!/usr/bin/env bash
# Session 18, call 5: the paper DAG from scratch on both GPUs of a two-H200 host (MPS,
# GPU_JOBS=28) at the code of call 3 (the generative nets' feature padding): the two-GPU speedup
# against call 3's one-H200 build.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-565}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
GPU_JOBS=28 bash benchmarks/gpu_dag_call.sh
cd "$OUT" && rm -f results.tgz.part-* && tar czf call5.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
