"""The SageMaker endpoint tests' world (the ``sagemaker_world`` fixture in tests/integration/conftest.py is
:func:`prepare`) and helpers: load a template, apply it, count its calls, what lives in moto, destroy and prove it
empty.

Emulator gaps (moto 5.2.5) patched in the ``sagemaker_world`` fixture, test-only (the server runs in this
process, so patching moto's classes reaches it; product code never knows):

- ``CreateEndpointConfig`` checks instance types against an old hard-coded list without ``ml.inf2.*``: the check
  uses botocore's own ``ProductionVariantInstanceType`` enum instead;
- ``UpdateEndpoint`` is not implemented: a small one moves the endpoint to the new config (keeping the variant
  counts with ``RetainAllVariantProperties``), refuses an endpoint that is not InService, and, as SageMaker does,
  refuses to change the instance type of a variant that is still an Application Auto Scaling target.
"""

from __future__ import annotations

import json

from neurondeploy.archive import artifact_digest
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.apply import apply_spec
from neurondeploy.engine.destroy import destroy
from neurondeploy.engine.drift import drift
from neurondeploy.engine.executor import UPDATE_PROGRESS, Executor
from neurondeploy.engine.model_bundle import dlc_model_dir
from neurondeploy.engine.reconcile import RETIRED
from neurondeploy.engine.sweep import find_leftovers
from neurondeploy.planner.context import plan_context
from neurondeploy.resources import sagemaker_endpoint as rq
from neurondeploy.resources.release import serving_piece
from neurondeploy.resources.s3 import claim_key
from neurondeploy.specs import load_spec, parse_spec
from neurondeploy.wheel import toolkit_wheel
from support.ec2_deployment import REPO, FaultyTransport, transport  # noqa: F401  (shared with its tests)

MINILM = REPO / "templates" / "minilm-sagemaker.yaml"
VLLM = REPO / "templates" / "llama3-8b-vllm-sagemaker.yaml"
ACCOUNT = "123456789012"  # moto's


def artifact_uri_of(directory) -> str:
    """Where apply puts an artifact: named by its sha256, so a new model is a new SageMaker model (blue/green). On the
    DLC (the default), model.tar.gz is the artifact plus code/ with the handler and this toolkit's wheel."""
    image = serving_piece(load_spec(MINILM).spec)  # the template's release's image
    digest = artifact_digest(dlc_model_dir(directory, toolkit_wheel(), image))
    return f"s3://neurondeploy-{ACCOUNT}-us-east-1/minilm-embed/artifact/model-{digest[:16]}.tar.gz"


# --- the emulator ------------------------------------------------------------------------------------------------


def _botocore_instance_types() -> list[str]:
    from botocore.session import get_session

    model = get_session().get_service_model("sagemaker")
    return list(model.shape_for("ProductionVariantInstanceType").enum)


def _update_endpoint(self):
    """moto gap: SageMaker UpdateEndpoint (see the module doc)."""
    from moto.applicationautoscaling.models import applicationautoscaling_backends
    from moto.core.responses import ActionResult
    from moto.sagemaker.exceptions import ValidationError

    backend = self.sagemaker_backend
    name, config_name = self._get_param("EndpointName"), self._get_param("EndpointConfigName")
    endpoint = backend.endpoints.get(name)
    if endpoint is None:
        raise ValidationError(message=f"Could not find endpoint '{name}'.")
    if endpoint.endpoint_status != "InService":
        raise ValidationError(message=f"Cannot update in-progress endpoint '{name}'.")
    config = backend.describe_endpoint_config(config_name)  # raises when it does not exist
    old = backend.endpoint_configs.get(endpoint.endpoint_config_name)
    old_types = {v["VariantName"]: v.get("InstanceType") for v in (old.production_variants if old else [])}
    targets = applicationautoscaling_backends[backend.account_id][backend.region_name].targets
    for variant in config["ProductionVariants"]:
        resource_id = f"endpoint/{name}/variant/{variant['VariantName']}"
        registered = any(resource_id in by_id for by_id in targets.values())
        if registered and old_types.get(variant["VariantName"]) not in (None, variant.get("InstanceType")):
            raise ValidationError(
                message=f"The variant {variant['VariantName']} is an autoscaling target: deregister "
                "it before changing its instance type."
            )
    counts = {v["VariantName"]: v.get("DesiredInstanceCount") for v in endpoint.production_variants}
    endpoint.endpoint_config_name = config_name
    endpoint.production_variants = endpoint._process_production_variants(config["ProductionVariants"])
    if self._get_param("RetainAllVariantProperties"):
        for variant in endpoint.production_variants:
            if counts.get(variant["VariantName"]):
                variant["CurrentInstanceCount"] = variant["DesiredInstanceCount"] = counts[variant["VariantName"]]
    return ActionResult({"EndpointArn": endpoint.arn})


