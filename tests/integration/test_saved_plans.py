"""Saved plans in S3 (plan in one CI job, apply in another), against a moto server over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from neurondeploy.engine.saved_plans import check_saved_plan, save_plan
from neurondeploy.errors import PlanError
from neurondeploy.planner.plan import build_plan
from neurondeploy.specs import load_spec, parse_spec

pytestmark = pytest.mark.integration


def test_a_plan_saved_to_s3_is_checked_like_a_file(aws, tmp_path):
    from neurondeploy.cli.main import main

    aws.client("s3").create_bucket(Bucket="team-plans")
    spec = tmp_path / "spec.yaml"
    spec.write_text((Path(__file__).parents[2] / "templates" / "minilm-sagemaker.yaml").read_text())
    uri = "s3://team-plans/minilm/plan.json"
    assert main(["plan", str(spec), "--out", uri, "--json"]) == 0
    loaded = load_spec(spec)
    assert check_saved_plan(uri, loaded).spec_sha256 == loaded.digest
    edited = parse_spec(spec.read_text() + "\n# edited\n", file=str(spec), path=spec)
    with pytest.raises(PlanError, match="stale"):
        check_saved_plan(uri, edited)
    with pytest.raises(PlanError, match="no such plan"):
        check_saved_plan("s3://team-plans/minilm/other.json", loaded)
    save_plan(build_plan(edited), uri)  # re-planned after the edit: accepted again
    assert check_saved_plan(uri, edited).spec_sha256 == edited.digest
