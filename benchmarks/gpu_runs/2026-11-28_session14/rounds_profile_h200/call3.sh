#!/usr/bin/env bash
# Session 14, call 3: the trainer against the reference (two rounds at batch 256, one at 32, each
# run a fresh process), a kernel table at batch 256, and the fused head's tiles swept.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
T="python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 --min-steps 200"
timeout 200 $T --batch 256 --rounds 2 --ours "" --ours deterministic=false --out "$OUT/r256.json" > "$OUT/r256.txt" 2>&1; t r256
timeout 100 $T --batch 32 --ours "" --ours deterministic=false --out "$OUT/r32.json" > "$OUT/r32.txt" 2>&1; t r32
timeout 70 $T --batch 256 --no-reference --ours deterministic=false --profile 60 > "$OUT/profile.txt" 2>&1; t profile
H="python benchmarks/output_layer_speed.py --device cuda --only fused --rows 32768 --rows 4096 --iters 50"
timeout 90 $H --blocks "" --blocks dx_warps=4 --blocks dx_m=64 --blocks dx_n=32 --blocks stages=4 --blocks "" \
  --out "$OUT/sweep.json" > "$OUT/sweep.txt" 2>&1; t sweep
grep -h "^| [or]\|median\|round" "$OUT/r256.txt" | cut -c1-40,95-220
grep -h "^| [or]" "$OUT/r32.txt" | cut -c1-40,95-220
grep "^|" "$OUT/sweep.txt"
grep -m12 -E "softmax|grad_w|fused_linea|nvjet|gelu" "$OUT/profile.txt" | cut -c1-70,150-200
t end
cd "$OUT" && tar czf call3.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
