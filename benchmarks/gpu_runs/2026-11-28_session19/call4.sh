#!/usr/bin/env bash
# Session 19, call 4: the paper DAG from scratch on one GPU (MPS, GPU_JOBS=14) with SAFFU's
# fixed-order forward and RowAdamW; session 18's call 3 (438 s) is the before. Also brings
# back the SAFFU jobs' metrics.json (to read their steps, losses and times).
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-565}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
GPU_JOBS=14 bash benchmarks/gpu_dag_call.sh
tar czf "$OUT/saffu_metrics.tgz" $(find results/paper/saffu -name metrics.json) 2>/dev/null
cd "$OUT" && tar czf call4.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt logs.tgz saffu_metrics.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz saffu_metrics.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
