#!/bin/bash
# Session probe (2026-11-27, fifth session), one H100: GPU-only tests (deterministic reruns),
# trainer at batches 32 and 256 beside the reference with and without deterministic kernels,
# Inductor's GEMM autotuning at batch 256, fused head tiles at 32,768 rows, ridge selection.
. benchmarks/gpu_env.sh
timeout 130 python -m pytest -q -p no:cacheprovider tests/test_cuda_graph.py tests/test_train.py \
  tests/test_fused_ce.py 2>&1 | tail -8 >$OUT/pytest_gpu.txt
B=benchmarks/trainer_throughput.py
T="--device cuda --tokens results/paper/tokens/wikitext2"
timeout 250 python $B $T --batch 32 --batch 256 --min-steps 200 --ours "" \
  --ours deterministic=false --max-seconds 240 --out $OUT/trainer.json >$OUT/trainer.txt 2>&1
TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 timeout 130 python $B $T --batch 256 --min-steps 200 \
  --no-reference --ours deterministic=false --max-seconds 125 --out $OUT/mag.json >$OUT/mag.txt 2>&1
timeout 60 python benchmarks/output_layer_speed.py --rows 32768 --only fused --blocks "" \
  --blocks dw_m=128 --blocks stages=4 --blocks dx_warps=4,dw_warps=4 --iters 10 2>&1 \
  | grep -iv warn >$OUT/head.txt
timeout 40 python benchmarks/ridge_select.py --device cuda --size 7169,3072 --repeats 2 >$OUT/ridge.txt 2>&1
cat $OUT/pytest_gpu.txt; grep -h "tokens/s\|MFU\|x \|Error" $OUT/trainer.txt $OUT/mag.txt | tail -30
tail -8 $OUT/head.txt; tail -5 $OUT/ridge.txt
