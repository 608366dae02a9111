"""`apply SPEC`: what Terraform's apply guarantees, for a deployment.

In order, changing nothing until the review: checks; the artifact against the deployment's target
(:mod:`~neurondeploy.planner.artifact_target`: a CPU trace is never sent to Inf2); Service Quotas; ownership (:mod:`~neurondeploy.engine.ownership`:
another state's deployment is refused, this state's lost answers are found for adoption); the serving image; the
artifact's sha256 against S3; the resources; a refresh of every recorded one (:mod:`~neurondeploy.engine.refresh`);
the diff (:mod:`~neurondeploy.engine.changes`) handed to ``review``, which may refuse. Then the artifact upload
(only a new sha256) and the executor. A re-apply of an unchanged spec sends no mutating call and uploads nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path

from neurondeploy.archive import artifact_digest
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.changes import Changes, changes
from neurondeploy.engine.claims import take_claim
from neurondeploy.engine.destroy import sweep_leftovers
from neurondeploy.engine.executor import ApplyResult, Executor
from neurondeploy.engine.model_bundle import dlc_model_dir
from neurondeploy.engine.ownership import ownership_of, refuse_foreign
from neurondeploy.engine.preflight import needs_of, preflight
from neurondeploy.engine.quotas import check_quotas
from neurondeploy.engine.refresh import refresh
from neurondeploy.engine.state import DeploymentState, StateStore
from neurondeploy.engine.sweep import Leftover
from neurondeploy.engine.uploads import (
    ApplyError,
    artifact_is_current,
    check_container_image,
    ensure_bucket,
    upload_artifact,
    upload_toolkit,
)
from neurondeploy.errors import NeurondeployError
from neurondeploy.manifest import check_artifact_files, read_manifest
from neurondeploy.planner.artifact_target import gate_artifact
from neurondeploy.planner.checks import refuse_errors, resolve_model_path
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.naming import artifact_uri, bucket_name
from neurondeploy.resources.release import instance_piece, serving_piece, target_constraints
from neurondeploy.resources.sagemaker_endpoint import runs_on_dlc
from neurondeploy.resources.validation import check_requests
from neurondeploy.specs import InferenceSpec, LoadedSpec
from neurondeploy.wheel import toolkit_wheel


def needs_artifact(loaded: LoadedSpec) -> bool:
    """Whether apply uploads the endpoint's model data (a model already in S3 is used where it is)."""
    spec = loaded.spec
    return isinstance(spec, InferenceSpec) and spec.ships_model_data and spec.model.source_kind in _LOCAL_SOURCES


_LOCAL_SOURCES = ("factory", "hf-directory", "torchscript")


