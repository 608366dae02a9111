"""The Neuron DLAMIs EC2 deployments boot (data/dlami.yaml): each public SSM parameter, the Neuron SDK of the build
it resolves to, its PyTorch virtual environment and that environment's Python."""

from __future__ import annotations

from dataclasses import dataclass

from neurondeploy.catalog._data import load, unknown

# The DLAMI EC2 deployments boot unless told otherwise (apply --ami-ssm-parameter / --ami-id): the newest PyTorch 2.9
# DLAMI, the last with torch-neuronx (aws-neuron-sdk frameworks/torch/index.rst).
DEFAULT_DLAMI_PARAMETER = "/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id"


@dataclass(frozen=True)
class Dlami:
    parameter: str  # the public SSM parameter naming the newest build
    ami_name: str
    sdk: str  # the Neuron SDK minor line of the build the parameter resolves to ("2.31")
    venv: str
    python: str
    source: str
    serves: tuple[str, ...] = ()  # the container kinds (data/containers.yaml) it runs on EC2
    families: tuple[str, ...] = ()  # the instance families its docs list
    sdk_confirmed: bool = True
    python_confirmed: bool = True


def dlamis() -> tuple[Dlami, ...]:
    return tuple(
        Dlami(
            parameter=row["name"],
            ami_name=row["ami_name"],
            sdk=row["sdk"],
            venv=row["venv"],
            python=row["python"],
            source=row["source"],
            serves=tuple(row["serves"]),
            families=tuple(row["families"]),
            sdk_confirmed=row.get("sdk_confirmed", True),
            python_confirmed=row.get("python_confirmed", True),
        )
        for row in load("dlami")["parameters"]
    )


def dlamis_by_parameter() -> dict[str, Dlami]:
    return {d.parameter: d for d in dlamis()}


def dlami(parameter: str) -> Dlami:
    """The DLAMI a public SSM parameter names."""
    found = dlamis_by_parameter()
    if parameter not in found:
        raise unknown("Neuron DLAMI SSM parameter", parameter, found)
    return found[parameter]


def dlami_for(container_kind: str) -> Dlami | None:
    """The DLAMI an EC2 deployment of ``container_kind`` boots: the first row that serves it (None: no row does)."""
    return next((d for d in dlamis() if container_kind in d.serves), None)
