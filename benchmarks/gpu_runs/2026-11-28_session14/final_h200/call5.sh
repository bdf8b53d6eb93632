#!/usr/bin/env bash
# Session 14, call 5: the final head kernels on CUDA (tests), the int32 compare of grad_w_kernel
# against the kernels before it (bench_old/src = fdff6fe), and the trainer against the reference.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
OLD=$SITE:$PWD/bench_old/src
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
timeout 130 python -m pytest -q -p no:cacheprovider tests/test_fused_ce.py 2>&1 | tail -3 > "$OUT/pytest.txt"
cat "$OUT/pytest.txt"; t pytest
H="python benchmarks/output_layer_speed.py --device cuda --only fused --rows 32768 --iters 100"
timeout 40 $H --out "$OUT/head_new.json" > "$OUT/head_new.txt" 2>&1
PYTHONPATH=$OLD timeout 40 $H --out "$OUT/head_old.json" > "$OUT/head_old.txt" 2>&1
timeout 40 $H --out "$OUT/head_new2.json" > "$OUT/head_new2.txt" 2>&1
PYTHONPATH=$OLD timeout 40 $H --out "$OUT/head_old2.json" > "$OUT/head_old2.txt" 2>&1
for f in head_new head_old head_new2 head_old2; do echo "== $f $(grep '^| 32768' "$OUT/$f.txt")"; done; t head
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
T="python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 --min-steps 200 --batch 256"
timeout 120 $T --ours "" --ours deterministic=false --out "$OUT/t256.json" > "$OUT/t256.txt" 2>&1; t t256
grep -h "^| [or]" "$OUT/t256.txt" | cut -c1-40,95-220
t end
cd "$OUT" && tar czf call5.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
