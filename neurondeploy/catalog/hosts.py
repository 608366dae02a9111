"""What runs under a container (data/hosts.yaml): SageMaker's Neuron host images (``InferenceAmiVersion``) with the
Neuron driver each carries, and the oldest driver a container's Neuron runtime accepts. A runtime the host's driver
is too old for fails at model load ("This runtime requires Neuron Driver version ...", aws-neuron-sdk
neuron-runtime/faq.rst), after the image is pulled and the endpoint has been billed for its start."""

from __future__ import annotations

from dataclasses import dataclass

from neurondeploy.catalog._data import load, unknown, version_tuple
from neurondeploy.catalog.dlc_releases import dlc_releases

# The host image every SageMaker endpoint on Neuron instances asks for: the only Neuron value of the enum.
SAGEMAKER_INFERENCE_AMI = "al2-ami-sagemaker-inference-neuron-2"


@dataclass(frozen=True)
class InferenceAmi:
    name: str  # ProductionVariant.InferenceAmiVersion
    accelerator: str
    neuron_driver: str  # "2.19"
    source: str
    proven_runtime: str | None = None  # the newest Neuron runtime AWS itself runs on this host
    proven_by: str | None = None  # the image that shows it
    proven_source: str | None = None


@dataclass(frozen=True)
class DriverFloor:
    runtime: str  # runtimes from this minor line on ...
    driver: str  # ... need this host driver or newer
    fact: str
    source: str


def _line(version: str) -> tuple[int, int]:
    """A runtime's or driver's release line: "2.32.31.0" -> (2, 32) (four-part versions, unlike the SDK's)."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def inference_amis() -> tuple[InferenceAmi, ...]:
    return tuple(InferenceAmi(**row) for row in load("hosts")["inference_amis"])


def inference_ami(name: str = SAGEMAKER_INFERENCE_AMI) -> InferenceAmi:
    found = {ami.name: ami for ami in inference_amis()}
    if name not in found:
        raise unknown("SageMaker InferenceAmiVersion", name, found)
    return found[name]


def driver_floor(runtime: str) -> DriverFloor | None:
    """The newest documented floor that applies to a Neuron runtime ("2.32.31.0"), if any."""
    floors = [DriverFloor(**row) for row in load("hosts")["runtime_needs_driver"]]
    applying = [floor for floor in floors if _line(runtime) >= _line(floor.runtime)]
    return max(applying, key=lambda floor: _line(floor.driver), default=None)


def driver_refusal(runtime: str, host: InferenceAmi) -> str | None:
    """Why ``host`` cannot run a container with Neuron runtime ``runtime``, or None where no source says so."""
    floor = driver_floor(runtime)
    if floor is None or _line(host.neuron_driver) >= _line(floor.driver):
        return None
    return (
        f"its Neuron Runtime {runtime} needs host Neuron driver {floor.driver} or newer and SageMaker's host image "
        f"{host.name} has driver {host.neuron_driver}"
    )


def untested_pairing(runtime: str, host: InferenceAmi) -> str | None:
    """Why a container with Neuron runtime ``runtime`` on ``host`` is a pairing no source shows working (newer than
    the newest runtime AWS itself runs there), or None. Not a refusal: no document rules it out either."""
    if host.proven_runtime is None or _line(runtime) <= _line(host.proven_runtime):
        return None
    return (
        f"SageMaker's host image {host.name} has Neuron driver {host.neuron_driver}; this image's Neuron Runtime "
        f"{runtime} is newer than any AWS itself runs there ({host.proven_runtime}, {host.proven_by}) and AWS's DLC "
        "guide matches the host driver to the container's SDK: an untested pairing"
    )


def newest_proven_sdk(host: InferenceAmi) -> str | None:
    """The newest Neuron SDK whose DLCs' runtime is no newer than the newest AWS runs on ``host``."""
    if host.proven_runtime is None:
        return None
    fitting = [
        row.sdk
        for row in dlc_releases()
        if row.neuron_runtime and _line(row.neuron_runtime) <= _line(host.proven_runtime)
    ]
    return max(fitting, key=version_tuple, default=None)
