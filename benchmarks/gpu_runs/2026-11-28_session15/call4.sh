#!/usr/bin/env bash
# Session 15, call 4: the paper DAG from scratch on both GPUs of a two-H200 host (MPS,
# GPU_JOBS=28), at the code of call 1 (the attention of call 3 reverted): the two-GPU speedup.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-420}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
GPU_JOBS=28 bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call4.tgz timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
tar xzf call4.tgz -O gpu_power.txt | head -20; ls
echo "end t=$(( $(date +%s) - CALL_START ))"
