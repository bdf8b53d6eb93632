#!/usr/bin/env bash
# Session 20, call 1: b6567d8's SAFFU code on a GPU (tests/test_saffu_cuda.py at the final
# adamw_step defaults; saffu_step.py at batch 1,024 and 4,096), then the DAG's start: the image
# decodes and the 20 gen_lr_run jobs at once under MPS (GPU_JOBS=20, as the paper build), every
# pillm process under cProfile (benchmarks/startup_trace.py as sitecustomize), then one
# gen_lr_run alone the same way (no MPS) for the uncontended reference.
set -u
export CALL_START=$(date +%s)
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_saffu_cuda.py 2>&1 | tail -15 > "$OUT/pytest_saffu.txt"; t tests; tail -3 "$OUT/pytest_saffu.txt"
timeout 200 python benchmarks/saffu_step.py --device cuda --batch 1024 --batch 4096 --out "$OUT/saffu_step.json" > "$OUT/saffu_step.txt" 2>&1; t saffu_step
grep -v Warn "$OUT/saffu_step.txt" | cut -c1-1500 | tail -4
cp benchmarks/startup_trace.py /tmp/pillm_site/sitecustomize.py
export PILLM_CPROFILE_DIR=/tmp/prof_dag; mkdir -p $PILLM_CPROFILE_DIR
rm -rf results/paper .snakemake/locks
MPS=1 NO_PACK=1 SKIP_PIL_BENCH=1 SKIP_AFTER_BENCH=1 LOCAL_DIR=.gpu/data GPU_JOBS=20 UNTIL=gen_lr_run \
  SNAKE_TIMEOUT=150 bash benchmarks/gpu_run.sh > "$OUT/dag_call.log" 2>&1; t dag start
grep "snakemake rc" "$OUT/dag_call.log"; head -3 "$OUT/timeline.txt"
export PILLM_CPROFILE_DIR=/tmp/prof_alone; mkdir -p $PILLM_CPROFILE_DIR
python -c "import json,yaml" 2>/dev/null
CFG=$(python - <<'PY'
import json, yaml
c = yaml.safe_load(open("config/config.yaml"))["generative"]
print(json.dumps({k: v for k, v in c.items() if k not in ("datasets", "classifier")}, sort_keys=True))
PY
)
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv,noheader -l 1 > "$OUT/alone_util.csv" &
S=$!
timeout 120 python -m pillm gen-lr-run --dataset cifar10 --family flow --lr 0.001 --params "$CFG" \
  --images results/paper/generative/cifar10/images.npz --out /tmp/alone_lr.json --device cuda --threads 2 > "$OUT/alone.log" 2>&1
kill $S; t alone
cd /tmp && tar czf "$OUT/prof.tgz" prof_dag prof_alone; cd - >/dev/null
cd "$OUT" && tar czf call1.tgz *.txt *.json *.csv *.log logs.tgz mps_log 2>/dev/null; ls; t end
