"""`apply SPEC`: an inference deployment in AWS (compiling its artifact first when none is given)."""

from __future__ import annotations

from pathlib import Path

from neurondeploy.cli.options import open_state_of, transport_for
from neurondeploy.cli.output import console_err, print_json
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.engine.apply import apply_spec
from neurondeploy.engine.saved_plans import check_saved_plan
from neurondeploy.specs import load_spec


def cmd_apply(args) -> int:
    loaded = load_spec(args.spec)
    console = console_err()
    transport = transport_for(loaded.spec.region, args)
    if args.plan:
        check_saved_plan(args.plan, loaded, transport)
        console.print(
            f"applying the plan reviewed in {args.plan} (spec sha256 {loaded.digest[:12]}, requests unchanged)"
        )

    def compile_artifact(loaded_spec):
        return compile_spec(
            loaded_spec, backend=args.backend, out_dir=Path(args.out) if args.out else None
        ).artifact_dir

    context = {
        key: value for key, value in (("ami_ssm_parameter", args.ami_ssm_parameter), ("ami_id", args.ami_id)) if value
    }
    result = apply_spec(
        loaded,
        transport=transport,
        state=open_state_of(args),
        artifact_dir=Path(args.artifact) if args.artifact else None,
        compile_artifact=compile_artifact,
        rollback=args.rollback,
        parallel=not args.sequential,
        on_event=lambda message: console.print(f"  {message}"),
        context=context,
    )
    mutating = len(transport.mutating_calls())
    summary = {
        "deployment": loaded.spec.name,
        "created": result.created,
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
            f"[bold]{loaded.spec.name}[/]: {len(result.created)} created, {len(result.unchanged)} unchanged, "
            f"{len(result.deleted)} deleted; {mutating} mutating AWS calls of {len(transport.calls)} in {result.seconds:.1f} s"
        )
    return 0
