"""The part of `apply --local` every kind of endpoint shares: wait for it, let the caller show how to call it,
show the AWS plan of the same spec, then hold it until Ctrl-C."""

from __future__ import annotations

from collections.abc import Callable

from neurondeploy.serving import local


def hold_local_endpoint(
    console, endpoint: local.LocalEndpoint, plan, spec_path: str, introduce: Callable[[], None]
) -> int:
    try:
        local.wait_until_ready(endpoint)
        introduce()
        cost = f"${plan.cost.hourly_usd:,.2f}/hour" if plan.cost.hourly_usd else "price unknown"
        console.print(
            f"in AWS this spec would create {len(plan.resources)} resources with {plan.request_count} checked "
            f"requests ({cost}); `neurondeploy plan {spec_path}` shows every one"
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
