"""SageMaker real-time endpoints on ml.inf2 (apply / re-apply / destroy) and blue/green updates, against a real
moto server over HTTP.

The emulator gaps the ``sagemaker_world`` fixture patches are listed in tests/support/sagemaker.py.
"""

from __future__ import annotations

import pytest
from support.account import provision
from support.cli import run_cli
from support.ec2_deployment import FaultyTransport, transport
from support.sagemaker import (
    ACCOUNT,
    MINILM,
    VLLM,
    FailingOperation,
    Live,
    _update_endpoint,
    apply,
    artifact_uri_of,
    assert_converged,
    destroy_and_prove_empty,
    expected,
    load,
    objects,
    only_the_claim_written,
    operations,
    push_image,
)

from neurondeploy import catalog
from neurondeploy.engine.apply import apply_spec
from neurondeploy.engine.drift import drift
from neurondeploy.engine.executor import ApplyFailed
from neurondeploy.engine.reconcile import RETIRED
from neurondeploy.engine.state import StateStore
from neurondeploy.engine.uploads import ApplyError
from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.context import plan_context
from neurondeploy.resources import sagemaker_endpoint as rq
from neurondeploy.resources.release import deployment_release
from neurondeploy.resources.sagemaker_endpoint import endpoint_resources
from neurondeploy.resources.validation import check_request

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose


def test_inf2_endpoint_with_our_container_applied_reapplied_and_destroyed(sagemaker_world, artifact, tmp_path):
    aws = sagemaker_world
    loaded = load(tmp_path, MINILM)
    state = StateStore(tmp_path / "state.db")
    result, _ = apply(loaded, state, artifact)
    assert {"execution-role", "model", "endpoint-config", "endpoint", "endpoint-scaling"} <= set(result.created)
    from neurondeploy.serving.client import resolve_target

    target = resolve_target("minilm-embed", str(tmp_path / "state.db"))  # `invoke minilm-embed`: found in state
    assert (target.kind, target.address, target.region) == ("sagemaker", "minilm-embed", "us-east-1")
    # status leads with where it answers, its health, $/hour, age and last change; the ids only when asked
    shown = run_cli("status", "minilm-embed", "--state", str(tmp_path / "state.db"))
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and lines[0] == "minilm-embed (inference, us-east-1)", shown.stdout + shown.stderr
    url = "https://runtime.sagemaker.us-east-1.amazonaws.com/endpoints/minilm-embed/invocations"
    assert lines[1] == f"  url:     {url}  (invoke sagemaker:minilm-embed)" and lines[2] == "  health:  InService"
    price = catalog.price_per_hour(catalog.get_instance("ml.inf2.xlarge"), platform="sagemaker")
    assert lines[3] == f"  cost:    ${price:,.2f}/hour" and lines[4].startswith("  age:     0 min (created 20")
    assert lines[5].startswith("  changed: 20") and "(--resources lists them)" in lines[6] and len(lines) == 7
    listed = run_cli("status", "minilm-embed", "--resources", "--state", str(tmp_path / "state.db")).stdout
    assert "arn:aws:sagemaker:us-east-1:123456789012:endpoint/minilm-embed" in listed

    ctx, model_request, config_request = expected(loaded, artifact_s3_uri=artifact_uri_of(artifact))
    live = Live(aws, "minilm-embed")
    model = live.sm.describe_model(ModelName=model_request["ModelName"])
    container = model["PrimaryContainer"]
    # AWS's Neuron inference DLC, nothing built or pushed; our server rides in model.tar.gz (code/)
    release = deployment_release(loaded.spec)  # the one release: the artifact's SDK is the image's
    assert container["Image"] == catalog.neuron_image("inference", "us-east-1", release.sdk)
    assert container["Image"].endswith(":" + release.piece("serving image").name)
    assert "/pytorch-inference-neuronx:" in container["Image"] and container["Image"].startswith("763104351884.")
    assert container["Image"] == model_request["PrimaryContainer"]["Image"]
    assert container["Environment"]["SAGEMAKER_PROGRAM"] == "inference.py"
    assert container["Environment"]["SAGEMAKER_SUBMIT_DIRECTORY"] == "/opt/ml/model/code"
    assert container["ModelDataUrl"] == artifact_uri_of(artifact)
    assert container["Environment"]["NEURONDEPLOY_TASK"] == "feature-extraction"
    assert container["Environment"] == rq.model_environment(loaded.spec, ctx)
    assert model["ExecutionRoleArn"] == state.get("minilm-embed").resources["execution-role"].outputs["Arn"]

    config = live.sm.describe_endpoint_config(EndpointConfigName=config_request["EndpointConfigName"])
    variant = config["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.inf2.xlarge" and variant["InitialInstanceCount"] == 1
    assert variant["ModelName"] == model_request["ModelName"]
    assert (
        variant["ModelDataDownloadTimeoutInSeconds"] == 600
        and variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 600
    )
    assert (
        variant["VolumeSizeInGB"] == rq.endpoint_volume_gib(loaded.spec, ctx) == 30
    )  # MiniLM: 3 × 0.09 GiB -> the floor

    endpoint = live.endpoint()
    assert (
        endpoint["EndpointConfigName"] == config_request["EndpointConfigName"]
        and endpoint["EndpointStatus"] == "InService"
    )
    assert live.endpoints() == {"minilm-embed"}
    (target,) = live.targets()
    assert target["ResourceId"] == "endpoint/minilm-embed/variant/AllTraffic"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 4)
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    (policy,) = live.policies()
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert policy["PolicyType"] == "TargetTrackingScaling" and tracking["TargetValue"] == 3000.0
    assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == "SageMakerVariantInvocationsPerInstance"

    again, second = apply(loaded, state, artifact)
    assert operations(second) == [] and again.created == again.updated == again.deleted == []
    assert drift("minilm-embed", transport(), state) == []
    destroy_and_prove_empty(aws, state, "minilm-embed")


