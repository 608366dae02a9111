"""Strict offline request validation and placeholder refs, tested as data against botocore's real models."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest

from neurondeploy.errors import AwsRequestError
from neurondeploy.resources.refs import UnresolvedRef, contains_ref, find_refs, is_ref, ref, resolve
from neurondeploy.resources.validation import check_request, matches_pattern, uncompilable_patterns, validate_request

OWNER_TAGS = [
    {"Key": "neurondeploy:deployment", "Value": "demo"},
    {"Key": "neurondeploy:managed-by", "Value": "neurondeploy"},
]
# Every service the planner renders requests for; all their patterns must be expressible in Python.
PLANNER_SERVICES = [
    "ec2", "elbv2", "acm", "route53", "autoscaling", "application-autoscaling",
    "sagemaker", "iam", "ssm", "s3", "logs", "resourcegroupstaggingapi",
]  # fmt: skip


def endpoint_config(**variant) -> dict:
    return {
        "EndpointConfigName": "demo-llama-v1",
        "ProductionVariants": [
            {
                "VariantName": "AllTraffic",
                "ModelName": "demo-llama-v1",
                "InstanceType": "ml.inf2.xlarge",
                "InitialInstanceCount": 1,
                "ContainerStartupHealthCheckTimeoutInSeconds": 600,
                **variant,
            }
        ],
        "Tags": OWNER_TAGS,
    }


def load_balancer(**overrides) -> dict:
    return {
        "Name": "demo-alb",
        "Subnets": [ref("subnet-public-a", "SubnetId"), ref("subnet-public-b", "SubnetId")],
        "SecurityGroups": [ref("sg-alb", "GroupId")],
        "Scheme": "internet-facing",
        "Type": "application",
        "IpAddressType": "ipv4",
        "Tags": OWNER_TAGS,
        **overrides,
    }


VALID = {
    "ec2 CreateVpc with TagSpecifications": (
        "ec2",
        "CreateVpc",
        {"CidrBlock": "10.0.0.0/16", "TagSpecifications": [{"ResourceType": "vpc", "Tags": OWNER_TAGS}]},
    ),
    "elbv2 CreateLoadBalancer with refs as subnets": ("elbv2", "CreateLoadBalancer", load_balancer()),
    "acm RequestCertificate": (
        "acm",
        "RequestCertificate",
        {"DomainName": "api.example.com", "ValidationMethod": "DNS", "Tags": OWNER_TAGS},
    ),
    "route53 alias A record and ownership TXT": (
        "route53",
        "ChangeResourceRecordSets",
        {
            "HostedZoneId": "/hostedzone/Z05521232AXJCTJYE0NF2",  # 33 chars > max 32: valid only because boto3 strips the prefix
            "ChangeBatch": {
                "Changes": [
                    {
                        "Action": "UPSERT",
                        "ResourceRecordSet": {
                            "Name": "api.example.com",
                            "Type": "A",
                            "AliasTarget": {
                                "HostedZoneId": ref("alb", "CanonicalHostedZoneID"),
                                "DNSName": ref("alb", "DNSName"),
                                "EvaluateTargetHealth": True,
                            },
                        },
                    },
                    {
                        "Action": "UPSERT",
                        "ResourceRecordSet": {
                            "Name": "_neurondeploy.api.example.com",
                            "Type": "TXT",
                            "TTL": 300,
                            "ResourceRecords": [{"Value": '"neurondeploy:deployment=demo"'}],
                        },
                    },
                ]
            },
        },
    ),
    "sagemaker CreateEndpointConfig on inf2": ("sagemaker", "CreateEndpointConfig", endpoint_config()),
    "sagemaker CreateTrainingJob minimal": (
        "sagemaker",
        "CreateTrainingJob",
        {
            "TrainingJobName": "demo-train-20250101",
            "AlgorithmSpecification": {
                "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:2.1",
                "TrainingInputMode": "File",
            },
            "RoleArn": "arn:aws:iam::123456789012:role/demo-sagemaker",
            "OutputDataConfig": {"S3OutputPath": "s3://demo-bucket/output/"},
            "ResourceConfig": {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
            "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        },
    ),
}


@pytest.mark.parametrize("service,operation,params", VALID.values(), ids=VALID.keys())
def test_valid_requests_pass(service, operation, params):
    assert validate_request(service, operation, params) == []
    check_request(service, operation, params)  # does not raise


@functools.cache
def botocore_input_shape(service: str, operation: str):
    from botocore.loaders import Loader
    from botocore.model import ServiceModel

    model = ServiceModel(Loader().load_service_model(service, "service-2"), service_name=service)
    return model.operation_model(operation).input_shape


def botocore_accepts(service: str, operation: str, params: dict) -> bool:
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(params, botocore_input_shape(service, operation))
    return not report.has_errors()


STRICT = {
    "max length": (
        endpoint_config(ModelName="m" * 64),
        "CreateEndpointConfig.ProductionVariants[0].ModelName: 64 characters is over the maximum 63",
    ),
    "pattern": (
        {**endpoint_config(), "EndpointConfigName": "demo_llama"},
        "CreateEndpointConfig.EndpointConfigName: 'demo_llama' does not match the pattern",
    ),
    "enum": (
        endpoint_config(InstanceType="ml.inf9.huge"),
        "CreateEndpointConfig.ProductionVariants[0].InstanceType: 'ml.inf9.huge' is not one of",
    ),
    "max value": (
        endpoint_config(ContainerStartupHealthCheckTimeoutInSeconds=7200),
        "CreateEndpointConfig.ProductionVariants[0].ContainerStartupHealthCheckTimeoutInSeconds: "
        "7200 is over the maximum 3600",
    ),
}


@pytest.mark.parametrize("params,expected", STRICT.values(), ids=STRICT.keys())
def test_refuses_what_botocore_accepts(params, expected):
    assert botocore_accepts("sagemaker", "CreateEndpointConfig", params)
    problems = validate_request("sagemaker", "CreateEndpointConfig", params)
    assert len(problems) == 1
    assert problems[0].startswith(expected)


def test_enum_problem_suggests_the_closest_values():
    (problem,) = validate_request("sagemaker", "CreateEndpointConfig", endpoint_config(InstanceType="ml.inf9.huge"))
    assert "did you mean 'ml.inf2.xlarge'" in problem


def test_required_members_missing_at_top_and_nested():
    params = load_balancer()
    del params["Name"]
    config = endpoint_config()
    del config["ProductionVariants"][0]["VariantName"]
    assert validate_request("elbv2", "CreateLoadBalancer", params) == [
        "CreateLoadBalancer.Name: required member is missing"
    ]
    assert validate_request("sagemaker", "CreateEndpointConfig", config) == [
        "CreateEndpointConfig.ProductionVariants[0].VariantName: required member is missing"
    ]


def test_unknown_member_suggests_the_real_name():
    params = {"CidrBlock": "10.0.0.0/16", "TagSpecification": [], "cidr_block": "x"}
    assert validate_request("ec2", "CreateVpc", params) == [
        "CreateVpc.TagSpecification: unknown member (did you mean 'TagSpecifications'?)",
        "CreateVpc.cidr_block: unknown member (did you mean 'CidrBlock'?)",
    ]


def test_bool_is_not_an_integer():
    problems = validate_request("sagemaker", "CreateEndpointConfig", endpoint_config(InitialInstanceCount=True))
    assert problems == [
        "CreateEndpointConfig.ProductionVariants[0].InitialInstanceCount: expected an integer, got bool True"
    ]


def test_wrong_type_inside_a_list():
    params = load_balancer(Subnets=["subnet-0abc", 5])
    assert validate_request("elbv2", "CreateLoadBalancer", params) == [
        "CreateLoadBalancer.Subnets[1]: expected a string, got int 5"
    ]


def test_ref_skips_pattern_but_must_still_be_a_string_where_one_is_expected():
    with_ref = {**endpoint_config(), "EndpointConfigName": "${model.ModelName}-cfg"}
    assert validate_request("sagemaker", "CreateEndpointConfig", with_ref) == []
    # the same text without a ref breaks the pattern, so the ref is what made it pass
    plain = {**endpoint_config(), "EndpointConfigName": "$model.ModelName-cfg"}
    assert len(validate_request("sagemaker", "CreateEndpointConfig", plain)) == 1
    # a whole-string ref may stand for an integer or a whole list; embedded text may not
    assert (
        validate_request(
            "sagemaker", "CreateEndpointConfig", endpoint_config(InitialInstanceCount=ref("size", "Count"))
        )
        == []
    )
    assert validate_request("elbv2", "CreateLoadBalancer", load_balancer(Subnets=ref("vpc", "PublicSubnetIds"))) == []
    (problem,) = validate_request(
        "sagemaker", "CreateEndpointConfig", endpoint_config(InitialInstanceCount="${size.Count}0")
    )
    assert "InitialInstanceCount: expected an integer, got str" in problem


def test_map_keys_and_values_are_checked():
    base = {"RoleName": "demo-role", "AssumeRolePolicyDocument": "{}", "Tags": OWNER_TAGS}
    assert validate_request("iam", "CreateRole", base) == []
    problems = validate_request(
        "sagemaker",
        "CreateModel",
        {
            "ModelName": "demo",
            "ExecutionRoleArn": "arn:aws:iam::123456789012:role/demo",
            "PrimaryContainer": {
                "Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/img:1",
                "Environment": {"OK": "1", "X" * 1025: "v", "N": 3},
            },
        },
    )
    assert problems == [
        f"CreateModel.PrimaryContainer.Environment key '{'X' * 1025}': 1025 characters is over the maximum 1024",
        "CreateModel.PrimaryContainer.Environment['N']: expected a string, got int 3",
    ]


def test_unknown_service_and_operation_are_problems_not_exceptions():
    assert validate_request("ec3", "CreateVpc", {}) == [
        "CreateVpc: unknown service 'ec3' (did you mean 'ecs' or 'ecr' or 'ec2'?)"
    ]
    assert validate_request("ec2", "create_vpc", {}) == [
        "create_vpc: ec2 has no operation 'create_vpc' (did you mean 'CreateVpc'?)"
    ]


def test_check_request_raises_with_first_problem_and_count():
    params = endpoint_config(InstanceType="ml.inf9.huge", ContainerStartupHealthCheckTimeoutInSeconds=7200)
    with pytest.raises(AwsRequestError) as caught:
        check_request("sagemaker", "CreateEndpointConfig", params)
    message = caught.value.message
    assert message.startswith(
        "sagemaker:CreateEndpointConfig refused offline: "
        "CreateEndpointConfig.ProductionVariants[0].InstanceType: 'ml.inf9.huge' is not one of"
    )
    assert message.endswith("(+1 more)")
    assert "7200 is over the maximum 3600" in caught.value.hint


def test_java_patterns_are_translated_not_skipped():
    from botocore.loaders import Loader

    loader = Loader()
    patterns = {
        shape["pattern"]
        for service in PLANNER_SERVICES
        for shape in loader.load_service_model(service, "service-2")["shapes"].values()
        if "pattern" in shape
    }
    assert len(patterns) > 300
    for pattern in patterns:
        matches_pattern(pattern, "x")
    assert {p: why for p, why in uncompilable_patterns().items() if p in patterns} == {}


def test_untranslatable_patterns_are_skipped_and_counted():
    nested = r"[\p{Print}&&[^|:/]]+"  # Java class intersection: no Python spelling
    assert matches_pattern(nested, "anything") is None
    assert "intersected" in uncompilable_patterns()[nested]


@pytest.mark.parametrize(
    "pattern,value,expected",
    [
        (r"^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$", "Größe 東京 42", True),  # tag values in any script
        (r"^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$", "a!b", False),
        (r"[\u0020-\uD7FF\uE000-\uFFFD\uD800\uDC00-\uDBFF\uDFFF\r\n\t]*", "ok 😀\n", True),  # surrogate pair range
        (r"[\u0020-\uD7FF\uE000-\uFFFD\uD800\uDC00-\uDBFF\uDFFF\r\n\t]*", "bell\x07", False),
        (r"[\w-_]*", "a-_b", True),  # Java: '-' after \w is a literal
        (r"[\w-_]*", "a.b", False),
        (r"\A[a-zA-Z0-9_]+\z", "ab_1", True),
        (r"\A[a-zA-Z0-9_]+\z", "ab\n", False),
        (r"[\P{C}]+", "plain é", True),
        (r"[\P{C}]+", "\x00", False),
        (r"\p{Alnum}+", "é", False),  # Java POSIX classes are ASCII-only
        (r"\d+", "٣", False),  # so is \d
        (r"[\p{L}||\p{N}]+", "a|1", True),  # '|' is a literal inside a Java class
    ],
)
def test_java_pattern_semantics(pattern, value, expected):
    assert matches_pattern(pattern, value) is expected


def test_loading_models_needs_neither_botocore_import_at_startup_nor_its_loader():
    # The CLI must start without botocore, and botocore.loaders alone costs ~100 ms of imports.
    code = (
        "import sys\n"
        "from neurondeploy.resources.validation import validate_request\n"
        "assert 'botocore' not in sys.modules\n"
        "assert validate_request('ec2', 'CreateVpc', {'CidrBlock': '10.0.0.0/16'}) == []\n"
        "assert 'botocore.loaders' not in sys.modules, 'slow path taken'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _validate_in_fresh_process(cache_dir, requests) -> list:
    """validate_request for each (service, operation, params) in a new interpreter, with this cache directory."""
    code = (
        "import json, sys\n"
        "from neurondeploy.resources import validation\n"
        "requests = json.loads(sys.argv[1])\n"
        "answers = [validation.validate_request(*request) for request in requests]\n"
        "json.dump({'answers': answers, 'full_models': validation._load_model.cache_info().currsize}, sys.stdout)\n"
    )
    env = {**os.environ, "NEURONDEPLOY_CACHE_DIR": str(cache_dir)}
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(requests)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


def test_the_shapes_an_operation_uses_are_kept_so_the_next_process_reads_no_full_model(tmp_path):
    requests = [
        ["ec2", "CreateVpc", {"CidrBlock": "10.0.0.0/16"}],
        ["ec2", "CreateLaunchTemplate", {"LaunchTemplateName": "x", "LaunchTemplateData": {"InstanceType": "inf9"}}],
        ["sagemaker", "CreateEndpointConfig", endpoint_config(InstanceType="ml.inf2.huge")],
    ]
    cold = _validate_in_fresh_process(tmp_path, requests)
    kept = sorted(path.name.split("-")[0] for path in (tmp_path / "botocore-shapes").iterdir())
    warm = _validate_in_fresh_process(tmp_path, requests)
    assert kept == ["ec2", "sagemaker"]
    assert cold["full_models"] == 2 and warm["full_models"] == 0  # the 5 MB EC2 model is not parsed again
    assert warm["answers"] == cold["answers"]
    assert cold["answers"][0] == [] and "inf9" in cold["answers"][1][0] and "ml.inf2.huge" in cold["answers"][2][0]
    # an operation not used before is read from the full model, then kept too
    more = _validate_in_fresh_process(tmp_path, [["ec2", "DeleteVpc", {"VpcId": "vpc-1"}]])
    assert more == {"answers": [[]], "full_models": 1}


def test_a_damaged_or_unwritable_shape_cache_costs_speed_not_answers(tmp_path):
    requests = [["ec2", "CreateVpc", {"CidrBlock": "not a cidr", "Bogus": 1}]]
    expected = _validate_in_fresh_process(tmp_path / "fresh", requests)["answers"]
    damaged = tmp_path / "damaged"
    _validate_in_fresh_process(damaged, requests)
    for path in (damaged / "botocore-shapes").iterdir():
        path.write_bytes(b"\x00garbage")
    assert _validate_in_fresh_process(damaged, requests)["answers"] == expected
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory would be")
    assert _validate_in_fresh_process(blocked, requests)["answers"] == expected


# --- refs -------------------------------------------------------------------------------------------


def test_ref_round_trip_keeps_types_and_embeds_text():
    request = {
        "Subnets": ref("vpc", "PublicSubnetIds"),
        "Port": ref("alb", "Port"),
        "ResourceId": f"arn:aws:elasticloadbalancing:us-east-1:1:{ref('alb', 'Arn')}/x",
        "Nested": [{"Id": ref("vpc", "VpcId")}],
        "Plain": "no refs here",
    }
    values = {
        ("vpc", "PublicSubnetIds"): ["subnet-a", "subnet-b"],
        ("alb", "Port"): 443,
        ("alb", "Arn"): "app/demo/123",
        ("vpc", "VpcId"): "vpc-1",
    }
    assert find_refs(request) == set(values)
    resolved = resolve(request, values)
    assert resolved == {
        "Subnets": ["subnet-a", "subnet-b"],
        "Port": 443,
        "ResourceId": "arn:aws:elasticloadbalancing:us-east-1:1:app/demo/123/x",
        "Nested": [{"Id": "vpc-1"}],
        "Plain": "no refs here",
    }
    resolved["Subnets"].append("subnet-c")
    assert values[("vpc", "PublicSubnetIds")] == ["subnet-a", "subnet-b"]  # a copy, not the caller's list
    assert request["Port"] == "${alb.Port}"  # the input is untouched


def test_unresolved_ref_raises_a_key_error_that_says_what_is_missing():
    with pytest.raises(UnresolvedRef) as caught:
        resolve({"Name": f"x-{ref('alb', 'DNSName')}"}, {("alb", "Arn"): "a"})
    assert isinstance(caught.value, KeyError)
    assert caught.value.key == ("alb", "DNSName")
    assert str(caught.value) == "unresolved reference ${alb.DNSName}: alb has only Arn"


def test_ref_syntax():
    assert ref("subnet-public-a", "SubnetId") == "${subnet-public-a.SubnetId}"
    assert is_ref("${vpc.VpcId}") and not is_ref("x${vpc.VpcId}") and not is_ref(3)
    assert contains_ref("x${vpc.VpcId}") and not contains_ref("${Vpc.VpcId}") and not contains_ref(None)
    with pytest.raises(ValueError):
        ref("Bad_Name", "VpcId")
    with pytest.raises(ValueError):
        ref("vpc", "Vpc-Id")
