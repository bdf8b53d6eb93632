#!/usr/bin/env bash
# Session 20, call 3: the paper DAG from scratch on one GPU (MPS) with GPU_JOBS=26 instead of
# call 2's 20, same code (bytecode cache included): in call 2 the GPU was 100 % busy from about
# 13 s to 360 s, at 621 W on average (highest one-second draws about 700 W), with 7.9 of 16
# cores busy on average: do more jobs at once fill the GPU further?
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
GPU_JOBS=26 bash benchmarks/gpu_dag_call.sh
tar czf "$OUT/saffu_metrics.tgz" $(find results/paper/saffu -name metrics.json) 2>/dev/null
cd "$OUT" && tar czf call3.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz saffu_metrics.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz saffu_metrics.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
