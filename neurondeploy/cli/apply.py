"""`apply SPEC`: an inference deployment in AWS (compiling its artifact first when none is given)."""

from __future__ import annotations

from pathlib import Path

from neurondeploy.cli.confirm import confirm
from neurondeploy.cli.images import image_context
from neurondeploy.cli.options import open_state_of, transport_for
from neurondeploy.cli.output import console_err, dollars, print_json
from neurondeploy.engine.changes import recorded_hourly_usd
from neurondeploy.ops.apply import apply
from neurondeploy.planner.plan import build_plan
from neurondeploy.specs import load_spec


def cmd_apply(args) -> int:
    loaded = load_spec(args.spec)
    console = console_err()
    transport = transport_for(loaded.spec.region, args)
    state = open_state_of(args)

    def review(planned, upload_uri, reviewed: bool) -> None:
        for change in planned.pending:
            console.print(f"  {change.line()}")
        if upload_uri:
            console.print(f"  + the artifact, to {upload_uri}")
        before = state.get(loaded.spec.name)
        cost_before = recorded_hourly_usd(before) if before else 0.0
        cost_after = build_plan(loaded).cost.hourly_usd
        console.print(f"{loaded.spec.name}: {planned.summary()}; cost {dollars(cost_before)} -> {dollars(cost_after)}")
        if not reviewed:  # a diff reviewed in the saved plan is applied without asking again
            confirm(args, console, f"apply these changes to {loaded.spec.name}")

    result = apply(
        loaded,
        transport=transport,
        state=state,
        artifact_dir=Path(args.artifact) if args.artifact else None,
        backend=args.backend,
        out_dir=Path(args.out) if args.out else None,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        cache_s3=args.cache_s3,
        context=image_context(args),
        plan_file=args.plan,
        rollback=args.rollback,
        parallel=not args.sequential,
        review=review,
        on_event=lambda message: console.print(f"  {message}"),
        smoke=not args.no_smoke,
        smoke_url=args.smoke_url,
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
