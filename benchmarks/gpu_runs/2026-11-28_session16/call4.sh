#!/usr/bin/env bash
# Session 16, call 4: the paper DAG from scratch on one GPU (MPS, GPU_JOBS=14) at be90185's src/
# (a loose block of the fused head's softmax pass redone from its rows' largest logits).
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-565}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
GPU_JOBS=14 bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call4.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt logs.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
