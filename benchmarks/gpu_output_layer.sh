#!/usr/bin/env bash
# Issue #18 item 1 on a GPU host, one call (~4-5 min): the fused output layer's GPU tests (where
# pytest is installed), the output layer alone at batches 32 and 256 for dense, compiled,
# chunked, fused at a few tile settings and the libraries (output_layer_speed.py), then the
# trainer at batches 32 and 256 beside the nanoGPT-style reference, with and without the
# libraries' fused heads (trainer_throughput.py). Carry .whl/ and results/paper/tokens/wikitext2.
set -u
. benchmarks/gpu_env.sh
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if python -c "import pytest" 2>/dev/null; then
  timeout 150 python -m pytest tests/test_fused_ce.py -q -x -p no:cacheprovider \
    -k "gpu or step" 2>&1 | tail -4
else
  echo "no pytest on this host: output_layer_speed's error columns compare fused with dense"
fi
timeout 120 python benchmarks/output_layer_speed.py --blocks "" --blocks dx_stages=2,dw_stages=2 \
  --blocks dx_n=128 --blocks dx_m=64,dw_n=64 --out "$OUT/bench_head.json" 2>&1 \
  | grep -v -i warn | tee "$OUT/bench_head.txt"
timeout 260 python benchmarks/trainer_throughput.py --device cuda \
  --tokens results/paper/tokens/wikitext2 --batch 32 --batch 256 --ours "" \
  --ours output_layer=fused --ref-loss cce --ref-loss liger --max-seconds 250 \
  --out "$OUT/bench_trainer_batches.json" 2>&1 | grep -v 'it/s' | tee "$OUT/bench_trainer_batches.txt"
