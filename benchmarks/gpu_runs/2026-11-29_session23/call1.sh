#!/usr/bin/env bash
# Session 23, call 1 (one H200): SAFFU's one-launch update and fused softmax loss. First the
# CUDA tests of SAFFU (a gate: on a failure the DAG is skipped), the update's bits of the old
# (f8a4f3e, carried as .gpu/old.tgz) and the new tree, row_adamw.py of both trees and the new
# saffu_step.py, same call; then the paper DAG from scratch (MPS, GPU_JOBS=20) as call 3 of
# session 22, in the time left.
set -u
export CALL_START=$(date +%s)
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"
mkdir -p old && tar xzf .gpu/old.tgz -C old
R=benchmarks/gpu_runs/2026-11-29_session23
{
  timeout 150 python -m pytest -q -p no:cacheprovider -rs tests/test_saffu_cuda.py 2>&1 | tail -8
  gate=${PIPESTATUS[0]}
  echo "pytest rc=$gate t=$(( $(date +%s) - CALL_START ))"
  for tree in old .; do timeout 60 python $R/update_bits.py $tree/src; done
  timeout 90 python old/benchmarks/row_adamw.py --batch 1024 --batch 4096 --out "$OUT/row_adamw_old.json"
  timeout 90 python benchmarks/row_adamw.py --batch 1024 --batch 4096 --out "$OUT/row_adamw_new.json"
  timeout 120 python benchmarks/saffu_step.py --device cuda --batch 1024 --batch 4096 --out "$OUT/saffu_step.json"
  echo "benchmarks done t=$(( $(date +%s) - CALL_START ))"
} > "$OUT/bench.txt" 2>&1
cat "$OUT/bench.txt" | grep -v "^ *[0-9.]*s \(call\|setup\|teardown\)"
if grep -q "pytest rc=0" "$OUT/bench.txt"; then
  GPU_JOBS=${GPU_JOBS:-20} bash benchmarks/gpu_dag_call.sh
  cd "$OUT" && tar czf call.tgz gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz \
    && rm -f gpu.txt timeline.tsv timeline.txt job_cpu.txt gpu_power.txt gpu_share.txt logs.tgz
fi
ls; echo "end t=$(( $(date +%s) - CALL_START ))"
