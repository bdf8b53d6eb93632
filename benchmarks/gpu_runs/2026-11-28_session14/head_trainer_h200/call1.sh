#!/usr/bin/env bash
# Session 14, call 1: the bounded softmax pass (new) against HEAD's kernels (bench_old/src).
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
OLD=$SITE:$PWD/bench_old/src
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
timeout 170 python -m pytest -q -p no:cacheprovider tests/test_fused_ce.py 2>&1 | tail -8 > "$OUT/pytest.txt"
tail -2 "$OUT/pytest.txt"; t pytest
H="python benchmarks/output_layer_speed.py --device cuda --only fused --rows 4096 --rows 32768 --iters 50"
timeout 60 $H --out "$OUT/head_new.json" > "$OUT/head_new.txt" 2>&1
PYTHONPATH=$OLD timeout 60 $H --out "$OUT/head_old.json" > "$OUT/head_old.txt" 2>&1
timeout 60 $H --out "$OUT/head_new2.json" > "$OUT/head_new2.txt" 2>&1
for f in head_new head_old head_new2; do echo "== $f"; grep "^|" "$OUT/$f.txt" | tail -2; done; t head
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
T="python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 --min-steps 200"
timeout 150 $T --batch 256 --ours "" --ours deterministic=false --out "$OUT/t256.json" > "$OUT/t256.txt" 2>&1; t t256
PYTHONPATH=$OLD timeout 60 $T --batch 256 --no-reference --ours deterministic=false --out "$OUT/t256_old.json" > "$OUT/t256_old.txt" 2>&1; t t256_old
timeout 120 $T --batch 32 --ours "" --ours deterministic=false --out "$OUT/t32.json" > "$OUT/t32.txt" 2>&1; t t32
for f in t256 t256_old t32; do echo "== $f"; grep -h "^| [or]" "$OUT/$f.txt" | grep -v "^| trainer" | cut -c1-40,95-220; done
t end
cd "$OUT" && tar czf call1.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
