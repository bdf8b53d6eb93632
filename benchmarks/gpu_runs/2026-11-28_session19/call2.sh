#!/usr/bin/env bash
# Session 19, call 2: the SAFFU CUDA tests with the fixed-order forward; row_adamw.py (the
# fused gradient + AdamW against the gradient then torch's fused AdamW) over column blocks and
# warps, Zipf-distributed inputs; saffu_step.py with the model's new forward.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_saffu_cuda.py 2>&1 | tail -15 > "$OUT/pytest_saffu.txt"; t tests; tail -3 "$OUT/pytest_saffu.txt"
timeout 200 python benchmarks/row_adamw.py --batch 1024 --batch 4096 --block-v 256 --block-v 512 --block-v 1024 --block-v 2048 \
  --warps 2 --warps 4 --warps 8 --out "$OUT/row_adamw.json" > "$OUT/row_adamw.txt" 2>&1; t row_adamw
grep -v Warn "$OUT/row_adamw.txt" | tail -30
timeout 200 python benchmarks/saffu_step.py --device cuda --batch 1024 --batch 4096 --out "$OUT/saffu_step.json" > "$OUT/saffu_step.txt" 2>&1; t saffu_step
grep -v Warn "$OUT/saffu_step.txt" | cut -c1-1500 | tail -4
cd "$OUT" && tar czf call2.tgz *.txt *.json 2>/dev/null; rm -f *.txt *.json; ls; t end
