"""`apply SPEC`: an inference deployment in AWS, its artifact compiled first when none is given (or the one
`compile --remote` left in the S3 compile cache); `apply --local`: the same spec served on this machine.

The engine (:func:`neurondeploy.engine.apply.apply_spec`) does what Terraform's apply guarantees; this is the
workflow around it: which artifact, which plan context, and the review of a saved plan.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.compiler.backends import select_backend
from neurondeploy.compiler.cache import CacheWarning, CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.compiler.llm_export import find_precompiled, precompiled_prefix
from neurondeploy.compiler.remote import fetch_remote_artifact, remote_artifact_key
from neurondeploy.engine.apply import apply_spec
from neurondeploy.engine.changes import Changes
from neurondeploy.engine.executor import ApplyResult
from neurondeploy.engine.saved_plans import check_saved_plan
from neurondeploy.engine.state import StateStore
from neurondeploy.engine.state_s3 import open_state
from neurondeploy.errors import PlanError
from neurondeploy.manifest import read_manifest
from neurondeploy.ops.compile_remote import default_cache_uri, llm_export
from neurondeploy.ops.smoke import smoke_deployment, smoke_ec2
from neurondeploy.planner.artifact_target import artifact_target
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.precompiled import load_budget
from neurondeploy.resources.sagemaker_endpoint import endpoint_volume_gib
from neurondeploy.serving import local
from neurondeploy.serving.llm import serve as llm_serve
from neurondeploy.specs import LoadedSpec, load_spec

Review = Callable[[Changes, "str | None", bool], None]  # (changes, artifact URI to upload, reviewed in a saved plan)


def apply(
    spec: str | Path | LoadedSpec,
    *,
    transport: AwsTransport | None = None,
    state: StateStore | None = None,
    artifact_dir: Path | None = None,
    backend: str = "auto",
    out_dir: Path | None = None,
    cache_dir: Path | None = None,
    cache_s3: str | None = None,
    context: dict | None = None,
    plan_file: str | Path | None = None,
    rollback: bool = False,
    parallel: bool = True,
    review: Review | None = None,
    on_event: Callable[[str], None] | None = None,
    smoke: bool = True,
    smoke_url: str | None = None,
) -> ApplyResult:
    """Create or update ``spec``'s deployment in AWS. Without ``artifact_dir`` the model is compiled first (cache
    first; on a machine without Neuron, the artifact `compile --remote` stored). ``review(changes, upload_uri,
    reviewed)`` sees the changes before the first mutating call and may raise to stop with nothing changed
    (``reviewed``: ``plan_file`` holds exactly this diff, reviewed already); without it the changes are applied,
    as `apply --yes` does. ``context`` adds to the plan context (``ami_ssm_parameter``, ``ami_id``). State defaults
    to ``$NEURONDEPLOY_STATE`` (else ``.neurondeploy/state.db``). With ``smoke``, an apply that changed the
    deployment ends with its smoke test (:mod:`neurondeploy.ops.smoke`), said through ``on_event``, before the
    objects an update replaced are deleted; a failure raises :class:`~neurondeploy.ops.smoke.SmokeTestFailed`,
    after moving an updated endpoint back to them (a new deployment stays recorded, or goes with ``rollback``).
    On EC2 it waits for a healthy target first, and goes through the load balancer's name, or ``smoke_url``."""
    loaded = spec if isinstance(spec, LoadedSpec) else load_spec(spec)
    _check_smoke_url(loaded, smoke_url)
    transport = transport or AwsTransport(loaded.spec.region)
    state = state if state is not None else open_state(None)
    say = on_event or (lambda message: None)
    saved = None
    if plan_file:
        saved = check_saved_plan(plan_file, loaded, transport)
        say(f"applying the plan reviewed in {plan_file} (spec sha256 {loaded.digest[:12]}, requests unchanged)")

    served = [artifact_dir] if artifact_dir else []  # the artifact the endpoint serves, for its smoke test

    def compile_artifact(loaded_spec: LoadedSpec) -> Path:
        remote = neuron_artifact_from_cache(loaded_spec, transport, backend, cache_dir, cache_s3, say)
        if remote is not None:
            say(f"the Neuron artifact that compile --remote left in the compile cache: {remote}")
            served.append(remote)
            return remote
        cache = CompileCache(root=cache_dir) if cache_dir else None
        served.append(compile_spec(loaded_spec, backend=backend, out_dir=out_dir, cache=cache).artifact_dir)
        return served[-1]

    def checked_review(planned: Changes, upload_uri: str | None) -> None:
        reviewed = saved is not None and saved.changes is not None
        if review is not None:
            review(planned, upload_uri, reviewed)
        if reviewed and [change.line() for change in planned.pending] != saved.changes:
            raise PlanError(
                f"what apply would change now differs from the diff reviewed in {plan_file} (state or AWS "
                "changed since): nothing was changed",
                f"run `neurondeploy plan {loaded.source.file} --out {plan_file}` again and review it",
            )

    def smoke_test() -> None:
        manifest = read_manifest(Path(served[-1])) if served and loaded.spec.container.ours else None
        if loaded.spec.deployment.platform == "ec2":
            deployment = state.get(loaded.spec.name)
            say(smoke_ec2(loaded.spec, manifest, transport, deployment, url=smoke_url, delay_s=transport.wait_delay_s))
        else:
            say(smoke_deployment(loaded.spec, manifest))

    return apply_spec(
        loaded,
        transport=transport,
        state=state,
        artifact_dir=artifact_dir,
        compile_artifact=compile_artifact,
        rollback=rollback,
        parallel=parallel,
        on_event=on_event,
        context=(context or {}) | precompiled_context(loaded, transport, cache_s3, say),
        review=checked_review,
        verify=smoke_test if smoke else None,
    )


