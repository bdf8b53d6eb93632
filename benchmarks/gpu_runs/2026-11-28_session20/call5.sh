#!/usr/bin/env bash
# Session 20, call 5 (one H200): the per-job fixed cost of an LM job (benchmarks/job_overhead.py
# through gpu_overhead.sh, the baseline variant: cold and warm compile cache, then several seeds
# in one process) with gpu_env.sh's bytecode cache, against the H100 table of 2026-11-26.
set -u
OUT=${OUT:-gpu_out}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
VARIANTS=baseline timeout 170 bash benchmarks/gpu_overhead.sh > "$OUT/call5.log" 2>&1
echo "rc=$?"; tail -15 "$OUT/call5.log"
