#!/usr/bin/env bash
# Session 14, call 2: the paper DAG from scratch on one GPU (MPS, GPU_JOBS=14), then the gap
# between the fused head's logit bound and the trained LM variants' largest logits.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-565}
OUT=${OUT:-gpu_out}
GPU_JOBS=14 bash benchmarks/gpu_dag_call.sh
. benchmarks/gpu_env.sh >/dev/null
timeout 30 python benchmarks/head_bound_gap.py --tokens results/paper/tokens/wikitext2 \
  --rows 32768 results/paper/lm/*/seed0 > "$OUT/head_bound_gap.txt" 2>&1
cat "$OUT/head_bound_gap.txt"
echo "end t=$(( $(date +%s) - CALL_START ))"
