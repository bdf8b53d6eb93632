#!/usr/bin/env bash
# Session 16, call 3: the kept exponentials removed; a loose block of softmax_pass is redone from
# its rows' largest logits (a max sweep, no running maximum). GPU tests; the head alone and its
# kernel table against the src/ of f3eb00e (bench_old/, first on PYTHONPATH); the trainer at
# batch 256 and 32 against the reference, and at 256 with f3eb00e, each a fresh process.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 80 python -m pytest -q -p no:cacheprovider tests/test_fused_ce.py -k "gpu" > "$OUT/pytest.txt" 2>&1; t pytest
tail -2 "$OUT/pytest.txt"
OLD="env PYTHONPATH=$PWD/bench_old/src:${PYTHONPATH:-}"
timeout 40 python benchmarks/output_layer_speed.py --device cuda --only fused --rows 32768 --rows 4096 \
  --out "$OUT/head_new.json" > "$OUT/head_new.txt" 2>&1; t head_new
timeout 40 $OLD python benchmarks/output_layer_speed.py --device cuda --only fused --rows 32768 --rows 4096 \
  --out "$OUT/head_old.json" > "$OUT/head_old.txt" 2>&1; t head_old
grep -h "^| [0-9]" "$OUT/head_new.txt" "$OUT/head_old.txt"
cat > /tmp/prof.py <<'PY'
import sys, torch
from pillm.core.runtime import kernel_profile
from pillm.lm.fused_ce import fused_linear_cross_entropy
for n in (32768, 4096):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, 256, device="cuda", generator=g).requires_grad_()
    w = (0.05 * torch.randn(50304, 256, device="cuda", generator=g)).requires_grad_()
    y = torch.randint(0, 50304, (n,), device="cuda", generator=g)
    for _ in range(3):
        fused_linear_cross_entropy(h, w, y, torch.bfloat16).backward()
    torch.cuda.synchronize()
    with kernel_profile("cuda", f"{sys.argv[1]} N={n}", 6):
        for _ in range(20):
            fused_linear_cross_entropy(h, w, y, torch.bfloat16).backward()
PY
timeout 40 python /tmp/prof.py new > "$OUT/prof.txt" 2>&1; t prof_new
timeout 40 $OLD python /tmp/prof.py old >> "$OUT/prof.txt" 2>&1; t prof_old
grep -h "N=\|softmax_pass\|grad_w_kernel\|Self CUDA time total" "$OUT/prof.txt" | cut -c1-30,100-200
ARGS="--device cuda --tokens results/paper/tokens/wikitext2 --min-steps 300"
T="python benchmarks/trainer_throughput.py $ARGS"
timeout 110 $T --batch 256 --ours deterministic=false --ours "" --out "$OUT/new256.json" > "$OUT/new256.txt" 2>&1; t new256
timeout 60 $OLD $T --batch 256 --no-reference --ours deterministic=false --out "$OUT/old256.json" > "$OUT/old256.txt" 2>&1; t old256
timeout 100 $T --batch 32 --ours deterministic=false --ours "" --out "$OUT/new32.json" > "$OUT/new32.txt" 2>&1; t new32
for f in new256 old256 new32; do echo "== $f"; grep -h "^| [or]" "$OUT/$f.txt" | cut -c1-200; done
t end
cd "$OUT" && tar czf call3.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
