"""The offline :class:`PlanContext` of a loaded spec: run id, and what each kind of spec adds to it (an
endpoint's model size sizes its volume; a training job's source digest names the archive it uploads)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

from neurondeploy import catalog
from neurondeploy.archive import artifact_digest
from neurondeploy.errors import PlanError
from neurondeploy.planner.checks import model_architecture
from neurondeploy.planner.sizing import DTYPE_BYTES, parameter_count
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.release import Piece, instance_dlami_parameter, instance_piece, target_constraints
from neurondeploy.resources.sagemaker_training import job_files
from neurondeploy.specs import LoadedSpec
from neurondeploy.wheel import toolkit_identity


def plan_context(loaded: LoadedSpec, **overrides) -> PlanContext:
    """The offline context for ``loaded``: run id from the spec's digest (an unchanged spec re-planned gets the
    same job name; pass ``run_id`` for a new run), plus its kind's values; ``overrides`` win."""
    values = {"run_id": loaded.digest[:8], **_BY_KIND[loaded.spec.kind](loaded, overrides)}
    values.update(overrides)
    return dataclasses.replace(PlanContext(), **values)


def _training_values(loaded: LoadedSpec, overrides: dict) -> dict:
    """Training source is uploaded content-addressed, so plan shows the object train will send. Hashing a source
    tree is not free: a caller that has the digest passes it."""
    if "source_digest" in overrides:
        return {}
    directory = loaded.spec.resolved_source_dir(loaded.base_dir)
    if not directory.is_dir():
        return {"source_digest": None}
    try:
        generated = job_files(loaded.spec)
    except PlanError:  # a config that cannot be rendered: plan notes why, and train refuses the spec
        generated = {}
    return {"source_digest": artifact_digest(directory, generated)[:16]}


# What plan shows for a training job's model artifacts: apply reads the real URI with DescribeTrainingJob.
TRAINING_JOB_ARTIFACTS = "s3://resolved-at-apply/{job}/output/model.tar.gz"


def toolkit_values(target: Piece | None) -> dict:
    """The exact build of this toolkit that EC2 instances install (its identity: apply builds and uploads it), with
    its constraints for the instances' environment (``target``; None: unknown, this machine's)."""
    wheel = toolkit_identity()
    constraints = target_constraints(wheel.constraints, target)
    boto3 = next((line for line in constraints.splitlines() if line.startswith("boto3==")), "boto3")
    return {
        "toolkit_wheel": wheel.filename,
        "toolkit_sha256": wheel.sha256,
        "toolkit_constraints_sha256": hashlib.sha256(constraints.encode()).hexdigest(),
        "toolkit_boto3": boto3,
    }


def _inference_values(loaded: LoadedSpec, overrides: dict) -> dict:
    spec = loaded.spec
    if spec.deployment.platform != "ec2":
        return _model_values(loaded)
    # The DLAMI that serves the container kind, unless told which (apply --ami-ssm-parameter), and its venv.
    parameter = overrides.get("ami_ssm_parameter") or instance_dlami_parameter(spec)
    known = catalog.dlamis_by_parameter().get(parameter)
    instances = {"ami_ssm_parameter": parameter, **({"neuron_venv": known.venv} if known else {})}
    if "toolkit_sha256" not in overrides:
        instances |= toolkit_values(instance_piece(spec, parameter))
    return {**instances, **_model_values(loaded)}


def _model_values(loaded: LoadedSpec) -> dict:
    model = loaded.spec.model
    if model.s3_uri or model.training_job:
        artifacts = model.s3_uri or TRAINING_JOB_ARTIFACTS.format(job=model.training_job)
        return {"model_size_gib": None, "artifact_s3_uri": artifacts}
    try:
        arch = model_architecture(loaded)
    except Exception:  # an unreadable model directory is reported by the checks, not here
        return {"model_size_gib": None}
    size = None if arch is None else parameter_count(arch) * DTYPE_BYTES[loaded.spec.model.dtype] / 2**30
    return {"model_size_gib": size}


_BY_KIND: dict[str, Callable[[LoadedSpec, dict], dict]] = {"inference": _inference_values, "training": _training_values}