def prepare(aws, monkeypatch):
    """moto patched for SageMaker on Inf2 (module doc) and our serving image in ECR."""
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.models import FakeEndpointConfig
    from moto.sagemaker.responses import SageMakerResponse

    allowed = _botocore_instance_types()
    assert "ml.inf2.xlarge" in allowed and "ml.inf2.8xlarge" in allowed

    def validate_instance_type(self, instance_type: str) -> None:
        if instance_type not in allowed:
            raise ValidationError(message=f"Value '{instance_type}' at 'instanceType' failed to satisfy constraint")

    monkeypatch.setattr(FakeEndpointConfig, "validate_instance_type", validate_instance_type)
    monkeypatch.setattr(SageMakerResponse, "update_endpoint", _update_endpoint, raising=False)
    push_serving_image(aws)
    wrapper = load_spec(VLLM).spec.deployment.container.image_uri  # the template's infra/hf-secrets wrapper
    push_image(aws, wrapper.split("/", 1)[1].rsplit(":", 1)[0], wrapper.rsplit(":", 1)[1])
    return aws


def push_serving_image(aws) -> None:
    """What `docker push` of infra/serving's image leaves in the account's ECR (apply checks it is there)."""
    from neurondeploy import __version__
    from neurondeploy.resources.sagemaker_endpoint import SERVING_REPOSITORY

    push_image(aws, SERVING_REPOSITORY, __version__)


def push_image(aws, repository: str, tag: str) -> None:
    """What `docker push` leaves in the account's ECR: a repository with the tagged image."""
    ecr = aws.client("ecr")
    ecr.create_repository(repositoryName=repository)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": 2,
            "digest": "sha256:" + "0" * 64,
        },
        "layers": [],
    }
    ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag=tag)


# --- helpers -----------------------------------------------------------------------------------------------------


def served_answer(artifact_dir, request: dict | None = None) -> list:
    """What our server's runner answers to ``request`` (default: the artifact's smoke request) with this
    artifact's modules: an endpoint serving it would answer the same."""
    from neurondeploy.manifest import read_manifest, smoke_request
    from neurondeploy.serving.runtime import ModelRunner
    from neurondeploy.specs.inference import ServingSpec

    runner = ModelRunner(artifact_dir, ServingSpec())
    items, _single = runner.parse(request or smoke_request(read_manifest(artifact_dir)))
    return [row.tolist() for row in runner.run(0, items)]


def queue_invocation_answer(aws, answer) -> None:
    """What SageMaker's InvokeEndpoint answers next (moto answers "body" otherwise), through moto's API for it.
    moto keeps the answer it gave to each (endpoint, body) for good: those are forgotten first, so the same request
    can get the new answer."""
    import requests
    from moto.sagemakerruntime.models import sagemakerruntime_backends

    sagemakerruntime_backends["123456789012"]["us-east-1"].results.clear()

    results = [{"Body": json.dumps(answer), "ContentType": "application/json"}]
    requests.post(
        f"{aws.endpoint_url}/moto-api/static/sagemaker/endpoint-results",
        json={"account_id": "123456789012", "region": "us-east-1", "results": results},
        timeout=10,
    ).raise_for_status()


def load(tmp_path, template, label: str = "v1", **replacements: str):
    text = template.read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / f"{template.stem}-{label}.yaml"
    path.write_text(text)
    return parse_spec(text, file=str(path), path=path)


def apply(loaded, state, artifact_dir, t=None):
    t = t or transport()
    return apply_spec(loaded, transport=t, state=state, artifact_dir=artifact_dir), t


def operations(t: AwsTransport) -> list[str]:
    return [call.operation for call in t.mutating_calls()]


