#!/usr/bin/env bash
# Installs neurondeploy for development into the active Python environment.
# torch is pinned to 2.13.0 first because that CPU build is what a plain machine can use; the package
# itself only declares a range (on a Neuron DLAMI it must sit beside the Neuron SDK's torch 2.9).
set -euo pipefail
cd "$(dirname "$0")/.."
# This machine's pip config names local index folders that may be absent; pip warns about each, uselessly.
pip_install() { python -m pip install --quiet "$@" 2> >(grep -v '^WARNING: Location' >&2); }
pip_install --upgrade pip
pip_install "torch==2.13.0"
pip_install -e ".[dev]"
echo "neurondeploy installed: $(command -v neurondeploy)"
