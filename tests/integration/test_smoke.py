"""The smoke test after a deploy (issue 23, item 3): the artifact carries eager PyTorch's answer to the smoke request,
computed at compile time; a deployment must answer the same, to the spec's tolerance. Checked against our own
server on loopback (the right model and another model's artifact), and through the CLI against a moto server:
SageMaker's InvokeEndpoint answering what the served model computes, then another model's answer."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch
from support.cli import run_cli
from support.ec2_deployment import AMI_PARAMETER, FIXTURES, REPO, build_artifact
from support.ec2_deployment import transport as ec2_transport
from support.sagemaker import load, queue_invocation_answer, served_answer

from neurondeploy.engine.state import StateStore
from neurondeploy.manifest import SMOKE_TOKEN_IDS, read_manifest, smoke_request
from neurondeploy.ops.smoke import SmokeTestFailed, judge, smoke_encoder, wait_for_healthy_targets

from .serving_support import Server

pytestmark = pytest.mark.integration
SAGEMAKER = REPO / "templates" / "minilm-sagemaker.yaml"


@pytest.fixture(scope="module")
def other_artifact(tmp_path_factory):
    """The same tiny architecture with other weights: a module from another model."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINY_MODEL_SEED", "1")
        return build_artifact(tmp_path_factory.mktemp("other"))


def test_the_artifact_carries_eager_pytorchs_answer_to_the_smoke_request(artifact):
    manifest = read_manifest(artifact)
    assert manifest.smoke.sample == SMOKE_TOKEN_IDS  # the tiny encoder has no tokenizer: it takes token ids
    assert manifest.smoke.tolerance == 1e-3
    sys.path.insert(0, str(FIXTURES))
    try:
        import tiny_models

        module = tiny_models.text_encoder().eval()
    finally:
        sys.path.remove(str(FIXTURES))
    ids = torch.tensor([SMOKE_TOKEN_IDS])
    with torch.no_grad():
        eager = module(ids, torch.ones_like(ids))[0].tolist()
    assert manifest.smoke.output == pytest.approx(eager, abs=1e-6)
    assert smoke_request(manifest) == {"inputs": [SMOKE_TOKEN_IDS]}


def test_our_server_passes_the_smoke_test_and_another_models_artifact_fails_it(artifact, other_artifact):
    manifest = read_manifest(artifact)
    assert read_manifest(other_artifact).smoke.output != manifest.smoke.output
    for served, passes in ((artifact, True), (other_artifact, False)):
        server = Server(served)
        try:
            server.wait_ready()
            if passes:
                line = smoke_encoder(server.url, manifest)
                assert line.startswith(f"smoke test passed: {server.url} answered embedding of 16 values")
            else:
                with pytest.raises(SmokeTestFailed, match="off the compile-time reference by") as failed:
                    smoke_encoder(server.url, manifest)
                assert "apply --no-smoke skips the smoke test" in failed.value.one_line()
        finally:
            server.stop()


def test_answers_not_of_the_models_shape_fail_and_a_classifier_is_judged_by_its_scores(artifact):
    manifest = read_manifest(artifact)
    vector = manifest.smoke.output
    assert judge([vector], manifest, "x").startswith("smoke test passed")
    for wrong, why in (
        ("body", "not the model's answer"),  # what an emulator answers when nobody queued a result
        ([vector[:-1]], "not the model's answer"),
        ([[math.nan] * len(vector)], "off the compile-time reference by nan"),
        ([[v + 0.01 for v in vector]], "off the compile-time reference by 0.01"),
    ):
        with pytest.raises(SmokeTestFailed, match=why):
            judge(wrong, manifest, "x")
    logits = [2.0, 0.5, -1.0]
    classifier = manifest.model_copy(
        update={
            "task": "text-classification",
            "labels": {0: "POSITIVE", 1: "NEGATIVE", 2: "NEUTRAL"},
            "smoke": manifest.smoke.model_copy(update={"output": logits}),
        }
    )
    probabilities = torch.softmax(torch.tensor(logits), dim=-1).tolist()
    right = [[{"label": "POSITIVE", "score": probabilities[0]}, {"label": "NEGATIVE", "score": probabilities[1]}]]
    assert judge(right, classifier, "x").startswith("smoke test passed")
    swapped = [[{"label": "NEGATIVE", "score": probabilities[0]}, {"label": "POSITIVE", "score": probabilities[1]}]]
    with pytest.raises(SmokeTestFailed, match="off the compile-time reference"):
        judge(swapped, classifier, "x")


