#!/usr/bin/env bash
# Session 14, call 4: the fused head's launches with 4 warps, 64 rows and 2 stages (two programs
# fit an SM, so one's softmax can overlap the other's matmuls) against the defaults; the
# trainer with the fastest setting at 32,768 rows, beside the defaults and the reference.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
DX=dx_m=64,dx_warps=4,dx_stages=2
DW=dw_n=64,dw_warps=4,dw_stages=2
H="python benchmarks/output_layer_speed.py --device cuda --only fused --rows 32768 --rows 4096 --iters 50"
timeout 120 $H --blocks "" --blocks $DX --blocks $DW --blocks $DX,$DW --blocks dw_stages=4 --blocks "" \
  --out "$OUT/sweep.json" > "$OUT/sweep.txt" 2>&1; t sweep
grep "^|" "$OUT/sweep.txt"
BEST=$(python - "$OUT/sweep.json" <<'PY'
import json, sys
runs = [r for r in json.load(open(sys.argv[1]))["runs"] if r["rows"] == 32768]
best = min(runs, key=lambda r: r["ms"])["method"]
print(best[len("fused["):-1])
PY
)
echo "fastest at 32,768 rows: [$BEST]"
T="python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 --min-steps 200 --batch 256"
timeout 110 $T --ours deterministic=false --out "$OUT/t256.json" > "$OUT/t256.txt" 2>&1; t t256
if [ -n "$BEST" ]; then
  PILLM_FUSED_CE_BLOCKS=$BEST timeout 60 $T --no-reference --ours deterministic=false \
    --out "$OUT/t256_best.json" > "$OUT/t256_best.txt" 2>&1; t t256_best
  PILLM_FUSED_CE_BLOCKS=$BEST timeout 60 $T --no-reference --ours "" \
    --out "$OUT/t256_best_det.json" > "$OUT/t256_best_det.txt" 2>&1; t t256_best_det
fi
for f in t256 t256_best t256_best_det; do [ -f "$OUT/$f.txt" ] && { echo "== $f"; grep -h "^| [or]" "$OUT/$f.txt" | cut -c1-40,95-220; }; done
t end
cd "$OUT" && tar czf call4.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
