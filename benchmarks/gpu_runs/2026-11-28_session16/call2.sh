#!/usr/bin/env bash
# Session 16, call 2: where the kept exponentials' time goes. The head alone and its kernel table
# with keep_exp 0 (recompute), 1 ((V, N) buffer) and 2 ((N, V) buffer), and the src/ of f3eb00e
# (bench_old/, first on PYTHONPATH); the trainer at batch 256 in fresh processes: reference with
# keep_exp=0, f3eb00e, keep_exp=2, keep_exp=0 again.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
H="python benchmarks/output_layer_speed.py --device cuda --only fused --rows 32768 --rows 4096"
timeout 60 $H --blocks keep_exp=0 --blocks keep_exp=1 --blocks keep_exp=2 --blocks keep_exp=0 \
  --out "$OUT/head_new.json" > "$OUT/head_new.txt" 2>&1; t head_new
PYTHONPATH=$PWD/bench_old/src:${PYTHONPATH:-} timeout 40 $H --blocks "" --out "$OUT/head_old.json" \
  > "$OUT/head_old.txt" 2>&1; t head_old
grep -h "^| [0-9]" "$OUT/head_new.txt" "$OUT/head_old.txt"
cat > /tmp/prof.py <<'PY'
import sys, torch
from pillm.core.runtime import kernel_profile
from pillm.lm import fused_ce
from pillm.lm.fused_ce import Blocks, fused_linear_cross_entropy
n = int(sys.argv[1])
g = torch.Generator(device="cuda").manual_seed(0)
h = torch.randn(n, 256, device="cuda", generator=g).requires_grad_()
w = (0.05 * torch.randn(50304, 256, device="cuda", generator=g)).requires_grad_()
y = torch.randint(0, 50304, (n,), device="cuda", generator=g)
for text in sys.argv[2:]:
    fused_ce.BLOCKS = Blocks.parse("" if text == "-" else text)
    for _ in range(3):
        fused_linear_cross_entropy(h, w, y, torch.bfloat16).backward()
    torch.cuda.synchronize()
    with kernel_profile("cuda", f"N={n} blocks={text}", 8):
        for _ in range(10):
            fused_linear_cross_entropy(h, w, y, torch.bfloat16).backward()
PY
timeout 60 python /tmp/prof.py 32768 keep_exp=0 keep_exp=1 keep_exp=2 > "$OUT/prof.txt" 2>&1; t prof
timeout 40 python /tmp/prof.py 4096 keep_exp=0 keep_exp=1 keep_exp=2 >> "$OUT/prof.txt" 2>&1; t prof4096
grep -h "N=\|softmax_pass\|grad_w_kernel\|Self CUDA time total" "$OUT/prof.txt" | cut -c1-60,100-200
ARGS="--device cuda --tokens results/paper/tokens/wikitext2 --min-steps 300 --batch 256"
T="python benchmarks/trainer_throughput.py $ARGS"
PILLM_FUSED_CE_BLOCKS=keep_exp=0 timeout 80 $T --ours deterministic=false --out "$OUT/k0.json" > "$OUT/k0.txt" 2>&1; t k0
PYTHONPATH=$PWD/bench_old/src:${PYTHONPATH:-} timeout 60 $T --no-reference --ours deterministic=false \
  --out "$OUT/old.json" > "$OUT/old.txt" 2>&1; t old
PILLM_FUSED_CE_BLOCKS=keep_exp=2 timeout 60 $T --no-reference --ours deterministic=false --out "$OUT/k2.json" > "$OUT/k2.txt" 2>&1; t k2
PILLM_FUSED_CE_BLOCKS=keep_exp=0 timeout 60 $T --no-reference --ours deterministic=false --out "$OUT/k0b.json" > "$OUT/k0b.txt" 2>&1; t k0b
for f in k0 old k2 k0b; do echo "== $f"; grep -h "^| [or]" "$OUT/$f.txt" | cut -c1-200; done
t end
cd "$OUT" && tar czf call2.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