def test_vllm_endpoint_applied_reapplied_and_destroyed(sagemaker_world, tmp_path):
    aws = sagemaker_world
    loaded = load(tmp_path, VLLM)
    provision(aws, loaded.path)  # its HF_TOKEN secret
    state = StateStore(tmp_path / "state.db")
    before = objects(aws)
    apply(loaded, state, None)
    assert only_the_claim_written(aws, before, "llama3-8b")  # the container loads the model from the Hub: no artifact

    ctx, model_request, config_request = expected(loaded)
    live = Live(aws, "llama3-8b")
    container = live.sm.describe_model(ModelName=model_request["ModelName"])["PrimaryContainer"]
    assert "ModelDataUrl" not in container
    # the wrapper image of infra/hf-secrets: it reads the gated model's HF_TOKEN from the referenced secret
    assert (
        container["Image"] == model_request["PrimaryContainer"]["Image"]
        and "neurondeploy-hf-vllm" in container["Image"]
    )
    assert container["Environment"] == {
        "SM_ON_MODEL": "meta-llama/Llama-3.1-8B-Instruct",
        "SM_ON_TENSOR_PARALLEL_SIZE": "2",
        "SM_ON_BATCH_SIZE": "4",
        "SM_ON_SEQUENCE_LENGTH": "4096",
        "SM_ON_PORT": "8080",
        "NEURONDEPLOY_SECRET_ENV": '{"HF_TOKEN":{"secret":"arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token"}}',
    }
    variant = live.sm.describe_endpoint_config(EndpointConfigName=config_request["EndpointConfigName"])[
        "ProductionVariants"
    ][0]
    assert variant["InstanceType"] == "ml.inf2.8xlarge" and variant["InitialInstanceCount"] == 1
    assert (
        variant["ModelDataDownloadTimeoutInSeconds"] == 3600
        and variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 3600
    )
    assert variant["VolumeSizeInGB"] == rq.endpoint_volume_gib(loaded.spec, ctx) == 128
    assert live.endpoint()["EndpointConfigName"] == config_request["EndpointConfigName"]
    assert live.targets() == []  # no autoscaling in this template

    again, second = apply(loaded, state, None)
    assert operations(second) == [] and again.created == []
    destroy_and_prove_empty(aws, state, "llama3-8b")


# --- blue/green updates ------------------------------------------------------------------------------------------

V2 = {
    "instance_count: 1": "instance_count: 2",
    "health_check_timeout_s: 600": "health_check_timeout_s: 900",
    "max_batch_delay_ms: 5": "max_batch_delay_ms: 8",
}  # count, timeout and the container's environment


