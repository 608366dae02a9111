"""What artifact a deployment can run, and the gate that refuses any other before it is uploaded or served.

An Inf2 / Trn1 deployment of our container loads NEFFs: an artifact compiled by the Neuron backend for the
instance's ``--target`` with the deployment's Neuron SDK. A CPU trace (what ``compile`` makes where torch_neuronx
is not installed) would be uploaded, the endpoint or the instances created, and the model would fail at ``/ping``
minutes later; the gate refuses it first and names the fix that works on any machine: ``compile --remote``.

Tests and replays that stand a CPU artifact in for a NEFF say so explicitly with ``NEURONDEPLOY_CPU_STANDIN`` (its value: why)
(never a default): the gate then lets a CPU artifact of the right target through and says so in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from neurondeploy import catalog
from neurondeploy.manifest import ArtifactError, Manifest, check_compatible
from neurondeploy.resources.release import deployment_release
from neurondeploy.specs import InferenceSpec
from neurondeploy.standin import CPU_STANDIN_ENV, cpu_standin_reason


@dataclass(frozen=True)
class ArtifactTarget:
    """What the deployment's instances run: ``neuron`` NEFFs for ``target`` built with ``neuron_sdk``."""

    runtime: str  # "neuron" | "cpu"
    target: str | None  # neuronx-cc --target
    neuron_sdk: str
    instance_type: str


def compile_target(spec: InferenceSpec) -> str | None:
    """neuronx-cc ``--target`` for the spec: ``compile.target`` or the instance's generation."""
    return spec.compile.target or catalog.get_instance(spec.instance_type).compile_target


def artifact_sdk(spec: InferenceSpec) -> str:
    """The Neuron SDK the artifact is built for: the deployment's one release (resources.release), whose images or
    DLAMI run it."""
    return deployment_release(spec).sdk


def artifact_target(spec: InferenceSpec) -> ArtifactTarget:
    target = compile_target(spec)
    return ArtifactTarget(
        runtime="neuron" if target else "cpu",
        target=target,
        neuron_sdk=artifact_sdk(spec),
        instance_type=spec.deployment.instance_type,
    )


def cpu_standin_allowed() -> bool:
    return cpu_standin_reason() is not None


def remote_compile_hint(spec_file: str | None) -> str:
    spec = spec_file or "SPEC"
    return (
        f"compile it on Neuron with `neurondeploy compile {spec} --remote` (a SageMaker job; no Neuron SDK "
        "needed here), then apply again"
    )


def gate_artifact(
    spec: InferenceSpec,
    manifest: Manifest,
    *,
    where: str,
    spec_file: str | None = None,
    allow_cpu_standin: bool | None = None,
) -> str | None:
    """Refuse (ArtifactError, one line with the fix) an artifact the deployment cannot run; return a notice when a
    CPU stand-in was let through on purpose, else None."""
    wanted = artifact_target(spec)
    allow = cpu_standin_allowed() if allow_cpu_standin is None else allow_cpu_standin
    if wanted.runtime == "neuron" and manifest.backend != "neuron":
        if not allow:
            raise ArtifactError(
                f"{where} is a {manifest.backend} trace and {wanted.instance_type} runs only Neuron artifacts "
                f"(NEFFs for --target {wanted.target}); it would fail at /ping after the upload",
                remote_compile_hint(spec_file),
            )
        check_compatible(manifest, runtime=manifest.backend, target=wanted.target, where=where)
        return (
            f"{where}: a {manifest.backend} artifact stands in for a Neuron one on {wanted.instance_type} "
            f"(${CPU_STANDIN_ENV}=1: tests and replays only; it will not load on Neuron)"
        )
    check_compatible(manifest, runtime=wanted.runtime, target=wanted.target, neuron_sdk=wanted.neuron_sdk, where=where)
    return None
