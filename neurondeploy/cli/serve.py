"""`serve`, `apply --local`, `invoke`: endpoints on this machine, and calling any endpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from neurondeploy.cli.output import bucket_line, console_err, print_json
from neurondeploy.planner.plan import build_plan
from neurondeploy.serving import local
from neurondeploy.serving.client import invoke, parse_data
from neurondeploy.serving.server import resolve_target, run_server
from neurondeploy.specs import load_spec


def cmd_serve(args) -> int:
    target = resolve_target(
        args.target, args.artifact, backend=args.backend, cache_dir=Path(args.cache_dir) if args.cache_dir else None
    )
    port = args.port or target.serving.port
    print(
        f"serving {target.artifact_dir} on http://{args.host}:{port} (POST /invocations, GET /ping, GET /metrics); "
        "Ctrl-C stops",
        file=sys.stderr,
    )
    run_server(target, host=args.host, port=port, replicas=args.replicas, log_level=args.log_level)
    return 0


def cmd_apply_local(args) -> int:
    loaded = load_spec(args.spec)
    console = console_err()
    plan = build_plan(loaded)  # validates first: an invalid spec stops here, before any compile
    console.print(f"[bold]{loaded.spec.name}[/]: valid; compiling (cache: {args.cache_dir or 'default'})")

    def on_bucket(bucket) -> None:
        console.print(bucket_line(bucket))

    endpoint = local.start_local_endpoint(
        loaded,
        host=args.host,
        port=args.port,
        backend=args.backend,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        out_dir=Path(args.out) if args.out else None,
        on_bucket=on_bucket,
    )
    try:
        local.wait_until_ready(endpoint)
        payload = local.sample_request(loaded.spec)
        answer = local.call(endpoint, payload)
        body = json.dumps(payload) if len(json.dumps(payload)) < 200 else "@request.json"
        console.print(f"endpoint ready at [bold]{endpoint.url}[/] (artifact {endpoint.artifact_dir})")
        console.print(f"sample answer: {local.describe_answer(answer)}")
        for note in endpoint.notes:
            console.print(f"replay: {note}")
        console.print("call it:")
        console.print(f"  curl -s -X POST {endpoint.url}/invocations -H 'Content-Type: application/json' -d '{body}'")
        console.print(f"  neurondeploy invoke {endpoint.url} --data '{body}'")
        cost = f"${plan.cost.hourly_usd:,.2f}/hour" if plan.cost.hourly_usd else "price unknown"
        console.print(
            f"in AWS this spec would create {len(plan.resources)} resources with {plan.request_count} checked "
            f"requests ({cost}); `neurondeploy plan {args.spec}` shows every one"
        )
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


def cmd_invoke(args) -> int:
    print_json(invoke(args.target, parse_data(args.data), region=args.region, state_location=args.state))
    return 0
