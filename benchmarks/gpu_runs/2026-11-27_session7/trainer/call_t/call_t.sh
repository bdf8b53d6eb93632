#!/bin/bash
# Session 7 call T (one H100): batch 256 in fresh processes. 1: the reference and ours
# (deterministic=false, like for like); 2: ours with Inductor's max-autotune (GEMM templates
# with fused epilogues) from the environment; 3: ours without CUDA graphs under torch.profiler
# (the kernel table).
. benchmarks/gpu_env.sh
T="--device cuda --tokens results/paper/tokens/wikitext2 --batch 256 --max-seconds 140"
timeout 150 python benchmarks/trainer_throughput.py $T --min-steps 200 --ours deterministic=false \
  --out $OUT/t1_ref.json >$OUT/t1_ref.txt 2>&1
TORCHINDUCTOR_MAX_AUTOTUNE=1 timeout 170 python benchmarks/trainer_throughput.py $T --min-steps 200 \
  --no-reference --ours deterministic=false --max-seconds 160 --out $OUT/t2_autotune.json >$OUT/t2_autotune.txt 2>&1
timeout 150 python benchmarks/trainer_throughput.py $T --min-steps 100 --no-reference \
  --ours cuda_graphs=false,deterministic=false --profile >$OUT/t3_profile.txt 2>&1
for f in $OUT/t1_ref.txt $OUT/t2_autotune.txt; do grep -h "^| ref\|^| ours" $f | cut -c1-160; done
