#!/bin/bash
# Session 6 call A (one H100): GPU tests at HEAD (SAFFU's cuSPARSE rerun test added), fused-head
# tiles at 4,096 and 32,768 rows, then the trainer at batches 32 and 256 in three alternating
# rounds (reference, ours deterministic, ours deterministic=false; each ratio against its round's
# reference). Carry .whl, results/paper/tokens/wikitext2, .gpu_rev.
. benchmarks/gpu_env.sh
timeout 170 python -m pytest -q -p no:cacheprovider tests/test_cuda_graph.py tests/test_train.py \
  tests/test_fused_ce.py tests/test_embedding.py tests/test_saffu_cuda.py 2>&1 | tail -15 >$OUT/pytest_gpu.txt
timeout 75 python benchmarks/output_layer_speed.py --rows 32768 --rows 4096 --only fused --blocks "" \
  --blocks dx_n=32 --blocks dx_m=64 --blocks dw_n=64 --blocks dw_m=32 --blocks stages=2,dx_n=128 \
  --blocks waves=2 --blocks dx_m=64,dx_n=128,stages=2 --blocks lse_m=64 --iters 10 2>&1 \
  | grep -iv warn >$OUT/head.txt
timeout 320 python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 \
  --batch 256 --batch 32 --min-steps 200 --ours "" --ours deterministic=false --rounds 3 \
  --max-seconds 310 --out $OUT/trainer.json >$OUT/trainer.txt 2>&1
cat $OUT/pytest_gpu.txt; grep -h "fused\[" $OUT/head.txt | head -30
grep -h "tokens/s\|MFU\|x ref\|Error" $OUT/trainer.txt | tail -30
