"""`compile` and `cache`: artifacts and the content-addressed compile cache."""

from __future__ import annotations

from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from neurondeploy.cli.options import open_state_of, transport_for
from neurondeploy.cli.output import bucket_line, console_err, print_json
from neurondeploy.compiler.backends import select_backend
from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.compiler.llm_export import (
    JOB_MODULE,
    LLM_CONTAINERS,
    find_precompiled,
    job_arguments,
    llm_artifact_key,
    precompiled_prefix,
)
from neurondeploy.compiler.remote import fetch_remote_artifact, remote_artifact_key, stage_job_source
from neurondeploy.engine.remote_compile import default_cache_uri, start_remote_compile
from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.checks import model_architecture, refuse_errors
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.llm_compile import llm_compile_host
from neurondeploy.resources.sagemaker_compile import DEFAULT_COMPILE_INSTANCE
from neurondeploy.resources.sagemaker_endpoint import container_image
from neurondeploy.specs import load_spec
from neurondeploy.training.jobs import EXIT_DETACHED, exit_code_of, outcome_lines, wait_for_job


def _report(args, summary: dict, code: int) -> int:
    if args.json:
        print_json(summary)
    return code


def _follow_job(args, transport, job, console, summary: dict) -> int | None:
    """--no-wait: report the job started; otherwise wait for it like `train` waits. The exit code to return now
    (started, or not completed), else None: the job completed and the caller checks what it wrote."""
    if args.no_wait:
        summary["status"] = "started"
        return _report(args, summary, 0)
    try:
        with console.status(f"{job.job_name}: waiting") as live:
            finished = wait_for_job(
                transport,
                job.job_name,
                delay_s=args.wait_delay_s,
                on_event=lambda message: console.print(f"  {message}"),
                on_status=live.update,
            )
    except KeyboardInterrupt:
        console.print(f"stopped waiting; {job.job_name} keeps running (neurondeploy logs {job.deployment})")
        return EXIT_DETACHED
    for line in outcome_lines(finished):
        console.print(line)
    summary["status"] = finished["TrainingJobStatus"]
    code = exit_code_of(finished["TrainingJobStatus"])
    return _report(args, summary, code) if code else None


def cmd_compile_remote_llm(args, loaded) -> int:
    """An LLM (container hf-vllm / hf-tgi): the container's own export as a SageMaker job on the smallest Neuron
    host that fits it, unless the S3 compile cache already holds the model under its content key."""
    console = console_err()
    refuse_errors(loaded)
    spec = loaded.spec
    transport = transport_for(spec.region, args)
    cache_uri = args.cache_s3 or default_cache_uri(transport, loaded)
    key = llm_artifact_key(spec, container_image(spec, plan_context(loaded)))
    prefix = precompiled_prefix(cache_uri, key)
    summary = {"artifact_key": key, "cache_uri": cache_uri, "job_name": None, "status": None, "model_uri": prefix}
    size = find_precompiled(cache_uri, key)
    if size is not None:
        summary.update(status="cached", size_bytes=size)
        console.print(f"already exported: {prefix} ({size / 2**30:.2f} GiB, no job started)")
        return _report(args, summary, 0) if args.json else 0
    if args.instance_type:  # the user's choice: not sized (nor refused) here
        instance, reasons = args.instance_type, (f"{args.instance_type}, as --instance-type says",)
    else:
        host = llm_compile_host(spec, model_architecture(loaded))
        instance, reasons = host.instance_type, host.reasons
    for line in reasons:
        console.print(f"  export host: {line}")
    job = start_remote_compile(
        loaded,
        transport=transport,
        state=open_state_of(args),
        artifact_key=key,
        stage_source=None,
        cache_uri=cache_uri,
        instance_type=instance,
        on_event=lambda message: console.print(f"  {message}"),
        export=(JOB_MODULE, tuple(job_arguments(spec, key, cache_uri))),
    )
    summary.update(job_name=job.job_name, instance_type=instance)
    console.print(f"export job {job.job_name} ({instance}) -> {prefix}")
    failed = _follow_job(args, transport, job, console, summary)
    if failed is not None:
        return failed
    if find_precompiled(cache_uri, key) is None:
        raise NeurondeployError(
            f"export job {job.job_name} completed but {cache_uri} has no model {key[:16]}",
            f"read its logs: neurondeploy logs {job.deployment}",
        )
    return _report(args, summary, 0)


