#!/usr/bin/env bash
# Session 16, call 1: the fused head keeps softmax_pass's exponentials for grad_w_kernel (three
# logits-sized matmuls instead of four). GPU tests; the head alone kept vs recomputed
# (keep_exp=0); the trainer at batch 256 and 32 against the reference, and at 256 with
# keep_exp=0, each a fresh process.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_fused_ce.py > "$OUT/pytest.txt" 2>&1; t pytest
tail -4 "$OUT/pytest.txt"
timeout 70 python benchmarks/output_layer_speed.py --device cuda --only fused --blocks "" \
  --blocks keep_exp=0 --rows 32768 --rows 4096 --out "$OUT/head.json" > "$OUT/head.txt" 2>&1; t head
cat "$OUT/head.txt" | tail -12
ARGS="--device cuda --tokens results/paper/tokens/wikitext2 --min-steps 300"
T="python benchmarks/trainer_throughput.py $ARGS"
timeout 120 $T --batch 256 --ours deterministic=false --ours "" --out "$OUT/new256.json" > "$OUT/new256.txt" 2>&1; t new256
PILLM_FUSED_CE_BLOCKS=keep_exp=0 timeout 70 $T --batch 256 --no-reference \
  --ours deterministic=false --out "$OUT/old256.json" > "$OUT/old256.txt" 2>&1; t old256
timeout 110 $T --batch 32 --ours deterministic=false --ours "" --out "$OUT/new32.json" > "$OUT/new32.txt" 2>&1; t new32
for f in new256 old256 new32; do echo "== $f"; grep -h "^| [or]" "$OUT/$f.txt" | cut -c1-200; done
t end
cd "$OUT" && tar czf call1.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
