#!/bin/bash
# Session 6 calls D and E (one H100): SAFFU rerun test with its message (D), then the trainer at
# batches 256 and 32, three alternating rounds, every run from the same process state
# (trainer_throughput.reset_peak: gc, Dynamo reset, empty CUDA cache).
. benchmarks/gpu_env.sh
timeout 60 python -m pytest -q -p no:cacheprovider tests/test_saffu_cuda.py 2>&1 | grep -v "^\s*$" | tail -12 >$OUT/pytest_saffu.txt
timeout 420 python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 \
  --batch 256 --batch 32 --min-steps 200 --ours "" --ours deterministic=false --rounds 3 \
  --max-seconds 410 --out $OUT/trainer.json >$OUT/trainer.txt 2>&1
cat $OUT/pytest_saffu.txt; grep -h "^|\|x ref\|Error" $OUT/trainer.txt | tail -30
