"""The table of serving containers (catalog/data/containers.yaml): each row consistent with the rest of the
catalogue, and the one place a container kind is defined: a kind added to the table alone is accepted by the specs,
planned with its own image and environment, and refused where its row says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from neurondeploy import catalog
from neurondeploy.catalog import containers
from neurondeploy.errors import SpecError
from neurondeploy.planner.checks import serving_backend
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.sagemaker_endpoint import container_image, create_model_request
from neurondeploy.specs import parse_spec
from neurondeploy.specs.inference import SERVING_ENV

TEMPLATE = (Path(__file__).parents[2] / "templates" / "tiny-lm-serve-local.yaml").read_text()
SOURCES = ("factory", "hf-hub-id", "s3-uri", "training-job", "torchscript", "hf-directory")


@pytest.mark.parametrize("name", catalog.container_kinds())
def test_every_row_names_what_the_rest_of_the_catalogue_knows(name):
    kind = catalog.container_kind(name)
    assert kind.image_purpose in catalog.image_purposes()
    assert kind.runtime in catalog.tp_backends()
    assert set(kind.platforms) <= {"sagemaker", "ec2"} and kind.platforms
    assert set(kind.model_sources) <= set(SOURCES) and kind.model_sources
    assert {value for _, value in kind.environment} <= set(containers.ENVIRONMENT_VALUES)
    assert kind.buckets in ("many", "one") and "sagemaker" in kind.apis
    assert kind.source and kind.description
    assert kind.ours or kind.model_variable, "a container that loads the model itself must be told where it is"


def test_our_row_carries_the_environment_our_server_reads():
    ours = [catalog.container_kind(name) for name in catalog.container_kinds() if catalog.container_kind(name).ours]
    assert [kind.name for kind in ours] == ["neurondeploy"]
    assert (SERVING_ENV, "serving") in ours[0].environment


def test_an_unknown_kind_is_refused_with_the_known_ones():
    with pytest.raises(SpecError) as refused:
        parse_spec(TEMPLATE.replace("kind: hf-vllm", "kind: hf-vlm"), file="spec.yaml")
    assert "hf-vllm" in str(refused.value) and "deployment.container.kind" in str(refused.value)


@pytest.fixture
def new_kind(monkeypatch):
    """A container kind that exists only as a table row: an LLM container on the vLLM image with its own
    variable names, on SageMaker only."""
    rows = containers._kinds()
    added = dataclasses.replace(
        rows["hf-vllm"],
        name="hf-new",
        environment=(("NEW_MODEL", "model"), ("NEW_TP", "tensor_parallel"), ("NEW_TOKENS", "max_sequence")),
        quantization=False,
    )
    monkeypatch.setattr(containers, "_kinds", lambda: {**rows, "hf-new": added})
    return added


def test_a_kind_added_to_the_table_alone_is_specified_planned_and_refused_by_its_row(new_kind):
    loaded = parse_spec(TEMPLATE.replace("kind: hf-vllm", "kind: hf-new"), file="spec.yaml")
    assert loaded.spec.container is new_kind and serving_backend(loaded.spec) == "nxdi"
    ctx = plan_context(loaded, account_id="123456789012")
    container = create_model_request(loaded.spec, ctx)["PrimaryContainer"]
    assert container["Image"] == container_image(loaded.spec, ctx)
    assert container["Image"] == catalog.neuron_image("vllm", "us-east-1", loaded.spec.neuron_sdk_version)
    env = container["Environment"]
    assert env["NEW_MODEL"] == "/opt/ml/model" and env["NEW_TP"] == str(loaded.spec.deployment.tensor_parallel)
    assert env["NEW_TOKENS"] == str(max(loaded.spec.compile.sequence_lengths)) and "SM_ON_MODEL" not in env
    with pytest.raises(SpecError, match="model.quantization"):  # its row: no quantization
        parse_spec(
            TEMPLATE.replace("kind: hf-vllm", "kind: hf-new").replace("model:\n", "model:\n  quantization: int8\n", 1),
            file="spec.yaml",
        )
    with pytest.raises(SpecError, match="runs on SageMaker only"):  # its row: SageMaker only
        parse_spec(
            TEMPLATE.replace("kind: hf-vllm", "kind: hf-new").replace("platform: sagemaker", "platform: ec2"),
            file="spec.yaml",
        )