class Versions:
    """v1 of the Inf2 template applied (state in tmp_path), v2 (:data:`V2`) ready to apply."""

    def __init__(self, aws, tmp_path, artifact_dir) -> None:
        self.v1, self.v2 = load(tmp_path, MINILM), load(tmp_path, MINILM, "v2", **V2)
        self.state = StateStore(tmp_path / "state.db")
        apply(self.v1, self.state, artifact_dir)
        self.live = Live(aws, "minilm-embed")
        self.arn, self.config = self.live.endpoint()["EndpointArn"], self.live.endpoint()["EndpointConfigName"]


@pytest.fixture
def versions(sagemaker_world, tmp_path, artifact) -> Versions:
    return Versions(sagemaker_world, tmp_path, artifact)


def test_every_update_request_passes_strict_validation(tmp_path):
    loaded = load(tmp_path, MINILM)
    updates = [
        r
        for resource in endpoint_resources(loaded.spec, plan_context(loaded, account_id=ACCOUNT))
        for r in resource.update
    ]
    assert {r.operation for r in updates} == {
        "UpdateEndpoint",
        "DescribeEndpoint",
        "RegisterScalableTarget",
        "PutScalingPolicy",
    }
    for request in updates:
        check_request(request.service, request.operation, request.params)  # raises when refused


def test_a_changed_spec_updates_the_endpoint_in_place_then_removes_the_old_model_and_config(
    versions, sagemaker_world, artifact
):
    aws, v2, state, live, arn = sagemaker_world, versions.v2, versions.state, versions.live, versions.arn
    (old_model,), (old_config,) = live.models(), live.configs()

    result, t = apply(v2, state, artifact)
    sent = operations(t)
    assert "DeleteEndpoint" not in sent and "CreateEndpoint" not in sent
    assert result.updated == ["endpoint"] and set(result.created) == {"model", "endpoint-config"}
    # blue/green order: new model and config, the endpoint moved to them, only then the old ones deleted
    assert (
        sent.index("CreateModel")
        < sent.index("CreateEndpointConfig")
        < sent.index("UpdateEndpoint")
        < sent.index("DeleteEndpointConfig")
        < sent.index("DeleteModel")
    )
    # the instance type stayed: the scaling target is not touched (it keeps the count it chose)
    assert not {"DeregisterScalableTarget", "RegisterScalableTarget", "PutScalingPolicy"} & set(sent)
    assert_converged(aws, state, v2, artifact_s3_uri=artifact_uri_of(artifact))
    assert live.endpoint()["EndpointArn"] == arn
    assert old_model not in live.models() and old_config not in live.configs()
    config = live.sm.describe_endpoint_config(EndpointConfigName=live.endpoint()["EndpointConfigName"])
    assert config["ProductionVariants"][0]["InitialInstanceCount"] == 2
    assert config["ProductionVariants"][0]["ContainerStartupHealthCheckTimeoutInSeconds"] == 900
    model = live.sm.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])
    assert '"max_batch_delay_ms":8' in model["PrimaryContainer"]["Environment"]["NEURONDEPLOY_SERVING"]
    assert len(live.targets()) == 1 and len(live.policies()) == 1

    again, t = apply(v2, state, artifact)
    assert operations(t) == [] and again.updated == again.created == []
    destroy_and_prove_empty(aws, state, "minilm-embed")


def test_a_new_instance_type_deregisters_autoscaling_before_the_update_and_registers_it_after(
    sagemaker_world, artifact, tmp_path
):
    aws = sagemaker_world
    v1 = load(tmp_path, MINILM)
    v2 = load(tmp_path, MINILM, "v2", **{"instance_type: ml.inf2.xlarge": "instance_type: ml.inf2.8xlarge"})
    state = StateStore(tmp_path / "state.db")
    apply(v1, state, artifact)
    arn = Live(aws, "minilm-embed").endpoint()["EndpointArn"]
    _, t = apply(v2, state, artifact)
    sent = operations(t)
    # the emulator refuses a type change under a registered target, as SageMaker does: the order is needed
    assert (
        sent.index("DeregisterScalableTarget")
        < sent.index("UpdateEndpoint")
        < sent.index("RegisterScalableTarget")
        < sent.index("PutScalingPolicy")
    )
    assert "DeleteEndpoint" not in sent
    live = Live(aws, "minilm-embed")
    assert live.endpoint()["EndpointArn"] == arn
    assert (
        live.sm.describe_endpoint_config(EndpointConfigName=live.endpoint()["EndpointConfigName"])[
            "ProductionVariants"
        ][0]["InstanceType"]
        == "ml.inf2.8xlarge"
    )
    assert len(live.targets()) == 1 and len(live.policies()) == 1
    assert_converged(aws, state, v2, artifact_s3_uri=artifact_uri_of(artifact))

    # new capacities only: RegisterScalableTarget updates the target in place, nothing else moves
    v3 = load(
        tmp_path,
        MINILM,
        "v3",
        **{"instance_type: ml.inf2.xlarge": "instance_type: ml.inf2.8xlarge", "max_instances: 4": "max_instances: 6"},
    )
    result, t = apply(v3, state, artifact)
    assert operations(t) == ["RegisterScalableTarget", "PutScalingPolicy"] and result.updated == ["endpoint-scaling"]
    assert live.targets()[0]["MaxCapacity"] == 6
    _, t = apply(v3, state, artifact)
    assert operations(t) == []
    assert drift("minilm-embed", transport(), state) == []
    destroy_and_prove_empty(aws, state, "minilm-embed")


