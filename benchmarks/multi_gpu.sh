#!/usr/bin/env bash
# One GPU per job on a multi-GPU host: the paper config's LM runs of one seed, first pinned to
# GPU 0, then spread over every GPU by pillm.gpu_slots; prints both wall times, the speedup and
# how many jobs ran on each device (from each run's metrics.json). Carry .whl/ and .gpu/data/.
# Env: JOBS_PER_GPU (default 6) GPU jobs share one device in both runs; SEEDS (default 0) the
# lm seeds to run, e.g. SEEDS=0,1,2 (more independent jobs: the DAG of one seed is a chain).
set -u
. benchmarks/gpu_env.sh
K=${JOBS_PER_GPU:-6}
N=$(nvidia-smi -L | wc -l)
SEEDS=${SEEDS:-0}
printf 'data:\n  local_dir: .gpu/data\nlm:\n  seeds: [%s]\n' "$SEEDS" >/tmp/multi_gpu.yaml
CFG="--configfile config/config.yaml /tmp/multi_gpu.yaml"
TARGETS=$(python -c "
import yaml
v = yaml.safe_load(open('config/config.yaml'))['lm']['variants']
print(' '.join(f'results/paper/lm/{x}/seed{s}/metrics.json' for x in v for s in '$SEEDS'.split(',')))")
python -m snakemake results/paper/tokens/wikitext2/meta.json --cores 16 $CFG >"$OUT/prep.log" 2>&1
run() {  # $1: label, $2: gpu resource
  rm -rf results/paper/lm
  local t0=$(date +%s.%N)
  python -m snakemake $TARGETS --cores 32 --resources gpu="$2" $CFG >"$OUT/$1.log" 2>&1
  local rc=$?
  python -c "print(round($(date +%s.%N)-$t0,1))" >"$OUT/$1.wall"
  python - "$1" "$rc" <<'PY'
import collections, glob, json, sys
devs = collections.Counter()
for p in glob.glob("results/paper/lm/*/seed*/metrics.json"):
    rows = json.load(open(p))
    devs[rows[0].get("cuda_visible_devices", "?")] += 1
print(f"{sys.argv[1]}: snakemake rc={sys.argv[2]}, jobs per CUDA_VISIBLE_DEVICES: {dict(devs)}")
PY
}
CUDA_VISIBLE_DEVICES=0 run one_gpu "$K"
run all_gpus "$((K * N))"
python - "$OUT" "$N" "$SEEDS" <<'PY'
import sys
out, n = sys.argv[1], sys.argv[2]
one, all_ = (float(open(f"{out}/{x}.wall").read()) for x in ("one_gpu", "all_gpus"))
print(f"LM runs (seeds {sys.argv[3]}): 1 GPU {one:.1f} s, {n} GPUs {all_:.1f} s, speedup {one / all_:.2f}x")
PY
