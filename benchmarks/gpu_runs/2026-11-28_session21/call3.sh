#!/usr/bin/env bash
# Session 21, call 3 (one H200): a solved net's sampler step as solved and aligned
# (benchmarks/sample_align.py, batches 512 and 2,048: the sampler's), then the paper DAG from
# scratch on one GPU (MPS, 20 jobs) with the PIL samplers on aligned features.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-585}
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python benchmarks/sample_align.py --device cuda --batch 512 --batch 2048 > "$OUT/sample_align.txt" 2>&1
cat "$OUT/sample_align.txt"; echo "t=$(( $(date +%s) - CALL_START )) sample_align"
GPU_JOBS=20 bash benchmarks/gpu_dag_call.sh
cd "$OUT" && tar czf call3.tgz gpu.txt sample_align.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
  && rm -f gpu.txt sample_align.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
