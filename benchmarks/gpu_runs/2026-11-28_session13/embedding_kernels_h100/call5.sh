#!/usr/bin/env bash
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
OLD=$SITE:$PWD/bench_old/src
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_embedding.py tests/test_train.py 2>&1 | tail -8 > "$OUT/pytest.txt"
tail -2 "$OUT/pytest.txt"; echo "t=$(( $(date +%s) - CALL_START ))"
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1
T="python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 --min-steps 200"
timeout 170 $T --batch 256 --ours "" --ours deterministic=false --out "$OUT/t256.json" > "$OUT/t256.txt" 2>&1
PYTHONPATH=$OLD timeout 90 $T --batch 256 --no-reference --ours "" --out "$OUT/t256_old.json" > "$OUT/t256_old.txt" 2>&1
echo "t=$(( $(date +%s) - CALL_START ))"
timeout 90 $T --batch 32 --no-reference --ours "" --out "$OUT/t32.json" > "$OUT/t32.txt" 2>&1
PYTHONPATH=$OLD timeout 90 $T --batch 32 --no-reference --ours "" --out "$OUT/t32_old.json" > "$OUT/t32_old.txt" 2>&1
for f in t256 t256_old t32 t32_old; do echo "== $f"; grep -h "^| [or]" "$OUT/$f.txt" | grep -v "^| trainer" | cut -c1-40,95-200; done
echo "end t=$(( $(date +%s) - CALL_START ))"
cd "$OUT" && tar czf call5.tgz t*.json t*.txt tokens.log pytest.txt && rm -f t*.json t*.txt tokens.log
