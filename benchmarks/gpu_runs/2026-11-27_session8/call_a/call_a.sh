#!/bin/bash
# Session 8 call A (one H100): the functional-gradient target's determinism test and the other
# GPU tests; the batch-256 step's eager profile with input shapes (which small operators cost
# what); batch 256 reference vs ours in a fresh process; the SAFFU rates job alone (its
# uncontended time, against 426 s inside the one-H100 DAG).
. benchmarks/gpu_env.sh
D=benchmarks/gpu_runs/2026-11-27_session8/call_a
timeout 240 python -m pytest -q -p no:cacheprovider tests/test_pil.py tests/test_fused_ce.py \
  tests/test_train.py tests/test_embedding.py 2>&1 | tail -4 | tee $OUT/pytest_gpu.txt
T="--device cuda --tokens results/paper/tokens/wikitext2 --max-seconds 140"
timeout 150 python benchmarks/trainer_throughput.py $T --batch 256 --min-steps 60 --no-reference \
  --ours cuda_graphs=false,deterministic=false --profile 200 --profile-shapes \
  >$OUT/profile_shapes.txt 2>&1
timeout 150 python benchmarks/trainer_throughput.py $T --batch 256 --min-steps 200 \
  --ours deterministic=false --out $OUT/b256.json >$OUT/b256.txt 2>&1
grep -h "^| ref\|^| ours" $OUT/b256.txt | cut -c1-150
mkdir -p /tmp/saffu
s=$(date +%s.%N)
timeout 200 python -m pillm saffu --setting cat_b16_r4 --fraction 1.0 \
  --tokens-dir results/paper/tokens/wikitext2 --params "$(cat $D/saffu_cat_b16_r4.json)" \
  --out-dir /tmp/saffu >$OUT/saffu.txt 2>&1
echo "saffu rc=$? wall=$(python -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a $OUT/saffu.txt
cp /tmp/saffu/metrics.json $OUT/saffu_metrics.json 2>/dev/null
