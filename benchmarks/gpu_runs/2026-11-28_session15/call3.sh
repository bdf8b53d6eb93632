#!/usr/bin/env bash
# Session 15, call 3: the one-tile Triton attention (pillm.models.attention). GPU tests; the
# attention alone against SDPA; the trainer at batch 256 and 32 against the reference, and at 256
# with the src/ of 0d2debc (SDPA attention; bench_old/, first on PYTHONPATH), each a fresh process.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_attention.py tests/test_fused_ce.py \
  tests/test_cuda_graph.py tests/test_host_sync.py > "$OUT/pytest.txt" 2>&1; t pytest
tail -4 "$OUT/pytest.txt"
timeout 60 python benchmarks/attention_speed.py --batch 32 --batch 256 --out "$OUT/attention.json" \
  > "$OUT/attention.txt" 2>&1; t attention
cat "$OUT/attention.txt"
ARGS="--device cuda --tokens results/paper/tokens/wikitext2 --min-steps 300"
T="python benchmarks/trainer_throughput.py $ARGS"
timeout 120 $T --batch 256 --ours deterministic=false --ours "" --out "$OUT/new256.json" > "$OUT/new256.txt" 2>&1; t new256
PYTHONPATH=$PWD/bench_old/src:${PYTHONPATH:-} timeout 80 $T --batch 256 --no-reference \
  --ours deterministic=false --out "$OUT/old256.json" > "$OUT/old256.txt" 2>&1; t old256
timeout 100 $T --batch 32 --ours deterministic=false --ours "" --out "$OUT/new32.json" > "$OUT/new32.txt" 2>&1; t new32
for f in new256 old256 new32; do echo "== $f"; grep -h "^| [or]" "$OUT/$f.txt" | cut -c1-200; done
t end
cd "$OUT" && tar czf call3.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
