#!/bin/bash
# Session 6 call F (one H100): the trainer in fresh processes, the reference first in each (in
# one process the reference slowed from round to round: calls A, D, E). Batch 256 three times,
# batch 32 twice; each process: reference, ours (deterministic), ours (deterministic=false).
. benchmarks/gpu_env.sh
T="--device cuda --tokens results/paper/tokens/wikitext2 --min-steps 200 --ours '' --ours deterministic=false"
for run in b256_1 b256_2 b256_3 b32_1 b32_2; do
  B=${run%_*}; B=${B#b}
  eval timeout 150 python benchmarks/trainer_throughput.py $T --batch $B --max-seconds 140 \
    --out $OUT/$run.json >$OUT/$run.txt 2>&1
  grep -h "^| ref\|^| ours" $OUT/$run.txt | sed "s/compile=True,cuda_graphs=True,output_layer=fused,ce_chunk=0,//; s/^/$run /" | cut -c1-120
done