COMMAND = ["apply", str(SAGEMAKER), "--yes"]


@pytest.mark.usefixtures("cpu_standin")
def test_apply_ends_with_the_smoke_test_through_sagemaker_runtime(sagemaker_world, artifact, tmp_path):
    queue_invocation_answer(sagemaker_world, served_answer(artifact, smoke_request(read_manifest(artifact))))
    applied = run_cli(*COMMAND, "--artifact", str(artifact), state=tmp_path / "state.db")
    assert applied.returncode == 0, applied.stderr
    assert "smoke test passed: sagemaker:minilm-embed answered embedding of 16 values" in applied.stderr
    again = run_cli(*COMMAND, "--artifact", str(artifact), state=tmp_path / "state.db")
    assert again.returncode == 0 and "smoke test" not in again.stderr, again.stderr  # nothing deployed, nothing to test


@pytest.mark.usefixtures("cpu_standin")
def test_an_endpoint_answering_another_models_values_fails_apply_in_one_line(
    sagemaker_world, artifact, other_artifact, tmp_path
):
    queue_invocation_answer(sagemaker_world, served_answer(other_artifact, smoke_request(read_manifest(artifact))))
    failed = run_cli(*COMMAND, "--artifact", str(artifact), state=tmp_path / "state.db")
    assert failed.returncode == 11, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert "smoke test: sagemaker:minilm-embed answered embedding of 16 values" in errors[0]
    assert "off the compile-time reference" in errors[0] and "apply --no-smoke skips" in errors[0]
    # the deployment stays as applied and recorded: the next apply changes nothing
    endpoints = sagemaker_world.client("sagemaker").list_endpoints()["Endpoints"]
    assert [endpoint["EndpointName"] for endpoint in endpoints] == ["minilm-embed"]
    again = run_cli(*COMMAND, "--artifact", str(artifact), "--json", state=tmp_path / "state.db")
    assert again.returncode == 0 and json.loads(again.stdout)["mutating_calls"] == 0, again.stderr


@pytest.mark.usefixtures("cpu_standin")
def test_no_smoke_skips_it(sagemaker_world, artifact, tmp_path):
    queue_invocation_answer(sagemaker_world, "body")  # an answer that would fail it
    applied = run_cli(*COMMAND, "--artifact", str(artifact), "--no-smoke", state=tmp_path / "state.db")
    assert applied.returncode == 0 and "smoke test" not in applied.stderr, applied.stderr


@pytest.mark.usefixtures("cpu_standin")
def test_an_update_that_fails_its_smoke_test_moves_the_endpoint_back(
    sagemaker_world, artifact, other_artifact, tmp_path
):
    state = tmp_path / "state.db"
    queue_invocation_answer(sagemaker_world, served_answer(artifact))
    assert run_cli(*COMMAND, "--artifact", str(artifact), state=state).returncode == 0
    sm = sagemaker_world.client("sagemaker")
    v1_config = sm.describe_endpoint(EndpointName="minilm-embed")["EndpointConfigName"]

    v2 = load(tmp_path, SAGEMAKER, "v2", **{"max_batch_delay_ms: 5": "max_batch_delay_ms: 8"})
    queue_invocation_answer(sagemaker_world, served_answer(other_artifact, smoke_request(read_manifest(artifact))))
    failed = run_cli("apply", v2.source.file, "--yes", "--artifact", str(artifact), state=state)
    assert failed.returncode == 11, failed.stderr
    assert f"endpoint: moved back to endpoint config {v1_config}" in failed.stderr
    assert "off the compile-time reference" in failed.stderr.splitlines()[-1]
    assert sm.describe_endpoint(EndpointName="minilm-embed")["EndpointConfigName"] == v1_config
    assert [c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]] == [v1_config]
    again = run_cli(*COMMAND, "--artifact", str(artifact), "--json", state=state)  # state is v1's again
    assert again.returncode == 0 and json.loads(again.stdout)["mutating_calls"] == 0, again.stderr