def objects(aws) -> set[str]:
    """Every object in the emulated account's buckets, as ``bucket/key``."""
    s3 = aws.client("s3")
    return {
        f"{bucket['Name']}/{item['Key']}"
        for bucket in s3.list_buckets()["Buckets"]
        for item in s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", [])
    }


def only_the_claim_written(aws, before: set[str], name: str) -> bool:
    """Whether apply wrote nothing to S3 but the deployment's claim on its name (engine.claims): no upload."""
    return {key.split("/", 1)[1] for key in objects(aws) - before} == {claim_key(name)}


class FailingOperation(AwsTransport):
    """Refuses every call of one operation, as AWS would: nothing is sent."""

    def __init__(self, operation: str) -> None:
        super().__init__("us-east-1", wait_delay_s=1, wait_attempts=5)
        self.operation = operation

    def call(self, service, operation, params):
        if operation == self.operation:
            raise AwsCallError(f"{service}:{operation}: InjectedFault", code="InjectedFault")
        return super().call(service, operation, params)


class Live:
    """What moto holds for the deployment."""

    def __init__(self, aws, name: str) -> None:
        self.sm, self.scaling, self.name = aws.client("sagemaker"), aws.client("application-autoscaling"), name

    def models(self) -> set[str]:
        return {m["ModelName"] for m in self.sm.list_models()["Models"]}

    def configs(self) -> set[str]:
        return {c["EndpointConfigName"] for c in self.sm.list_endpoint_configs()["EndpointConfigs"]}

    def endpoints(self) -> set[str]:
        return {e["EndpointName"] for e in self.sm.list_endpoints()["Endpoints"]}

    def endpoint(self) -> dict:
        return self.sm.describe_endpoint(EndpointName=self.name)

    def targets(self) -> list[dict]:
        return self.scaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]

    def policies(self) -> list[dict]:
        return self.scaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]


def expected(loaded, **context):
    """The builders' requests for ``loaded`` with the context apply uses against moto's account."""
    ctx = plan_context(loaded, account_id=ACCOUNT, **context)
    spec = loaded.spec
    return ctx, rq.create_model_request(spec, ctx), rq.create_endpoint_config_request(spec, ctx)


def stored_under(aws, name: str) -> list[dict]:
    """Every version (and delete marker) under the deployment's prefix of the shared bucket."""
    s3 = aws.client("s3")
    try:
        page = s3.list_object_versions(Bucket="neurondeploy-123456789012-us-east-1", Prefix=f"{name}/")
    except s3.exceptions.NoSuchBucket:
        return []
    return page.get("Versions", []) + page.get("DeleteMarkers", [])


def destroy_and_prove_empty(aws, state, name: str) -> None:
    t = transport()
    stored = {version["Key"] for version in stored_under(aws, name)}
    report = destroy(name, Executor(t, state), t, state)
    assert report.remaining == [] and report.errors == []
    # its artifact, wheel and sources go with it, every version of each (the shared bucket is versioned)
    assert stored_under(aws, name) == [] and report.objects.deleted == len(stored)
    live = Live(aws, name)
    assert live.models() == live.configs() == live.endpoints() == set()
    assert live.targets() == [] and live.policies() == []
    assert find_leftovers(transport(), name) == []
    assert state.get(name) is None


def assert_converged(aws, state, loaded, **context) -> None:
    """Exactly the builders' model, config and endpoint exist; state records them, complete, nothing retired."""
    _, model, config = expected(loaded, **context)
    live = Live(aws, loaded.spec.name)
    assert live.models() == {model["ModelName"]}
    assert live.configs() == {config["EndpointConfigName"]}
    endpoint = live.endpoint()
    assert endpoint["EndpointConfigName"] == config["EndpointConfigName"] and endpoint["EndpointStatus"] == "InService"
    recorded = state.get(loaded.spec.name)
    assert not [n for n in recorded.resources if RETIRED in n]
    assert all(r.complete and UPDATE_PROGRESS not in r.outputs for r in recorded.resources.values())
    assert recorded.resources["endpoint"].outputs["EndpointArn"] == endpoint["EndpointArn"]
    assert drift(loaded.spec.name, transport(), state) == []


# --- apply / re-apply / destroy ----------------------------------------------------------------------------------
