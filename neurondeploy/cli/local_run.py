"""The part of `apply --local` every kind of endpoint shares: wait for it, let the caller show how to call it,
show the AWS plan of the same spec, then hold it until Ctrl-C (or SIGTERM, which stops it the same way)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator

from neurondeploy.serving import local
from neurondeploy.serving.running import announced


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (what `timeout`, CI, tmux or a process manager send) stops a local run as Ctrl-C does: the endpoint
    and its sandbox removed, `stopped` said. Python's default for it ends the process with nothing cleaned up."""

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def smoke_line(args, smoke_test: Callable[[], str]) -> str:
    """The smoke test's line after a local endpoint starts, unless `--no-smoke` (a failure raises)."""
    return "smoke test: skipped (--no-smoke)" if args.no_smoke else smoke_test()


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
        console.print(f"[bold]Ctrl-C[/] stops the endpoint; `neurondeploy invoke {spec_path}` reaches it meanwhile")
        with announced(plan.name, endpoint.url):
            print(f"ready {endpoint.url}", flush=True)  # one machine-readable line on stdout
            while endpoint.thread.is_alive():
                endpoint.thread.join(timeout=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        endpoint.stop()
    console.print("stopped")
    return 0