def _check_smoke_url(loaded: LoadedSpec, smoke_url: str | None) -> None:
    """Refused before anything is created: a smoke URL that could only fail the deployment's test afterwards."""
    if smoke_url is None:
        return
    if loaded.spec.kind != "inference" or loaded.spec.deployment.platform != "ec2":
        raise PlanError(
            "--smoke-url is for EC2 deployments (a SageMaker endpoint is tested through InvokeEndpoint)",
            "remove --smoke-url",
        )
    if not re.fullmatch(r"https?://[^\s/?#]+(/\S*)?", smoke_url):
        raise PlanError(f"--smoke-url {smoke_url!r} is not an http(s) URL", "give one such as http://127.0.0.1:8080")


def neuron_artifact_from_cache(
    loaded: LoadedSpec,
    transport: AwsTransport,
    backend: str,
    cache_dir: Path | None,
    cache_s3: str | None,
    on_event: Callable[[str], None],
) -> Path | None:
    """Where this machine cannot compile for Neuron: the artifact `compile --remote` stored, if any."""
    if artifact_target(loaded.spec).runtime != "neuron" or select_backend(backend).name == "neuron":
        return None
    if loaded.spec.model.factory:  # compile --remote cannot send a factory: nothing to find
        return None
    cache_uri = cache_s3 or default_cache_uri(transport, loaded)
    cache = CompileCache(root=cache_dir, s3_uri=cache_uri)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", CacheWarning)
        found = fetch_remote_artifact(remote_artifact_key(loaded, cache.root), cache)
    for warning in seen:  # no bucket yet is a plain miss (the cache says nothing); anything else is worth a line
        on_event(f"compile cache: {warning.message}")
    return found


# What a Hugging Face LLM container does without an export (planner.checks._precompile_advice has the source).
NO_EXPORT = (
    "the container starts from the Hugging Face Neuron cache's compiled configuration for these shapes, and "
    "refuses to start if it has none (run compile --remote first)"
)