def test_a_failed_update_keeps_the_old_config_serving_and_a_reapply_converges(versions, sagemaker_world, artifact):
    aws, v2, state, live = sagemaker_world, versions.v2, versions.state, versions.live
    arn, old_config = versions.arn, versions.config

    with pytest.raises(ApplyFailed, match="InjectedFault"):
        apply(v2, state, artifact, t=FailingOperation("UpdateEndpoint"))
    # the endpoint still serves v1, whose model and config are kept (retired in state) next to v2's
    assert live.endpoint()["EndpointConfigName"] == old_config
    assert len(live.models()) == len(live.configs()) == 2
    assert sorted(n.split(RETIRED)[0] for n in state.get("minilm-embed").resources if RETIRED in n) == [
        "endpoint-config",
        "model",
    ]

    result, t = apply(v2, state, artifact)
    assert operations(t) == ["UpdateEndpoint", "DeleteEndpointConfig", "DeleteModel"] and result.updated == ["endpoint"]
    assert_converged(aws, state, v2, artifact_s3_uri=artifact_uri_of(artifact))
    assert live.endpoint()["EndpointArn"] == arn
    destroy_and_prove_empty(aws, state, "minilm-embed")


def test_an_update_that_fails_its_check_goes_back_to_the_old_config_and_deletes_the_new_objects(
    versions, sagemaker_world, artifact
):
    """The smoke test's place in a blue/green update: after the endpoint moved, before the old objects go. A check
    that fails moves the endpoint back (same ARN), deletes what the update made, and state is v1's again."""
    aws, v1, v2, state, live = sagemaker_world, versions.v1, versions.v2, versions.state, versions.live
    old_models = live.models()

    def wrong_answer() -> None:
        raise NeurondeployError("smoke test: the endpoint answered another model's embedding")

    t = transport()
    with pytest.raises(NeurondeployError, match="another model's embedding"):
        apply_spec(v2, transport=t, state=state, artifact_dir=artifact, verify=wrong_answer)
    sent = operations(t)
    assert sent.count("UpdateEndpoint") == 2  # moved to v2's config, then back
    assert sent.index("UpdateEndpoint") < sent.index("DeleteEndpointConfig") and sent[-1] == "DeleteModel"
    assert live.endpoint()["EndpointArn"] == versions.arn
    assert_converged(aws, state, v1, artifact_s3_uri=artifact_uri_of(artifact))
    assert live.models() == old_models
    _, t = apply(v1, state, artifact)
    assert operations(t) == []  # state is v1's: nothing to do

    checked = []
    result = apply_spec(v2, transport=transport(), state=state, artifact_dir=artifact, verify=lambda: checked.append(1))
    assert checked == [1] and result.updated == ["endpoint"]
    assert_converged(aws, state, v2, artifact_s3_uri=artifact_uri_of(artifact))
    destroy_and_prove_empty(aws, state, "minilm-embed")


def test_going_back_after_a_failed_update_restores_the_old_objects_instead_of_recreating_them(
    versions, sagemaker_world, artifact
):
    aws, v1, v2, state = sagemaker_world, versions.v1, versions.v2, versions.state
    with pytest.raises(ApplyFailed):
        apply(v2, state, artifact, t=FailingOperation("UpdateEndpoint"))
    _, t = apply(v1, state, artifact)  # v2's model and config go; v1's are current again, not made anew
    assert "CreateModel" not in operations(t) and "UpdateEndpoint" not in operations(t)
    assert "DeleteEndpoint" not in operations(t)
    assert_converged(aws, state, v1, artifact_s3_uri=artifact_uri_of(artifact))
    destroy_and_prove_empty(aws, state, "minilm-embed")


