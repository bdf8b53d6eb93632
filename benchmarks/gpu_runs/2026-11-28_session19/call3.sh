#!/usr/bin/env bash
# Session 19, call 3: row_adamw.py over chunk lengths (64-256), column blocks (128-512) and
# warps; saffu_step.py with RowAdamW at 256 columns a program.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 240 python benchmarks/row_adamw.py --batch 1024 --batch 4096 --chunk 32 --chunk 64 --chunk 128 --chunk 256 \
  --block-v 128 --block-v 256 --block-v 512 --warps 2 --warps 4 --out "$OUT/row_adamw.json" > "$OUT/row_adamw.txt" 2>&1; t row_adamw
grep -v Warn "$OUT/row_adamw.txt" | tail -52
timeout 200 python benchmarks/saffu_step.py --device cuda --batch 1024 --batch 4096 --out "$OUT/saffu_step.json" > "$OUT/saffu_step.txt" 2>&1; t saffu_step
grep -v Warn "$OUT/saffu_step.txt" | cut -c1-1500 | tail -4
cd "$OUT" && tar czf call3.tgz *.txt *.json 2>/dev/null; rm -f *.txt *.json; ls; t end
