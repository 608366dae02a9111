"""An LLM spec whose model is a local Hugging Face directory (e.g. what `train --local` saved), applied to
SageMaker against a real moto server over HTTP: the directory goes to S3 as the endpoint's model data and the
vLLM container is pointed at /opt/ml/model, where SageMaker unpacks it; what S3 holds, unpacked as SageMaker
would, loads in transformers as the same model."""

from __future__ import annotations

import io
import tarfile

import pytest
import torch

from neurondeploy.engine.state import StateStore

from .test_sagemaker_endpoint import (  # noqa: F401  sagemaker_world is a fixture
    REPO,
    Live,
    apply,
    destroy_and_prove_empty,
    expected,
    load,
    operations,
    sagemaker_world,
)

pytestmark = pytest.mark.integration
TEMPLATE = REPO / "templates" / "tiny-lm-serve-local.yaml"


def test_a_local_model_directory_becomes_the_vllm_endpoints_model_data(sagemaker_world, tmp_path):
    from transformers import AutoModelForCausalLM

    from neurondeploy.serving.llm.model import build_stand_in

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
    assert torch.equal(served(ids).logits, lm.model(ids).logits.detach())

    _, second = apply(loaded, state, None)
    assert operations(second) == []  # the same directory is not uploaded again
    destroy_and_prove_empty(sagemaker_world, state, "tiny-lm-serve")
