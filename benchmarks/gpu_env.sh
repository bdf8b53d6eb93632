# Sourced by the GPU scripts: snakemake from the carried cp312 wheels (.whl/) on an offline GPU
# host, `python` on PATH, the project importable. Sets OUT (default gpu_out) and PY.
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
PY=$(command -v python3)
SITE=/tmp/pillm_site
mkdir -p "$SITE" /tmp/pillm_bin
# Unzip rather than pip install: pip stalled for minutes on the offline host.
for w in .whl/*.whl; do "$PY" -m zipfile -e "$w" "$SITE"; done
printf '#!/bin/sh\nexec %s "$@"\n' "$PY" >/tmp/pillm_bin/python && chmod +x /tmp/pillm_bin/python
export PATH=/tmp/pillm_bin:$PATH PYTHONPATH=$SITE:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# Runs record "<rev>-dirty" when this copy differs from HEAD: say how, so a build record can tell
# a real edit from an artefact of the copy (file modes, say).
git status --porcelain --untracked-files=no | head -20 >"$OUT/git_status.txt"
[ -s "$OUT/git_status.txt" ] && echo "tree differs from HEAD in $(wc -l <"$OUT/git_status.txt") files: see git_status.txt"
true
