#!/usr/bin/env bash
# Session 18, call 7: PIL against AdamW to the same held-out error (gen_speed.py) with the
# padded AdamW nets (the faster opponent), CIFAR-10 then MNIST, 45 s cap as on 2026-11-26.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 190 python benchmarks/gen_speed.py --dataset cifar10 --data .gpu/data --max-seconds 45 \
  --out "$OUT/bench_gen_cifar10.json" > "$OUT/bench_gen_cifar10.txt" 2>&1; echo "cifar10 rc=$? t=$(( $(date +%s) - CALL_START ))"
grep -v "it/s\]" "$OUT/bench_gen_cifar10.txt" | tail -12
timeout 105 python benchmarks/gen_speed.py --dataset mnist --data .gpu/data --max-seconds 45 \
  --out "$OUT/bench_gen_mnist.json" > "$OUT/bench_gen_mnist.txt" 2>&1; echo "mnist rc=$? t=$(( $(date +%s) - CALL_START ))"
grep -v "it/s\]" "$OUT/bench_gen_mnist.txt" | tail -12
