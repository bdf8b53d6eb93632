#!/usr/bin/env bash
# Session 19, call 1: SAFFU's step with RowAdamW (the weight gradient summed inside the AdamW
# update) and with the fixed-order kernel's forward, beside the pipeline's step so far, batch
# 1,024 and 4,096; the SAFFU CUDA tests; gen_speed.py on MNIST with the graphed AdamW.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_saffu_cuda.py 2>&1 | tail -15 > "$OUT/pytest_saffu.txt"; t tests; tail -3 "$OUT/pytest_saffu.txt"
timeout 200 python benchmarks/saffu_step.py --device cuda --batch 1024 --batch 4096 --out "$OUT/saffu_step.json" > "$OUT/saffu_step.txt" 2>&1; t saffu_step
grep -v Warn "$OUT/saffu_step.txt" | cut -c1-1500 | tail -4
timeout 150 python benchmarks/gen_speed.py --dataset mnist --data .gpu/data --max-seconds 45 \
  --out "$OUT/bench_gen_mnist.json" > "$OUT/bench_gen_mnist.txt" 2>&1; t gen_speed mnist
grep -v "it/s\]" "$OUT/bench_gen_mnist.txt" | tail -12
cd "$OUT" && tar czf call1.tgz *.txt *.json 2>/dev/null; rm -f *.txt *.json; ls; t end
