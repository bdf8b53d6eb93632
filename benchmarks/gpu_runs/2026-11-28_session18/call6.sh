#!/usr/bin/env bash
# Session 18, call 6: the GPU-only tests (gpu_run.sh's GPU_TESTS list) and the padding test on
# CUDA (tests/test_flow.py: fused AdamW replayed from a CUDA graph leaves the padding rows zero).
set -u
export CALL_START=$(date +%s)
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 300 python -m pytest -q -p no:cacheprovider -rs tests/test_flow.py tests/test_diffusion.py \
  tests/test_cuda_graph.py tests/test_train.py tests/test_fused_ce.py tests/test_embedding.py tests/test_saffu_cuda.py \
  tests/test_host_sync.py tests/test_probe_masks.py::test_window_scores_rerun_bitwise_on_cuda \
  > "$OUT/pytest_gpu.txt" 2>&1
echo "pytest rc=$?"; grep -v "^[0-9.]*s \(call\|setup\|teardown\)" "$OUT/pytest_gpu.txt" | tail -25
echo "end t=$(( $(date +%s) - CALL_START ))"
