#!/usr/bin/env bash
# Session 23, call 4 (one H200): the generative AdamW arms' backward without the data columns'
# gradient (flow.DataReadout). The CUDA tests of flow.py as a gate (on a failure the DAG is
# skipped), gen_step.py with and without --data-grad in the same call, then the paper DAG from
# scratch (MPS, GPU_JOBS=20, inductor's default compile threads) in the time left.
set -u
export CALL_START=$(date +%s)
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"
{
  timeout 120 python -m pytest -q -p no:cacheprovider -rs tests/test_flow.py 2>&1 | tail -4
  gate=${PIPESTATUS[0]}
  echo "pytest rc=$gate t=$(( $(date +%s) - CALL_START ))"
  for flag in --data-grad ""; do
    timeout 90 python benchmarks/gen_step.py --device cuda --batch 256 --batch 512 --steps 200 $flag \
      --out "$OUT/gen_step${flag:+_data_grad}.json"
  done
  echo "benchmarks done t=$(( $(date +%s) - CALL_START ))"
} > "$OUT/bench.txt" 2>&1
cat "$OUT/bench.txt"
if grep -q "pytest rc=0" "$OUT/bench.txt"; then
  GPU_JOBS=${GPU_JOBS:-20} bash benchmarks/gpu_dag_call.sh
  cd "$OUT" && tar czf call.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
    && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
fi
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
