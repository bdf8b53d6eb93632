#!/usr/bin/env bash
# Session 18, call 1: (a) is the generative output layer's odd feature count (width + D + 1) what
# keeps cuBLAS on Ampere-generation TF32 kernels? (gemm_align.py: as built vs padded to 4, 16);
# (b) the AdamW step with its forward compiled by Inductor in max-autotune (gen_step --compile).
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python benchmarks/gemm_align.py --device cuda --batch 256 --batch 512 --out "$OUT/gemm_align.json" > "$OUT/gemm_align.txt" 2>&1; t gemm_align
cut -c1-230 "$OUT/gemm_align.txt"
timeout 330 python benchmarks/gen_step.py --device cuda --batch 256 --batch 512 --steps 300 \
  --compile max-autotune-no-cudagraphs --out "$OUT/gen_step_compile.json" > "$OUT/gen_step_compile.txt" 2>&1; t compile
grep -v "^ *$" "$OUT/gen_step_compile.txt" | grep -v Warning | tail -30
cd "$OUT" && tar czf call1.tgz *.txt *.json 2>/dev/null; rm -f *.txt *.json; ls; t end
