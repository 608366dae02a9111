"""What `plan` adds when a state knows the deployment or the plan is saved: the diff against state, `--out`.

Its own module because it loads the engine (SQLite state, reconcile, saved plans): `plan` imports it only when there
is a state file or an --out, so a first plan on a new machine stays as fast as the planner (bench/plan.py).
"""

from __future__ import annotations

from pathlib import Path

from neurondeploy.cli.images import image_context
from neurondeploy.engine.changes import changes_against_state, recorded_hourly_usd
from neurondeploy.engine.saved_plans import save_plan
from neurondeploy.engine.state import StateStore
from neurondeploy.planner.plan import Plan
from neurondeploy.specs import LoadedSpec


def add_changes_and_save(args, loaded: LoadedSpec, plan: Plan, state_path: Path | None) -> None:
    if state_path is not None:
        state = StateStore(state_path)
        before = state.get(plan.name)
        if before is not None:
            planned = changes_against_state(loaded, before, state.lineage, image_context(args))
            plan.changes = [change.line() for change in planned.pending]
            plan.changes_summary = planned.summary()
            plan.hourly_usd_before = recorded_hourly_usd(before)
    if args.out:
        save_plan(plan, args.out)
