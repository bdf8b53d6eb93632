#!/usr/bin/env bash
# Session 17, call 5: the LM side's GPU jobs alone (GPU_JOBS=1, no MPS) for the ledger of GPU
# work per family: an LM variant, LAMBADA/extras, a probe, an SST-2 LoRA job, a sensitivity
# job and SAFFU at 30 % of the train split; whatever ends before the deadline.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-560}
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
T=results/paper
NO_PACK=1 SKIP_PIL_BENCH=1 SKIP_AFTER_BENCH=1 GPU_JOBS=1 LOCAL_DIR=.gpu/data SNAKE_TIMEOUT=500 \
  TARGETS="$T/lm/attn_only/seed0/metrics.json $T/lm/baseline/seed0/extras.json \
  $T/probe/pillm-s0/wikitext2/blocks.parquet $T/lora/pillm-s0/lora/metrics.json \
  $T/sensitivity/baseline/lr0.0005_do0/seed0/metrics.json $T/saffu/cat_b16_r4/f30/seed0/metrics.json \
  $T/saffu/cat_b16_r4/f30/seed1/metrics.json" \
  bash benchmarks/gpu_run.sh > "$OUT/alone.log" 2>&1; t alone
cat "$OUT/timeline.txt"; cut -f2- "$OUT/timeline.tsv"
cd "$OUT" && tar czf call5.tgz *.txt *.tsv *.log *.csv 2>/dev/null; rm -f *.txt *.tsv *.log *.csv; ls; t end
