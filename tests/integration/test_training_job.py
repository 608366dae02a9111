"""`train` (SageMaker), `stop`, `logs` and `status` of a training deployment against a real moto server over HTTP.

Emulator gaps (moto 5.2.5), worked around here only (design.md):
- No lifecycle: CreateTrainingJob makes a job ``Completed`` at once. :class:`SageMakerSim` patches moto's in-process
  backend (the ThreadedMotoServer runs in this process) so that each DescribeTrainingJob of a job applies the next
  scripted step (status, secondary status with its transition, times, failure reason, log lines).
- StopTrainingJob is not implemented (moto answers 500): the sim adds the action, with SageMaker's behaviour: refused
  unless InProgress, then ``Stopping`` and ``Stopped`` at the next describe.
- DescribeTrainingJob does not return ``Environment`` (moto never stores it): the environment is asserted on the
  request our state recorded as sent, everything moto stores on moto's own DescribeTrainingJob.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from support.account import provision
from support.reference_script import template_with_script_copy

from neurondeploy import catalog
from neurondeploy.cli.main import main
from neurondeploy.engine.state import StateStore
from neurondeploy.ops.sagemaker_job import EXIT_JOB_FAILED, recorded_job_name

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]
TEMPLATE = REPO / "templates" / "llama-pretrain-trn1-multinode.yaml"
NAME = "llama-pretrain"
BUCKET = "neurondeploy-123456789012-us-east-1"  # moto's account
LOG_GROUP = "/aws/sagemaker/TrainingJobs"


# --- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture
def spec_file(tmp_path, aws) -> Path:
    """The template beside a copy of its source dir, in an account holding its role, data and buckets."""
    spec = template_with_script_copy(TEMPLATE, tmp_path)
    provision(aws, spec)
    return spec


def shared_buckets(aws) -> list[str]:
    """neurondeploy's own buckets (the account's data bucket is the user's, made by provision)."""
    return [b["Name"] for b in aws.client("s3").list_buckets()["Buckets"] if b["Name"].startswith("neurondeploy-")]


def _transition(job, status: str, message: str) -> None:
    from moto.core.utils import utcnow

    now = utcnow()
    if job.secondary_status_transitions:
        job.secondary_status_transitions[-1]["EndTime"] = now
    job.secondary_status_transitions.append({"Status": status, "StartTime": now, "StatusMessage": message})


class SageMakerSim:
    """Scripted training-job lifecycles and StopTrainingJob in moto's in-process backend."""

    def __init__(self, monkeypatch, aws) -> None:
        from moto.core.responses import ActionResult
        from moto.sagemaker.exceptions import ValidationError
        from moto.sagemaker.models import SageMakerModelBackend
        from moto.sagemaker.responses import SageMakerResponse

        self.aws = aws
        self.scripts: dict[str, list] = {}  # job name prefix -> steps, one applied per DescribeTrainingJob
        self.stops: list[str] = []
        original = SageMakerModelBackend.describe_training_job
        sim = self

        def describe_training_job(backend, training_job_name):
            job = backend.training_jobs.get(training_job_name)
            for prefix, steps in sim.scripts.items():
                if job is not None and training_job_name.startswith(prefix) and steps:
                    sim.apply(job, steps.pop(0))
            return original(backend, training_job_name)

        def stop_training_job(response):
            name = response._get_param("TrainingJobName")
            job = response.sagemaker_backend.training_jobs.get(name)
            sim.stops.append(name)
            if job is None:
                raise ValidationError(message=f"Could not find training job '{name}'.")
            if job.training_job_status != "InProgress":
                # SageMaker's wording (see aws/sagemaker-python-sdk users' reports, e.g. awslabs/benchmark-ai#928)
                raise ValidationError(
                    message=f"The request was rejected because the training job is in status {job.training_job_status}."
                )
            job.training_job_status, job.secondary_status = "Stopping", "Stopping"
            _transition(job, "Stopping", "Stopping the training job")
            sim.scripts.setdefault(name, []).append(("Stopped", "Stopped", "Training job stopped", {}))
            return ActionResult({})

        monkeypatch.setattr(SageMakerModelBackend, "describe_training_job", describe_training_job)
        monkeypatch.setattr(SageMakerResponse, "stop_training_job", stop_training_job, raising=False)

    @staticmethod
    def backend():
        from moto.backends import get_backend

        return get_backend("sagemaker")["123456789012"]["us-east-1"]

    def job(self, name: str):
        return self.backend().training_jobs[name]

    def apply(self, job, step) -> None:
        if callable(step):
            step(job)
            return
        status, secondary, message, extra = step
        job.training_job_status, job.secondary_status = status, secondary
        _transition(job, secondary, message)
        for key, value in extra.items():
            setattr(job, key, value)

    def set_running(self, name: str) -> None:
        """What a just-created job looks like on AWS (moto made it Completed)."""
        job = self.job(name)
        job.training_job_status, job.secondary_status = "InProgress", "Starting"
        for attr in ("training_end_time", "training_start_time"):
            setattr(job, attr, None)

    def put_logs(self, job_name: str, host: str, messages: list[str]) -> None:
        """Log lines as SageMaker writes them: group /aws/sagemaker/TrainingJobs, stream <job>/<host>-<epoch>."""
        import time

        logs = self.aws.client("logs")
        if not logs.describe_log_groups(logGroupNamePrefix=LOG_GROUP)["logGroups"]:
            logs.create_log_group(logGroupName=LOG_GROUP)
        stream = f"{job_name}/{host}-1700000000"
        if not logs.describe_log_streams(logGroupName=LOG_GROUP, logStreamNamePrefix=stream)["logStreams"]:
            logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        now = int(time.time() * 1000)
        logs.put_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=stream,
            logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(messages)],
        )


