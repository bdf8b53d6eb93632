#!/usr/bin/env bash
# Session 19, call 7: the paper DAG from scratch on both GPUs of a two-H200 host (MPS,
# GPU_JOBS=40: twice call 6's 20) at call 4's src/: the two-GPU speedup against call 6 (393 s).
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-565}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
GPU_JOBS=40 bash benchmarks/gpu_dag_call.sh
cd "$OUT" && rm -f results.tgz.part-* && tar czf call7.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
