"""The LLM export of `compile --remote` as data and rules: the export host (host RAM and HBM), the content key, the
startup budget over a precompiled model, and the job request checked strictly against botocore."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.compiler.llm_export import LlmExportError, export_argv, job_arguments, llm_artifact_key
from neurondeploy.errors import PlanError
from neurondeploy.planner.checks import run_checks
from neurondeploy.planner.llm_compile import llm_compile_host
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.precompiled import load_budget
from neurondeploy.resources.sagemaker_compile import CompileJob, compile_deployment, compile_job_resources
from neurondeploy.resources.sagemaker_endpoint import create_endpoint_config_request, create_model_request
from neurondeploy.resources.validation import check_request
from neurondeploy.specs import load_spec, parse_spec
from neurondeploy.specs.inference import ModelArchitecture

REPO = Path(__file__).parents[2]
VLLM = REPO / "templates" / "llama3-8b-vllm-sagemaker.yaml"
CTX = PlanContext(account_id="123456789012", run_id="20261204-170000")
CACHE = "s3://neurondeploy-123456789012-us-east-1/compile-cache"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/neurondeploy-hf-vllm:0.1.0"


def vllm(**model):
    spec = load_spec(VLLM).spec
    return spec.model_copy(update={"model": spec.model.model_copy(update=model)}) if model else spec


def test_an_8b_model_is_exported_on_trn1_32xlarge_because_32_gib_of_host_ram_was_too_little():
    spec = vllm()
    host = llm_compile_host(spec, spec.model.architecture)
    assert host.instance_type == "ml.trn1.32xlarge"
    assert any(line.startswith("not trn1.2xlarge: host RAM 32 GiB < 45 GiB") for line in host.reasons)


def test_a_1b_model_fits_the_smallest_trainium_host():
    small = ModelArchitecture(
        layers=16, hidden_size=2048, attention_heads=32, kv_heads=8, vocab_size=128256, intermediate_size=8192
    )
    spec = vllm(architecture=small)
    assert llm_compile_host(spec, small).instance_type == "ml.trn1.2xlarge"


def test_a_model_no_host_fits_is_refused_with_the_reasons():
    huge = ModelArchitecture(layers=400, hidden_size=16384, attention_heads=128, kv_heads=8, vocab_size=128256)
    with pytest.raises(PlanError, match="no SageMaker training Neuron instance fits the export"):
        llm_compile_host(vllm(architecture=huge), huge)


def test_the_key_changes_with_what_decides_the_export_and_not_otherwise():
    base = llm_artifact_key(vllm(), IMAGE)
    assert base == llm_artifact_key(vllm(), IMAGE)
    assert base != llm_artifact_key(vllm(hf_revision="0e9e39f"), IMAGE)
    assert base != llm_artifact_key(vllm(dtype="float16"), IMAGE)
    assert base != llm_artifact_key(vllm(), IMAGE.replace("0.1.0", "0.2.0"))
    spec = vllm()
    tp1 = spec.model_copy(update={"deployment": spec.deployment.model_copy(update={"tensor_parallel": 1})})
    assert base != llm_artifact_key(tp1, IMAGE)


def test_fp8_weights_are_refused_since_optimum_cli_loads_bf16_fp16_or_fp32():
    with pytest.raises(LlmExportError, match="model.dtype fp8"):
        export_argv(vllm(dtype="fp8"))


def test_a_revision_is_passed_to_the_job():
    args = job_arguments(vllm(hf_revision="0e9e39f"), "k" * 64, CACHE)
    assert args[args.index("--revision") + 1] == "0e9e39f" and args.index("--revision") < args.index("--")


def test_the_job_request_is_strictly_valid_and_carries_no_token():
    spec = compile_deployment(vllm())
    job = CompileJob("k" * 64, CACHE, "2.26.1", "ml.trn1.32xlarge", "neurondeploy.compiler.llm_export", ("--x",))
    by_name = {r.name: r for r in compile_job_resources(spec, CTX, job)}
    params = by_name["compile-job"].create[0].params
    check_request("sagemaker", "CreateTrainingJob", params)
    assert params["AlgorithmSpecification"]["ContainerEntrypoint"][-1] == "neurondeploy.compiler.llm_export"
    assert "HF_TOKEN" not in params["Environment"] and "NEURONDEPLOY_SECRET_ENV" in params["Environment"]


def test_the_catalogue_image_alone_is_refused_as_it_has_no_job_code():
    spec = compile_deployment(vllm())
    container = spec.deployment.container.model_copy(update={"image_uri": None, "env": {}})
    spec = spec.model_copy(update={"deployment": spec.deployment.model_copy(update={"container": container})})
    job = CompileJob("k" * 64, CACHE, "2.26.1", "ml.trn1.32xlarge", "neurondeploy.compiler.llm_export", ("--x",))
    with pytest.raises(PlanError, match="wrapper image of infra/hf-secrets"):
        compile_job_resources(spec, CTX, job)


def test_load_budget_of_an_8b_model_is_minutes_not_the_hour_a_compile_takes():
    """Read at the endpoint's gp2 volume's throughput limit: 128 MiB/s up to 170 GiB, 250 MiB/s above (the EBS
    user guide's gp2 performance; SageMaker endpoint volumes are gp2 only)."""
    seconds, why = load_budget(16 * 10**9, 100)
    assert seconds == 360 and "128 MiB/s (a 100 GiB gp2 volume)" in why  # 14.9 GiB / 128 = 119 s; 120 + 2 × 119
    seconds, why = load_budget(16 * 10**9, 512)
    assert seconds == 270 and "250 MiB/s (a 512 GiB gp2 volume)" in why  # 61 s; 120 + 2 × 61 → 270
    assert load_budget(16 * 10**9)[0] == 360  # instance storage: the lower figure
    assert load_budget(0)[0] == 120 and load_budget(10**13)[0] == 3600


def test_the_endpoint_over_a_precompiled_model_never_gets_a_larger_budget_than_the_spec():
    spec = vllm()
    ctx = PlanContext(
        account_id="123456789012", precompiled_model_uri=f"{CACHE}/k/model/", precompiled_model_bytes=10**13
    )
    variant = create_endpoint_config_request(spec, ctx)["ProductionVariants"][0]
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == spec.deployment.health_check_timeout_s
    model = create_model_request(spec, ctx)
    check_request("sagemaker", "CreateModel", model)
    assert "ModelDataUrl" not in model["PrimaryContainer"]


def test_hf_revision_without_hf_model_id_is_one_line(tmp_path):
    text = (REPO / "templates" / "minilm-sagemaker.yaml").read_text()
    text = text.replace("model:\n", "model:\n  hf_revision: main\n", 1)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    ran = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(path)], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode != 0 and "hf_revision is the revision of hf_model_id" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_plan_says_the_container_refuses_a_model_the_neuron_cache_has_no_configuration_for():
    """optimum-neuron's serve exports only from a cached configuration unless --allow_non_cached_model: without an
    export the endpoint does not compile on the instance, and plan says so with the fix (it said it would)."""
    (refusal,) = [f for f in run_checks(load_spec(VLLM)) if f.field == "deployment.container"]
    assert "apply refuses to deploy meta-llama/Llama-3.1-8B-Instruct until compile --remote" in refusal.message
    assert "compile" in refusal.hint and "--remote" in refusal.hint
    text = VLLM.read_text().replace("    kind: hf-vllm\n", "    kind: hf-vllm\n    start_from_neuron_cache: true\n")
    from_cache = parse_spec(text, file=str(VLLM))
    (advice,) = [f for f in run_checks(from_cache) if f.field == "deployment.health_check_timeout_s"]
    assert "refuses to start otherwise" in advice.message and "--allow_non_cached_model" in advice.message
    assert "compiles it at start" not in advice.message
    assert "compile" in advice.hint and "--remote" in advice.hint
