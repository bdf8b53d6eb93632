#!/usr/bin/env bash
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1
MATH=$PWD/bench_old/sdpmath:$PYTHONPATH
T="python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 --min-steps 200"
timeout 200 $T --batch 256 --ours "" --ours deterministic=false --out "$OUT/t256.json" > "$OUT/t256.txt" 2>&1
echo "t=$(( $(date +%s) - CALL_START ))"
PYTHONPATH=$MATH timeout 100 $T --batch 256 --no-reference --ours "" --out "$OUT/t256_math.json" > "$OUT/t256_math.txt" 2>&1
echo "t=$(( $(date +%s) - CALL_START ))"
timeout 110 $T --batch 32 --no-reference --ours "" --out "$OUT/t32.json" > "$OUT/t32.txt" 2>&1
PYTHONPATH=$MATH timeout 100 $T --batch 32 --no-reference --ours "" --out "$OUT/t32_math.json" > "$OUT/t32_math.txt" 2>&1
grep -h "^| \|sitecustomize" "$OUT"/t*.txt | grep -v "^| trainer\|^|---" 
echo "end t=$(( $(date +%s) - CALL_START ))"
cd "$OUT" && tar czf trainer.tgz t*.json t*.txt tokens.log && rm -f t*.json t*.txt tokens.log
