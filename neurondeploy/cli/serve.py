"""`serve`, `apply --local`, `invoke`: endpoints on this machine, and calling any endpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from neurondeploy.cli import llm
from neurondeploy.cli.local_run import (
    hold_local_endpoint,
    progress,
    say_ready_once_answering,
    sigterm_as_ctrl_c,
    smoke_line,
)
from neurondeploy.cli.output import bucket_line, console_err
from neurondeploy.manifest import read_manifest, smoke_request
from neurondeploy.ops.apply import apply_local
from neurondeploy.ops.smoke import smoke_encoder
from neurondeploy.planner.plan import build_plan
from neurondeploy.serving.client import describe_answer, invoke
from neurondeploy.serving.llm import serve as llm_serve
from neurondeploy.serving.server import resolve_target, run_server, serving_from_env
from neurondeploy.specs import load_spec


def cmd_serve(args) -> int:
    if llm_serve.is_causal_lm_directory(Path(args.target)):
        return llm.serve(args, llm_serve.target_from_directory(Path(args.target), serving_from_env()))
    if Path(args.target).is_file():
        loaded = load_spec(args.target)
        if llm_serve.is_llm_spec(loaded.spec):
            return llm.serve(args, llm_serve.target_from_spec(loaded))
    target = resolve_target(
        args.target, args.artifact, backend=args.backend, cache_dir=Path(args.cache_dir) if args.cache_dir else None
    )
    port = args.port or target.serving.port
    print(
        f"serving {target.artifact_dir} on http://{args.host}:{port} (POST /invocations, GET /ping, GET /metrics); "
        "Ctrl-C stops",
        file=sys.stderr,
    )
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{port}"
    body = json.dumps(smoke_request(read_manifest(target.artifact_dir))).encode()
    say_ready_once_answering(console_err(), url, lambda: invoke(url, body))
    run_server(target, host=args.host, port=port, replicas=args.replicas, log_level=args.log_level)
    return 0


def cmd_apply_local(args) -> int:
    with sigterm_as_ctrl_c():
        return _apply_local(args)


def _apply_local(args) -> int:
    loaded = load_spec(args.spec)
    if llm_serve.is_llm_spec(loaded.spec):
        return llm.apply_local(args, loaded)
    console = console_err()
    plan = build_plan(loaded)  # validates first: an invalid spec stops here, before any compile
    console.print(f"[bold]{loaded.spec.name}[/]: valid; compiling (cache: {args.cache_dir or 'default'})")

    def on_bucket(bucket) -> None:
        console.print(bucket_line(bucket))

    endpoint = apply_local(
        loaded,
        host=args.host,
        port=args.port,
        backend=args.backend,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        out_dir=Path(args.out) if args.out else None,
        on_bucket=on_bucket,
    ).endpoint

    def introduce() -> None:
        manifest = read_manifest(endpoint.artifact_dir)
        payload = smoke_request(manifest)
        body = json.dumps(payload) if len(json.dumps(payload)) < 200 else "@request.json"

        def warm() -> str:
            answer = invoke(endpoint.url, json.dumps(payload).encode())
            return f"smoke test: skipped (--no-smoke); /invocations answered {describe_answer(answer)}"

        with progress(console, "the first answer from /invocations (the model's workers load first)"):
            console.print(smoke_line(args, lambda: smoke_encoder(endpoint.url, manifest), warm), markup=False)
        console.print(f"endpoint at [bold]{endpoint.url}[/] answers (artifact {endpoint.artifact_dir})")
        for note in endpoint.notes:
            console.print(f"replay: {note}")
        console.print("call it:")
        console.print(f"  curl -s -X POST {endpoint.url}/invocations -H 'Content-Type: application/json' -d '{body}'")
        console.print(f"  neurondeploy invoke {endpoint.url} --data '{body}'")

    return hold_local_endpoint(console, endpoint, plan, args.spec, introduce)