@pytest.fixture
def sim(aws, monkeypatch) -> SageMakerSim:
    return SageMakerSim(monkeypatch, aws)


def run(*argv: str, state: Path) -> int:
    agreed = ["--yes"] if argv[0] == "train" else []  # a paid job: no terminal here to ask
    return main([*argv, *agreed, "--state", str(state), "--wait-delay-s", "0"])


def job_of(state: Path) -> str:
    return recorded_job_name(StateStore(state).get(NAME))


def start_running_job(spec_file: Path, state: Path, sim: SageMakerSim) -> str:
    """`train --no-wait`, then the job as AWS shows it right after: InProgress."""
    assert run("train", str(spec_file), "--no-wait", state=state) == 0
    job_name = job_of(state)
    sim.set_running(job_name)
    return job_name


def recorded_request(state: Path) -> dict:
    (request,) = StateStore(state).get(NAME).resources["training-job"].create_requests
    return request["params"]


# --- the template's job, field by field ---------------------------------------------------------------------


def test_template_creates_the_job_it_plans(spec_file, tmp_path, aws, sim, capsys):
    state = tmp_path / "state.db"
    assert run("train", str(spec_file), state=state) == 0  # moto completes the job at once
    err = capsys.readouterr().err
    job_name = job_of(state)
    assert job_name.startswith(f"{NAME}-") and len(job_name) == len(NAME) + 16  # <name>-YYYYMMDD-HHMMSS
    assert (
        f"started training job {job_name}" in err and f"model artifacts: s3://{BUCKET}/{NAME}/output/{job_name}" in err
    )

    sm = aws.client("sagemaker")
    job = sm.describe_training_job(TrainingJobName=job_name)
    image = job["AlgorithmSpecification"]["TrainingImage"]
    assert image == catalog.neuron_image("training", "us-east-1", "2.27.1")
    assert (
        image.startswith("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:")
        and "sdk2.27.1" in image
    )
    assert job["AlgorithmSpecification"]["TrainingInputMode"] == "File"
    assert job["RoleArn"] == "arn:aws:iam::123456789012:role/SageMakerTrainingRole"
    assert job["ResourceConfig"] == {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2}  # no VolumeSizeInGB: NVMe
    hp = job["HyperParameters"]
    assert hp["tensor_parallel_size"] == "8" and hp["pipeline_parallel_size"] == "1"
    assert hp["sagemaker_torch_distributed_enabled"] == "true"
    assert hp["zero1"] == "true" and hp["gradient_checkpointing"] == "true"
    assert hp["precision"] == '"bf16-autocast"' and hp["checkpoint_every_steps"] == "200"
    assert hp["sagemaker_program"] == '"train.py"' and hp["sagemaker_region"] == '"us-east-1"'
    assert hp["max_steps"] == "10000" and hp["learning_rate"] == "0.0003"
    # the model the plan sized is the model the job builds (it was the script's default 4-head model, which died at
    # TP 8 on every rank)
    architecture = {"layers": 32, "hidden_size": 4096, "heads": 32, "kv_heads": 8, "intermediate_size": 14336}
    assert {key: json.loads(hp[key]) for key in architecture} == architecture
    assert json.loads(hp["vocab_size"]) == 128256 and json.loads(hp["gated_mlp"]) is True
    source = json.loads(hp["sagemaker_submit_directory"])
    assert source.startswith(f"s3://{BUCKET}/{NAME}/source/sourcedir-") and source.endswith(".tar.gz")
    assert job["CheckpointConfig"] == {
        "S3Uri": "s3://my-training-bucket/llama-pretrain/checkpoints",
        "LocalPath": "/opt/ml/checkpoints",
    }
    assert job["EnableManagedSpotTraining"] is True
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800}
    assert job["OutputDataConfig"]["S3OutputPath"] == f"s3://{BUCKET}/{NAME}/output"
    assert job["InputDataConfig"][0]["ChannelName"] == "train"
    assert (
        job["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"]
        == "s3://my-training-bucket/datasets/tokenized/train"
    )
    tags = {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=job["TrainingJobArn"])["Tags"]}
    assert tags["neurondeploy:deployment"] == NAME and tags["neurondeploy:run-id"] == job_name[len(NAME) + 1 :]

    # Environment: moto 5.2.5 drops it (DescribeTrainingJob has no Environment), so it comes from the request
    # our state recorded as sent, after the transport checked it strictly against botocore's model.
    assert "Environment" not in job
    sent = recorded_request(state)
    assert sent["TrainingJobName"] == job_name and sent["HyperParameters"] == hp
    env = sent["Environment"]
    assert {k: env[k] for k in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE")} == {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
    }
    assert env["NEURON_CC_FLAGS"] == "--model-type transformer --auto-cast=none"
    assert env["NEURON_COMPILE_CACHE_URL"] == "s3://my-training-bucket/neuron-compile-cache"
    assert "RUN_NEURON_PARALLEL_COMPILE" not in env  # the flagship trains; a pre-compile job is a separate run

    # The source archive: in S3 where the job looks for it, with the entry point inside.
    key = source.removeprefix(f"s3://{BUCKET}/")
    body = aws.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        assert "train.py" in archive.getnames()


