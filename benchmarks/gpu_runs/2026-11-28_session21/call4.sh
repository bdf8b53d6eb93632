#!/usr/bin/env bash
# Session 21, call 4 (one H200: the two-H200 kind was not lent): tests/test_flow.py (its CUDA cases: the
# trainable nets' alignment, a solved net's aligned sampling), then the paper DAG from scratch on
# one GPU (MPS, GPU_JOBS=20, a repeat of call 3 at this commit; GPU_JOBS=40 on both GPUs of a
# two-H200 host).
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 100 python -m pytest -q -p no:cacheprovider -rs tests/test_flow.py 2>&1 | tail -8 > "$OUT/pytest_flow.txt"
tail -3 "$OUT/pytest_flow.txt"; echo "t=$(( $(date +%s) - CALL_START )) tests"
GPU_JOBS=${GPU_JOBS:-20} bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call4.tgz gpu.txt pytest_flow.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt pytest_flow.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
