#!/usr/bin/env bash
# Session 16, call 6: the trainer's kernel table at batch 256 (eager steps: no CUDA graphs, so
# the profiler attributes kernels), this src/ against f3eb00e's (bench_old/), each a fresh process:
# which kernel makes the new code 3.5-4 % faster in the trainer when the head alone is not.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
T="python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 --batch 256 --min-steps 100 --no-reference --ours deterministic=false,cuda_graphs=false --profile 14"
timeout 80 $T --out "$OUT/new.json" > "$OUT/new.txt" 2>&1; t new
timeout 80 env PYTHONPATH=$PWD/bench_old/src:${PYTHONPATH:-} $T --out "$OUT/old.json" > "$OUT/old.txt" 2>&1; t old
for f in new old; do echo "== $f"; grep -h "^| [or]" "$OUT/$f.txt" | cut -c1-140; grep -A22 "^profile" "$OUT/$f.txt" | cut -c1-40,100-175; done
t end
cd "$OUT" && tar czf call6.tgz *.json *.txt tokens.log && rm -f *.json *.txt tokens.log