def training_job_artifacts(transport: AwsTransport, job: str) -> str:
    """The model.tar.gz a Completed SageMaker training job wrote (DescribeTrainingJob's ModelArtifacts)."""
    try:
        described = transport.call("sagemaker", "DescribeTrainingJob", {"TrainingJobName": job})
    except AwsCallError as exc:
        raise ApplyError(
            f"model.training_job {job}: {exc.code or 'no answer'}: {exc.detail}",
            "check the job name and region (`neurondeploy status` lists training runs)",
        ) from None
    status = described.get("TrainingJobStatus")
    uri = (described.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if status != "Completed" or not uri:
        raise ApplyError(
            f"model.training_job {job} is {status}, so it has no model artifacts to serve",
            f"wait for it to complete (`neurondeploy logs {job} --region {transport.region} --follow`), or name a "
            "completed job",
        )
    return uri


def model_directory(loaded: LoadedSpec) -> Path:
    """The local model directory a Hugging Face container is given as its model data."""
    path = resolve_model_path(loaded)
    if not (path / "config.json").is_file():
        raise ApplyError(
            f"model.path {path} is not a Hugging Face model directory (no config.json): nothing to upload",
            "train it first (`neurondeploy train SPEC --local` saves one) or point model.path at one",
        )
    return path


def check_artifact(loaded: LoadedSpec, artifact_dir: Path) -> str | None:
    """The artifact ↔ target gate: an artifact the deployment's instances cannot run is refused (one line, with
    the fix) before anything is uploaded or created. Returns the notice of a declared CPU stand-in, if any.
    A Hugging Face container's model data is a model directory it compiles or loads itself: not judged here."""
    if not loaded.spec.container.ours:
        return None
    manifest = read_manifest(artifact_dir)
    notice = gate_artifact(loaded.spec, manifest, where=f"artifact {artifact_dir}", spec_file=str(loaded.source.file))
    check_artifact_files(artifact_dir, manifest)  # damaged bytes would upload, roll out, then fail at /ping
    return notice


def needs_toolkit(loaded: LoadedSpec) -> bool:
    """Whether instances install this build: every EC2 deployment (our server, or an LLM server's launcher)."""
    spec = loaded.spec
    return isinstance(spec, InferenceSpec) and spec.deployment.platform == "ec2"


def apply_spec(
    loaded: LoadedSpec,
    *,
    transport: AwsTransport,
    state: StateStore,
    artifact_dir: Path | None = None,
    compile_artifact: Callable[[LoadedSpec], Path] | None = None,
    rollback: bool = False,
    parallel: bool = True,
    on_event: Callable[[str], None] | None = None,
    context: dict | None = None,
    review: Callable[[Changes, str | None], None] | None = None,
    verify: Callable[[], None] | None = None,
) -> ApplyResult:
    """``review(changes, artifact_uri_to_upload)`` sees what the apply would do before its first mutating call
    (and only when it would do something); raising there stops it with nothing changed. ``verify`` checks the
    changed deployment before the objects it replaced are deleted (:meth:`Executor.apply`)."""
    spec = loaded.spec
    if spec.kind == "training":
        raise ApplyError(
            "apply creates endpoints; training jobs run with `neurondeploy train SPEC`", "use neurondeploy train"
        )
    refuse_errors(loaded)
    on_event = on_event or (lambda message: None)
    if artifact_dir is not None and needs_artifact(loaded):  # a given artifact is judged before any AWS call
        check_artifact(loaded, Path(artifact_dir))
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    for line in check_quotas(transport, spec):  # read-only; a quota below the need refuses before any create
        on_event(line)
    ctx = plan_context(loaded, account_id=account, **(context or {}))
    zones = [spec.dns.hosted_zone_id] if spec.dns else []
    # Read-only and before any upload: the artifact in S3 is what a live deployment's instances boot from.
    found = ownership_of(transport, spec.name, state.lineage, state.get(spec.name), zones)
    refuse_foreign(spec.name, found.foreign, str(state.path))
    check_container_image(transport, spec, ctx)  # before any upload: a refused apply leaves nothing behind
    upload: tuple[Path, str, str] | None = None  # (directory, uri, sha256) of an artifact S3 lacks
    if isinstance(spec, InferenceSpec) and spec.model.training_job:
        uri = training_job_artifacts(transport, spec.model.training_job)
        on_event(f"model data: {uri} (training job {spec.model.training_job})")
        ctx = dataclasses.replace(ctx, artifact_s3_uri=uri)
    if needs_artifact(loaded):
        if artifact_dir is None and not spec.container.ours:
            artifact_dir = model_directory(loaded)  # a Hugging Face container loads the directory as it is
        if artifact_dir is None:
            if compile_artifact is None:
                raise ApplyError(
                    "this deployment serves a compiled artifact and none was given",
                    "pass --artifact DIR, or let apply compile it",
                )
            artifact_dir = compile_artifact(loaded)
        notice = check_artifact(loaded, Path(artifact_dir))  # said once the other checks passed
        if notice:
            on_event(notice)
        if spec.deployment.platform == "sagemaker" and runs_on_dlc(spec, ctx):  # our server rides in model.tar.gz
            artifact_dir = dlc_model_dir(Path(artifact_dir), toolkit_wheel(), serving_piece(spec))
        digest = artifact_digest(Path(artifact_dir))
        uri = artifact_uri(spec, dataclasses.replace(ctx, artifact_sha256=digest))
        if not artifact_is_current(transport, uri, digest):
            upload = (Path(artifact_dir), uri, digest)
        # The digest is in what instances boot with: a changed artifact rolls the fleet.
        ctx = dataclasses.replace(ctx, artifact_s3_uri=uri, artifact_sha256=digest)
    resources = deployment_resources(spec, ctx)
    check_requests(resources, spec.region)  # what AWS would refuse half-way is refused before the first change
    # read-only: what the deployment names outside itself (a role, a secret, a zone) is there
    preflight(transport, needs_of(spec, resources, account, shared_bucket=bucket_name(spec.region, ctx)), on_event)
    refreshed = refresh(spec.name, transport, state)
    for item in refreshed.items:
        on_event(f"refresh: {item.resource} ({item.type}) {item.kind}: {item.detail}")
    if review is not None:
        planned = changes(
            state.get(spec.name), resources, lineage=state.lineage, gone=refreshed.gone, drifted=refreshed.drifted
        )
        if planned.pending or upload or found.ours:
            review(planned, upload[1] if upload else None)
    # The name is this state's before anything of it is made: of two states applying together, one goes on.
    take_claim(transport, ensure_bucket(transport, spec.region, ctx), spec.name, state.lineage, str(state.path))
    if upload is not None:
        upload_artifact(transport, *upload)
        on_event(f"uploaded the artifact to {upload[1]}")
    if needs_toolkit(loaded):  # instances install this exact build from the bucket (user data checks its sha256)
        wheel = toolkit_wheel()  # with its constraints for the instances' Python, as the plan names them
        instances = instance_piece(spec, ctx.ami_ssm_parameter)
        wheel = dataclasses.replace(wheel, constraints=target_constraints(wheel.constraints, instances))
        if (wheel.sha256, wheel.constraints_sha256) != (ctx.toolkit_sha256, ctx.toolkit_constraints_sha256):
            raise ApplyError(  # the user data would check for another wheel than the one uploaded
                f"the neurondeploy wheel built now ({wheel.sha256[:16]}) is not the one this plan names "
                f"({(ctx.toolkit_sha256 or '')[:16]}): the installed package changed while applying",
                "run apply again",
            )
        # Beside the artifact, or where it would be (an LLM server's instances have none).
        for uri in upload_toolkit(transport, artifact_uri(spec, ctx), wheel):
            on_event(f"uploaded {uri}")
    executor = Executor(transport, state, parallel=parallel, on_event=on_event)
    with state.lock(spec.name, spec.region, spec.kind):  # re-entered by the executor
        result = executor.apply(
            spec.name,
            spec.region,
            spec.kind,
            resources,
            spec_digest=loaded.digest,
            spec_json=spec.model_dump_json(),
            rollback=rollback,
            found=found.ours,
            gone=refreshed.gone,
            drifted=refreshed.drifted,
            verify=verify,
        )
        if found.ours:  # what an earlier apply of this state made without hearing back, and nothing adopted
            delete_unclaimed(transport, spec.name, state.lineage, state.get(spec.name), zones, on_event)
    return result


def delete_unclaimed(
    transport: AwsTransport,
    name: str,
    lineage: str,
    recorded: DeploymentState | None,
    hosted_zone_ids: Iterable[str],
    on_event: Callable[[str], None],
) -> list[Leftover]:
    """After an apply that found leftovers of its own lineage: delete those it did not adopt. They are this
    state's (its lineage tag says so) and no resource of the spec is them."""
    left = ownership_of(transport, name, lineage, recorded, hosted_zone_ids).ours
    for item in left:
        on_event(f"deleting {item.type} {item.id}: made by an earlier apply of this state that lost its answer")
    errors: list[str] = []
    swept = sweep_leftovers(transport, left, errors, on_event)
    if errors:
        raise NeurondeployError(
            f"could not delete what an interrupted apply left: {errors[0]}",
            "delete it by hand, or run `neurondeploy destroy` and apply again",
        )
    return swept
