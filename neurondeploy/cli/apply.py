"""`apply SPEC`: an inference deployment in AWS (compiling its artifact first when none is given)."""

from __future__ import annotations

import warnings
from pathlib import Path

from neurondeploy.aws.transport import AwsCallError
from neurondeploy.cli.confirm import confirm
from neurondeploy.cli.images import image_context
from neurondeploy.cli.options import open_state_of, transport_for
from neurondeploy.cli.output import console_err, dollars, print_json
from neurondeploy.compiler.backends import select_backend
from neurondeploy.compiler.cache import CacheWarning, CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.compiler.llm_export import LLM_CONTAINERS, find_precompiled, llm_artifact_key, precompiled_prefix
from neurondeploy.compiler.remote import fetch_remote_artifact, remote_artifact_key
from neurondeploy.engine.apply import apply_spec
from neurondeploy.engine.changes import recorded_hourly_usd
from neurondeploy.engine.remote_compile import default_cache_uri
from neurondeploy.engine.saved_plans import check_saved_plan
from neurondeploy.errors import PlanError
from neurondeploy.planner.artifact_target import artifact_target
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.plan import build_plan
from neurondeploy.resources.precompiled import load_budget
from neurondeploy.resources.sagemaker_endpoint import container_image
from neurondeploy.specs import load_spec


def neuron_artifact_from_cache(loaded, args, transport) -> Path | None:
    """Where this machine cannot compile for Neuron: the artifact `compile --remote` stored, if any."""
    if artifact_target(loaded.spec).runtime != "neuron" or select_backend(args.backend).name == "neuron":
        return None
    if loaded.spec.model.factory:  # compile --remote cannot send a factory: nothing to find
        return None
    cache_uri = args.cache_s3 or default_cache_uri(transport, loaded)
    cache = CompileCache(root=Path(args.cache_dir) if args.cache_dir else None, s3_uri=cache_uri)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", CacheWarning)
        found = fetch_remote_artifact(remote_artifact_key(loaded, cache.root), cache)
    for warning in seen:  # a first apply has no bucket yet: nothing to say; anything else is worth a line
        if "NoSuchBucket" not in str(warning.message):
            console_err().print(f"  compile cache: {warning.message}")
    return found


def precompiled_context(loaded, args, transport) -> dict:
    """An LLM endpoint on SageMaker: the model `compile --remote` exported, if the S3 cache has it, as the plan
    context that points the endpoint at it (and shrinks its startup budget to what loading needs)."""
    spec = loaded.spec
    if spec.kind != "inference" or spec.deployment.container.kind not in LLM_CONTAINERS:
        return {}
    if spec.deployment.platform != "sagemaker":
        return {}
    console = console_err()
    cache_uri = args.cache_s3 or default_cache_uri(transport, loaded)
    key = llm_artifact_key(spec, container_image(spec, plan_context(loaded)))
    try:
        size = find_precompiled(cache_uri, key)
    except AwsCallError as exc:
        console.print(f"  compile cache: {exc.message}; the container downloads and compiles the model at start")
        return {}
    if size is None:
        console.print(
            f"  no model exported by compile --remote in {cache_uri} (key {key[:16]}): the container downloads "
            f"and compiles it at start, within {spec.deployment.health_check_timeout_s} s"
        )
        return {}
    prefix = precompiled_prefix(cache_uri, key)
    budget, why = load_budget(size)
    console.print(
        f"  the model compile --remote exported: {prefix}, loaded from S3 at /opt/ml/model (no Hub download, no "
        f"HF_TOKEN, no compile at start); startup health-check budget {min(budget, spec.deployment.health_check_timeout_s)} s "
        f"({why}), was {spec.deployment.health_check_timeout_s} s"
    )
    return {"precompiled_model_uri": prefix, "precompiled_model_bytes": size}


def cmd_apply(args) -> int:
    loaded = load_spec(args.spec)
    console = console_err()
    transport = transport_for(loaded.spec.region, args)
    saved = None
    if args.plan:
        saved = check_saved_plan(args.plan, loaded, transport)
        console.print(
            f"applying the plan reviewed in {args.plan} (spec sha256 {loaded.digest[:12]}, requests unchanged)"
        )

    def compile_artifact(loaded_spec):
        cache = CompileCache(root=Path(args.cache_dir)) if args.cache_dir else None
        remote = neuron_artifact_from_cache(loaded_spec, args, transport)
        if remote is not None:
            console.print(f"  the Neuron artifact that compile --remote left in the compile cache: {remote}")
            return remote
        return compile_spec(
            loaded_spec, backend=args.backend, out_dir=Path(args.out) if args.out else None, cache=cache
        ).artifact_dir

    context = image_context(args) | precompiled_context(loaded, args, transport)

    def review(planned, upload_uri) -> None:
        for change in planned.pending:
            console.print(f"  {change.line()}")
        if upload_uri:
            console.print(f"  + the artifact, to {upload_uri}")
        before = state.get(loaded.spec.name)
        cost_before = recorded_hourly_usd(before) if before else 0.0
        cost_after = build_plan(loaded).cost.hourly_usd
        console.print(f"{loaded.spec.name}: {planned.summary()}; cost {dollars(cost_before)} -> {dollars(cost_after)}")
        if saved is not None and saved.changes is not None:
            if [change.line() for change in planned.pending] != saved.changes:
                raise PlanError(
                    f"what apply would change now differs from the diff reviewed in {args.plan} (state or AWS "
                    "changed since): nothing was changed",
                    f"run `neurondeploy plan {args.spec} --out {args.plan}` again and review it",
                )
            return  # that diff was reviewed: apply it without asking again
        confirm(args, console, f"apply these changes to {loaded.spec.name}")

    state = open_state_of(args)
    result = apply_spec(
        loaded,
        transport=transport,
        state=state,
        artifact_dir=Path(args.artifact) if args.artifact else None,
        compile_artifact=compile_artifact,
        rollback=args.rollback,
        parallel=not args.sequential,
        on_event=lambda message: console.print(f"  {message}"),
        context=context,
        review=review,
    )
    mutating = len(transport.mutating_calls())
    summary = {
        "deployment": loaded.spec.name,
        "created": result.created,
        "updated": result.updated,
        "unchanged": len(result.unchanged),
        "deleted": result.deleted,
        "mutating_calls": mutating,
        "calls": len(transport.calls),
        "seconds": round(result.seconds, 2),
    }
    if args.json:
        print_json(summary)
    else:
        console.print(
            f"[bold]{loaded.spec.name}[/]: {len(result.created)} created, {len(result.updated)} updated in place, "
            f"{len(result.unchanged)} unchanged, "
            f"{len(result.deleted)} deleted; {mutating} mutating AWS calls of {len(transport.calls)} in {result.seconds:.1f} s"
        )
    return 0