def test_an_update_sagemaker_rolls_back_is_not_taken_for_done(versions, sagemaker_world, artifact, monkeypatch):
    """SageMaker ends a failed update InService on the old config; the check after the wait sees it, and the
    old model and config (still serving) are kept."""
    from moto.core.responses import ActionResult
    from moto.sagemaker.responses import SageMakerResponse

    aws, v2, state, live, old_config = sagemaker_world, versions.v2, versions.state, versions.live, versions.config
    monkeypatch.setattr(
        SageMakerResponse,
        "update_endpoint",
        lambda self: ActionResult({"EndpointArn": self.sagemaker_backend.endpoints["minilm-embed"].arn}),
    )
    with pytest.raises(ApplyFailed, match="EndpointConfigName"):
        apply(v2, state, artifact)
    assert live.endpoint()["EndpointConfigName"] == old_config and old_config in live.configs()
    assert len(live.models()) == 2
    monkeypatch.setattr(SageMakerResponse, "update_endpoint", _update_endpoint)
    apply(v2, state, artifact)
    assert_converged(aws, state, v2, artifact_s3_uri=artifact_uri_of(artifact))
    destroy_and_prove_empty(aws, state, "minilm-embed")


@pytest.mark.slow
def test_failing_any_mutating_call_of_an_update_then_reapplying_converges(sagemaker_world, artifact, tmp_path):
    aws = sagemaker_world
    v1, v2 = load(tmp_path, MINILM), load(tmp_path, MINILM, "v2", **V2)
    reference = StateStore(tmp_path / "reference.db")
    apply(v1, reference, artifact)
    _, t = apply(v2, reference, artifact)
    total = len(t.mutating_calls())
    assert total >= 5
    destroy_and_prove_empty(aws, reference, "minilm-embed")
    for k in range(1, total + 1):
        state = StateStore(tmp_path / f"state-{k}.db")
        apply(v1, state, artifact)
        arn = Live(aws, "minilm-embed").endpoint()["EndpointArn"]
        with pytest.raises(NeurondeployError, match="InjectedFault"):
            apply(v2, state, artifact, t=FaultyTransport("us-east-1", k))
        _, t = apply(v2, state, artifact)
        assert "DeleteEndpoint" not in operations(t), f"k={k}"
        assert_converged(aws, state, v2, artifact_s3_uri=artifact_uri_of(artifact))
        assert Live(aws, "minilm-embed").endpoint()["EndpointArn"] == arn, f"k={k}"
        _, t = apply(v2, state, artifact)
        assert operations(t) == [], f"k={k}"
        destroy_and_prove_empty(aws, state, "minilm-embed")


OUR_IMAGE = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/neurondeploy-serving:0.1.0"


def test_apply_refuses_before_creating_anything_when_the_serving_image_is_not_in_ecr(aws, tmp_path, artifact):
    """Our own image stays an option; without it in ECR SageMaker would create the endpoint and fail it minutes
    later: apply says so first."""
    loaded = load(
        tmp_path,
        MINILM,
        **{"  instance_count: 1\n": f"  instance_count: 1\n  container:\n    image_uri: {OUR_IMAGE}\n"},
    )
    with pytest.raises(ApplyError) as refused:
        apply(loaded, StateStore(tmp_path / "state.db"), artifact)
    assert "is not in ECR (RepositoryNotFoundException)" in refused.value.message
    assert "docker push" in refused.value.hint and "Neuron DLC" in refused.value.hint
    assert aws.client("sagemaker").list_models()["Models"] == [] and StateStore(tmp_path / "state.db").names() == []
    assert aws.client("s3").list_buckets()["Buckets"] == []  # not even the artifact was uploaded


