#!/usr/bin/env bash
# Session 15, call 1: the paper DAG from scratch on one GPU (MPS, GPU_JOBS=14), with nvidia-smi
# pmon and the jobs' command lines logged (benchmarks/gpu_share.py: which job kept the GPU busy).
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-565}
OUT=${OUT:-gpu_out}
GPU_JOBS=14 bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call1.tgz timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
head -40 gpu_share.txt 2>/dev/null; tar xzf call1.tgz -O gpu_share.txt | head -45; ls
echo "end t=$(( $(date +%s) - CALL_START ))"
