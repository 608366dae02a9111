"""The one explicit flag that a CPU artifact stands in for a Neuron one (tests and replays only).

A replay (:mod:`neurondeploy.replay`) runs, on this machine's CPU, what AWS would run on Inf2/Trn1. It sets
:data:`CPU_STANDIN_ENV` in every process it starts, with the reason as its value; tests that send a CPU compile
through the AWS flow set it too (the ``cpu_standin`` fixture). The artifact <-> target gate
(:mod:`neurondeploy.planner.artifact_target`) lets a CPU artifact through for a Neuron target only when it is set,
and says so: "a replay that said so" is told from "a CPU artifact shipped to inf2 by mistake", never silently.
"""

from __future__ import annotations

import os

CPU_STANDIN_ENV = "NEURONDEPLOY_CPU_STANDIN"
CPU_STANDIN_REASON = "replay: the Neuron runtime is stood in for by the CPU (no NeuronCores on this machine)"


def cpu_standin_reason(environ: dict[str, str] | None = None) -> str | None:
    """The announced reason when this process runs as a replay's CPU stand-in, else None."""
    value = (os.environ if environ is None else environ).get(CPU_STANDIN_ENV, "")
    return value or None
