#!/usr/bin/env bash
# The GPU part of the paper config on a GPU host without network access.
# Carry: .whl/ (cp312 wheels of snakemake + deps, see docs/offline-gpu.md) and a mirror copy with
# the files the GPU rules read (LOCAL_DIR, default .gpu/data; both folders are git-ignored, so
# name them in the call's carry). Writes results (no checkpoints or arrays) to
# $OUT/results.tgz.part-* (cat them into one archive), also when
# Snakemake runs out of time: SNAKE_TIMEOUT (default 400 s) interrupts it (SIGINT: running jobs
# are killed and their outputs removed) and the packing still happens.
# Env: NO_PACK=1 skips the results archive; MPS=1 shares the GPU through MPS (below), GPU_TESTS=1 first runs the GPU-only tests, SKIP_PIL_BENCH=1 skips the PIL benchmark, SKIP_AFTER_BENCH=1 the benchmarks after the DAG
# (probe, SST-2, generative, trainer); TARGETS='file ...' builds only those targets; UNTIL='rule ...'
# only what those rules need (with saffu in UNTIL, Snakemake 9.27 stopped with "Out of jobs ready"
# before the SAFFU ablation settings, which read the main setting's chosen rates: build those with
# TARGETS afterwards); GPU_JOBS jobs share the GPU (default 6), as many as fit its memory (each
# GPU rule declares gpu_mem_mb; workflow/rules/common.smk). --keep-going: one failed job does not
# stop the others from being scheduled.
set -u
. benchmarks/gpu_env.sh
# MPS=1: the jobs' kernels share the GPU through the CUDA Multi-Process Service (a user-level
# daemon started here and quit on exit; no card setting changes). Without it the GPU
# time-slices between the job processes: one process's kernels at a time. Under MPS the bulk
# jobs (PIL generative fits, SAFFU) run at below-normal client priority (mps_priority in
# common.smk).
if [ -n "${MPS:-}" ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/pillm_mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/pillm_mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    trap 'echo quit | nvidia-cuda-mps-control; cp -r "$CUDA_MPS_LOG_DIRECTORY" "$OUT/mps_log"' EXIT
    echo "MPS daemon started"
  else
    echo "MPS: nvidia-cuda-mps-control could not start; jobs time-slice the GPU"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
fi
[ -n "${GPU_TESTS:-}" ] && gpu_tests  # GPU_TESTS=1: the tests that need a GPU (gpu_env.sh)
if [ -z "${SKIP_PIL_BENCH:-}" ]; then  # SKIP_PIL_BENCH=1: the PIL benchmark's code is unchanged
  timeout 150 python benchmarks/pil_solve.py --out "$OUT/bench_pil.json" 2>&1 | tee "$OUT/bench_pil.txt"
  timeout 100 python benchmarks/pil_solve.py --batch-size 64 --out "$OUT/bench_pil_b64.json" 2>&1 | tee "$OUT/bench_pil_b64.txt"
fi
# Probe only the pipeline's own models here: MiniLM and SmolLM2 (>64 MiB) stay on the CPU side.
# Likewise the SST-2 (lora) jobs: pillm here (needs sst2/ in .gpu/data; peft comes with the host's torch).
printf 'data:\n  local_dir: %s\nprobe:\n  models: [pillm]\nlora:\n  models: [pillm]\n' "${LOCAL_DIR:-.gpu/data}" >/tmp/gpu_data.yaml
t0=$(date +%s.%N)
# The GPU host has no polars: every rule that reads summaries (and all below it) is omitted
# (gpu_env.sh's SUMMARY_RULES). UNTIL="rule ..." builds only what those rules need (e.g.
# UNTIL="lm_extras sensitivity_run"); Snakemake 9 ignores --until when --omit-from is also
# given, so it replaces the omit list.
if [ -n "${UNTIL:-}" ]; then SELECT="--until $UNTIL"; else SELECT="--omit-from $SUMMARY_RULES"; fi
# Every GPU job takes 2 CPU threads (GPU_THREADS) and waits on the device, so --cores defaults to
# 2 x GPU_JOBS + 2: with fewer cores, fewer GPU jobs run at once than GPU_JOBS allows.
GPU_JOBS=${GPU_JOBS:-6}
# Where the time goes: the GPU's busy share and memory each second, the host's load every 5 s.
# "Busy" only says some kernel ran; the power draw tells a full GPU from one running tiny kernels.
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw,clocks.sm \
  --format=csv,noheader \
  -l 1 >>"$OUT/gpu_util.csv" 2>/dev/null &
SAMPLER=$!
(while sleep 5; do echo "$(date +%T) $(cut -d' ' -f1-4 /proc/loadavg)"; done >>"$OUT/loadavg.txt") &
LOADS=$!
SNAKE_TIMEOUT=${SNAKE_TIMEOUT:-400}
# Leave 40 s before CALL_DEADLINE: Snakemake's stop (up to 30 s) and the packing (about 5 s).
if [ -n "${CALL_DEADLINE:-}" ]; then
  left=$((CALL_DEADLINE - ($(date +%s) - ${CALL_START:-$(date +%s)}) - 40))
  if [ "$left" -lt "$SNAKE_TIMEOUT" ]; then
    echo "SNAKE_TIMEOUT $SNAKE_TIMEOUT s cut to $left s (CALL_DEADLINE $CALL_DEADLINE s)"
    SNAKE_TIMEOUT=$((left > 1 ? left : 1))
  fi
fi
timeout -s INT -k 30 "$SNAKE_TIMEOUT" python -m snakemake ${TARGETS:-} $SELECT \
  --cores "${CORES:-$((2 * GPU_JOBS + 2))}" \
  --rerun-incomplete --keep-going --resources gpu="$GPU_JOBS" --configfile config/config.yaml /tmp/gpu_data.yaml \
  >"$OUT/snakemake.log" 2>&1
rc=$? wall=$(python -c "print(round($(date +%s.%N)-$t0,1))")
echo "snakemake rc=$rc wall=$wall s"
kill $SAMPLER $LOADS 2>/dev/null
tail -4 "$OUT/snakemake.log"
# each job's start, end and fate (benchmarks/dag_timeline.py; standard library only)
python benchmarks/dag_timeline.py "$OUT/snakemake.log" --tsv "$OUT/timeline.tsv" | tee "$OUT/timeline.txt"
# each rule's wall and CPU seconds, from the jobs' benchmark files (nproc: the cores this call has)
python benchmarks/job_cpu.py results/paper/benchmarks --wall "$wall" --cores "$(nproc)" \
  >"$OUT/job_cpu.txt" 2>&1
# each GPU's busy share, memory and power draw in 30 s windows (full work or small kernels?)
python benchmarks/gpu_power.py "$OUT/gpu_util.csv" >"$OUT/gpu_power.txt" 2>&1
if [ -z "${SKIP_AFTER_BENCH:-}" ]; then
  timeout 120 python benchmarks/probe_throughput.py --model pillm --device cuda --rows 65536 \
    --data .gpu/data --checkpoint results/paper/lm/baseline/seed0/model.pt \
    --out "$OUT/bench_probe.json" 2>&1 | tee "$OUT/bench_probe.txt"
  timeout 200 python benchmarks/lora_speed.py --model pillm --device cuda \
    --checkpoint results/paper/lm/baseline/seed0/model.pt \
    --tokenizer results/paper/tokens/wikitext2/tokenizer.json --data .gpu/data \
    --out "$OUT/bench_lora.json" 2>&1 | tee "$OUT/bench_lora.txt"
  for ds in mnist cifar10; do
    timeout 150 python benchmarks/gen_speed.py --dataset $ds --data .gpu/data --max-seconds 60 \
      --out "$OUT/bench_gen_$ds.json" 2>&1 | grep -v 'it/s' | tee "$OUT/bench_gen_$ds.txt"
  done
  timeout 230 python benchmarks/trainer_throughput.py --device cuda \
    --tokens results/paper/tokens/wikitext2 --ours "" --ours deterministic=false --ours compile=false \
    --ours output_layer=chunked,ce_chunk=1024 --ours output_layer=fused \
    --max-seconds 165 --out "$OUT/bench_trainer.json" 2>&1 | tee "$OUT/bench_trainer.txt"
fi
# The results archive (gpu_env.sh's pack_results); NO_PACK=1: none (a timing-only run).
[ -n "${NO_PACK:-}" ] && exit 0
pack_results