def test_train_shows_the_job_and_its_price_ceiling_and_asks_first(spec_file, tmp_path, aws, capsys):
    """Without --yes and with no terminal: the job, role and source upload, and what 2 × ml.trn1.32xlarge cost
    until max_runtime_s; nothing is uploaded or created."""
    state = tmp_path / "state.db"
    assert main(["train", str(spec_file), "--no-wait", "--state", str(state)]) == 1
    shown = " ".join(capsys.readouterr().err.split())
    hourly = catalog.price_per_hour(catalog.get_instance("ml.trn1.32xlarge"), 2, platform="sagemaker")
    assert "+ training-job (sagemaker:training-job)" in shown and "+ /" in shown  # the job and its source upload
    assert (
        f"cost: 2 × ml.trn1.32xlarge at ${hourly:,.2f}/hour; SageMaker stops it after 24 h: at most ${24 * hourly:,.2f}"
        in shown
    )
    assert "(on-demand prices; managed spot bills less)" in shown and "nothing was changed" in shown
    assert aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
    assert shared_buckets(aws) == []


def test_hp_override_reaches_the_job_json_encoded(spec_file, tmp_path, aws, sim, capsys):
    state = tmp_path / "state.db"
    assert (
        run(
            "train",
            str(spec_file),
            "--no-wait",
            "--json",
            "--hp",
            "max_steps=5",
            "--hp",
            "run_name=smoke",
            "--hp",
            'run_id="7"',
            state=state,
        )
        == 0
    )
    hp = aws.client("sagemaker").describe_training_job(TrainingJobName=job_of(state))["HyperParameters"]
    assert hp["max_steps"] == "5" and hp["run_name"] == '"smoke"' and hp["learning_rate"] == "0.0003"
    assert hp["run_id"] == '"7"'  # quoted on the command line: the string "7", not the number
    assert json.loads(capsys.readouterr().out)["job_name"] == job_of(state)


def test_hp_that_the_spec_owns_is_refused_before_anything_is_uploaded(spec_file, tmp_path, aws, capsys):
    assert run("train", str(spec_file), "--hp", "tensor_parallel_size=4", state=tmp_path / "state.db") == 3
    assert "hyperparameters tensor_parallel_size are set by neurondeploy from the spec" in capsys.readouterr().err
    assert shared_buckets(aws) == [] and StateStore(tmp_path / "state.db").names() == []


