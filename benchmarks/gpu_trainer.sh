#!/usr/bin/env bash
# The LM trainer against the nanoGPT-style reference, and the output layer alone, on an offline
# GPU host (docs/performance.md, "LM trainer vs nanoGPT" and "Output layer"). Carry .whl/ and
# .gpu/data/ (or .gpu/data.tgz); the paper config's WikiText-2 tokens are made here first.
# Writes to $OUT:
#   output_layer.{json,txt}  every method of output_layer_speed.py at 32,768 and 4,096 rows
#   seed<S>.{json,txt}       trainer_throughput.py at batches 256 and 32, 300 steps, each batch a
#                            fresh process, the reference first, ours without deterministic kernels
#   trainer_seeds.txt        paired loss differences over the seeds and the tokens/s ratios
# SEEDS (default "0 1 2") picks the seeds.
#   OUT=gpu_out bash benchmarks/gpu_trainer.sh
set -u
. benchmarks/gpu_env.sh
. benchmarks/gpu_tokens.sh >"$OUT/tokens.log" 2>&1
timeout 120 python benchmarks/output_layer_speed.py --device cuda --rows 32768 --rows 4096 \
  --out "$OUT/output_layer.json" >"$OUT/output_layer.txt" 2>&1
grep "^|" "$OUT/output_layer.txt"
for s in ${SEEDS:-0 1 2}; do
  timeout 170 python benchmarks/trainer_throughput.py --device cuda \
    --tokens results/paper/tokens/wikitext2 --min-steps 300 --batch 256 --batch 32 --seed "$s" \
    --ours deterministic=false --out "$OUT/seed$s.json" >"$OUT/seed$s.txt" 2>&1
done
python benchmarks/trainer_seeds.py "$OUT"/seed*.json | tee "$OUT/trainer_seeds.txt"
