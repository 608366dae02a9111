"""Command line: parse, call the library, render. Thin on purpose; everything here is doable from Python.

Heavy modules (rich, botocore, torch) are imported inside the commands so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from neurondeploy import __version__
from neurondeploy.errors import NeurondeployError

EXIT_INTERNAL = 70


def _print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _console_err():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, stderr=True)


def cmd_validate(args) -> int:
    from neurondeploy.planner.validate import validate_files

    results = validate_files(args.specs)
    if args.json:
        _print_json([result.as_dict() for result in results])
    else:
        for result in results:
            for line in result.lines():
                print(line, file=sys.stderr if not result.ok else sys.stdout)
    return 0 if all(result.ok for result in results) else 2


def cmd_plan(args) -> int:
    from neurondeploy.planner.plan import build_plan_for_file
    from neurondeploy.engine.saved_plans import save_plan

    plan = build_plan_for_file(args.spec)
    if args.out:
        save_plan(plan, args.out)
    if args.json:
        _print_json(plan.model_dump(mode="json"))
    else:
        from neurondeploy.cli.render import render_plan

        render_plan(plan, _console())
    return 0 if plan.all_validated else 3


def cmd_size(args) -> int:
    from neurondeploy.planner.size import run_size

    result = run_size(args)
    if args.json:
        _print_json(result)
    else:
        from neurondeploy.cli.render import render_size

        render_size(result, _console())
    return 0 if result["options"] else 3


def _bucket_line(bucket) -> str:
    state = f"cache hit ({bucket.source})" if bucket.cache_hit else f"compiled in {bucket.trace_s:.1f} s"
    return f"  bucket batch {bucket.batch_size} × {bucket.length}: {state}"


def cmd_compile(args) -> int:
    from neurondeploy.compiler.backends import select_backend
    from neurondeploy.compiler.cache import CompileCache
    from neurondeploy.compiler.compile import compile_spec
    from neurondeploy.specs import load_spec

    loaded = load_spec(args.spec)
    console = _console_err()
    backend = select_backend(args.backend).name
    if backend == "cpu":
        why = "forced with --backend cpu" if args.backend == "cpu" else "torch_neuronx is not installed here"
        console.print(f"backend: [bold]cpu[/] ({why}): a CPU trace with the same artifact format, for testing and local serving")
    else:
        console.print("backend: [bold]neuron[/] (torch_neuronx.trace with neuronx-cc)")
    cache = CompileCache(root=Path(args.cache_dir) if args.cache_dir else None, s3_uri=args.cache_s3)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    buckets = loaded.spec.compile.buckets if loaded.spec.kind == "inference" else []
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} buckets"),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        task = progress.add_task("compiling", total=len(buckets))

        def on_bucket(bucket) -> None:
            progress.console.print(_bucket_line(bucket))
            progress.advance(task)

        result = compile_spec(loaded, backend=args.backend, cache=cache,
                              out_dir=Path(args.out) if args.out else None, on_bucket=on_bucket)
    if args.json:
        _print_json(result.as_dict())
    else:
        console.print(f"artifact: [bold]{result.artifact_dir}[/] ({len(result.buckets)} buckets, {result.seconds:.1f} s)")
    return 0


def cmd_serve(args) -> int:
    from neurondeploy.serving.server import resolve_target, run_server

    target = resolve_target(args.target, args.artifact, backend=args.backend,
                            cache_dir=Path(args.cache_dir) if args.cache_dir else None)
    port = args.port or target.serving.port
    print(f"serving {target.artifact_dir} on http://{args.host}:{port} (POST /invocations, GET /ping, GET /metrics); "
          "Ctrl-C stops", file=sys.stderr)
    run_server(target, host=args.host, port=port, replicas=args.replicas, log_level=args.log_level)
    return 0


def cmd_apply(args) -> int:
    from neurondeploy.specs import load_spec

    if not args.local:
        return _apply_cloud(args)
    from neurondeploy.planner.plan import build_plan
    from neurondeploy.serving import local

    loaded = load_spec(args.spec)
    console = _console_err()
    plan = build_plan(loaded)  # validates first: an invalid spec stops here, before any compile
    console.print(f"[bold]{loaded.spec.name}[/]: valid; compiling (cache: {args.cache_dir or 'default'})")

    def on_bucket(bucket) -> None:
        console.print(_bucket_line(bucket))

    endpoint = local.start_local_endpoint(loaded, host=args.host, port=args.port, backend=args.backend,
                                          cache_dir=Path(args.cache_dir) if args.cache_dir else None,
                                          out_dir=Path(args.out) if args.out else None, on_bucket=on_bucket)
    try:
        local.wait_until_ready(endpoint)
        payload = local.sample_request(loaded.spec)
        answer = local.call(endpoint, payload)
        body = json.dumps(payload) if len(json.dumps(payload)) < 200 else "@request.json"
        console.print(f"endpoint ready at [bold]{endpoint.url}[/] (artifact {endpoint.artifact_dir})")
        console.print(f"sample answer: {local.describe_answer(answer)}")
        console.print("call it:")
        console.print(f"  curl -s -X POST {endpoint.url}/invocations -H 'Content-Type: application/json' -d '{body}'")
        console.print(f"  neurondeploy invoke {endpoint.url} --data '{body}'")
        cost = f"${plan.cost.hourly_usd:,.2f}/hour" if plan.cost.hourly_usd else "price unknown"
        console.print(f"in AWS this spec would create {len(plan.resources)} resources with {plan.request_count} checked "
                      f"requests ({cost}); `neurondeploy plan {args.spec}` shows every one")
        for resource in plan.resources:
            console.print(f"  {'<=' if resource.lookup else '+ '} {resource.name} ({resource.type})")
        console.print("[bold]Ctrl-C[/] stops the endpoint")
        print(f"ready {endpoint.url}", flush=True)  # one machine-readable line on stdout
        while endpoint.thread.is_alive():
            endpoint.thread.join(timeout=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        endpoint.stop()
    console.print("stopped")
    return 0


def _state(args):
    from neurondeploy.engine.state_s3 import open_state

    return open_state(args.state)


def _transport(region: str, args):
    from neurondeploy.aws.transport import AwsTransport

    console = _console_err()
    return AwsTransport(region, wait_delay_s=args.wait_delay_s, on_progress=lambda message: console.print(f"  {message}"))


def _apply_cloud(args) -> int:
    from neurondeploy.engine.apply import apply_spec
    from neurondeploy.specs import load_spec

    loaded = load_spec(args.spec)
    console = _console_err()
    transport = _transport(loaded.spec.region, args)
    if args.plan:
        from neurondeploy.engine.saved_plans import check_saved_plan

        check_saved_plan(args.plan, loaded, transport)
        console.print(f"applying the plan reviewed in {args.plan} (spec sha256 {loaded.digest[:12]}, requests unchanged)")

    def compile_artifact(loaded_spec):
        from neurondeploy.compiler.compile import compile_spec

        return compile_spec(loaded_spec, backend=args.backend, out_dir=Path(args.out) if args.out else None).artifact_dir

    context = {key: value for key, value in (("ami_ssm_parameter", args.ami_ssm_parameter), ("ami_id", args.ami_id)) if value}
    result = apply_spec(loaded, transport=transport, state=_state(args), artifact_dir=Path(args.artifact) if args.artifact else None,
                        compile_artifact=compile_artifact, rollback=args.rollback, parallel=not args.sequential,
                        on_event=lambda message: console.print(f"  {message}"), context=context)
    mutating = len(transport.mutating_calls())
    summary = {"deployment": loaded.spec.name, "created": result.created, "unchanged": len(result.unchanged),
               "deleted": result.deleted, "mutating_calls": mutating, "calls": len(transport.calls),
               "seconds": round(result.seconds, 2)}
    if args.json:
        _print_json(summary)
    else:
        console.print(f"[bold]{loaded.spec.name}[/]: {len(result.created)} created, {len(result.unchanged)} unchanged, "
                      f"{len(result.deleted)} deleted; {mutating} mutating AWS calls of {len(transport.calls)} in {result.seconds:.1f} s")
    return 0


def cmd_destroy(args) -> int:
    from neurondeploy.engine.destroy import destroy
    from neurondeploy.engine.executor import Executor

    state = _state(args)
    recorded = state.get(args.name)
    region = args.region or (recorded.region if recorded else None)
    if region is None:
        from neurondeploy.errors import NeurondeployError

        raise NeurondeployError(f"no state for deployment {args.name}", "pass --region to sweep AWS for its tagged resources")
    console = _console_err()
    transport = _transport(region, args)
    executor = Executor(transport, state, on_event=lambda message: console.print(f"  {message}"))
    report = destroy(args.name, executor, transport, state)
    for leftover in report.remaining:
        console.print(f"[red]still present[/]: {leftover.type} {leftover.id} {leftover.detail}")
    for problem in report.errors:
        console.print(f"[red]failed[/]: {problem}")
    console.print(f"{args.name}: {len(report.deleted)} recorded resources deleted, {len(report.swept)} found by tag sweep and "
                  f"deleted, {len(report.remaining)} remaining")
    if report.errors and not report.remaining:
        console.print("state keeps the deployment; run destroy again once the cause is fixed")
    return 0 if report.clean else 7


def cmd_status(args) -> int:
    state = _state(args)
    names = [args.name] if args.name else state.names()
    data = []
    for name in names:
        deployment = state.get(name)
        if deployment is None:
            from neurondeploy.errors import NeurondeployError

            raise NeurondeployError(f"no state for deployment {name}", f"known: {', '.join(state.names()) or 'none'}")
        item = {"name": name, "region": deployment.region, "kind": deployment.kind, "spec_sha256": deployment.spec_digest,
                "resources": [{"name": r.name, "type": r.type, "complete": r.complete, "outputs": r.outputs}
                              for r in deployment.resources.values()]}
        if deployment.kind == "training":  # the job's live state, from DescribeTrainingJob
            from neurondeploy.training.jobs import training_job_status

            item["training_job"] = training_job_status(deployment, args.wait_delay_s)
        data.append(item)
    if args.json:
        _print_json(data)
    else:
        for item in data:
            incomplete = [r["name"] for r in item["resources"] if not r["complete"]]
            print(f"{item['name']} ({item['kind']}, {item['region']}): {len(item['resources'])} resources"
                  + (f", incomplete: {', '.join(incomplete)} (run apply again)" if incomplete else ""))
            for resource in item["resources"]:
                ident = next(iter(resource["outputs"].values()), "") if resource["outputs"] else ""
                print(f"  {resource['name']:28} {resource['type']:40} {ident}")
            if item["kind"] == "training":
                job = item["training_job"]
                if job is None:
                    print("  job: none recorded (neurondeploy train SPEC starts one)")
                elif "error" in job:
                    print(f"  job {job['job_name']}: status unavailable: {job['error']}")
                else:
                    started = f", started {job['training_start']:%Y-%m-%d %H:%M:%S %Z}" if job["training_start"] else ""
                    print(f"  job {job['line']}{started}")
    return 0


def cmd_drift(args) -> int:
    from neurondeploy.engine.drift import drift

    state = _state(args)
    recorded = state.get(args.name)
    if recorded is None:
        from neurondeploy.errors import NeurondeployError

        raise NeurondeployError(f"no state for deployment {args.name}", "apply it first")
    items = drift(args.name, _transport(recorded.region, args), state)
    if args.json:
        _print_json([item.__dict__ for item in items])
    else:
        for item in items:
            print(f"{item.kind}: {item.resource} ({item.type}): {item.detail}")
        print(f"{args.name}: {len(items)} differences from what neurondeploy applied")
    return 0 if not items else 8


def cmd_unlock(args) -> int:
    _state(args).unlock(args.name)
    print(f"unlocked {args.name}")
    return 0


def _hyperparameter_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise NeurondeployError(f"--hp {pair!r} is not KEY=VALUE", "e.g. --hp max_steps=20")
        overrides[key] = value  # typed once, by training.entry.parse_override (both local and SageMaker runs)
    return overrides


def cmd_train(args) -> int:
    from neurondeploy.specs import load_spec

    loaded = load_spec(args.spec)
    if loaded.spec.kind != "training":
        raise NeurondeployError(f"{args.spec} is an inference spec; train runs training specs",
                                "use neurondeploy apply for endpoints")
    overrides = _hyperparameter_overrides(args.hp)
    if args.local:
        from neurondeploy.training.local import run_local_training

        result = run_local_training(loaded, processes=args.processes, work_dir=Path(args.work_dir) if args.work_dir else None,
                                    hyperparameters=overrides, console=_console_err())
        if args.json:
            _print_json(result.as_dict())
        return result.exit_code
    from neurondeploy.training.jobs import run_training_job

    return run_training_job(loaded, args, hyperparameters=overrides, console=_console_err())


def cmd_stop(args) -> int:
    from neurondeploy.training.jobs import stop_training_job

    return stop_training_job(args, console=_console_err())


def cmd_logs(args) -> int:
    from neurondeploy.training.jobs import print_training_logs

    return print_training_logs(args)


def cmd_invoke(args) -> int:
    from neurondeploy.serving.client import invoke, parse_data

    _print_json(invoke(args.target, parse_data(args.data), region=args.region, state_location=args.state))
    return 0


def cmd_cache(args) -> int:
    from neurondeploy.compiler.cache import CompileCache

    cache = CompileCache(root=Path(args.cache_dir) if args.cache_dir else None)
    if args.cache_command == "ls":
        entries = cache.ls()
        if args.json:
            _print_json([{"key": e.key, "path": str(e.path), "size_bytes": e.size_bytes, "created": e.created,
                          "last_used": e.last_used, "metadata": e.metadata} for e in entries])
        else:
            for entry in entries:
                print(f"{entry.key[:16]}  {entry.size_bytes / 2**20:9.1f} MiB  {entry.path}")
            print(f"{len(entries)} entries, {sum(e.size_bytes for e in entries) / 2**20:.1f} MiB in {cache.root}")
    elif args.cache_command == "verify":
        verified, removed = cache.verify()
        for key in removed:
            print(f"corrupt, removed: {key}")
        print(f"{len(verified)} entries verified, {len(removed)} corrupt entries removed")
        return 0 if not removed else 1
    elif args.cache_command == "rm":
        for key in cache.remove(args.key):
            print(f"removed {key}")
    else:
        if args.older_than_days is None and args.max_gib is None:
            from neurondeploy.errors import NeurondeployError

            raise NeurondeployError("cache prune needs --older-than-days or --max-gib", "e.g. cache prune --older-than-days 30")
        removed = cache.prune(older_than_s=args.older_than_days * 86400 if args.older_than_days is not None else None,
                              max_bytes=int(args.max_gib * 2**30) if args.max_gib is not None else None)
        print(f"pruned {len(removed)} entries")
    return 0


def cmd_schema(args) -> int:
    from neurondeploy.specs.loader import SPEC_KINDS

    _print_json(SPEC_KINDS[args.kind].model_json_schema())
    return 0


def _state_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", metavar="FILE_OR_S3_URI", help="state: a SQLite file, or s3://bucket/prefix for a team "
                        "(default $NEURONDEPLOY_STATE or ~/.neurondeploy/state.db)")
    parser.add_argument("--wait-delay-s", type=int, default=15, help="seconds between waiter polls")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neurondeploy",
        description="From a YAML spec to an AWS Trainium training job or Inferentia2 endpoint, checked offline first.",
    )
    parser.add_argument("--version", action="version", version=f"neurondeploy {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = commands.add_parser("validate", help="check specs: schema, instance, SDK, parallel layout, memory fit")
    validate.add_argument("specs", nargs="+", metavar="SPEC")
    validate.add_argument("--json", action="store_true", help="machine-readable findings")
    validate.set_defaults(handler=cmd_validate)

    plan = commands.add_parser("plan", help="checks, cost per hour, and every AWS request apply would send (offline)")
    plan.add_argument("spec", metavar="SPEC")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--out", metavar="FILE_OR_S3_URI", help="save the plan (carries the spec's hash; a changed spec makes it "
                      "stale); apply --plan checks it")
    plan.set_defaults(handler=cmd_plan)

    size = commands.add_parser("size", help="which instances and TP degrees fit a model, cheapest first")
    size.add_argument("--model", metavar="DIR", help="Hugging Face model directory (reads config.json and safetensors headers)")
    size.add_argument("--layers", type=int)
    size.add_argument("--hidden", type=int, help="hidden size (d_model)")
    size.add_argument("--heads", type=int, help="attention heads")
    size.add_argument("--kv-heads", type=int, help="key/value heads (GQA); default = heads")
    size.add_argument("--vocab", type=int, default=32000)
    size.add_argument("--intermediate", type=int, help="MLP width; default 4 × hidden")
    size.add_argument("--params", type=int, help="exact parameter count, if known")
    size.add_argument("--gated-mlp", action="store_true", help="SwiGLU MLP with 3 matrices (Llama, Mistral, Qwen)")
    size.add_argument("--batch", type=int, default=1)
    size.add_argument("--seq", type=int, default=2048, help="sequence length (context) to hold in the KV cache")
    size.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16", "fp8"])
    size.add_argument("--backend", default="nxdi", choices=["nxdi", "transformers-neuronx", "trace"],
                      help="serving runtime: decides legal TP degrees and head rules")
    size.add_argument("--region", help="only instances offered in this region")
    size.add_argument("--json", action="store_true")
    size.set_defaults(handler=cmd_size)

    compile_ = commands.add_parser("compile", help="compile an inference spec's model into an artifact, one module per bucket, cached")
    compile_.add_argument("spec", metavar="SPEC")
    compile_.add_argument("--backend", default="auto", choices=["auto", "neuron", "cpu"],
                          help="auto: neuron when torch_neuronx imports, else the CPU fallback")
    compile_.add_argument("--out", metavar="DIR", help="artifact directory (default artifacts/<name>)")
    compile_.add_argument("--cache-dir", metavar="DIR", help="local cache (default $NEURONDEPLOY_CACHE_DIR or ~/.cache/neurondeploy)")
    compile_.add_argument("--cache-s3", metavar="S3_URI", help="team cache shared through an S3 prefix")
    compile_.add_argument("--json", action="store_true", help="print a JSON summary (artifact, cache hit per bucket, times)")
    compile_.set_defaults(handler=cmd_compile)

    serve = commands.add_parser("serve", help="serve an artifact (or a spec, compiled from the cache) over the SageMaker contract")
    serve.add_argument("target", metavar="ARTIFACT_OR_SPEC")
    serve.add_argument("--artifact", metavar="DIR", help="with a spec: serve this compiled artifact instead of compiling")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 on instances)")
    serve.add_argument("--port", type=int, help="default serving.port (8080)")
    serve.add_argument("--replicas", type=int, help="model replicas (default: one per NeuronCore group on Neuron, 1 on CPU)")
    serve.add_argument("--backend", default="auto", choices=["auto", "neuron", "cpu"], help="when compiling a spec")
    serve.add_argument("--cache-dir", metavar="DIR")
    serve.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(handler=cmd_serve)

    apply = commands.add_parser("apply", help="apply a spec; --local: compile, serve on this machine, send a sample request")
    apply.add_argument("spec", metavar="SPEC")
    apply.add_argument("--local", action="store_true", help="run on this machine: CPU compile and a loopback endpoint")
    apply.add_argument("--host", default="127.0.0.1")
    apply.add_argument("--port", type=int, default=8080)
    apply.add_argument("--backend", default="auto", choices=["auto", "neuron", "cpu"])
    apply.add_argument("--cache-dir", metavar="DIR")
    apply.add_argument("--out", metavar="DIR", help="artifact directory (default artifacts/<name>)")
    apply.add_argument("--artifact", metavar="DIR", help="an already compiled artifact to upload instead of compiling")
    apply.add_argument("--rollback", action="store_true", help="on failure, delete what this apply created (default: keep and record it)")
    apply.add_argument("--sequential", action="store_true", help="create one resource at a time (default: independent ones in parallel)")
    apply.add_argument("--ami-ssm-parameter", metavar="NAME", help="SSM parameter holding the Neuron DLAMI id (default: the public PyTorch 2.9 DLAMI)")
    apply.add_argument("--ami-id", metavar="AMI", help="pin the instance image instead of resolving the SSM parameter")
    apply.add_argument("--plan", metavar="FILE_OR_S3_URI", help="apply only if this saved plan (plan --out) is of this spec "
                       "and still what apply would send; refused if stale")
    apply.add_argument("--json", action="store_true")
    _state_options(apply)
    apply.set_defaults(handler=cmd_apply)

    train = commands.add_parser("train", help="run a training spec: a SageMaker job on Trn1, or --local with torchrun on this CPU")
    train.add_argument("spec", metavar="SPEC")
    train.add_argument("--local", action="store_true", help="run the entry script here with torchrun (gloo), the SageMaker contract set")
    train.add_argument("--processes", type=int, help="--local: processes torchrun starts (default: the spec's local_processes)")
    train.add_argument("--work-dir", metavar="DIR", help="--local: model, output, checkpoints (default .neurondeploy/train/<name>)")
    train.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE", help="override a hyperparameter (repeatable)")
    train.add_argument("--no-wait", action="store_true", help="start the SageMaker job and return (follow it with logs/status)")
    train.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    _state_options(train)
    train.set_defaults(handler=cmd_train)

    stop = commands.add_parser("stop", help="stop a deployment's running SageMaker training job (checkpoints stay in S3)")
    stop.add_argument("name", metavar="NAME")
    _state_options(stop)
    stop.set_defaults(handler=cmd_stop)

    logs = commands.add_parser("logs", help="a training job's CloudWatch logs (every host), optionally following them")
    logs.add_argument("name", metavar="NAME", help="deployment name (its latest job) or a training job name")
    logs.add_argument("--follow", action="store_true", help="keep printing until the job ends")
    logs.add_argument("--region", help="when the state has no record of NAME")
    _state_options(logs)
    logs.set_defaults(handler=cmd_logs)

    destroy = commands.add_parser("destroy", help="delete everything a deployment created (state + tag sweep) and prove nothing is left")
    destroy.add_argument("name", metavar="NAME")
    destroy.add_argument("--region", help="needed only when the state has no record of the deployment")
    _state_options(destroy)
    destroy.set_defaults(handler=cmd_destroy)

    status = commands.add_parser("status", help="what state records for a deployment (or all)")
    status.add_argument("name", metavar="NAME", nargs="?")
    status.add_argument("--json", action="store_true")
    _state_options(status)
    status.set_defaults(handler=cmd_status)

    drift = commands.add_parser("drift", help="what changed in AWS outside neurondeploy since it applied")
    drift.add_argument("name", metavar="NAME")
    drift.add_argument("--json", action="store_true")
    _state_options(drift)
    drift.set_defaults(handler=cmd_drift)

    unlock = commands.add_parser("unlock", help="release a deployment's lock left by a process on another host")
    unlock.add_argument("name", metavar="NAME")
    _state_options(unlock)
    unlock.set_defaults(handler=cmd_unlock)

    invoke = commands.add_parser("invoke", help="send one request to an endpoint: URL, sagemaker:NAME, a spec file or a deployment name")
    invoke.add_argument("target", metavar="TARGET")
    invoke.add_argument("--data", required=True, help='JSON body, @file, or plain text sent as {"inputs": text}')
    invoke.add_argument("--region", help="for SageMaker endpoints (default: the spec's, or the AWS default)")
    invoke.add_argument("--state", metavar="FILE_OR_S3_URI", help="where to look up a deployment name (default as apply)")
    invoke.set_defaults(handler=cmd_invoke)

    cache = commands.add_parser("cache", help="list, remove or prune compiled entries in the local cache")
    cache.add_argument("--cache-dir", metavar="DIR")
    cache_commands = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    cache_ls = cache_commands.add_parser("ls", help="entries, newest first")
    cache_ls.add_argument("--json", action="store_true")
    cache_rm = cache_commands.add_parser("rm", help="remove entries by key or key prefix (6+ characters)")
    cache_rm.add_argument("key")
    cache_commands.add_parser("verify", help="hash every file of every entry (lookups trust untouched files); drop corrupt ones")
    cache_prune = cache_commands.add_parser("prune", help="drop entries unused for a while, then least recently used")
    cache_prune.add_argument("--older-than-days", type=float)
    cache_prune.add_argument("--max-gib", type=float)
    cache.set_defaults(handler=cmd_cache)

    schema = commands.add_parser("schema", help="JSON schema of a spec kind, with every field described")
    schema.add_argument("kind", choices=["inference", "training"])
    schema.set_defaults(handler=cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except NeurondeployError as exc:
        if args.debug:
            raise
        problems = getattr(exc, "problems", [exc])
        for problem in problems:
            print(f"error: {problem.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug of ours: say so in one line; --debug shows where
        if args.debug:
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback and report it)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
