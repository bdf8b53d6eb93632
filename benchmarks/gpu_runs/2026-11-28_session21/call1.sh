#!/usr/bin/env bash
# Session 21, call 1 (one H200): the λ selection of the PIL generative fits at their sizes
# (p = 4,881 / 7,169 / 8,977 features, k = 784 / 3,072 outputs): the shared eigh against a
# Cholesky per λ (benchmarks/ridge_select.py), each decomposition alone per CUDA linalg library
# (--parts); and gpu_env.sh's pycache.txt (what the host ships as bytecode).
set -u
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 400 python benchmarks/ridge_select.py --device cuda --parts --repeats 3 \
  --size 4881,784 --size 7169,3072 --size 8977,784 2>&1 | grep -v Warn | tee "$OUT/ridge_select.txt"
cat "$OUT/pycache.txt"
