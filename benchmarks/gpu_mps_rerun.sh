#!/usr/bin/env bash
# Whether a second build on the same GPU host shares the GPU through MPS as the first does: the
# README's command restricted to the two classifier jobs (UNTIL=gen_classifier), built twice in
# a row, each time from scratch. Per build: the MPS lines of its log and which processes held a
# CUDA context (nvidia-smi's compute apps, sampled each second): `nvidia-cuda-mps-server` is
# there when the jobs reach an MPS server, only `python3` when they time-slice the GPU.
# First, what the control daemon leaves in its pipe folder once it has quit.
# OLD_MPS=<file>: also build twice with that pillm/accel/mps.py in place of this tree's (e.g.
# `git show 56e4d8c:src/pillm/accel/mps.py`, before stale sockets were cleared), then restore it.
# Carry .whl/ and .gpu/data.tgz (docs/offline-gpu.md).
#   bash benchmarks/gpu_mps_rerun.sh
set -u
d=$(mktemp -d /tmp/pillm-mps-raw-XXXX)
mkdir -p "$d/pipe" "$d/log"
(export CUDA_MPS_PIPE_DIRECTORY=$d/pipe CUDA_MPS_LOG_DIRECTORY=$d/log
 nvidia-cuda-mps-control -d && sleep 1 && echo quit | nvidia-cuda-mps-control && sleep 3)
echo "control daemon, 3 s after quit: pipe folder holds: $(ls "$d/pipe" | tr '\n' ' ')"
pgrep -fa nvidia-cuda-mps-control || echo "no control daemon process"
. benchmarks/gpu_env.sh >/dev/null 2>&1
cp src/pillm/accel/mps.py /tmp/pillm_mps_tree.py
builds="tree1 tree2"
[ -n "${OLD_MPS:-}" ] && builds="old1 old2 $builds"
for b in $builds; do
  case $b in old*) cp "$OLD_MPS" src/pillm/accel/mps.py ;; *) cp /tmp/pillm_mps_tree.py src/pillm/accel/mps.py ;; esac
  (while sleep 1; do nvidia-smi --query-compute-apps=gpu_uuid,process_name,used_memory \
    --format=csv,noheader; done) >"$OUT/apps_$b.csv" &
  sampler=$!
  UNTIL=gen_classifier bash benchmarks/gpu_readme_command.sh >"$OUT/build_$b.txt" 2>&1
  rc=$?
  kill $sampler
  echo "build $b: rc=$rc $(grep -h 'wall=' "$OUT/build_$b.txt")"
  grep -h "MPS:" "$OUT/build_$b.txt" | sed 's/^/  /'
  echo "  CUDA contexts (samples): $(cut -d, -f2 "$OUT/apps_$b.csv" | sed 's|.*/||' | sort | uniq -c | tr -s ' \n' ' ')"
done
cp /tmp/pillm_mps_tree.py src/pillm/accel/mps.py
