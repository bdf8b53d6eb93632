#!/usr/bin/env bash
# Session 20, call 2: the SAFFU CUDA tests (the interpreter benchmark test now skips where the
# host's Triton interpreter cannot loop), then the paper DAG from scratch on one GPU (MPS, 20
# jobs) with the bytecode cache of gpu_env.sh (compiled before the DAG; its seconds in
# pycache.txt inside logs.tgz), same src/ as call 1 otherwise.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 100 python -m pytest -q -p no:cacheprovider -rs tests/test_saffu_cuda.py 2>&1 | tail -8 > "$OUT/pytest_saffu.txt"
tail -3 "$OUT/pytest_saffu.txt"; echo "t=$(( $(date +%s) - CALL_START )) tests"
GPU_JOBS=20 bash benchmarks/gpu_dag_call.sh
tar czf "$OUT/saffu_metrics.tgz" $(find results/paper/saffu -name metrics.json) 2>/dev/null
cd "$OUT" && tar czf call2.tgz gpu.txt pytest_saffu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz saffu_metrics.tgz \
  && rm -f gpu.txt pytest_saffu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz saffu_metrics.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
