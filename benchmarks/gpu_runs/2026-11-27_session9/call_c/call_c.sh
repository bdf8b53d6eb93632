#!/bin/bash
# Session 9 call C (one H100): SAFFU's weight gradient without host syncs (segment_sum: tables
# sized by the shapes, not the data). Its GPU tests (bitwise reruns, a training step under
# torch.cuda.set_sync_debug_mode("error")), the step benchmark, and the rates job alone
# (session 8: 70.9 s with the step cap at 1000; now 3000, as the paper config).
. benchmarks/gpu_env.sh
D=benchmarks/gpu_runs/2026-11-27_session9/call_c
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_saffu_cuda.py 2>&1 | tail -3 \
  | tee $OUT/pytest_gpu.txt
timeout 90 python benchmarks/saffu_step.py --device cuda --out $OUT/saffu_step.json \
  >$OUT/saffu_step.txt 2>&1; tail -12 $OUT/saffu_step.txt
mkdir -p /tmp/saffu
s=$(date +%s.%N)
timeout 200 python -m pillm saffu --setting cat_b16_r4 --fraction 1.0 \
  --tokens-dir results/paper/tokens/wikitext2 --params "$(cat $D/saffu_cat_b16_r4.json)" \
  --out-dir /tmp/saffu >$OUT/saffu.txt 2>&1
echo "saffu rc=$? wall=$(python -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a $OUT/saffu.txt
cp /tmp/saffu/metrics.json $OUT/saffu_metrics.json 2>/dev/null