def precompiled_context(
    loaded: LoadedSpec, transport: AwsTransport, cache_s3: str | None, on_event: Callable[[str], None]
) -> dict:
    """An LLM endpoint (on SageMaker, or EC2 instances that lay it out as SageMaker does): the model `compile --remote` built, if the S3 cache has it, as the plan context
    that points the endpoint at it (and shrinks its startup budget to what loading needs). Without one, apply stops
    here, before anything is created, unless the spec chose to start without it: from the Hugging Face Neuron cache
    (``deployment.container.start_from_neuron_cache``) or by compiling at start (``compile_at_start``)."""
    spec = loaded.spec
    if spec.kind != "inference" or not spec.container.llm:
        return {}
    cache_uri = cache_s3 or default_cache_uri(transport, loaded)
    key = llm_export(loaded, cache_uri).key
    try:
        size = find_precompiled(cache_uri, key)
        missing = f"no model built by compile --remote in {cache_uri} (key {key[:16]})"
    except AwsCallError as exc:
        size, missing = None, f"compile cache: {exc.message}"
    if size is None:
        _start_without_precompiled(loaded, missing, on_event)
        return {}
    prefix = precompiled_prefix(cache_uri, key)
    budget, why = load_budget(size, endpoint_volume_gib(spec, plan_context(loaded)))
    on_event(
        f"the model compile --remote built: {prefix}, loaded from S3 at /opt/ml/model (no Hub download, no "
        f"HF_TOKEN, no compile at start); startup health-check budget {min(budget, spec.deployment.health_check_timeout_s)} s "
        f"({why}), was {spec.deployment.health_check_timeout_s} s"
    )
    return {"precompiled_model_uri": prefix, "precompiled_model_bytes": size}


def _start_without_precompiled(loaded: LoadedSpec, missing: str, on_event: Callable[[str], None]) -> None:
    """No model built by compile --remote: the start the spec agreed to, said; or the refusal, nothing created."""
    spec = loaded.spec
    budget = spec.deployment.health_check_timeout_s
    run_first = f"run `neurondeploy compile {loaded.source.file} --remote` first"
    if spec.container.compiles_at_start:
        if not spec.deployment.container.compile_at_start:
            raise PlanError(
                f"{missing}: {spec.container.name} would compile the model when the endpoint starts, within its "
                "startup health check; nothing was created",
                f"{run_first}, or set deployment.container.compile_at_start: true to let it compile at start",
            )
        on_event(
            f"{missing}: {spec.container.name} compiles the model when it starts, within the {budget} s "
            "startup health check"
        )
        return
    if not spec.deployment.container.start_from_neuron_cache:
        raise PlanError(
            f"{missing}: the container would start only if the Hugging Face Neuron cache has this model "
            "compiled at these shapes, and refuse to start otherwise, after the endpoint was created; nothing "
            "was created",
            f"{run_first}, or set deployment.container.start_from_neuron_cache: true to start from that cache",
        )
    on_event(f"{missing}: {NO_EXPORT}, within {budget} s")


@dataclass
class LocalApply:
    """`apply --local`'s endpoint on this machine; an LLM spec's also names its target (routes, served name)."""

    endpoint: local.LocalEndpoint
    llm: llm_serve.LlmTarget | None = None


def apply_local(
    spec: str | Path | LoadedSpec,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    backend: str = "auto",
    cache_dir: Path | None = None,
    out_dir: Path | None = None,
    on_bucket: Callable | None = None,
) -> LocalApply:
    """Serve ``spec`` on this machine as AWS would: a CPU compile (cache first) replayed as the plan's SageMaker
    model, or an LLM spec's model behind the vLLM Neuron container's API. Returns once it answers; stop it with
    ``.endpoint.stop()``."""
    loaded = spec if isinstance(spec, LoadedSpec) else load_spec(spec)
    if llm_serve.is_llm_spec(loaded.spec):
        target = llm_serve.target_from_spec(loaded)
        return LocalApply(llm_serve.start_local(target, host, port), target)
    endpoint = local.start_local_endpoint(
        loaded, host=host, port=port, backend=backend, cache_dir=cache_dir, out_dir=out_dir, on_bucket=on_bucket
    )
    return LocalApply(endpoint)