def test_an_entry_point_missing_from_the_source_dir_is_one_line_and_creates_nothing(spec_file, tmp_path, aws, capsys):
    (tmp_path / "training" / "train.py").unlink()
    assert run("train", str(spec_file), state=tmp_path / "state.db") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "entry_point train.py is not in source_dir" in err and "\n" not in err
    assert aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []


# --- runs, attach, logs, outcomes -------------------------------------------------------------------------------


def test_second_train_is_a_new_job_and_leaves_the_finished_one_alone(spec_file, tmp_path, aws, sim, capsys):
    state = tmp_path / "state.db"
    assert run("train", str(spec_file), state=state) == 0
    first = job_of(state)
    assert run("train", str(spec_file), state=state) == 0
    second = job_of(state)
    err = capsys.readouterr().err
    assert second != first and second > first
    assert sim.stops == []  # a finished job is never stopped (SageMaker refuses it)
    assert f"previous job {first}: Completed" in err
    assert "unchanged, not uploaded again" in err  # the same source, content-addressed
    names = {j["TrainingJobName"] for j in aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]}
    assert names == {first, second}
    assert set(StateStore(state).get(NAME).resources) == {"training-job"}


def test_train_attaches_to_a_running_job_streams_every_host_and_reports_spot(spec_file, tmp_path, aws, sim, capsys):
    state = tmp_path / "state.db"
    job_name = start_running_job(spec_file, state, sim)
    sim.put_logs(job_name, "algo-1", ["[rank 0] step 1 loss 11.2", "[rank 0] step 2 loss 10.9"])
    sim.put_logs(job_name, "algo-2", ["[rank 32] step 1 loss 11.2"])
    sim.scripts[NAME] = [
        ("InProgress", "Downloading", "Downloading input data", {}),
        ("InProgress", "Training", "Training image download completed. Training in progress.", {}),
        ("InProgress", "Interrupted", "Insufficient capacity for spot instances", {}),
        ("InProgress", "Starting", "Preparing the instances for training", {}),
        lambda job: sim.put_logs(job_name, "algo-1", ["resumed from step 200"]),
        ("InProgress", "Training", "Training in progress.", {}),
        (
            "Completed",
            "Completed",
            "Training job completed",
            {"training_time_in_seconds": 1000, "billable_time_in_seconds": 300},
        ),
    ]
    assert run("train", str(spec_file), "--json", state=state) == 0
    out, err = capsys.readouterr()
    assert f"job {job_name} of {NAME} is still InProgress: attaching to it" in err
    assert job_of(state) == job_name and len(aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]) == 1
    for line in (
        "Downloading: Downloading input data",
        "Interrupted: Insufficient capacity for spot instances",
        "[algo-1] [rank 0] step 1 loss 11.2",
        "[algo-1] [rank 0] step 2 loss 10.9",
        "[algo-2] [rank 32] step 1 loss 11.2",
        "[algo-1] resumed from step 200",
    ):
        assert err.count(line) == 1, line
    assert (
        err.count(
            "spot capacity interrupted the job; SageMaker restarts it and the script resumes from the last "
            "checkpoint in s3://my-training-bucket/llama-pretrain/checkpoints"
        )
        == 1
    )
    assert "training time 1000 s, billable 300 s (managed spot saved 70.0 %)" in err
    summary = json.loads(out)
    assert summary["status"] == "Completed" and summary["spot_savings_pct"] == 70.0 and summary["attached"] is True


def test_failed_job_exits_non_zero_with_its_reason(spec_file, tmp_path, aws, sim, capsys):
    state = tmp_path / "state.db"
    reason = "AlgorithmError: ExecuteUserScriptError: ExitCode 1 [neuronx-cc] compilation failed"
    sim.scripts[NAME] = [
        ("InProgress", "Training", "Training in progress.", {}),
        ("Failed", "Failed", "Training job failed", {"failure_reason": reason}),
    ]
    assert run("train", str(spec_file), state=state) == EXIT_JOB_FAILED
    err = capsys.readouterr().err
    assert f"failure reason: {reason}" in err and "model artifacts" not in err
    assert run("status", NAME, state=state) == 0
    line = [item for item in capsys.readouterr().out.splitlines() if item.strip().startswith("job:")]
    assert line and f"{job_of(state)}: Failed / Failed" in line[0] and reason in line[0]


