"""SageMaker hosting done by the replay inside the moto server (tests/support/replayed_hosting.py): the endpoint's
container really starts from what apply sent (the DLC's toolkit and TorchServe loading our handler), is held to
its startup health check, and answers InvokeEndpoint. A model that cannot load then fails its endpoint, and an
update to it is rolled back by SageMaker with the old config still serving; apply exits with an error both times."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from support.replayed_hosting import ReplayedHosting
from support.sagemaker import MINILM, load

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine.executor import ApplyFailed
from neurondeploy.engine.state import StateStore
from neurondeploy.errors import NeurondeployError
from neurondeploy.manifest import read_manifest, write_manifest
from neurondeploy.ops.apply import apply
from neurondeploy.ops.smoke import smoke_deployment
from neurondeploy.standin import CPU_STANDIN_ENV, CPU_STANDIN_REASON

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def broken_copy(artifact, root):
    """The artifact with its compiled module cut short, and its manifest naming those bytes (apply refuses a module
    that does not match its manifest): it packs and uploads like any other, and cannot load."""
    broken = root / "broken-artifact"
    shutil.copytree(artifact, broken)
    (module,) = (broken / "buckets").glob("*.pt")
    module.write_bytes(module.read_bytes()[:100])
    manifest = read_manifest(broken)
    (bucket,) = manifest.buckets
    bucket.sha256 = hashlib.sha256(module.read_bytes()).hexdigest()
    write_manifest(broken, manifest)
    return broken


def test_a_model_that_cannot_load_fails_its_endpoint_and_an_update_to_it_rolls_back(
    sagemaker_world, artifact, tmp_path, monkeypatch
):
    aws = sagemaker_world
    monkeypatch.setenv(CPU_STANDIN_ENV, CPU_STANDIN_REASON)  # the replay runs a CPU trace for inf2, and says so
    hosting = ReplayedHosting(tmp_path / "hosting").install(monkeypatch)
    t = AwsTransport("us-east-1", wait_delay_s=1, wait_attempts=240)
    state = StateStore(tmp_path / "state.db")
    loaded = load(tmp_path, MINILM)
    events: list[str] = []
    broken = broken_copy(artifact, tmp_path)
    try:
        # a new endpoint of a model that cannot load: Failed, and apply says so (one TorchServe runs at a time
        # here, so this one comes first)
        other = load(tmp_path, MINILM, "other", **{"name: minilm-embed": "name: minilm-other"})
        with pytest.raises(NeurondeployError) as refused:
            apply(other, transport=t, state=state, artifact_dir=broken)
        sm = aws.client("sagemaker")
        failed = sm.describe_endpoint(EndpointName="minilm-other")
        assert (
            failed["EndpointStatus"] == "Failed" and "did not pass the ping health check" in failed["FailureReason"]
        ), refused.value.message
        assert "EndpointInService" in refused.value.message and "ping health check" in refused.value.message

        apply(loaded, transport=t, state=state, artifact_dir=artifact, on_event=events.append)
        assert any(line.startswith("smoke test passed") for line in events), events  # answered by the container
        serving_config = sm.describe_endpoint(EndpointName="minilm-embed")["EndpointConfigName"]

        # an update to the model that cannot load: SageMaker keeps the old config serving and says why
        with pytest.raises(ApplyFailed, match="EndpointConfigName"):
            apply(loaded, transport=t, state=state, artifact_dir=broken)
        endpoint = sm.describe_endpoint(EndpointName="minilm-embed")
        assert endpoint["EndpointStatus"] == "InService" and endpoint["EndpointConfigName"] == serving_config
        assert "did not pass the ping health check" in endpoint["FailureReason"]
        assert smoke_deployment(loaded.spec, read_manifest(artifact)).startswith("smoke test passed")  # still v1's
        answer = aws.client("sagemaker-runtime").invoke_endpoint(
            EndpointName="minilm-embed", Body=json.dumps({"inputs": [1, 2, 3]}), ContentType="application/json"
        )
        assert answer["CustomAttributes"] == "neurondeploy-batched-requests=1"
    finally:
        hosting.stop()
