#!/usr/bin/env bash
# Session 16, call 5: how often the fused head's softmax pass falls back while the paper model
# trains (head_bound_gap.py --train-steps, eager), at batch 256 and 32 for 300 steps as
# trainer_throughput.py trains; then the trainer at batch 256 against the reference once more.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
G="python benchmarks/head_bound_gap.py --tokens results/paper/tokens/wikitext2 --train-steps 300 --every 10"
timeout 90 $G --batch 256 > "$OUT/gap256.txt" 2>&1; t gap256
timeout 60 $G --batch 32 > "$OUT/gap32.txt" 2>&1; t gap32
grep -v "it/s\]" "$OUT/gap256.txt" | tail -34; grep -v "it/s\]" "$OUT/gap32.txt" | tail -34
timeout 110 python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 \
  --min-steps 300 --batch 256 --ours deterministic=false --ours "" --out "$OUT/new256.json" > "$OUT/new256.txt" 2>&1; t new256
grep -h "^| [or]" "$OUT/new256.txt" | cut -c1-200
t end
cd "$OUT" && tar czf call5.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
