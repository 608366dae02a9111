"""The explicit flag of a replay's CPU stand-in for the Neuron runtime.

A replay (:mod:`neurondeploy.engine.replay`) runs, on this machine's CPU, what AWS would run on Inf2/Trn1. It sets
:data:`CPU_STANDIN_ENV` in every process it starts, with the reason as its value, so that a check refusing CPU
artifacts for Neuron targets can tell "a replay that said so" from "a CPU artifact shipped to inf2 by mistake"; no
other path sets it, and nothing is bypassed silently: whoever honours it must say so.
"""

from __future__ import annotations

import os

CPU_STANDIN_ENV = "NEURONDEPLOY_REPLAY_CPU_STANDIN"
CPU_STANDIN_REASON = "replay: the Neuron runtime is stood in for by the CPU (no NeuronCores on this machine)"


def cpu_standin_reason(environ: dict[str, str] | None = None) -> str | None:
    """The announced reason when this process runs as a replay's CPU stand-in, else None."""
    value = (os.environ if environ is None else environ).get(CPU_STANDIN_ENV, "")
    return value or None
