#!/usr/bin/env bash
# Session 23, call 2 (one H200): saffu_step.py (its reference fixed), then the paper DAG from
# scratch (MPS, GPU_JOBS=20) as call 1, at 2280df9 (codedeps' cached import walks: a shorter
# Snakemake start) and with TORCHINDUCTOR_COMPILE_THREADS=1 in every job: does one compile
# thread per LM job (no worker pool of 16 per job at the DAG's start) let the GPU fill sooner?
set -u
export CALL_START=$(date +%s)
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"
{
  timeout 120 python benchmarks/saffu_step.py --device cuda --batch 1024 --batch 4096 --out "$OUT/saffu_step.json"
  echo "benchmarks done t=$(( $(date +%s) - CALL_START ))"
} > "$OUT/bench.txt" 2>&1
grep -v Warning "$OUT/bench.txt" | grep -v sparse_csr
export TORCHINDUCTOR_COMPILE_THREADS=1
GPU_JOBS=${GPU_JOBS:-20} bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