def test_the_wait_for_a_healthy_target_reads_the_target_groups_health(aws):
    """DescribeTargetHealth against moto: an empty target group fails the wait once its budget is spent, naming
    what it saw; a running instance registered in it is a healthy target."""
    ec2, elbv2 = aws.client("ec2"), aws.client("elbv2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    group = elbv2.create_target_group(Name="tg-smoke", Protocol="HTTP", Port=8080, VpcId=vpc)
    arn = group["TargetGroups"][0]["TargetGroupArn"]
    t = ec2_transport()
    with pytest.raises(SmokeTestFailed, match=r"no healthy target behind the load balancer after 0 s \(no target"):
        wait_for_healthy_targets(t, arn, budget_s=0, delay_s=0)
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": instance, "Port": 8080}])
    assert wait_for_healthy_targets(t, arn, budget_s=0, delay_s=0) == 1


def _ec2_apply_behind(loaded, artifact, *, served, state):
    """apply of ``artifact`` through the CLI, with a real server of ``served`` behind --smoke-url: (result, url)."""
    server = Server(served)
    try:
        server.wait_ready()
        args = ["apply", loaded.source.file, "--artifact", str(artifact), "--ami-ssm-parameter", AMI_PARAMETER]
        return run_cli(*args, "--wait-delay-s", "1", "--yes", "--smoke-url", server.url, state=state), server.url
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.usefixtures("cpu_standin")
def test_ec2_apply_smokes_through_the_load_balancer_once_a_target_is_healthy(world, artifact, tmp_path):
    """Through the CLI against moto: apply waits for the target group's healthy target, then sends the model's
    request to --smoke-url (here a real `neurondeploy serve` of the artifact, standing in for the instance behind
    the load balancer, which moto does not run), and the answer is judged against the compile-time reference."""
    loaded, _ = world
    applied, url = _ec2_apply_behind(loaded, artifact, served=artifact, state=tmp_path / "state.db")
    assert applied.returncode == 0, applied.stderr
    said = " ".join(applied.stderr.split())  # the console wraps long lines
    healthy = loaded.spec.deployment.instance_count  # moto's instances are healthy targets once running
    assert f"{healthy} healthy target(s); smoke test passed: {url} answered embedding of 16 values" in said


@pytest.mark.slow
@pytest.mark.usefixtures("cpu_standin")
def test_ec2_apply_whose_instances_serve_another_model_exits_11(world, artifact, other_artifact, tmp_path):
    loaded, _ = world
    applied, _ = _ec2_apply_behind(loaded, artifact, served=other_artifact, state=tmp_path / "state.db")
    assert applied.returncode == 11, applied.stderr
    (line,) = [line for line in applied.stderr.splitlines() if line.startswith("error:")]
    assert "off the compile-time reference" in line and "apply --no-smoke skips the smoke test" in line


@pytest.mark.parametrize(
    ("spec", "url", "says"),
    [
        ("minilm-ec2-alb.yaml", "embed.example.com", "is not an http(s) URL"),
        ("minilm-ec2-alb.yaml", "http://", "is not an http(s) URL"),
        ("minilm-sagemaker.yaml", "http://127.0.0.1:8080", "--smoke-url is for EC2 deployments"),
    ],
)
def test_a_smoke_url_apply_could_not_use_is_refused_before_any_call(tmp_path, spec, url, says):
    """Bad input to --smoke-url is one line before apply does anything (no AWS endpoint is even configured here),
    instead of a failed smoke test after the deployment was created."""
    refused = run_cli("apply", str(REPO / "templates" / spec), "--yes", "--smoke-url", url, state=tmp_path / "s.db")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]
    assert not (tmp_path / "s.db").exists() or StateStore(tmp_path / "s.db").names() == []
