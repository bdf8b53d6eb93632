#!/usr/bin/env bash
# Session 13, call 1: GPU tests; trainer b256 ref/new/old; baseline LM then lora_speed new vs old.
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
NEW=$PYTHONPATH OLD=$SITE:$PWD/bench_old/src
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_cuda_graph.py tests/test_train.py \
    tests/test_fused_ce.py tests/test_embedding.py tests/test_saffu_cuda.py tests/test_cuda_wait.py \
    tests/test_host_sync.py tests/test_probe_masks.py::test_window_scores_rerun_bitwise_on_cuda 2>&1 | tail -15 > "$OUT/pytest_gpu.txt"
tail -3 "$OUT/pytest_gpu.txt"; echo "t=$(( $(date +%s) - CALL_START ))"
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1
echo "tokens t=$(( $(date +%s) - CALL_START ))"
T="python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 --batch 256 --min-steps 200"
timeout 150 $T --ours deterministic=false --out "$OUT/trainer_new.json" > "$OUT/trainer_new.txt" 2>&1
PYTHONPATH=$OLD timeout 100 $T --no-reference --ours deterministic=false --out "$OUT/trainer_old.json" > "$OUT/trainer_old.txt" 2>&1
grep -E "tokens/s|x ref|ours|reference" "$OUT/trainer_new.txt" "$OUT/trainer_old.txt" | tail -12
echo "trainer t=$(( $(date +%s) - CALL_START ))"
SKIP_PIL_BENCH=1 SKIP_AFTER_BENCH=1 NO_PACK=1 GPU_JOBS=2 TARGETS=results/paper/lm/baseline/seed0/metrics.json \
  SNAKE_TIMEOUT=150 bash benchmarks/gpu_run.sh > "$OUT/baseline_call.log" 2>&1
tail -2 "$OUT/baseline_call.log"; ls results/paper/lm/baseline/seed0/
echo "baseline t=$(( $(date +%s) - CALL_START ))"
L="python benchmarks/lora_speed.py --model pillm --device cuda --checkpoint results/paper/lm/baseline/seed0/model.pt --tokenizer results/paper/tokens/wikitext2/tokenizer.json --data .gpu/data"
timeout 100 $L --out "$OUT/lora_new.json" > "$OUT/lora_new.txt" 2>&1
PYTHONPATH=$OLD timeout 100 $L --out "$OUT/lora_old.json" > "$OUT/lora_old.txt" 2>&1
tail -12 "$OUT/lora_new.txt" "$OUT/lora_old.txt"
echo "end t=$(( $(date +%s) - CALL_START ))"
