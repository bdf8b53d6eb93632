#!/usr/bin/env bash
# Session 18, call 2: (a) gemm_align.py again with the PIL Gram's float64 update as built and
# padded; (b) the generative AdamW step with the nets' alignment padding (the pipeline's now)
# and without it (--align 1), same call.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python benchmarks/gemm_align.py --device cuda --batch 256 --batch 512 --out "$OUT/gemm_align.json" > "$OUT/gemm_align.txt" 2>&1; t gemm_align
grep -A12 "PIL Gram" "$OUT/gemm_align.txt"
for a in 1 4; do
  timeout 100 python benchmarks/gen_step.py --device cuda --batch 256 --batch 512 --steps 300 --align $a \
    --out "$OUT/gen_step_align$a.json" > "$OUT/gen_step_align$a.txt" 2>&1; t align $a
  grep -E "^(mnist|cifar10) " "$OUT/gen_step_align$a.txt"
done
cd "$OUT" && tar czf call2.tgz *.txt *.json 2>/dev/null; rm -f *.txt *.json; ls; t end
