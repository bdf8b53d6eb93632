#!/bin/bash
# Session 8 call B (one H100): the fused head's exponentials as exp2 of one fused multiply-add
# (this commit) against the kernels before it, swapped in for the second head run (the call
# copied the parent commit's file; exp2.patch, reversed, gives the same). GPU tests of the
# head, the head alone at 32,768 and 4,096 rows, then the trainer at batch 256 and 32 (fresh
# process each, the reference first).
. benchmarks/gpu_env.sh
D=benchmarks/gpu_runs/2026-11-27_session8/call_b
K=src/pillm/lm/fused_ce_kernels.py
timeout 100 python -m pytest -q -p no:cacheprovider tests/test_fused_ce.py 2>&1 | tail -2 \
  | tee $OUT/pytest_gpu.txt
H="--only fused --rows 32768 --rows 4096 --iters 50"
timeout 60 python benchmarks/output_layer_speed.py $H --out $OUT/head_exp2.json >$OUT/head.txt 2>&1
cp $K /tmp/k_now.py && patch -s -R $K <$D/exp2.patch
timeout 60 python benchmarks/output_layer_speed.py $H --out $OUT/head_before.json >>$OUT/head.txt 2>&1
cp /tmp/k_now.py $K
grep -h "fused" $OUT/head.txt | cut -c1-140
T="--device cuda --tokens results/paper/tokens/wikitext2 --max-seconds 140"
timeout 150 python benchmarks/trainer_throughput.py $T --batch 256 --min-steps 200 \
  --ours deterministic=false --ours '' --out $OUT/b256.json >$OUT/b256.txt 2>&1
timeout 100 python benchmarks/trainer_throughput.py $T --batch 32 --min-steps 280 \
  --ours deterministic=false --out $OUT/b32.json >$OUT/b32.txt 2>&1
grep -h "^| ref\|^| ours" $OUT/b256.txt $OUT/b32.txt | cut -c1-150
