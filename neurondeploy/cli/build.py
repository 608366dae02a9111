"""`compile` and `cache`: artifacts and the content-addressed compile cache."""

from __future__ import annotations

from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from neurondeploy.cli.confirm import job_review
from neurondeploy.cli.options import open_state_of, transport_for
from neurondeploy.cli.output import bucket_line, console_err, print_json
from neurondeploy.compiler.backends import select_backend
from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.errors import NeurondeployError
from neurondeploy.ops.compile_remote import RemoteCompileJob, compile_remote
from neurondeploy.ops.sagemaker_job import EXIT_DETACHED, outcome_lines
from neurondeploy.specs import load_spec


def cmd_compile_remote(args, loaded) -> int:
    """The Neuron compile (or an LLM's export) as a SageMaker job, unless the S3 compile cache holds it."""
    console = console_err()
    job: list[RemoteCompileJob] = []  # the job once it runs: Ctrl-C while waiting names it
    with console.status(f"{loaded.spec.name}: compile --remote") as live:

        def started(started: RemoteCompileJob, instance: str) -> None:
            job.append(started)
            console.print(f"{started.label} {started.job_name} ({instance}) -> {started.destination}")
            live.update(f"{started.job_name}: waiting")

        try:
            done = compile_remote(
                loaded,
                transport=transport_for(loaded.spec.region, args),
                state=open_state_of(args),
                cache_s3=args.cache_s3,
                cache_dir=Path(args.cache_dir) if args.cache_dir else None,
                instance_type=args.instance_type,
                wait=not args.no_wait,
                wait_delay_s=args.wait_delay_s,
                on_event=lambda message: console.print(f"  {message}"),
                on_status=live.update,
                on_started=started,
                on_finished=lambda finished: [console.print(line) for line in outcome_lines(finished)],
                review=job_review(args, console, live, f"start this compile job for {loaded.spec.name}"),
            )
        except KeyboardInterrupt:
            if not job:
                raise
            console.print(f"stopped waiting; {job[0].job_name} keeps running (neurondeploy logs {job[0].deployment})")
            return EXIT_DETACHED
    summary = done.summary
    if summary["status"] == "cached" and "model_uri" in summary:
        size = summary["size_bytes"] / 2**30
        console.print(f"already exported: {summary['model_uri']} ({size:.2f} GiB, no job started)")
    elif summary["status"] == "cached":
        console.print(f"already compiled: {summary['cache_uri']}/{summary['artifact_key']} (no job started)")
    if args.json:
        print_json(summary)
    elif done.artifact is not None:
        console.print(f"artifact: [bold]{done.artifact}[/] (apply finds it in {summary['cache_uri']})")
    return done.exit_code


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