def test_apply_refuses_before_creating_anything_when_the_llm_wrapper_image_is_not_in_ecr(aws, tmp_path):
    """The vLLM template runs the infra/hf-secrets wrapper from the account's ECR (its HF_TOKEN is a secret
    reference): missing, SageMaker would fail the endpoint at image pull; apply says how to build and push it."""
    loaded = load(tmp_path, VLLM)
    with pytest.raises(ApplyError) as refused:
        apply(loaded, StateStore(tmp_path / "state.db"), None)
    image = loaded.spec.deployment.container.image_uri
    assert f"the container image {image} is not in ECR (RepositoryNotFoundException)" in refused.value.message
    assert "infra/hf-secrets/Dockerfile" in refused.value.hint and "BASE_IMAGE=763104351884" in refused.value.hint
    assert aws.client("sagemaker").list_models()["Models"] == [] and StateStore(tmp_path / "state.db").names() == []
    # pushed under another tag: still not the image the spec names
    push_image(aws, image.split("/", 1)[1].rsplit(":", 1)[0], "0.0.9")
    with pytest.raises(ApplyError, match="ImageNotFoundException"):
        apply(loaded, StateStore(tmp_path / "state.db"), None)
    assert aws.client("sagemaker").list_models()["Models"] == []


def test_drift_reports_a_fixed_size_variant_s_instance_count_changed_in_the_console(
    sagemaker_world, artifact, tmp_path
):
    """The console's "Update weights and capacity" (UpdateEndpointWeightsAndCapacities) on a variant nothing scales
    is a drift; on an autoscaled variant, a count between its target's min and max is scaling at work."""
    aws = sagemaker_world
    autoscaling = (
        "  autoscaling:\n    min_instances: 1\n    max_instances: 4\n    target_invocations_per_instance: 3000\n"
    )
    fixed = load(tmp_path, MINILM, "fixed", **{autoscaling: ""})
    state = StateStore(tmp_path / "state.db")
    apply(fixed, state, artifact)
    assert drift("minilm-embed", transport(), state) == []
    sm = Live(aws, "minilm-embed").sm
    sm.update_endpoint_weights_and_capacities(
        EndpointName="minilm-embed",
        DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 3}],
    )
    (item,) = drift("minilm-embed", transport(), state)
    assert (item.resource, item.kind) == ("endpoint", "changed"), item
    assert "variant AllTraffic: desired instance count is 3, expected 1" in item.detail, item.detail
    _, t = apply(fixed, state, artifact)  # re-apply puts the count back in place: no new config, no new endpoint
    assert operations(t) == ["UpdateEndpointWeightsAndCapacities"], operations(t)
    assert Live(aws, "minilm-embed").endpoint()["ProductionVariants"][0]["DesiredInstanceCount"] == 1
    assert drift("minilm-embed", transport(), state) == []
    destroy_and_prove_empty(aws, state, "minilm-embed")


def test_drift_leaves_an_autoscaled_variant_s_instance_count_to_its_scaling(sagemaker_world, artifact, tmp_path):
    aws = sagemaker_world
    state = StateStore(tmp_path / "state.db")
    apply(load(tmp_path, MINILM), state, artifact)
    Live(aws, "minilm-embed").sm.update_endpoint_weights_and_capacities(
        EndpointName="minilm-embed",
        DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 3}],
    )
    assert drift("minilm-embed", transport(), state) == []  # 3 is within the target's 1..4: scaling's to move
    destroy_and_prove_empty(aws, state, "minilm-embed")


def test_destroy_deletes_the_deployments_objects_unless_asked_to_keep_them(sagemaker_world, artifact, tmp_path):
    """Through the CLI: `destroy --keep-artifacts` leaves the artifact (and says how to remove it); a later destroy
    of the name (nothing recorded any more) deletes every version of every object under its prefix, counted."""
    from support.sagemaker import stored_under

    aws = sagemaker_world
    loaded = load(tmp_path, MINILM)
    state = tmp_path / "state.db"
    apply(loaded, StateStore(state), artifact)
    stored = {version["Key"] for version in stored_under(aws, "minilm-embed")}
    assert any("/artifact/" in key for key in stored), stored
    kept = run_cli("destroy", "minilm-embed", "--yes", "--keep-artifacts", "--state", str(state))
    assert kept.returncode == 0, kept.stderr
    said = " ".join(kept.stderr.split())
    bucket = "s3://neurondeploy-123456789012-us-east-1/minilm-embed/"
    assert f"0 objects deleted from {bucket}" in said and f"kept {len(stored)} objects under {bucket}" in said
    assert {version["Key"] for version in stored_under(aws, "minilm-embed")} == stored
    gone = run_cli("destroy", "minilm-embed", "--yes", "--region", "us-east-1", "--state", str(state))
    assert gone.returncode == 0, gone.stderr
    assert f"{len(stored)} objects deleted from {bucket}" in " ".join(gone.stderr.split())
    assert stored_under(aws, "minilm-embed") == []
