#!/usr/bin/env bash
# Session 21, call 2 (one H200): the probe's swap metric with the blocks below a swap replayed
# against a whole forward per swap (benchmarks/probe_swap.py, SmolLM2 at the paper's 64 windows
# of 128 tokens and at 256), then the paper DAG from scratch on one GPU (MPS, 20 jobs, as
# session 20's call 2) at this commit.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 100 python benchmarks/probe_swap.py --model smollm2 --device cuda --seq-len 128 \
  --windows 64 --windows 256 2>&1 | grep -v "Loading\|Converting" > "$OUT/probe_swap.txt"
cat "$OUT/probe_swap.txt"; echo "t=$(( $(date +%s) - CALL_START )) probe_swap"
GPU_JOBS=20 bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call2.tgz gpu.txt probe_swap.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt probe_swap.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
