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
