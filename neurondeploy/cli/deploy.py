"""`apply`, `destroy`, `status`, `drift`, `unlock`: deployments in AWS and their state."""

from __future__ import annotations

from neurondeploy.cli.confirm import confirm
from neurondeploy.cli.options import open_state_of, transport_for
from neurondeploy.cli.output import console_err, dollars, print_json
from neurondeploy.engine.destroy import destroy
from neurondeploy.engine.drift import drift
from neurondeploy.engine.executor import Executor
from neurondeploy.engine.importer import import_deployment
from neurondeploy.engine.state import DeploymentLocked
from neurondeploy.errors import NeurondeployError
from neurondeploy.ops.status import deployment_status
from neurondeploy.resources.sagemaker_compile import COMPILE_SUFFIX


def cmd_destroy(args) -> int:
    state = open_state_of(args)
    recorded = state.get(args.name)
    region = args.region or (recorded.region if recorded else None)
    if region is None:
        raise NeurondeployError(
            f"no state for deployment {args.name}", "pass --region to sweep AWS for its tagged resources"
        )
    console = console_err()
    transport = transport_for(region, args)
    if recorded is not None:
        for resource in sorted(recorded.resources.values(), key=lambda r: -r.sequence):
            console.print(f"    - {resource.name} ({resource.type})")
    console.print(
        f"{args.name}: {len(recorded.resources) if recorded else 0} recorded resources to delete, then whatever "
        f"else carries its tag and this state's lineage"
    )
    confirm(args, console, f"destroy {args.name}")
    executor = Executor(transport, state, on_event=lambda message: console.print(f"  {message}"))
    report = destroy(args.name, executor, transport, state, keep_artifacts=args.keep_artifacts)
    for leftover in report.remaining:
        console.print(f"[red]still present[/]: {leftover.type} {leftover.id} {leftover.detail}")
    for problem in report.errors:
        console.print(f"[red]failed[/]: {problem}")
    objects = report.objects
    stored = f", {objects.deleted} objects deleted from s3://{objects.bucket}/{objects.prefix}" if objects else ""
    console.print(
        f"{args.name}: {len(report.deleted)} recorded resources deleted, {len(report.swept)} found by tag sweep and "
        f"deleted{stored}, {len(report.remaining)} remaining"
    )
    if objects and objects.kept:
        why = "--keep-artifacts" if args.keep_artifacts else "the training job's results"
        console.print(
            f"kept {len(objects.kept)} objects under s3://{objects.bucket}/{objects.prefix} ({why}); remove them "
            f"with `aws s3 rm --recursive s3://{objects.bucket}/{objects.prefix}`"
        )
    if report.errors and not report.remaining:
        console.print("state keeps the deployment; run destroy again once the cause is fixed")
    return 0 if report.clean else 7


def cmd_import(args) -> int:
    state = open_state_of(args)
    console = console_err()
    transport = transport_for(args.region, args)
    retagged = import_deployment(
        args.name, transport, state, hosted_zone_ids=args.zone, on_event=lambda m: console.print(f"  {m}")
    )
    console.print(
        f"{args.name}: {len(retagged)} resources now carry this state's lineage ({state.lineage}); "
        f"`neurondeploy apply SPEC` adopts them, `neurondeploy destroy {args.name}` deletes them"
    )
    return 0


def cmd_status(args) -> int:
    state = open_state_of(args)
    names = [args.name] if args.name else state.names()
    data = []
    for name in names:
        deployment = state.get(name)
        if deployment is None:
            raise NeurondeployError(f"no state for deployment {name}", f"known: {', '.join(state.names()) or 'none'}")
        data.append(deployment_status(deployment, args.wait_delay_s))
    if args.json:
        print_json(data)
        return 0
    for item in data:
        _print_status(item, args.resources)
    if not data:
        print("no deployments in this state")
    return 0


def _print_status(item: dict, resources: bool) -> None:
    incomplete = [r["name"] for r in item["resources"] if not r["complete"]]
    print(f"{item['name']} ({item['kind']}, {item['region']})")
    if item["url"]:
        print(f"  url:     {item['url']}" + (f"  (invoke {item['invoke']})" if item["invoke"] != item["url"] else ""))
    if item["kind"] == "training":
        job = item["training_job"]
        if job is None:
            starts = "compile SPEC --remote" if item["name"].endswith(COMPILE_SUFFIX) else "train SPEC"
            print(f"  job:     none recorded (neurondeploy {starts} starts one)")
        elif "error" in job:
            print(f"  job:     {job['job_name']}: status unavailable: {job['error']}")
        else:
            print(f"  job:     {job['line']}")
    else:
        print(f"  health:  {item['health']}")
    spent = f" (this run: ${item['cost_usd']:,.2f})" if item.get("cost_usd") is not None else ""
    print(f"  cost:    {dollars(item['hourly_usd'])}{spent}")
    if item["age"]:
        print(f"  age:     {item['age']} (created {item['created']})")
    print(f"  changed: {item['last_change']} (last apply)")
    what = f"  {len(item['resources'])} resources"
    if incomplete:
        what += f", incomplete: {', '.join(incomplete)} (run apply again)"
    print(what + ("" if resources else " (--resources lists them)"))
    if resources:
        for resource in item["resources"]:
            ident = next(iter(resource["outputs"].values()), "") if resource["outputs"] else ""
            print(f"    {resource['name']:28} {resource['type']:40} {ident}")


def cmd_drift(args) -> int:
    state = open_state_of(args)
    recorded = state.get(args.name)
    if recorded is None:
        raise NeurondeployError(f"no state for deployment {args.name}", "apply it first")
    items = drift(args.name, transport_for(recorded.region, args), state)
    if args.json:
        print_json([item.__dict__ for item in items])
    else:
        for item in items:
            print(f"{item.kind}: {item.resource} ({item.type}): {item.detail}")
        print(f"{args.name}: {len(items)} differences from what neurondeploy applied")
    return 0 if not items else 8


def cmd_unlock(args) -> int:
    """The state decides: a lock whose holder is gone is released, a no-op when unlocked, unknown names fail; one
    whose holder still runs here is released once the user confirms (Terraform's force-unlock), naming it."""
    store = open_state_of(args)
    try:
        outcome = store.unlock(args.name)
    except DeploymentLocked as held:
        confirm(args, console_err(), f"{held.message}: release it anyway")
        outcome = store.unlock(args.name, force=True)
    print(outcome or f"unlocked {args.name}")  # the S3 store says nothing
    return 0
