"""The part of `apply --local` every kind of endpoint shares: wait for it, let the caller show how to call it,
show the AWS plan of the same spec, then hold it until Ctrl-C (or SIGTERM, which stops it the same way)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
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


PROGRESS_EVERY_S = 5.0


@contextlib.contextmanager
def progress(console, what: str, every_s: float = PROGRESS_EVERY_S) -> Iterator[None]:
    """While inside, a line every ``every_s`` saying what is awaited and for how long: a first request that waits
    for TorchServe's workers to load (tens of seconds) is not silence."""
    done = threading.Event()
    started = time.monotonic()

    def tick() -> None:
        while not done.wait(every_s):
            console.print(f"  still waiting for {what}: {time.monotonic() - started:.0f} s", markup=False)

    ticker = threading.Thread(target=tick, name="neurondeploy-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join(timeout=every_s)


READY_BUDGET_S = 600.0


def say_ready_once_answering(console, url: str, first_request: Callable[[], object]) -> threading.Thread:
    """`serve`: in the background, send ``first_request`` (raises until the server answers it) until it answers,
    with a progress line while the workers load, then print ``ready URL`` on stdout: once, and only then."""

    def watch() -> None:
        started = time.monotonic()
        with progress(console, "the first answer from /invocations"):
            while time.monotonic() - started < READY_BUDGET_S:
                try:
                    first_request()
                except Exception:  # not listening or still loading: the server's own log says why
                    time.sleep(0.5)
                    continue
                print(f"ready {url}", flush=True)
                return

    thread = threading.Thread(target=watch, name="neurondeploy-ready", daemon=True)
    thread.start()
    return thread


def smoke_line(args, smoke_test: Callable[[], str], warm: Callable[[], str]) -> str:
    """The smoke test's line after a local endpoint starts; with `--no-smoke` the same request is still sent and
    its answer not judged (`ready` means an /invocations answered). A failure raises."""
    return warm() if args.no_smoke else smoke_test()


def hold_local_endpoint(
    console, endpoint: local.LocalEndpoint, plan, spec_path: str, introduce: Callable[[], None]
) -> int:
    try:
        console.print(f"endpoint starting at {endpoint.url}: waiting for GET /ping, then a first POST /invocations")
        with progress(console, "the endpoint's /ping"):
            local.wait_until_ready(endpoint)
        introduce()  # the first /invocations (the smoke test) answered: only now is it ready
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
