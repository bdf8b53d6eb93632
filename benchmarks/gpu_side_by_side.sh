#!/usr/bin/env bash
# Two builds of the README's main command at once on a two-GPU host, each given one GPU and half
# the host's cores, as two one-GPU machines side by side: two configurations measured at one
# revision in one wall-clock window (e.g. the paper config with and without the scaling study).
# Each build runs benchmarks/gpu_readme_command.sh in its own copy of this tree, so its results,
# Snakemake state, MPS daemon (one per checkout) and compile caches are its own; the GPU jobs see
# one GPU (CUDA_VISIBLE_DEVICES) and Snakemake's `--cores all` counts the cores it may run on
# (taskset). The host's memory bandwidth and disk are shared, which a one-GPU machine does not
# share: compare a side-by-side build with a one-GPU build of the same revision before quoting it
# as one.
#   DETACH=1 SNAKE_TIMEOUT=540 bash benchmarks/gpu_side_by_side.sh   # start both, wait 540 s
#   ATTACH=1 SNAKE_TIMEOUT=480 bash benchmarks/gpu_side_by_side.sh   # then: wait for both to end
# A_OMIT / B_OMIT: rules build A / B also leaves out (gpu_readme_command.sh's EXTRA_OMIT); by
# default A is the whole paper config and B leaves out the scaling study. Once both builds have
# ended, $OUT/A.tgz and $OUT/B.tgz hold each one's output (timeline, log, GPU power, run records:
# RECORDS=1 is set); $OUT/A.txt and $OUT/B.txt its console. PACK=1: build A also packs its
# results archive (gpu_readme_command.sh), returned as $OUT/A.results.tgz.part-* for the CPU
# side's paper build (docs/offline-gpu.md, step 3).
# B_PHASES: build B runs in phases (gpu_readme_command.sh's PHASES), so the same host measures the
# whole build (A) and each study alone (B's phases.txt), e.g.
#   B_OMIT= B_PHASES=studies DETACH=1 bash benchmarks/gpu_side_by_side.sh   # one phase per study
# B_TREE=<archive>: build B runs another revision: the archive's files (`git archive`, with that
# revision in .gpu_rev) with this tree's wheels and data, so two revisions of the code are
# measured side by side on one host (their ratio, not either's time, is the figure), e.g.
#   git archive --format=tar.gz --add-virtual-file=.gpu_rev:$(git rev-parse --short=12 R) \
#     -o .gpu/b_tree.tgz R      # then carry .gpu/b_tree.tgz and set B_TREE=.gpu/b_tree.tgz
set -u
OUT=${OUT:-gpu_out}
. benchmarks/gpu_env.sh  # unpacks the wheels and compiles the bytecode once, before the builds
A_OMIT=${A_OMIT-}
B_OMIT=${B_OMIT-scaling_point scaling_cost scaling_cost_warm scaling_tokens}
n=$(nproc --all)
half=$((n / 2))
side() {  # build name, GPU index, first core, last core, rules left out, tree archive, phases
  local dir=/tmp/pillm_side_$1
  if [ -z "${ATTACH:-}" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    if [ -n "$6" ]; then  # another revision's files, this tree's carried wheels and data
      tar xzf "$6" -C "$dir" && tar cf - .whl .gpu | tar xf - -C "$dir"
    else
      tar cf - --exclude=./results --exclude="./$OUT" --exclude=./.snakemake \
        --exclude='./.gpu/models*' . | tar xf - -C "$dir"
    fi
  fi
  local pack=; [ "$1" = A ] && pack=${PACK:-}
  (cd "$dir" && CUDA_VISIBLE_DEVICES=$2 TORCHINDUCTOR_CACHE_DIR=/tmp/pillm_inductor_$1 \
    OUT=/tmp/pillm_side_out_$1 BUILD_DIR=/tmp/pillm_build_$1 EXTRA_OMIT="$5" RECORDS=1 PACK=$pack \
    PHASES="$7" \
    taskset -c "$3-$4" bash benchmarks/gpu_readme_command.sh) >"$OUT/$1.txt" 2>&1
  echo "$1: exit $?" >>"$OUT/$1.txt"
}
rm -rf /tmp/pillm_side_out_A /tmp/pillm_side_out_B
side A 0 0 $((half - 1)) "$A_OMIT" "" "" &
side B 1 "$half" $((n - 1)) "$B_OMIT" "${B_TREE:-}" "${B_PHASES:-}" &
wait
for b in A B; do
  echo "== build $b (GPU $([ $b = A ] && echo 0 || echo 1)): $(tail -1 "$OUT/$b.txt")"
  grep -E "snakemake rc=|still running|jobs finished" "$OUT/$b.txt" | head -3
  if grep -q "snakemake rc=" "$OUT/$b.txt"; then
    for p in /tmp/pillm_side_out_$b/results.tgz.part-*; do
      [ -f "$p" ] && mv "$p" "$OUT/$b.${p##*/}"
    done
    tar czf "$OUT/$b.tgz" -C /tmp/pillm_side_out_$b .
  fi
done
