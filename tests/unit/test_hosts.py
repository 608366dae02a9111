"""What runs under a SageMaker endpoint's container (catalog.hosts): the host image every endpoint asks for, its
Neuron driver as botocore documents it, and the releases whose Neuron runtime that driver is too old for, refused
before anything is created (a runtime/driver mismatch otherwise fails at model load, after the endpoint started)."""

from __future__ import annotations

import re
from pathlib import Path

import botocore.session
import pytest
from support.cli import run_cli

from neurondeploy import catalog
from neurondeploy.catalog.hosts_source import inference_amis_documented
from neurondeploy.errors import CatalogError
from neurondeploy.planner.plan import build_plan
from neurondeploy.resources.release import deployment_release, release_runtime
from neurondeploy.specs import load_spec

TEMPLATES = Path(__file__).parents[2] / "templates"


def test_the_catalogued_host_images_are_botocores():
    documented = inference_amis_documented()
    assert catalog.SAGEMAKER_INFERENCE_AMI in documented
    for ami in catalog.inference_amis():
        assert documented[ami.name] == {"accelerator": ami.accelerator, "neuron_driver": ami.neuron_driver}
    enum = (
        botocore.session.get_session().get_service_model("sagemaker").shape_for("ProductionVariantInferenceAmiVersion")
    )
    assert catalog.SAGEMAKER_INFERENCE_AMI in enum.enum


def test_every_endpoint_asks_for_the_catalogued_host_image():
    plan = build_plan(load_spec(TEMPLATES / "minilm-sagemaker.yaml"))
    variants = [
        variant
        for resource in plan.resources
        for request in resource.requests
        if request.operation == "CreateEndpointConfig"
        for variant in request.params["ProductionVariants"]
    ]
    assert variants and {v["InferenceAmiVersion"] for v in variants} == {catalog.SAGEMAKER_INFERENCE_AMI}
    assert catalog.inference_ami().name in plan.release.host and "driver 2.19" in plan.release.host


@pytest.mark.parametrize(
    ("runtime", "floor"), [("2.31.24.0", None), ("2.32.31.0", "2.27"), ("2.33.10.0", "2.27"), ("2.23.110.0", None)]
)
def test_the_documented_driver_floor_of_a_runtime(runtime, floor):
    found = catalog.driver_floor(runtime)
    assert (found.driver if found else None) == floor


def test_each_release_carries_its_dlcs_runtime():
    """Every DLC row names its aws-neuronx-runtime-lib, and a newer release never ships an older runtime line."""
    for repository in ("pytorch-inference-neuronx", "pytorch-training-neuronx"):
        rows = [row for row in catalog.dlc_releases() if row.repository == repository]
        assert all(row.neuron_runtime for row in rows)
        lines = [tuple(int(p) for p in row.neuron_runtime.split(".")[:2]) for row in rows]
        assert lines == sorted(lines)
    assert release_runtime("2.30.0").startswith("2.32.")  # the release the Neuron notes name


@pytest.mark.parametrize("pin", ["2.30.0", "2.31", "2.31.1"])
def test_a_release_the_host_driver_cannot_run_is_refused_on_sagemaker(pin):
    spec = load_spec(TEMPLATES / "minilm-sagemaker.yaml").spec.model_copy(update={"neuron_sdk_version": pin})
    with pytest.raises(CatalogError) as refused:
        deployment_release(spec)
    assert "driver 2.19" in refused.value.message and "2.27" in refused.value.message
    for named in re.findall(r"\d+\.\d+\.\d+", refused.value.hint):  # the fix names releases that do run there
        assert deployment_release(spec.model_copy(update={"neuron_sdk_version": named})).sdk == named
    # The same release on EC2 runs on its own DLAMI's driver: no host rule there.
    ec2 = load_spec(TEMPLATES / "minilm-ec2-alb.yaml").spec.model_copy(update={"neuron_sdk_version": "2.31"})
    assert deployment_release(ec2).sdk.startswith("2.31.")


