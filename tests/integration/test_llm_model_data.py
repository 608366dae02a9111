"""An LLM spec whose model is a local Hugging Face directory (e.g. what `train --local` saved), applied to
SageMaker against a real moto server over HTTP: the directory goes to S3 as the endpoint's model data and the
vLLM container is pointed at /opt/ml/model, where SageMaker unpacks it; what S3 holds, unpacked as SageMaker
would, loads in transformers as the same model."""

from __future__ import annotations

import io
import tarfile

import pytest
import torch
from support.sagemaker import (
    REPO,
    Live,
    apply,
    destroy_and_prove_empty,
    expected,
    load,
    objects,
    only_the_claim_written,
    operations,
)

from neurondeploy.engine.state import StateStore

pytestmark = pytest.mark.integration
TEMPLATE = REPO / "templates" / "tiny-lm-serve-local.yaml"


def test_a_local_model_directory_becomes_the_vllm_endpoints_model_data(sagemaker_world, tmp_path):
    from transformers import AutoModelForCausalLM

    from neurondeploy.serving.llm.model import PRINTABLE_BYTES, build_stand_in

    lm = build_stand_in("tiny/gpt2-like", None, 256)
    model_dir = tmp_path / "model"
    lm.model.save_pretrained(model_dir)
    lm.tokenizer.save_pretrained(model_dir)
    loaded = load(tmp_path, TEMPLATE, **{"../.neurondeploy/train/tiny-lm/model": str(model_dir)})
    state = StateStore(tmp_path / "state.db")
    _, first = apply(loaded, state, None)
    assert "PutObject" in operations(first) or "CompleteMultipartUpload" in operations(first)

    _, model_request, _ = expected(loaded)
    live = Live(sagemaker_world, "tiny-lm-serve")
    config = live.sm.describe_endpoint_config(EndpointConfigName=live.endpoint()["EndpointConfigName"])
    container = live.sm.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])["PrimaryContainer"]
    assert container["Environment"]["SM_ON_MODEL"] == "/opt/ml/model"
    assert (
        container["Environment"]["SM_ON_BATCH_SIZE"] == "4"
        and container["Image"] == model_request["PrimaryContainer"]["Image"]
    )
    bucket, key = container["ModelDataUrl"].removeprefix("s3://").split("/", 1)
    archive = sagemaker_world.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    unpacked = tmp_path / "opt" / "ml" / "model"  # what SageMaker does with ModelDataUrl before the container starts
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(unpacked, filter="data")
    served = AutoModelForCausalLM.from_pretrained(unpacked).eval()
    ids = torch.tensor([list(b"hello")])
    printable = list(PRINTABLE_BYTES)  # the stand-in blocks the rest at its output layer; the saved weights do not
    assert torch.equal(served(ids).logits[..., printable], lm.model(ids).logits.detach()[..., printable])

    _, second = apply(loaded, state, None)
    assert operations(second) == []  # the same directory is not uploaded again
    destroy_and_prove_empty(sagemaker_world, state, "tiny-lm-serve")


def _training_job(aws, name: str) -> str:
    """A training job as `neurondeploy train` leaves one (moto makes it Completed at once); its model artifacts."""
    sm = aws.client("sagemaker")
    sm.create_training_job(
        TrainingJobName=name,
        AlgorithmSpecification={
            "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/x:1",
            "TrainingInputMode": "File",
        },
        RoleArn="arn:aws:iam::123456789012:role/trainer",
        OutputDataConfig={"S3OutputPath": "s3://my-training-bucket/tiny-lm/output"},
        ResourceConfig={"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )
    return sm.describe_training_job(TrainingJobName=name)["ModelArtifacts"]["S3ModelArtifacts"]


def test_a_training_job_or_an_s3_uri_is_served_where_it_lies(sagemaker_world, tmp_path, monkeypatch):
    from moto.sagemaker.models import sagemaker_backends

    from neurondeploy.errors import NeurondeployError

    artifacts = _training_job(sagemaker_world, "tiny-lm-20261204T170000Z")
    assert artifacts.startswith("s3://my-training-bucket/tiny-lm/output/tiny-lm-20261204T170000Z")
    source = "path: ../.neurondeploy/train/tiny-lm/model"
    by_job = load(tmp_path, TEMPLATE, "job", **{source: "training_job: tiny-lm-20261204T170000Z"})
    state = StateStore(tmp_path / "state.db")
    before = objects(sagemaker_world)
    apply(by_job, state, None)
    assert only_the_claim_written(sagemaker_world, before, "tiny-lm-serve")  # the job's model.tar.gz, where it is
    live = Live(sagemaker_world, "tiny-lm-serve")
    config = live.sm.describe_endpoint_config(EndpointConfigName=live.endpoint()["EndpointConfigName"])
    container = live.sm.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])["PrimaryContainer"]
    assert container["ModelDataUrl"] == artifacts and container["Environment"]["SM_ON_MODEL"] == "/opt/ml/model"
    role = sagemaker_world.client("iam").list_roles()["Roles"]
    policies = [
        sagemaker_world.client("iam").get_role_policy(RoleName=r["RoleName"], PolicyName=name)["PolicyDocument"]
        for r in role
        for name in sagemaker_world.client("iam").list_role_policies(RoleName=r["RoleName"])["PolicyNames"]
    ]
    assert any(
        "arn:aws:s3:::my-training-bucket/tiny-lm/output/tiny-lm-20261204T170000Z/output/*" in str(p) for p in policies
    )
    destroy_and_prove_empty(sagemaker_world, state, "tiny-lm-serve")

    by_uri = load(tmp_path, TEMPLATE, "uri", **{source: "s3_uri: s3://models-bucket/tiny/model.tar.gz"})
    before = objects(sagemaker_world)
    apply(by_uri, state, None)
    assert only_the_claim_written(sagemaker_world, before, "tiny-lm-serve")
    config = live.sm.describe_endpoint_config(EndpointConfigName=live.endpoint()["EndpointConfigName"])
    container = live.sm.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])["PrimaryContainer"]
    assert container["ModelDataUrl"] == "s3://models-bucket/tiny/model.tar.gz"
    destroy_and_prove_empty(sagemaker_world, state, "tiny-lm-serve")

    # A job still running has no model to serve: refused before anything is created.
    _training_job(sagemaker_world, "tiny-lm-running")
    job = sagemaker_backends["123456789012"]["us-east-1"].training_jobs["tiny-lm-running"]
    monkeypatch.setattr(job, "training_job_status", "InProgress")
    running = load(tmp_path, TEMPLATE, "running", **{source: "training_job: tiny-lm-running"})
    with pytest.raises(NeurondeployError, match="tiny-lm-running is InProgress, so it has no model artifacts"):
        apply(running, state, None)
    assert state.get("tiny-lm-serve") is None or not state.get("tiny-lm-serve").resources
    assert live.sm.list_models()["Models"] == []
