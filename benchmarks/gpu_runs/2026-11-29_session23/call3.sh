#!/usr/bin/env bash
# Session 23, call 3 (one H200): gpu_run.sh's GPU-only tests at the session's last code (SAFFU's
# one-launch update and fused softmax loss, codedeps' cached walks), and the probe tests on this host.
set -u
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 300 python -m pytest -q -p no:cacheprovider -rs tests/test_cuda_graph.py tests/test_train.py \
  tests/test_fused_ce.py tests/test_embedding.py tests/test_saffu_cuda.py tests/test_flow.py \
  tests/test_host_sync.py tests/test_probe_masks.py tests/test_probe.py 2>&1 | tail -25 > "$OUT/pytest_gpu.txt"
tail -5 "$OUT/pytest_gpu.txt"
