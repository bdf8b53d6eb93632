#!/usr/bin/env bash
# Session 15, call 2: the trainer at batch 256 with Inductor's coordinate-descent tuning of its
# generated kernels and with combo kernels, each in a fresh process, against the defaults and the
# reference (benchmarks/trainer_throughput.py; ours deterministic=false, the like-for-like run).
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
ARGS="--device cuda --tokens results/paper/tokens/wikitext2 --min-steps 300 --batch 256"
T="python benchmarks/trainer_throughput.py $ARGS"
timeout 150 $T --ours deterministic=false --out "$OUT/a_default.json" > "$OUT/a_default.txt" 2>&1; t a_default
TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 timeout 200 $T --no-reference --ours deterministic=false \
  --out "$OUT/b_cd.json" > "$OUT/b_cd.txt" 2>&1; t b_coordinate_descent
timeout 120 python - $ARGS --no-reference --ours deterministic=false --out "$OUT/c_combo.json" > "$OUT/c_combo.txt" 2>&1 <<'PY'
import runpy, sys
import torch._inductor.config as c
c.combo_kernels = True  # no environment variable for it
sys.argv = ["benchmarks/trainer_throughput.py", *sys.argv[1:]]
runpy.run_path("benchmarks/trainer_throughput.py", run_name="__main__")
PY
t c_combo
timeout 90 $T --no-reference --ours deterministic=false --out "$OUT/d_default.json" > "$OUT/d_default.txt" 2>&1; t d_default
for f in a_default b_cd c_combo d_default; do echo "== $f"; grep -h "^| [or]\|warm" "$OUT/$f.txt" | cut -c1-220; done
t end
cd "$OUT" && tar czf call2.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
