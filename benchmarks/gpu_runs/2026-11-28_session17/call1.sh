#!/usr/bin/env bash
# Session 17, call 1: (a) the GPU tests of CUDA graphs, dropout-replay case included; (b) the
# trainer at batch 256 against the reference with and without CUDA graphs and with the chunked
# head (where does ours' higher held-out loss come from?); (c) the generative AdamW and SAFFU
# steps' kernel tables; (d) SAFFU's main jobs and the LM baseline job alone (GPU_JOBS=1, no MPS).
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-560}
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_cuda_graph.py > "$OUT/pytest_graph.txt" 2>&1; t pytest
tail -5 "$OUT/pytest_graph.txt"
timeout 170 python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 \
  --min-steps 300 --batch 256 --ours deterministic=false --ours deterministic=false,cuda_graphs=false \
  --ours deterministic=false,output_layer=chunked --out "$OUT/heldout256.json" > "$OUT/heldout256.txt" 2>&1; t trainer
grep -h "^| [or]" "$OUT/heldout256.txt" | cut -c1-200
timeout 60 python benchmarks/gen_step.py --device cuda --batch 512 --steps 300 --profile > "$OUT/gen_step.txt" 2>&1; t gen_step
timeout 45 python benchmarks/saffu_step.py --device cuda --batch 1024 --repeats 10 --profile > "$OUT/saffu_step.txt" 2>&1; t saffu_step
grep -v "it/s" "$OUT/gen_step.txt" | head -80
head -60 "$OUT/saffu_step.txt"
T=results/paper
NO_PACK=1 SKIP_PIL_BENCH=1 SKIP_AFTER_BENCH=1 GPU_JOBS=1 LOCAL_DIR=.gpu/data SNAKE_TIMEOUT=400 \
  TARGETS="$T/saffu/cat_b16_r4/f100/seed1/metrics.json $T/lm/baseline/seed0/metrics.json" \
  bash benchmarks/gpu_run.sh > "$OUT/alone.log" 2>&1; t alone
cat "$OUT/timeline.txt"; cut -f2- "$OUT/timeline.tsv"
python - <<'P'
import json, glob
for f in sorted(glob.glob("results/paper/saffu/*/*/seed*/metrics.json")):
    by = {}
    for r in json.load(open(f)):
        by.setdefault((r["seed"], r["init"]), {})[r["metric"]] = r["value"]
    for k, m in by.items():
        print(f, k, {x: round(m.get(x, -1), 2) for x in ("job_time_s", "solve_time_s", "tune_time_s", "train_time_s", "train_steps")})
P
cd "$OUT" && tar czf call1.tgz *.txt *.json *.tsv *.log *.csv 2>/dev/null; rm -f *.txt *.json *.tsv *.log *.csv; ls; t end
