#!/usr/bin/env bash
# The paper DAG's GPU part from scratch in one command on an offline GPU host (one that runs a
# command for at most 600 s and returns at most 8 files): the wall time in docs/performance.md.
# Prints the snakemake exit code, the jobs done and the timeline's summary; leaves in $OUT the
# timeline (timeline.tsv, timeline.txt), job_cpu.txt, gpu_power.txt, the results archive
# (results.tgz.part-*, unless NO_PACK=1) and logs.tgz (snakemake.log, gpu_util.csv, loadavg.txt,
# pycache.txt, the MPS log). Env as benchmarks/gpu_run.sh. One H200 (16 cores):
#   GPU_JOBS=20 bash benchmarks/gpu_dag_call.sh
# one GPU of a two-GPU host, then both:
#   CUDA_VISIBLE_DEVICES=0 GPU_JOBS=20 bash benchmarks/gpu_dag_call.sh
#   GPU_JOBS=40 bash benchmarks/gpu_dag_call.sh
# GPU_TESTS=1 first runs the GPU-only tests (pytest_gpu.txt; outside the DAG's time).
# CALL_DEADLINE (seconds from this script's start, default 585, under the host's 600 s; set it
# lower when the host allows less) bounds Snakemake too, so the logs and results are packed
# before the host kills the command; a killed command returns nothing and leaves a Snakemake
# lock behind (removed below).
OUT=${OUT:-gpu_out}
export CALL_START=${CALL_START:-$(date +%s)} CALL_DEADLINE=${CALL_DEADLINE:-585}
# From scratch: a warm host keeps the previous call's ignored outputs and compile caches, and
# the lock of a Snakemake that a killed call left behind.
rm -rf results/paper /tmp/torchinductor_"$(whoami)" ~/.triton/cache .snakemake/locks
MPS=1 SKIP_PIL_BENCH=1 SKIP_AFTER_BENCH=1 LOCAL_DIR=${LOCAL_DIR:-.gpu/data} \
  SNAKE_TIMEOUT=${SNAKE_TIMEOUT:-555} bash benchmarks/gpu_run.sh >"$OUT/call.log" 2>&1
grep "snakemake rc" "$OUT/call.log"
cd "$OUT" && tar czf logs.tgz call.log pycache.txt snakemake.log gpu_util.csv loadavg.txt mps_log 2>/dev/null
rm -rf call.log pycache.txt snakemake.log gpu_util.csv loadavg.txt mps_log
grep -c done timeline.tsv; tail -3 timeline.txt; ls
