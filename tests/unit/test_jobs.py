"""Pure parts of the SageMaker training-job commands: run ids, --hp values, host names, summaries, exit codes."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from neurondeploy.ops import sagemaker_job as jobs
from neurondeploy.resources.sagemaker import NAME_MAX
from neurondeploy.training.entry import parse_override
from neurondeploy.training.logs import host_of


def test_run_id_is_a_utc_timestamp_and_the_longest_job_name_fits():
    assert jobs.new_run_id(datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)) == "20250102-030405"
    assert len("n" * 24 + "-" + jobs.new_run_id()) <= NAME_MAX  # specs cap names at 24


@pytest.mark.parametrize(
    ("given", "value"),
    [
        ("5", 5),
        ("0.0003", 0.0003),
        ("1e-4", 1e-4),
        ("true", True),
        ("smoke", "smoke"),
        ('"5"', "5"),
        ("[1, 2]", "[1, 2]"),
        ("null", "null"),
        (20, 20),
        ([1, 2], "[1, 2]"),
        (None, "null"),
    ],
)
def test_hp_values_are_typed_like_yaml_scalars(given, value):
    assert parse_override(given) == value


def test_host_is_the_stream_name_without_job_and_start_time():
    assert host_of("llama-pretrain-20250102-030405/algo-1-1700000000") == "algo-1"
    assert host_of("job/algo-12-1700000000") == "algo-12"


def _job(**extra):
    return {"TrainingJobName": "j", "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed", **extra}


def test_spot_savings_only_for_spot_jobs_with_both_times():
    assert (
        jobs.job_summary(_job(EnableManagedSpotTraining=True, TrainingTimeInSeconds=1000, BillableTimeInSeconds=250))[
            "spot_savings_pct"
        ]
        == 75.0
    )
    assert jobs.job_summary(_job(TrainingTimeInSeconds=1000, BillableTimeInSeconds=1000))["spot_savings_pct"] is None
    assert jobs.job_summary(_job(EnableManagedSpotTraining=True))["spot_savings_pct"] is None


def test_run_cost_is_billable_time_at_the_catalogued_ml_price():
    job = _job(
        TrainingTimeInSeconds=7200,
        BillableTimeInSeconds=1800,
        EnableManagedSpotTraining=True,
        ResourceConfig={"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2},
    )
    summary = jobs.job_summary(job)
    assert summary["price_usd_per_hour"] == pytest.approx(2 * 28.497)
    assert summary["cost_usd"] == pytest.approx(0.5 * 2 * 28.497, abs=0.01)
    assert "FMBENCH" in summary["price_source"]
    assert any(line.startswith("cost about $28.50") for line in jobs.outcome_lines(job))
    # no price for the type (trn2 has no ml.* figure) or no billable time yet: no cost, no guess
    trn2 = {**job, "ResourceConfig": {"InstanceType": "ml.trn2.48xlarge", "InstanceCount": 1}}
    assert jobs.job_summary(trn2)["cost_usd"] is None
    assert jobs.job_summary(_job(ResourceConfig=job["ResourceConfig"]))["cost_usd"] is None


def test_exit_codes_are_distinct_from_the_cli_s_other_codes():
    assert [jobs.exit_code_of(s) for s in ("Completed", "Failed", "Stopped")] == [
        0,
        jobs.EXIT_JOB_FAILED,
        jobs.EXIT_JOB_STOPPED,
    ]
    assert len({jobs.EXIT_JOB_FAILED, jobs.EXIT_JOB_STOPPED} & {0, 1, 2, 3, 4, 5, 6, 7, 8, 70, 130}) == 0


def test_status_line_carries_the_failure_reason():
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    line = jobs.status_line(
        _job(
            TrainingJobStatus="Failed",
            SecondaryStatus="Failed",
            FailureReason="OOM",
            TrainingStartTime=start,
            TrainingEndTime=start.replace(hour=1, minute=2, second=3),
        )
    )
    assert line == "j: Failed / Failed, 1:02:03 elapsed (OOM)"


def test_a_job_on_an_instance_the_catalogue_has_no_price_for_is_still_shown():
    """compile --remote --instance-type ml.c5.4xlarge (a CPU cross-compile the help offers) must still reach the
    question: the cost line says no price is catalogued, instead of refusing the unknown type."""
    from neurondeploy.ops.sagemaker_job import JobToStart

    job = JobToStart([], "ml.c5.4xlarge", 1, 4 * 3600, ["the compile job's source, to s3://b/k"], "us-east-1")
    assert job.hourly_usd is None
    assert job.lines() == [
        "+ the compile job's source, to s3://b/k",
        "cost: 1 × ml.c5.4xlarge: no ml.* price catalogued for us-east-1; SageMaker stops it after 4 h",
    ]
