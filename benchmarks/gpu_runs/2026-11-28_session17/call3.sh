#!/usr/bin/env bash
# Session 17, call 3: the trainer against the reference at batch 256 and 32, seeds 0, 1 and 2
# (each seed a fresh set of processes, reference first). Is ours' held-out loss at batch 256
# outside the seeds' spread, or is seed 0's gap one draw of the initialisation (the reference's
# padded vocabulary draws a different init from the same seed)?
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for s in 0 1 2; do
  timeout 170 python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 \
    --min-steps 300 --batch 256 --batch 32 --seed $s --ours deterministic=false \
    --out "$OUT/seed$s.json" > "$OUT/seed$s.txt" 2>&1; t seed $s
  grep -h "^| [or]" "$OUT/seed$s.txt" | cut -c1-200
done
cd "$OUT" && tar czf call3.tgz *.txt *.json tokens.log && rm -f *.txt *.json tokens.log; ls; t end
