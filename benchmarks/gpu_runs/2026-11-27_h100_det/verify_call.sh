#!/bin/bash
# Session call 5 (2026-11-27, fifth session): GPU-only tests (strict deterministic training,
# the fixed-point embedding backward), trainer at batches 32 and 256 with and without
# deterministic kernels beside the reference, and a paper-config rerun of attn_only seed 1
# (a run that differed between the two warn-only builds).
. benchmarks/gpu_env.sh
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_cuda_graph.py tests/test_train.py \
  tests/test_fused_ce.py tests/test_embedding.py 2>&1 | tail -6 >$OUT/pytest_gpu.txt
cat $OUT/pytest_gpu.txt
timeout 175 python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 \
  --batch 32 --batch 256 --min-steps 200 --ours "" --ours deterministic=false --max-seconds 170 \
  --out $OUT/trainer.json >$OUT/trainer.txt 2>&1
grep "|" $OUT/trainer.txt | tail -9
timeout 90 python benchmarks/gpu_repeat.py --tokens results/paper/tokens/wikitext2 --variant attn_only \
  --seed 1 --repeats 2 --out $OUT/rep.json >$OUT/rep.txt 2>&1
grep -v "it/s" $OUT/rep.txt | tail -5
