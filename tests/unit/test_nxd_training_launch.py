"""The launch of an engine: nxd-training job, offline: what it writes beside NxD Training's examples (the config and
the model's config.json), what its CreateTrainingJob passes (only where the config is: NxD Training reads no
--key value), and what validate refuses because NxD Training would misread or ignore it.

The launch is the SageMaker Python SDK's for Trainium recipes (src/sagemaker/modules/train/sm_recipes/utils.py):
source_dir NxD Training's examples, entry training_orchestrator.py under torchrun, hyperparameters config-path and
config-name."""

from __future__ import annotations

import io
import tarfile

import pytest
import yaml
from test_nxd_training_layouts import EXAMPLES, spec_of, write
from transformers import LlamaConfig

from neurondeploy.archive import artifact_digest, pack_artifact
from neurondeploy.planner.plan import build_plan
from neurondeploy.planner.validate import validate_file
from neurondeploy.replay.training import decode, to_cmd_args
from neurondeploy.resources.sagemaker_training import job_files
from neurondeploy.specs import load_spec

LLAMA_70B = EXAMPLES[1]


def job_request(plan) -> dict:
    (request,) = [r for res in plan.resources for r in res.requests if r.operation == "CreateTrainingJob"]
    return request.params


def test_the_job_files_are_the_rendered_config_and_the_models_config_json(tmp_path):
    loaded = load_spec(write(tmp_path, spec_of(LLAMA_70B)))
    files = job_files(loaded.spec)
    assert sorted(files) == ["config.json", "nxd-training-config.yaml"]
    assert yaml.safe_load(files["nxd-training-config.yaml"]) == build_plan(loaded).engine_config
    # NxD Training's Llama module reads it with transformers' LlamaConfig.from_pretrained (llama_model.py): the real
    # one, here, reads the model the plan sized
    (tmp_path / "config.json").write_bytes(files["config.json"])
    config = LlamaConfig.from_pretrained(tmp_path / "config.json")
    arch = loaded.spec.architecture
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (80, 8192, 28672)
    assert (config.num_attention_heads, config.num_key_value_heads, config.vocab_size) == (64, 8, arch.vocab_size)
    assert config.max_position_embeddings == LLAMA_70B["encoder_seq_length"]
    assert config.hidden_size // config.num_attention_heads == arch.attention_head_dim
    assert job_files(loaded.spec) == files  # byte for byte: the source archive is content-addressed


def test_the_job_passes_only_where_the_config_is_and_leaves_its_variables_to_it(tmp_path):
    job = job_request(build_plan(load_spec(write(tmp_path, spec_of(LLAMA_70B)))))
    hyperparameters = {key: decode(value) for key, value in job["HyperParameters"].items()}
    assert hyperparameters["sagemaker_program"] == "training_orchestrator.py"
    assert hyperparameters["sagemaker_torch_distributed_enabled"] is True
    user = {key: value for key, value in hyperparameters.items() if not key.startswith("sagemaker_")}
    # what the training toolkit appends to torchrun's command: Hydra's two options
    assert to_cmd_args(user) == ["--config-name", "nxd-training-config.yaml", "--config-path", "."]
    env = job["Environment"]
    # training_orchestrator.py sets these from the config's compiler_flags and precision.type, only where unset
    for name in ("NEURON_CC_FLAGS", "NEURON_RT_STOCHASTIC_ROUNDING_EN", "XLA_USE_BF16", "XLA_DOWNCAST_BF16"):
        assert name not in env
    assert not [name for name in env if name.startswith("NEURONDEPLOY_")]  # the reference script's
    assert env["FI_PROVIDER"] == "efa"  # 16 hosts
    assert job["ResourceConfig"] == {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 16}


def test_the_source_archive_is_named_by_the_config_too(tmp_path):
    """A changed config is a new archive (and upload); an unchanged one the same."""
    first = job_request(build_plan(load_spec(write(tmp_path, spec_of(LLAMA_70B)))))
    again = job_request(build_plan(load_spec(write(tmp_path, spec_of(LLAMA_70B)))))
    spec = spec_of(LLAMA_70B)
    spec["hyperparameters"]["max_steps"] = 20
    changed = job_request(build_plan(load_spec(write(tmp_path, spec))))
    where = [job["HyperParameters"]["sagemaker_submit_directory"] for job in (first, again, changed)]
    assert where[0] == where[1] != where[2]


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"entry_point": "train.py"}, "entry_point", "runs NxD Training's training_orchestrator.py"),
        ({"hyperparameters": {"lr": 0.1}}, "hyperparameters.lr", "is not a setting of NxD Training's config"),
        ({"head_dim": 64}, "architecture.head_dim", "overrides it with 128"),
        (
            {"inputs": {"train": {"s3_uri": "s3://my-training-bucket/text"}}},
            "inputs",
            "loads its training data from a channel with format: tokenized",
        ),
    ],
    ids=["another entry", "a hyperparameter it would ignore", "a head width it would override", "raw files"],
)
def test_validate_refuses_what_nxd_training_would_misread_on_its_line(tmp_path, change, field, words):
    spec = spec_of(LLAMA_70B)
    if "hyperparameters" in change:
        spec["hyperparameters"].update(change["hyperparameters"])
    elif "head_dim" in change:
        spec["architecture"]["head_dim"] = change["head_dim"]
    else:
        spec.update(change)
    result = validate_file(str(write(tmp_path, spec)))
    assert not result.ok
    (line,) = [line for line in result.lines() if line.startswith("error:")]
    assert f": {field}: " in line and words in line and "(fix: " in line, line
    assert line.split(":")[2].strip().isdigit(), line  # the line of the value in the spec file


def test_generated_files_are_packed_and_hashed_beside_the_directorys(tmp_path):
    (tmp_path / "b.py").write_text("b")
    (tmp_path / "config.json").write_text("the directory's")
    generated = {"config.json": b"generated", "a.yaml": b"a: 1\n"}
    with tarfile.open(fileobj=io.BytesIO(pack_artifact(tmp_path, generated))) as archive:
        assert archive.getnames() == ["a.yaml", "b.py", "config.json"]
        assert archive.extractfile("config.json").read() == b"generated"  # a generated file takes the name
        assert archive.extractfile("a.yaml").read() == b"a: 1\n"
    digest = artifact_digest(tmp_path, generated)
    assert digest == artifact_digest(tmp_path, dict(generated))
    assert digest != artifact_digest(tmp_path, {**generated, "a.yaml": b"a: 2\n"})
    assert artifact_digest(tmp_path) != digest
