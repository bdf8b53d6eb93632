#!/bin/bash
# Session 9 call B (one H100): LayerNorm's backward partial sums (train_step.inductor_options,
# PILLM_MIX_ORDER_PARTIALS: 0 = Inductor's own split, 16 rows = 2,048 partials at batch 256)
# at batch 256, ours alone, one fresh process each; then the best setting against the
# reference at batch 256 and 32, two rounds (a fresh process per batch and round).
. benchmarks/gpu_env.sh
T="--device cuda --tokens results/paper/tokens/wikitext2"
best=0; best_tps=0
for P in 0 1024 512 256; do
  PILLM_MIX_ORDER_PARTIALS=$P timeout 100 python benchmarks/trainer_throughput.py $T \
    --max-seconds 90 --batch 256 --min-steps 200 --no-reference --ours deterministic=false \
    --out $OUT/partials_$P.json >>$OUT/partials.txt 2>&1
  tps=$(python -c "import json;print(round(json.load(open('$OUT/partials_$P.json'))['runs'][0]['tokens_per_s']))")
  echo "partials $P: $tps tokens/s" | tee -a $OUT/sweep.txt
  if [ "$tps" -gt "$best_tps" ]; then best=$P; best_tps=$tps; fi
done
echo "best: partials $best" | tee -a $OUT/sweep.txt
PILLM_MIX_ORDER_PARTIALS=$best timeout 330 python benchmarks/trainer_throughput.py $T \
  --max-seconds 320 --batch 256 --batch 32 --min-steps 200 --rounds 2 \
  --ours deterministic=false --out $OUT/rounds.json >$OUT/rounds.txt 2>&1
grep -v "^train\|^done\|^\s*$" $OUT/rounds.txt | cut -c1-170 | tail -22