def test_logs_prints_every_host_and_follows_until_the_job_ends(spec_file, tmp_path, aws, sim, capsys):
    state = tmp_path / "state.db"
    assert run("train", str(spec_file), "--no-wait", state=state) == 0
    job_name = job_of(state)
    assert run("logs", NAME, state=state) == 0  # no group yet: nothing, not an error
    assert "no log events" in capsys.readouterr().err
    sim.put_logs(job_name, "algo-1", ["a1", "a2"])
    sim.put_logs(job_name, "algo-2", ["b1"])
    sim.put_logs(f"{job_name}x", "algo-1", ["another job's line"])  # prefix <job>/ keeps it out
    assert run("logs", NAME, state=state) == 0
    assert capsys.readouterr().out.splitlines() == ["[algo-1] a1", "[algo-1] a2", "[algo-2] b1"]
    assert run("logs", job_name, "--region", "us-east-1", state=tmp_path / "other.db") == 0  # by job name
    assert capsys.readouterr().out.splitlines() == ["[algo-1] a1", "[algo-1] a2", "[algo-2] b1"]

    sim.set_running(job_name)
    sim.scripts[NAME] = [
        lambda job: sim.put_logs(job_name, "algo-2", ["b2"]),
        ("InProgress", "Training", "Training in progress.", {}),
        lambda job: (
            sim.put_logs(job_name, "algo-1", ["a3 last line"])
            or sim.apply(job, ("Completed", "Completed", "Training job completed", {}))
        ),
    ]
    assert run("logs", NAME, "--follow", state=state) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[algo-1] a1",
        "[algo-1] a2",
        "[algo-2] b1",
        "[algo-2] b2",
        "[algo-1] a3 last line",
    ]
    assert run("logs", "nope", state=state) == 1
    assert "pass --region" in capsys.readouterr().err
    assert run("logs", "nope", "--region", "us-east-1", state=state) == 1
    assert (
        capsys.readouterr().err.strip() == "error: no training job nope in us-east-1 (fix: check the name and --region)"
    )


def test_stop_stops_a_running_job_and_refuses_a_finished_one(spec_file, tmp_path, aws, sim, capsys):
    state = tmp_path / "state.db"
    job_name = start_running_job(spec_file, state, sim)
    assert run("status", NAME, state=state) == 0
    assert f"job:     {job_name}: InProgress / Starting" in capsys.readouterr().out
    assert run("stop", NAME, state=state) == 0
    err = capsys.readouterr().err
    assert sim.stops == [job_name]
    assert sim.job(job_name).training_job_status == "Stopped"
    assert (
        f"{job_name}: Stopped" in err
        and "checkpoints stay in s3://my-training-bucket/llama-pretrain/checkpoints" in err
    )

    assert run("stop", NAME, state=state) == 1  # SageMaker would refuse it; we say so without sending it
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: training job {job_name} already finished (Stopped); there is nothing to stop "
        f"(fix: neurondeploy status {NAME} shows it)"
    )
    assert sim.stops == [job_name]
    assert run("stop", "unknown", state=state) == 1
    assert "no state for deployment unknown" in capsys.readouterr().err


def test_a_stopped_job_exits_with_its_own_code(spec_file, tmp_path, aws, sim, capsys):
    from neurondeploy.ops.sagemaker_job import EXIT_JOB_STOPPED

    state = tmp_path / "state.db"
    sim.scripts[NAME] = [
        ("InProgress", "Training", "Training in progress.", {}),
        ("Stopped", "MaxRuntimeExceeded", "Job stopped: MaxRuntimeInSeconds reached", {}),
    ]
    assert run("train", str(spec_file), state=state) == EXIT_JOB_STOPPED
    assert "Stopped (MaxRuntimeExceeded)" in capsys.readouterr().err


def test_ctrl_c_while_waiting_leaves_the_job_running(spec_file, tmp_path, aws, sim, capsys):
    import os
    import signal
    import threading

    from neurondeploy.ops.sagemaker_job import EXIT_DETACHED

    state = tmp_path / "state.db"
    job_name = start_running_job(spec_file, state, sim)
    # Bounded: were the Ctrl-C lost, the job would complete at the third describe and the test fail, not hang.
    sim.scripts[job_name] = [
        lambda job: None,
        lambda job: None,
        ("Completed", "Completed", "Training job completed", {}),
    ]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's Ctrl-C reaches Python's own
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))  # a real Ctrl-C, during the 30 s poll pause
    timer.start()
    try:
        code = main(["train", str(spec_file), "--yes", "--state", str(state), "--wait-delay-s", "30"])
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert code == EXIT_DETACHED
    err = capsys.readouterr().err
    assert f"stopped waiting; {job_name} keeps running" in err
    assert f"neurondeploy logs {NAME} --follow" in err and f"neurondeploy stop {NAME}" in err
    assert sim.stops == [] and sim.job(job_name).training_job_status == "InProgress"


