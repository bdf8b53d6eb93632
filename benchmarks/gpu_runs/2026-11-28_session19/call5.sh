#!/usr/bin/env bash
# Session 19, call 5: the SAFFU CUDA tests with entries loaded in blocks; row_adamw.py over
# entries loaded at once (1-8), chunk lengths, column blocks and warps, and the forward;
# gen_speed.py on CIFAR-10 with the graphed AdamW (20 s cap).
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_saffu_cuda.py 2>&1 | tail -15 > "$OUT/pytest_saffu.txt"; t tests; tail -3 "$OUT/pytest_saffu.txt"
timeout 200 python benchmarks/row_adamw.py --batch 1024 --batch 4096 --chunk 64 --chunk 128 --block-v 256 --block-v 512 \
  --warps 4 --warps 8 --entries 1 --entries 2 --entries 4 --entries 8 --out "$OUT/row_adamw.json" > "$OUT/row_adamw.txt" 2>&1; t row_adamw
grep -v Warn "$OUT/row_adamw.txt" | tail -72
timeout 170 python benchmarks/gen_speed.py --dataset cifar10 --data .gpu/data --max-seconds 20 \
  --out "$OUT/bench_gen_cifar10.json" > "$OUT/bench_gen_cifar10.txt" 2>&1; t gen_speed cifar10
grep -v "it/s\]" "$OUT/bench_gen_cifar10.txt" | tail -8
cd "$OUT" && tar czf call5.tgz *.txt *.json 2>/dev/null; rm -f *.txt *.json; ls; t end
