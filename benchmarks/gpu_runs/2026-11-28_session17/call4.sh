#!/usr/bin/env bash
# Session 17, call 4: more of the paper DAG's GPU jobs alone (GPU_JOBS=1, no MPS), for a ledger
# of GPU work per job family: the first seed of each generative AdamW and PIL arm not measured
# in call 2, with their learning-rate grids, images and classifiers.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-${DEADLINE:-560}}
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
T=results/paper/generative
NO_PACK=1 SKIP_PIL_BENCH=1 SKIP_AFTER_BENCH=1 GPU_JOBS=1 LOCAL_DIR=.gpu/data SNAKE_TIMEOUT=500 \
  TARGETS="$T/mnist/diff_bucketed_adamw/seed0/metrics.json $T/cifar10/flow_adamw/seed0/metrics.json \
  $T/mnist/diff_adamw/seed0/metrics.json $T/mnist/flow_adamw/seed0/metrics.json \
  $T/cifar10/diff_pil/seed0/metrics.json $T/cifar10/flow_pil/seed0/metrics.json \
  $T/mnist/diff_pil/seed0/metrics.json $T/mnist/diff_bucketed_pil/seed0/metrics.json" \
  bash benchmarks/gpu_run.sh > "$OUT/alone.log" 2>&1; t alone
cat "$OUT/timeline.txt"; cut -f2- "$OUT/timeline.tsv"
python - > "$OUT/job_metrics.txt" <<'P'
import glob, json
for f in sorted(glob.glob("results/paper/generative/*/*/seed*/metrics.json")):
    m = {}
    for r in json.load(open(f)):
        m.setdefault(r["metric"], r["value"])
    keys = ("job_time_s", "startup_time_s", "fit_seconds", "sample_seconds", "load_seconds", "adamw_steps")
    print(f, {k: round(m[k], 2) for k in keys if isinstance(m.get(k), (int, float))})
P
cat "$OUT/job_metrics.txt"
cd "$OUT" && tar czf call4.tgz *.txt *.tsv *.log *.csv 2>/dev/null; rm -f *.txt *.tsv *.log *.csv; ls; t end
