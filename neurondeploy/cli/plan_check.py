"""`plan --check`: the account read for the plan's "before apply" steps (ops/plan_check.py)."""

from __future__ import annotations

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.ops.plan_check import check_plan
from neurondeploy.planner.plan import Plan
from neurondeploy.specs import LoadedSpec


def check_account(loaded: LoadedSpec, plan: Plan) -> int:
    return check_plan(loaded, plan, AwsTransport(loaded.spec.region))
