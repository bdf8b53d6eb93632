#!/usr/bin/env bash
# Session 17, call 2: (a) the trainer at batch 256 against the reference with ours' head as the
# pipeline runs it (fused), as bf16 logits (dense) and chunked; which one carries ours' higher
# held-out loss? (b) the generative AdamW step with cuBLAS's and cuBLASLt's GEMMs; (c) a CIFAR-10
# AdamW arm and a MNIST PIL arm alone (GPU_JOBS=1, no MPS), with their inputs.
set -u
export CALL_START=$(date +%s) CALL_DEADLINE=${CALL_DEADLINE:-560}
. benchmarks/gpu_env.sh
t() { echo "t=$(( $(date +%s) - CALL_START )) $*"; }
. benchmarks/gpu_tokens.sh > "$OUT/tokens.log" 2>&1; t tokens
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python benchmarks/trainer_throughput.py --device cuda --tokens results/paper/tokens/wikitext2 \
  --min-steps 300 --batch 256 --ours deterministic=false --ours deterministic=false,output_layer=dense \
  --ours deterministic=false,output_layer=chunked,ce_chunk=1024 --out "$OUT/heldout256.json" > "$OUT/heldout256.txt" 2>&1; t trainer
grep -h "^| [or]" "$OUT/heldout256.txt" | cut -c1-200
timeout 50 python benchmarks/gen_step.py --device cuda --batch 256 --batch 512 --steps 300 --out "$OUT/gen_step_cublas.json" > "$OUT/gen_step_cublas.txt" 2>&1; t cublas
timeout 70 python benchmarks/gen_step.py --device cuda --batch 256 --batch 512 --steps 300 --blas cublaslt --profile --out "$OUT/gen_step_lt.json" > "$OUT/gen_step_lt.txt" 2>&1; t cublaslt
grep -E "^(mnist|cifar10) " "$OUT/gen_step_cublas.txt" "$OUT/gen_step_lt.txt"
grep -h "cutlass\|sm90\|gemm" "$OUT/gen_step_lt.txt" | cut -c1-80 | sort | uniq -c | head -20
T=results/paper/generative
NO_PACK=1 SKIP_PIL_BENCH=1 SKIP_AFTER_BENCH=1 GPU_JOBS=1 LOCAL_DIR=.gpu/data SNAKE_TIMEOUT=300 \
  TARGETS="$T/cifar10/diff_adamw/seed0/metrics.json $T/mnist/flow_pil/seed0/metrics.json" \
  bash benchmarks/gpu_run.sh > "$OUT/alone.log" 2>&1; t alone
cat "$OUT/timeline.txt"; cut -f2- "$OUT/timeline.tsv"
cd "$OUT" && tar czf call2.tgz *.txt *.json *.tsv *.log *.csv 2>/dev/null; rm -f *.txt *.json *.tsv *.log *.csv; ls; t end