def test_validate_refuses_it_in_one_line(tmp_path):
    text = (TEMPLATES / "minilm-sagemaker.yaml").read_text()
    text = re.sub(r"^neuron_sdk_version: .*$", "", text, flags=re.M)
    spec = tmp_path / "sm.yaml"
    spec.write_text(re.sub(r"^kind: inference$", "kind: inference\nneuron_sdk_version: 2.30.0", text, flags=re.M))
    result = run_cli("validate", str(spec))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    out = (result.stdout + result.stderr).strip()
    assert "al2-ami-sagemaker-inference-neuron-2" in out and "2.29.1" in out


def _host_warnings(spec: Path) -> list[str]:
    result = run_cli("validate", str(spec))
    assert "Traceback" not in result.stderr
    return [line for line in (result.stdout + result.stderr).splitlines() if "deployment.host_image:" in line]


def test_a_runtime_newer_than_any_aws_runs_on_the_host_is_a_warning_with_the_ways_out(tmp_path):
    """The vLLM Neuron SageMaker template runs SDK 2.29.1's image (its runtime, newer than 2.28, the newest AWS
    itself runs on the neuron-2 host, in its Hugging Face vLLM image) on driver 2.19: said, with the EC2 route."""
    spec = TEMPLATES / "llama3-8b-vllm-neuron-sagemaker.yaml"
    runtime = release_runtime(deployment_release(load_spec(spec).spec).sdk)
    (line,) = _host_warnings(spec)
    assert line.startswith("warning:") and "Neuron driver 2.19" in line and f"Neuron Runtime {runtime}" in line
    assert "untested pairing" in line and "deploy on EC2 (deployment.platform: ec2)" in line and "hf-vllm" in line
    source = catalog.inference_ami().proven_source  # the source beside the fact, in the catalogue
    assert source.startswith("aws/deep-learning-containers docs/src/data/huggingface-vllm-inference-neuronx/")
    on_ec2 = tmp_path / "ec2.yaml"
    on_ec2.write_text(spec.read_text().replace("platform: sagemaker", "platform: ec2"))
    assert _host_warnings(on_ec2) == []  # the DLAMI brings its own driver
    assert _host_warnings(TEMPLATES / "minilm-ec2-alb.yaml") == []


def test_a_release_whose_runtime_aws_runs_on_the_host_is_not_warned_about(tmp_path):
    proven = catalog.newest_proven_sdk(catalog.inference_ami())
    assert proven == "2.26.1"  # runtime 2.28.23.0, that of AWS's own image on the host
    text = re.sub(
        r"^kind: inference$",
        f"kind: inference\nneuron_sdk_version: {proven}",
        (TEMPLATES / "minilm-sagemaker.yaml").read_text(),
        flags=re.M,
    )
    spec = tmp_path / "pinned.yaml"
    spec.write_text(text)
    assert _host_warnings(spec) == []
    assert _host_warnings(TEMPLATES / "minilm-sagemaker.yaml")  # the newest release: warned


def test_the_host_image_is_a_spec_field_the_request_carries(tmp_path):
    plan = build_plan(load_spec(TEMPLATES / "minilm-sagemaker.yaml"))
    config = next(r for r in plan.resources if r.name == "endpoint-config").requests[0].params
    assert config["ProductionVariants"][0]["InferenceAmiVersion"] == catalog.SAGEMAKER_INFERENCE_AMI
    text = (
        (TEMPLATES / "minilm-sagemaker.yaml")
        .read_text()
        .replace("  instance_count: 1\n", "  instance_count: 1\n  host_image: al2-ami-sagemaker-inference-gpu-2\n")
    )
    spec = tmp_path / "gpu-host.yaml"
    spec.write_text(text)
    result = run_cli("validate", str(spec))
    assert (
        result.returncode == 2
        and "deployment.host_image: 'al2-ami-sagemaker-inference-gpu-2' is not a SageMaker host image for Neuron instances"
        in result.stderr
    )
