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


# --- the Neuron runtime's NeuronCore reservation, stood in for -------------------------------------------------
#
# "By default, Neuron Runtime initializes all the cores present in the system and reserves them for the current
# process. Once a NeuronCore is reserved for a process, it cannot be used by another process at all, until the
# process reserving that NeuronCore is terminated." NEURON_RT_VISIBLE_CORES names the cores a process reserves
# ("1-3", "0,1"); NEURON_RT_NUM_CORES how many (0: all). (awsdocs-neuron: neuron-runtime/guides/configuration-guide
# and neuron-runtime/api/nrt-env-var-reference.) A replay of a Neuron host sets how many cores the instance has and
# a directory of per-core lock files; each process that loads a model here reserves its cores there as the runtime
# would, so a second claimant fails as it does on the instance.

STANDIN_CORES_ENV = "NEURONDEPLOY_STANDIN_NEURON_CORES"  # the replayed instance's NeuronCores
STANDIN_CLAIMS_ENV = "NEURONDEPLOY_STANDIN_CORE_CLAIMS"  # the directory of its per-core locks
_reserved: list = []  # this process's reservation: open, locked files, held until it exits


class NeuronCoresInUse(RuntimeError):
    """The runtime found the cores this process asks for reserved by another process."""


def _wanted(environ: dict[str, str], cores: int) -> list[list[int]]:
    """The sets of cores this process may reserve, in the runtime's order of trying."""
    visible = environ.get("NEURON_RT_VISIBLE_CORES", "").strip()
    if visible:
        chosen: list[int] = []
        for part in visible.split(","):
            low, _, high = part.partition("-")
            chosen += range(int(low), int(high or low) + 1)
        return [chosen]
    count = int(environ.get("NEURON_RT_NUM_CORES", "0") or 0) or cores
    return [list(range(start, start + count)) for start in range(0, cores - count + 1)]


def reserve_neuron_cores(environ: dict[str, str] | None = None) -> list[int] | None:
    """This process's NeuronCores on a replayed Neuron host (None when no replay set one up): the first call
    reserves them, later calls return the same. Raises NeuronCoresInUse when another process holds them."""
    import fcntl

    environ = dict(os.environ if environ is None else environ)
    if not environ.get(STANDIN_CORES_ENV) or not environ.get(STANDIN_CLAIMS_ENV):
        return None
    if _reserved:
        return [core for core, _ in _reserved]
    cores = int(environ[STANDIN_CORES_ENV])
    claims = environ[STANDIN_CLAIMS_ENV]
    os.makedirs(claims, exist_ok=True)
    for candidate in _wanted(environ, cores):
        if not candidate or max(candidate) >= cores:
            break
        held = []
        for core in candidate:
            handle = open(os.path.join(claims, f"core-{core}"), "a+")  # noqa: SIM115 - held until the process exits
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                break
            held.append((core, handle))
        if len(held) == len(candidate):
            _reserved.extend(held)
            return candidate
        for _, handle in held:
            handle.close()
    asked = environ.get("NEURON_RT_VISIBLE_CORES") or environ.get("NEURON_RT_NUM_CORES") or "all"
    raise NeuronCoresInUse(
        f"NeuronCores {asked} of {cores} are not available: another process reserved them (the Neuron runtime gives "
        "each process its cores until it exits; give each its own with NEURON_RT_NUM_CORES or NEURON_RT_VISIBLE_CORES)"
    )
