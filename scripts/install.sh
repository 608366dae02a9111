#!/usr/bin/env bash
# Installs neurondeploy for development into the active Python environment.
# torch is pinned to 2.13.0 first because that CPU build is what a plain machine can use; the package
# itself only declares a range (on a Neuron DLAMI it must sit beside the Neuron SDK's torch 2.9).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet -e ".[dev]"
echo "neurondeploy installed: $(command -v neurondeploy)"