def cmd_compile_remote(args, loaded) -> int:
    """The Neuron compile as a SageMaker job, unless the S3 compile cache already holds its artifact."""
    if loaded.spec.kind == "inference" and loaded.spec.deployment.container.kind in LLM_CONTAINERS:
        return cmd_compile_remote_llm(args, loaded)
    console = console_err()
    refuse_errors(loaded)
    instance = args.instance_type or DEFAULT_COMPILE_INSTANCE
    transport = transport_for(loaded.spec.region, args)
    cache_uri = args.cache_s3 or default_cache_uri(transport, loaded)
    cache = CompileCache(root=Path(args.cache_dir) if args.cache_dir else None, s3_uri=cache_uri)
    key = remote_artifact_key(loaded, cache.root)
    summary = {"artifact_key": key, "cache_uri": cache_uri, "job_name": None, "status": None, "artifact": None}
    found = fetch_remote_artifact(key, cache)
    if found is None:
        job = start_remote_compile(
            loaded,
            transport=transport,
            state=open_state_of(args),
            artifact_key=key,
            stage_source=lambda directory: stage_job_source(loaded, directory),
            cache_uri=cache_uri,
            instance_type=instance,
            on_event=lambda message: console.print(f"  {message}"),
        )
        summary["job_name"] = job.job_name
        console.print(f"compile job {job.job_name} ({instance}) -> {cache_uri}/{key}")
        failed = _follow_job(args, transport, job, console, summary)
        if failed is not None:
            return failed
        found = fetch_remote_artifact(key, cache)
        if found is None:
            raise NeurondeployError(
                f"compile job {job.job_name} completed but {cache_uri} has no artifact {key[:16]}",
                f"read its logs: neurondeploy logs {job.deployment}",
            )
    else:
        summary["status"] = "cached"
        console.print(f"already compiled: {cache_uri}/{key} (no job started)")
    summary["artifact"] = str(found)
    if args.json:
        print_json(summary)
    else:
        console.print(f"artifact: [bold]{found}[/] (apply finds it in {cache_uri})")
    return 0


def cmd_compile(args) -> int:
    loaded = load_spec(args.spec)
    if args.remote:
        return cmd_compile_remote(args, loaded)
    console = console_err()
    backend = select_backend(args.backend).name
    if backend == "cpu":
        why = "forced with --backend cpu" if args.backend == "cpu" else "torch_neuronx is not installed here"
        console.print(
            f"backend: [bold]cpu[/] ({why}): a CPU trace with the same artifact format, for testing and local serving"
        )
    else:
        console.print("backend: [bold]neuron[/] (torch_neuronx.trace with neuronx-cc)")
    cache = CompileCache(root=Path(args.cache_dir) if args.cache_dir else None, s3_uri=args.cache_s3)
    buckets = loaded.spec.compile.buckets if loaded.spec.kind == "inference" else []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} buckets"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("compiling", total=len(buckets))

        def on_bucket(bucket) -> None:
            progress.console.print(bucket_line(bucket))
            progress.advance(task)

        result = compile_spec(
            loaded, backend=args.backend, cache=cache, out_dir=Path(args.out) if args.out else None, on_bucket=on_bucket
        )
    if args.json:
        print_json(result.as_dict())
    else:
        console.print(
            f"artifact: [bold]{result.artifact_dir}[/] ({len(result.buckets)} buckets, {result.seconds:.1f} s)"
        )
    return 0


def cmd_cache(args) -> int:
    cache = CompileCache(root=Path(args.cache_dir) if args.cache_dir else None)
    if args.cache_command == "ls":
        entries = cache.ls()
        if args.json:
            print_json(
                [
                    {
                        "key": e.key,
                        "path": str(e.path),
                        "size_bytes": e.size_bytes,
                        "created": e.created,
                        "last_used": e.last_used,
                        "metadata": e.metadata,
                    }
                    for e in entries
                ]
            )
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
            raise NeurondeployError(
                "cache prune needs --older-than-days or --max-gib", "e.g. cache prune --older-than-days 30"
            )
        removed = cache.prune(
            older_than_s=args.older_than_days * 86400 if args.older_than_days is not None else None,
            max_bytes=int(args.max_gib * 2**30) if args.max_gib is not None else None,
        )
        print(f"pruned {len(removed)} entries")
    return 0
