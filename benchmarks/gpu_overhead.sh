#!/usr/bin/env bash
# The per-job fixed cost of LM runs on a GPU host (benchmarks/job_overhead.py), the paper
# config's tokens made first without Snakemake. Carry .whl/ and .gpu/data/ (docs/offline-gpu.md).
# VARIANTS (default: job_overhead.py's) names the LM variants; writes $OUT/job_overhead.{json,txt}.
#   VARIANTS=baseline bash benchmarks/gpu_overhead.sh
set -eu
. benchmarks/gpu_env.sh
printf 'data:\n  local_dir: .gpu/data\n' >/tmp/gpu_data.yaml
. benchmarks/gpu_tokens.sh
python benchmarks/job_overhead.py --tokens-dir results/paper/tokens/wikitext2 \
  --configfile config/config.yaml /tmp/gpu_data.yaml --device cuda ${VARIANTS:+--variants $VARIANTS} \
  --out "$OUT/job_overhead.json" 2>&1 | tee "$OUT/job_overhead.txt"
