#!/bin/bash
# Session 7 call U (one H100): the fused head finishing its rows in softmax_pass. GPU tests,
# then batch 256 twice and batch 32 once in fresh processes (reference, ours deterministic,
# ours deterministic=false), then the eager kernel table at batch 256.
. benchmarks/gpu_env.sh
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_fused_ce.py tests/test_train.py \
  tests/test_cuda_graph.py tests/test_embedding.py 2>&1 | tail -4 | tee $OUT/pytest_gpu.txt
T="--device cuda --tokens results/paper/tokens/wikitext2 --min-steps 200 --max-seconds 140"
for run in b256_1 b256_2 b32_1; do
  B=${run%_*}; B=${B#b}
  timeout 150 python benchmarks/trainer_throughput.py $T --batch $B --ours '' \
    --ours deterministic=false --out $OUT/$run.json >$OUT/$run.txt 2>&1
  grep -h "^| ref\|^| ours" $OUT/$run.txt | sed "s/compile=True,cuda_graphs=True,output_layer=fused,ce_chunk=0,//; s/^/$run /" | cut -c1-150
done
timeout 150 python benchmarks/trainer_throughput.py $T --batch 256 --min-steps 100 --no-reference \
  --ours cuda_graphs=false,deterministic=false --profile >$OUT/profile.txt 2>&1
grep -E "fused_linear_ce|softmax_pass|grad_w_kernel" $OUT/profile.txt | cut -c1-70,150-230
