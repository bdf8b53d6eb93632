#!/usr/bin/env bash
# The README's main command, `snakemake --cores all`, on an offline GPU host: the time of its
# GPU part, as a user gets it (the default profile, the workflow's own GPU sharing and MPS).
# Only what the host forces is added: data.local_dir points at the carried mirror copy, the
# probe and SST-2 jobs use the pipeline's own models unless the pretrained packages were carried
# (gpu_env.sh, docs/offline-gpu.md), and the rules that read summaries are left out (the host
# has no polars). Carry and env as benchmarks/gpu_run.sh (docs/offline-gpu.md). Prints the exit
# code, the wall time and the timeline's summary; leaves timeline.tsv/.txt, gpu_power.txt and
# snakemake.log in $OUT.
#   bash benchmarks/gpu_readme_command.sh                          # every visible GPU
#   CUDA_VISIBLE_DEVICES=0 bash benchmarks/gpu_readme_command.sh   # one GPU of a larger host
# Snakemake runs in its own process group (setsid) with its logs in BUILD_DIR, outside $OUT
# (emptied for each command the host runs), so one build can outlast one command's time limit:
# the host keeps such a process while the machine is held.
# SNAKE_TIMEOUT (seconds, default 540): how long this command waits for the build. Then the
#   build is interrupted (Snakemake's INT), unless DETACH=1: it runs on, and the next command on
#   the same (still held) machine with ATTACH=1 waits for it (again up to SNAKE_TIMEOUT) and
#   reports the whole build as one, no job run twice.
# RESUME=<results.tgz> continues a build whose results were sent back without their bulk: it
#   unpacks them, deletes the folders named in RERUN (their jobs run again: their bulk outputs
#   feed later jobs) and stands in for the other bulk (benchmarks/assemble_gpu_results.py).
# KEEP=1 starts a build on the results left on the same (still held) machine: they stay, and
#   Snakemake reruns the jobs a time limit interrupted. UNTIL=<rules> runs only the jobs those
#   rules need (Snakemake's --until), e.g. UNTIL="scaling_point scaling_cost".
# PHASES="name=rule ...;name=rule ...;rest=": the build as one Snakemake run per phase, in order,
#   each leaving out the rules of the phases after it (the last phase: the whole build's
#   remainder), so each study's GPU time and energy alone are read from one build
#   (benchmarks/study_phases.py: $OUT/phases.txt). A phase names every rule of its study, the
#   data rules only it needs included. Needs DETACH=1 (no time limit per phase), not UNTIL.
#   PHASES=studies: one phase per study (`python benchmarks/study_phases.py --studies`).
# GPU_TESTS=1: once the build has ended, the tests that need a GPU (gpu_env.sh's gpu_tests).
# RECORDS=1: once the build has ended, $OUT/records.tgz holds its run records (every .json and
#   .parquet under 4 MB in results/paper: metrics, curves, per-block tables) and its jobs'
#   benchmark files: the figures of every run without the bulk, and what
#   benchmarks/estimates.json is made from. A paper build's packs to 1.7 MB (d287f33).
# PACK=1: once the build has ended, the results archive in parts (gpu_env.sh's pack_results),
#   from which the CPU side builds the paper (docs/offline-gpu.md, step 3).
set -u
. benchmarks/gpu_env.sh
BUILD_DIR=${BUILD_DIR:-/tmp/pillm_build}
[ "${PHASES:-}" = studies ] && PHASES=$(python benchmarks/study_phases.py --studies)
if [ -z "${ATTACH:-}" ]; then
  rm -rf .snakemake/locks
  [ -n "${KEEP:-}" ] || rm -rf results/paper
  printf 'data:\n  local_dir: %s\n' "${LOCAL_DIR:-.gpu/data}" >/tmp/gpu_data.yaml
  # the pretrained models' jobs run here where their packages were carried (gpu_env.sh)
  if [ ! -f /tmp/pillm_site/.models ]; then
    printf 'probe:\n  models: [pillm]\nlora:\n  models: [pillm]\n' >>/tmp/gpu_data.yaml
  fi
  sed 's/^/  config: /' /tmp/gpu_data.yaml
  TRIGGERS=()
  if [ -n "${RESUME:-}" ]; then
    tar xzf "$RESUME"
    for d in ${RERUN:-}; do rm -rf "results/paper/$d"; done
    python benchmarks/assemble_gpu_results.py --configfile config/config.yaml /tmp/gpu_data.yaml \
      | tail -3
    TRIGGERS+=(--rerun-triggers mtime)
  fi
  OMIT="$SUMMARY_RULES"  # gpu_env.sh: the rules that need polars, which the host lacks
  [ -n "${EXTRA_OMIT:-}" ] && OMIT="$OMIT $EXTRA_OMIT"
  # --until with --omit-from runs every job the omitted rules' siblings need (Snakemake 9.27: a
  # dry run of `--omit-from ... --until lora` lists 187 jobs, `--until lora` alone 15), so UNTIL
  # replaces the omissions: the rules it names and their inputs are GPU-side already.
  LIMIT=(--omit-from $OMIT)
  [ -n "${UNTIL:-}" ] && LIMIT=(--until $UNTIL)
  rm -rf "$BUILD_DIR" && mkdir -p "$BUILD_DIR"
  b=$BUILD_DIR
  {  # the build as a script, so it can run in its own process group
    echo "nvidia-smi ${CUDA_VISIBLE_DEVICES:+-i $CUDA_VISIBLE_DEVICES} --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw,clocks.sm \\"
    echo "  --format=csv,noheader -l 1 >$b/gpu_util.csv 2>/dev/null &"
    echo "sampler=\$!"
    echo "date +%s.%N >$b/t0"
    if [ -z "${PHASES:-}" ]; then
      [ -n "${DETACH:-}" ] || printf 'timeout -s INT -k 30 %q ' "${SNAKE_TIMEOUT:-540}"
      printf '%q ' python -m snakemake --cores all --configfile config/config.yaml \
        /tmp/gpu_data.yaml "${LIMIT[@]}" "${TRIGGERS[@]}"
      echo ">$b/snakemake.log 2>&1"
      echo "rc=\$?"
    else  # one Snakemake run per phase, in order (no time limit: DETACH's use)
      echo "rc=0"
      # each phase leaves out the later phases' rules (--omit-from, with what follows them);
      # --until would do the converse, but Snakemake 9.27 stops it with "Out of jobs ready"
      IFS=';' read -ra parts <<<"$PHASES"
      for i in "${!parts[@]}"; do
        name=${parts[$i]%%=*} later=()
        for part in "${parts[@]:$((i + 1))}"; do later+=(${part#*=}); done
        sel=("${LIMIT[@]}" "${later[@]}")
        echo "s=\$(date +%s.%N)"
        printf '%q ' python -m snakemake --cores all --configfile config/config.yaml \
          /tmp/gpu_data.yaml "${sel[@]}"
        echo ">$b/snakemake.$name.log 2>&1"
        echo "r=\$?; [ \$r = 0 ] || rc=\$r"
        echo "printf '%s\\t%s\\t%s\\t%s\\n' $name \$s \$(date +%s.%N) \$r >>$b/phases.tsv"
        echo "cat $b/snakemake.$name.log >>$b/snakemake.log"
      done
    fi
    echo "date +%s.%N >$b/t1"
    echo "kill \$sampler"
    echo "echo \$rc >$b/rc"  # last: its presence says the build has ended
  } >"$b/build.sh"
  setsid bash "$b/build.sh" </dev/null >/dev/null 2>&1 &
fi
[ -f "$BUILD_DIR/build.sh" ] || { echo "ATTACH=1: no build in $BUILD_DIR on this machine"; exit 1; }
waited=0
while [ ! -f "$BUILD_DIR/rc" ] && [ "$waited" -lt "${SNAKE_TIMEOUT:-540}" ]; do
  sleep 2
  waited=$((waited + 2))
done
# without DETACH the build was started with the same limit: give its interrupt time to land
[ -n "${DETACH:-}${ATTACH:-}" ] || for _ in $(seq 40); do [ -f "$BUILD_DIR/rc" ] && break; sleep 1; done
cp "$BUILD_DIR/snakemake.log" "$OUT/snakemake.log"
if [ ! -f "$BUILD_DIR/rc" ]; then
  echo "build still running: $(grep -c '^Finished jobid' "$OUT/snakemake.log") jobs finished so far"
  tail -2 "$OUT/snakemake.log"
  echo "continue on this machine within 30 s: ATTACH=1 bash benchmarks/gpu_readme_command.sh"
  exit 3
fi
rc=$(cat "$BUILD_DIR/rc")
wall=$(python -c "print(round($(cat "$BUILD_DIR/t1") - $(cat "$BUILD_DIR/t0"), 1))")
echo "snakemake rc=$rc wall=$wall s"
grep -E "MPS:|Provided resources" "$OUT/snakemake.log" | head -3
tail -3 "$OUT/snakemake.log"
if [ -f "$BUILD_DIR/phases.tsv" ]; then  # PHASES: each phase's log is one call of the timeline
  cp "$BUILD_DIR"/snakemake.*.log "$BUILD_DIR/phases.tsv" "$OUT/"
  logs=$(cut -f1 "$BUILD_DIR/phases.tsv" | sed "s|.*|$BUILD_DIR/snakemake.&.log|")
  python benchmarks/dag_timeline.py $logs --tsv "$OUT/timeline.tsv" | tee "$OUT/timeline.txt" | tail -8
  python benchmarks/study_phases.py "$BUILD_DIR/phases.tsv" "$BUILD_DIR/gpu_util.csv" \
    --logs "$BUILD_DIR" | tee "$OUT/phases.txt"
else
  python benchmarks/dag_timeline.py "$OUT/snakemake.log" --tsv "$OUT/timeline.tsv" | tee "$OUT/timeline.txt" | tail -8
fi
python benchmarks/gpu_power.py "$BUILD_DIR/gpu_util.csv" >"$OUT/gpu_power.txt" 2>&1
python benchmarks/study_phases.py --whole "$BUILD_DIR/t0" "$BUILD_DIR/t1" "$BUILD_DIR/gpu_util.csv" \
  | tee "$OUT/energy.txt"
[ -n "${GPU_TESTS:-}" ] && gpu_tests 200
if [ -n "${RECORDS:-}" ]; then
  find results/paper \( -name '*.json' -o -name '*.parquet' \) -size -4M -print0 >/tmp/pillm_records.list
  tar czf "$OUT/records.tgz" --null -T /tmp/pillm_records.list results/paper/benchmarks
  ls -l "$OUT/records.tgz"
fi
[ -n "${PACK:-}" ] && pack_results && ls -l "$OUT"/results.tgz.part-*
exit "$rc"
