#!/usr/bin/env bash
# Installs neurondeploy for development into the active Python environment, one line per step.
# torch is pinned to 2.13.0 first because that CPU build is what a plain machine can use; the package
# itself only declares a range (on a Neuron DLAMI it must sit beside the Neuron SDK's torch 2.9).
set -euo pipefail
cd "$(dirname "$0")/.."
# This machine's pip config names local index folders that may be absent; pip warns about each, uselessly.
# setuptools' editable build says "Editable installation." in a warning block about a flat layout we know of
# (setuptools/command/editable_wheel.py, _TopLevelFinder.__exit__); the filter is for this install only.
pip_install() {
  PYTHONWARNINGS="ignore:Editable installation" python -m pip install --quiet "$@" 2> >(grep -v '^WARNING: Location' >&2)
}
# "[n/3] what ... done (N s)": a long step (torch is about 1 GB) shows that it is under way, not a silent minute.
step() {
  local what=$1 start=$SECONDS
  shift
  printf '%s ... ' "$what"
  if "$@"; then
    echo "done ($((SECONDS - start)) s)"
  else
    echo "failed"
    return 1
  fi
}
step "[1/3] pip" pip_install --upgrade pip
step "[2/3] torch 2.13.0, the CPU build (about 1 GB)" pip_install "torch==2.13.0"
step "[3/3] neurondeploy, editable, with its test and bench tools" pip_install -e ".[dev]"
echo "neurondeploy installed: $(command -v neurondeploy)"
