#!/usr/bin/env bash
# Session 18, call 4: is SAFFU's step held back by its odd vocabulary (50,257 columns: rows of
# W and of the logits not 16-byte aligned)? saffu_step.py at 50,257, 50,260 and 50,272 columns.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for v in 50257 50260 50272; do
  timeout 120 python benchmarks/saffu_step.py --device cuda --batch 1024 --vocab $v --out "$OUT/saffu_v$v.json" > "$OUT/saffu_v$v.txt" 2>&1; t vocab $v
  cut -c1-600 "$OUT/saffu_v$v.txt" | grep -v Warn
done
cd "$OUT" && tar czf call4.tgz *.txt *.json 2>/dev/null; rm -f *.txt *.json; ls; t end
