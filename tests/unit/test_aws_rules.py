"""Requests AWS refuses by rules botocore does not model are refused offline, at `validate` as at `plan`, on the spec
field and line that feeds them, and before any call is sent (the transport checks every request the same way).

Each case is a template with one value changed as a user would write it; each used to pass `validate` with "ok"
and fail at `apply` half-way through, after billable resources were made.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.errors import AwsRequestError
from neurondeploy.planner.validate import validate_file
from neurondeploy.resources.aws_rules import RULES, bucket_name_problem, rule_problems
from neurondeploy.resources.validation import check_request

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "templates"
IMAGE = "image_uri: 123456789012.dkr.ecr.us-east-1.amazonaws.com/neurondeploy-hf-vllm:0.1.0"

# (case, template, (old, new), the field the finding names, words of its message)
CASES = [
    (
        "ELB name begins internal-",
        "minilm-ec2-alb.yaml",
        ("name: minilm-web", "name: internal-web"),
        "name",
        "cannot begin with 'internal-'",
    ),
    (
        "a CIDR given twice",
        "minilm-ec2-alb.yaml",
        ("allowed_cidrs: [0.0.0.0/0]", "allowed_cidrs: [10.0.0.0/8, 10.0.0.0/8]"),
        "network.allowed_cidrs",
        "10.0.0.0/8 is given twice",
    ),
    (
        "more inbound rules than a security group holds",
        "minilm-ec2-alb.yaml",
        ("allowed_cidrs: [0.0.0.0/0]", f"allowed_cidrs: [{', '.join(f'10.{i}.0.0/16' for i in range(61))}]"),
        "network.allowed_cidrs",
        "a security group holds 60",
    ),
    (
        "a SageMaker image outside ECR",
        "llama3-8b-vllm-sagemaker.yaml",
        (IMAGE, "image_uri: docker.io/library/vllm:0.1.0"),
        "deployment.container.image_uri",
        "is not an Amazon ECR image",
    ),
    (
        "a SageMaker image in another region's ECR",
        "llama3-8b-vllm-sagemaker.yaml",
        (IMAGE, IMAGE.replace("us-east-1", "eu-west-1")),
        "deployment.container.image_uri",
        "is in ECR in eu-west-1; SageMaker needs it in the model's region, us-east-1",
    ),
    (
        "a role of another partition",
        "minilm-sagemaker.yaml",
        ("tags:\n", "iam:\n  role_arn: arn:aws-cn:iam::123456789012:role/serving\ntags:\n"),
        "iam.role_arn",
        "is in partition aws-cn; us-east-1 is in aws",
    ),
    (
        "a bucket named like an IP address",
        "tiny-lm-train-local.yaml",
        ("s3://my-training-bucket/tiny-lm/checkpoints", "s3://192.168.1.1/tiny-lm/checkpoints"),
        "checkpoint.s3_uri",
        "cannot be formatted as an IP address",
    ),
    (
        "a hyperparameter value over SageMaker's 2500 characters (plan only, before)",
        "tiny-lm-train-local.yaml",
        ("  log_every: 10", "  log_every: 10\n  note: " + "x" * 3000),
        "hyperparameters.note",
        "over the maximum 2500",
    ),
    (
        "more environment entries than SageMaker takes (plan only, before)",
        "minilm-sagemaker.yaml",
        (
            "  instance_count: 1\n",
            "  instance_count: 1\n  container:\n    env:\n" + "".join(f"      E{i}: v\n" for i in range(101)),
        ),
        "deployment.container.env",
        "entries is over the maximum 100",
    ),
    (
        "an over-long Hub id",
        "llama3-8b-vllm-sagemaker.yaml",
        ("hf_model_id: meta-llama/Llama-3.1-8B-Instruct", "hf_model_id: meta-llama/" + "L" * 120),
        "model.hf_model_id",
        "at most 96",
    ),
    (
        "a zero sequence length the fit check reads",
        "tiny-lm-train-local.yaml",
        ("  sequence_length: 64", "  sequence_length: 0"),
        "hyperparameters.sequence_length",
        "positive whole number",
    ),
    (
        "a negative global batch size the fit check reads",
        "tiny-lm-train-local.yaml",
        ("  global_batch_size: 16", "  global_batch_size: -4"),
        "hyperparameters.global_batch_size",
        "positive whole number",
    ),
]


def spec_with(tmp_path: Path, template: str, change: tuple[str, str]) -> Path:
    text = (TEMPLATES / template).read_text()
    assert change[0] in text, change[0]
    path = tmp_path / template
    path.write_text(text.replace(change[0], change[1], 1))
    return path


@pytest.mark.parametrize("case, template, change, field, words", CASES, ids=[c[0] for c in CASES])
def test_validate_refuses_what_aws_would_refuse_on_the_field_that_feeds_it(
    tmp_path, case, template, change, field, words
):
    result = validate_file(str(spec_with(tmp_path, template, change)))
    assert not result.ok, result.lines()
    errors = [line for line in result.lines() if line.startswith("error:")]
    assert any(f": {field}: " in line and words in line for line in errors), errors
    line = next(line for line in errors if words in line)
    number = int(line.split(":")[2])  # error: FILE:LINE: field: ...
    named = (tmp_path / template).read_text().splitlines()[number - 1]
    assert f"{field.split('.')[-1]}:" in named, (line, named)  # the line of the value


def test_validate_names_the_line_of_the_value_through_the_cli(tmp_path):
    """As a user runs it: one line per problem with file, line, field and a fix, exit 2, no traceback."""
    path = spec_with(tmp_path, "minilm-ec2-alb.yaml", ("name: minilm-web", "name: internal-web"))
    run = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(path)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if "internal-" in line]
    assert line.startswith(f"error: {path}:6: name: AWS would refuse elbv2:CreateLoadBalancer.Name:"), line
    assert "(fix: " in line and "API_CreateLoadBalancer.html" in line
    plan = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "plan", str(path), "--json"], capture_output=True, text=True
    )
    assert plan.returncode == 3  # plan refuses the same request
    problems = [p for r in json.loads(plan.stdout)["resources"] for q in r["requests"] for p in q["problems"]]
    assert any("cannot begin with 'internal-'" in p for p in problems), problems


def test_the_transport_refuses_the_request_before_sending_it():
    """apply's calls pass the same rules: a request AWS would refuse never leaves the machine."""
    with pytest.raises(AwsRequestError, match="is in ECR in eu-west-1"):
        check_request(
            "sagemaker",
            "CreateModel",
            {
                "ModelName": "m",
                "ExecutionRoleArn": "arn:aws:iam::123456789012:role/r",
                "PrimaryContainer": {"Image": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/x:1"},
            },
            "us-east-1",
        )


def test_the_rules_pass_what_aws_accepts():
    assert (
        rule_problems(
            "sagemaker",
            "CreateModel",
            {
                "PrimaryContainer": {
                    "Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference-neuronx:2.7"
                }
            },
            "us-east-1",
        )
        == []
    )
    vpc_registry = {"PrimaryContainer": {"Image": "registry.corp/x:1", "ImageConfig": {"RepositoryAccessMode": "Vpc"}}}
    assert rule_problems("sagemaker", "CreateModel", vpc_registry, "us-east-1") == []
    assert rule_problems("elbv2", "CreateLoadBalancer", {"Name": "web-internal"}) == []
    assert rule_problems("elbv2", "CreateLoadBalancer", {"Name": "${name.Value}-alb"}) == []  # known at apply
    china = {"RoleArn": "arn:aws-cn:iam::123456789012:role/r"}
    assert rule_problems("sagemaker", "CreateTrainingJob", china, "cn-north-1") == []
    assert rule_problems("sagemaker", "CreateTrainingJob", china, "us-east-1") != []
    ingress = {
        "IpPermissions": [{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "IpRanges": [{"CidrIp": "10.0.0.0/8"}]}]
    }
    assert rule_problems("ec2", "AuthorizeSecurityGroupIngress", ingress) == []


@pytest.mark.parametrize(
    "name, refused",
    [
        ("my-bucket", False),
        ("my.bucket.1", False),
        ("192.168.1.1", True),
        ("My-Bucket", True),
        ("ab", True),
        ("a" * 64, True),
        ("my..bucket", True),
        ("xn--bucket", True),
        ("bucket-s3alias", True),
        ("-bucket", True),
    ],
)
def test_bucket_names(name, refused):
    assert (bucket_name_problem(name) is not None) is refused


def test_every_rule_cites_an_aws_page():
    assert RULES and all(rule.source.startswith("https://docs.aws.amazon.com/") for rule in RULES)
    assert all(rule.what for rule in RULES)


@pytest.mark.parametrize("vocab_size, words", [(0, "vocab_size is 0"), (-3, "vocab_size: Input should be greater")])
def test_a_config_json_vocab_size_below_one_is_refused_not_read_as_the_default(tmp_path, vocab_size, words):
    """A 0 used to be read as "not given" and sized as 32000."""
    model = tmp_path / "m"
    model.mkdir()
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
    (model / "config.json").write_text(json.dumps({**config, "vocab_size": vocab_size, "intermediate_size": 128}))
    spec = tmp_path / "s.yaml"
    spec.write_text("kind: inference\nname: web\ntask: text-generation\nmodel: {path: m}\n")
    run = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(spec)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert f"{model / 'config.json'}: {words}" in line and "(fix: " in line, line
