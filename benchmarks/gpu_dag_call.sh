#!/usr/bin/env bash
# One device call of the paper DAG's GPU part from scratch, its logs packed into one archive
# (a call returns at most 8 files). Env as benchmarks/gpu_run.sh; e.g. one GPU of a two-GPU host:
#   CUDA_VISIBLE_DEVICES=0 GPU_JOBS=14 NO_PACK=1 bash benchmarks/gpu_dag_call.sh
# and both:  GPU_JOBS=28 bash benchmarks/gpu_dag_call.sh
# GPU_TESTS=1 first runs the GPU-only tests (pytest_gpu.txt; outside the DAG's time).
# CALL_DEADLINE (seconds from this script's start, default 585: a call may run 600; set it
# below the call's limit when the device time left cuts that limit) bounds
# Snakemake too, so the logs and results are packed before the call is killed: in session 10
# GPU tests plus SNAKE_TIMEOUT=560 overran, the call came back without results, and its
# Snakemake lock made the next call fail at once.
OUT=${OUT:-gpu_out}
export CALL_START=${CALL_START:-$(date +%s)} CALL_DEADLINE=${CALL_DEADLINE:-585}
# From scratch: a warm host keeps the previous call's ignored outputs and compile caches, and
# the lock of a Snakemake that a killed call left behind.
rm -rf results/paper /tmp/torchinductor_"$(whoami)" ~/.triton/cache .snakemake/locks
MPS=1 SKIP_PIL_BENCH=1 SKIP_AFTER_BENCH=1 LOCAL_DIR=${LOCAL_DIR:-.gpu/data} \
  SNAKE_TIMEOUT=${SNAKE_TIMEOUT:-555} bash benchmarks/gpu_run.sh >"$OUT/call.log" 2>&1
grep "snakemake rc" "$OUT/call.log"
cd "$OUT" && tar czf logs.tgz call.log pycache.txt snakemake.log gpu_util.csv loadavg.txt pmon.txt pids.txt mps_log 2>/dev/null
rm -rf call.log pycache.txt snakemake.log gpu_util.csv loadavg.txt pmon.txt pids.txt mps_log
grep -c done timeline.tsv; tail -3 timeline.txt; ls
