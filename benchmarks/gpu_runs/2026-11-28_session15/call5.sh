#!/usr/bin/env bash
# Session 15, call 5: the trainer at the session's final code against the reference, batch 256
# and 32, each batch a fresh process (the reference first), ours deterministic and not.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
timeout 200 python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 \
  --min-steps 300 --batch 256 --batch 32 --ours deterministic=false --ours "" \
  --out "$OUT/final.json" > "$OUT/final.txt" 2>&1; t final
grep -h "^| [or]\|median" "$OUT/final.txt" | cut -c1-200
cd "$OUT" && tar czf call5.tgz final.json final.txt tokens.log && rm -f final.json final.txt tokens.log