def test_the_execution_role_is_kept_across_runs(spec_file, tmp_path, aws, sim, capsys):
    text = spec_file.read_text()
    spec_file.write_text(text[: text.index("iam:")])  # no role given: neurondeploy creates the execution role
    state = tmp_path / "state.db"
    assert run("train", str(spec_file), state=state) == 0
    role = StateStore(state).get(NAME).resources["execution-role"]
    assert run("train", str(spec_file), state=state) == 0
    err = capsys.readouterr().err
    assert err.count("creating execution-role") == 1 and "deleting" not in err
    after = StateStore(state).get(NAME)
    assert after.resources["execution-role"].create_hash == role.create_hash
    role_arn = after.resources["execution-role"].outputs["Arn"]
    assert recorded_request(state)["RoleArn"] == role_arn
    assert aws.client("iam").get_role(RoleName=role_arn.rsplit("/", 1)[-1])["Role"]["Arn"] == role_arn


def test_destroy_of_a_finished_job_forgets_it_and_leaves_nothing(spec_file, tmp_path, aws, sim, capsys):
    """A finished job cannot be stopped (SageMaker refuses) or deleted: destroy counts that as done."""
    state = tmp_path / "state.db"
    assert run("train", str(spec_file), state=state) == 0  # Completed at once
    job_name = job_of(state)
    s3 = aws.client("s3")
    s3.put_object(Bucket=BUCKET, Key=f"{NAME}/output/{job_name}/output/model.tar.gz", Body=b"the trained model")
    sources = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{NAME}/source/")["Contents"]]
    assert run("destroy", NAME, "--yes", state=state) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert sim.stops == [job_name]  # asked once, refused as finished, counted as done
    # the job's source goes with it; what the job produced is kept, and said
    assert f"{len(sources)} objects deleted from s3://{BUCKET}/{NAME}/" in said
    assert f"kept 1 objects under s3://{BUCKET}/{NAME}/ (the training job's results)" in said
    remaining = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{NAME}/")["Contents"]]
    assert remaining == [f"{NAME}/output/{job_name}/output/model.tar.gz"]
    assert StateStore(state).get(NAME) is None
    assert aws.client("sagemaker").describe_training_job(TrainingJobName=job_name)["TrainingJobStatus"] == "Completed"


def test_waiting_survives_sagemaker_being_unreachable_for_a_while(spec_file, tmp_path, aws, sim):
    """A job runs for hours: polls that get no answer (connection errors outlasting botocore's retries) are
    reported and retried; the wait still ends with the job's outcome. Other errors still stop it."""
    from neurondeploy.aws.transport import AwsCallError, AwsTransport
    from neurondeploy.ops.sagemaker_job import wait_for_job

    class Unreachable(AwsTransport):
        def __init__(self, misses: int, code=None) -> None:
            super().__init__("us-east-1", max_attempts=1)
            self.misses, self.code = misses, code

        def call(self, service, operation, params):
            if operation == "DescribeTrainingJob" and self.misses:
                self.misses -= 1
                raise AwsCallError(f"{service}:{operation}: Could not connect to the endpoint URL", code=self.code)
            return super().call(service, operation, params)

    job_name = start_running_job(spec_file, tmp_path / "state.db", sim)
    sim.scripts[NAME] = [
        ("InProgress", "Training", "Training in progress.", {}),
        ("Completed", "Completed", "Training job completed", {}),
    ]
    lines: list[str] = []
    job = wait_for_job(Unreachable(3), job_name, on_event=lines.append, delay_s=0)
    assert job["TrainingJobStatus"] == "Completed"
    printed = "\n".join(lines)
    assert printed.count("lost contact with SageMaker") == 3 and "(3/20)" in printed
    with pytest.raises(AwsCallError, match="Could not connect"):
        wait_for_job(Unreachable(1, code="AccessDeniedException"), job_name, on_event=lines.append, delay_s=0)
