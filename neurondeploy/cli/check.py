"""`validate`, `plan`, `size`, `schema`: what is known without AWS."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from neurondeploy.cli.output import console_out, print_json
from neurondeploy.cli.render import render_plan, render_size
from neurondeploy.paths import default_state_path
from neurondeploy.planner.plan import build_plan
from neurondeploy.planner.size import architecture_of, serving_load, size_report
from neurondeploy.planner.validate import validate_files
from neurondeploy.specs import load_spec
from neurondeploy.specs.loader import SPEC_KINDS

SIZE_ROWS = 12  # the cheapest options: the rest are dearer ways to fit the same model


def cmd_validate(args) -> int:
    results = validate_files(args.specs)
    if args.json:
        print_json([result.as_dict() for result in results])
    else:
        for result in results:
            for line in result.lines():
                print(line, file=sys.stderr if not result.ok else sys.stdout)
    return 0 if all(result.ok for result in results) else 2


def cmd_plan(args) -> int:
    loaded = load_spec(args.spec)
    plan = build_plan(loaded)
    path = default_state_path() if args.state is None else args.state
    state_path = Path(path) if not str(path).startswith("s3://") and Path(path).is_file() else None  # never created
    if state_path is not None or args.out:
        # the engine (state, reconcile, saved plans) is loaded only for this, the way main loads a command's module
        importlib.import_module("neurondeploy.cli.plan_state").add_changes_and_save(args, loaded, plan, state_path)
    missing = 0
    if args.check:  # AWS is read only with --check: a plain plan stays offline and fast
        missing = importlib.import_module("neurondeploy.cli.plan_check").check_account(loaded, plan)
    if args.json:
        print_json(plan.model_dump(mode="json"))
    else:
        render_plan(plan, console_out())
    if not plan.all_validated:
        return 3
    if missing:
        print(f"plan --check: {missing} missing before apply (each above, with its command)", file=sys.stderr)
        return 2
    return 0


def cmd_size(args) -> int:
    batch, seq, profile = serving_load(args.profile, args.batch, args.seq)
    arch = architecture_of(
        args.model,
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        kv_heads=args.kv_heads,
        vocab=args.vocab,
        intermediate=args.intermediate,
        params=args.params,
        gated_mlp=args.gated_mlp,
        head_dim=args.head_dim,
        experts=args.experts,
        experts_per_token=args.experts_per_token,
        expert_intermediate=args.expert_intermediate,
        tied_embeddings=args.tied_embeddings,
    )
    result = size_report(
        arch,
        batch=batch,
        seq=seq,
        dtype=args.dtype,
        backend=args.backend,
        region=args.region,
        quantization=args.quantization,
        platform=args.platform,
        profile=profile,
    )
    if args.json:
        print_json(result)
    else:
        render_size(result, console_out(), rows=None if args.all else SIZE_ROWS)
    return 0 if result["options"] else 3


def cmd_schema(args) -> int:
    print_json(SPEC_KINDS[args.kind].model_json_schema())
    return 0
