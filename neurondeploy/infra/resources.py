"""Resources as data: what `apply` creates and `destroy` deletes, as exact boto3 requests.

Builders are pure: they take a spec and a :class:`PlanContext` and return :class:`Resource` objects. IDs
that exist only after an earlier request are ``${resource.Attribute}`` refs (:mod:`neurondeploy.infra.refs`);
``Request.outputs`` says where each attribute is found in that request's response.

Contract with the executor:
- create resources in dependency order (:func:`creation_order`), each resource's ``create`` requests in order;
  after each request, read its ``outputs`` with :func:`extract_outputs`, then run its ``wait`` if any;
- an output whose expression finds nothing (ACM fills in validation records a few seconds after
  RequestCertificate) means "not ready": retry that read-only request with backoff before failing;
- destroy in reverse order, sending ``delete`` requests (refs resolved from the outputs kept in state);
- resources whose type ends in ``-lookup`` only read (AMI id, AZs, account): they have no delete and no tags;
- a recorded resource whose create requests changed (see :func:`content_hash`) is reconciled by its
  ``identity``: the same identity and ``update`` requests given -> updated in place (dependents untouched); a
  new identity and ``create_before_delete`` -> the new object is made beside the old one, which is deleted once
  the apply is done (blue/green: SageMaker models and endpoint configs, whose names carry their content hash);
  otherwise -> deleted first and re-created, with everything that depends on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from neurondeploy import __version__
from neurondeploy.errors import PlanError
from neurondeploy.infra.refs import find_refs, ref

DEPLOYMENT_TAG = "neurondeploy:deployment"
MANAGED_BY_TAG = "neurondeploy:managed-by"
MANAGED_BY = "neurondeploy"

# Latest Neuron DLAMI that still ships PyTorch 2.9 + torch-neuronx (the 2.32 multi-framework DLAMI dropped
# torch-neuronx; facts §0). [NSDK] deploy/environments/dlami.rst, "SSM Parameter Prefix" (SDK 2.28-2.31 docs).
DLAMI_SSM_PARAMETER = "/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id"
DLAMI_NEURON_VENV = "/opt/aws_neuronx_venv_pytorch_2_9"  # same page, "Virtual Environments pre-installed"


@dataclass(frozen=True)
class Wait:
    """A botocore waiter the executor runs after a request, on ``service``'s client or the request's own."""

    waiter: str  # waiter name as in botocore's waiter model, PascalCase: "NatGatewayAvailable"
    params: dict
    service: str | None = None  # a waiter of another service (acm's CertificateValidated after a Route 53 change)


@dataclass(frozen=True)
class Request:
    service: str  # boto3 client name: ec2, elbv2, acm, route53, autoscaling, application-autoscaling, sagemaker, ...
    operation: str  # botocore operation name, PascalCase: "CreateVpc"
    params: dict  # exactly the kwargs boto3 gets
    outputs: dict[str, str] = field(default_factory=dict)  # attribute -> JMESPath into the response
    wait: Wait | None = None
    # JMESPath into the response -> the value it must have, else the request failed (an update AWS rolled back)
    expect: dict[str, Any] = field(default_factory=dict)
    # Deletes only: fragments of a refusal message that mean nothing is left to do (a job that already finished)
    done_if: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resource:
    name: str  # logical name unique in a deployment, [a-z0-9-]
    type: str  # "<service>:<kind>"
    create: tuple[Request, ...]
    delete: tuple[Request, ...]
    depends_on: tuple[str, ...]
    taggable: bool = True  # False for Route 53 records (ownership TXT record instead), lookups, associations
    hourly_usd: float | None = None  # non-instance infrastructure only; the planner prices instances itself
    description: str = ""
    # Literal values naming the AWS object and what cannot change in place (names, never refs). Empty: unknown,
    # so any change replaces it (delete first, then create).
    identity: tuple[str, ...] = ()
    update: tuple[Request, ...] = ()  # bring the object with the same identity to the new create requests' content
    create_before_delete: bool = False  # a new identity can exist beside the old one: make it first (blue/green)

    @property
    def is_lookup(self) -> bool:
        return self.type.endswith("-lookup")

    @property
    def outputs(self) -> set[str]:
        return {name for request in self.create for name in request.outputs}

    def refs(self) -> set[tuple[str, str]]:
        """Every ``(resource, attribute)`` its requests and waits use, its own outputs included."""
        parts = [(r.params, r.wait.params if r.wait else {}) for r in self.create + self.delete + self.update]
        return find_refs(parts)


def requests_hash(requests: Iterable[Request]) -> str:
    text = json.dumps([[r.service, r.operation, r.params] for r in requests], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def content_hash(resource: Resource) -> str:
    """What state records to tell a changed resource: the hash of its create requests, prefixed with a digest of
    its identity when it declares one (``<identity>:<requests>``), so reconcile can tell "same object, new
    content" (update in place) from "another object" (blue/green or replace)."""
    if not resource.identity:
        return requests_hash(resource.create)
    return f"{identity_digest(resource.identity)}:{requests_hash(resource.create)}"


def identity_digest(identity: Iterable[str]) -> str:
    return hashlib.sha256(json.dumps(list(identity)).encode()).hexdigest()[:16]


def recorded_identity(create_hash: str) -> str | None:
    """The identity digest of a recorded :func:`content_hash`; None for a resource recorded without one."""
    return create_hash.split(":", 1)[0] if ":" in create_hash else None


@dataclass(frozen=True)
class PlanContext:
    """What a builder needs beyond the spec; every field has an offline default so `plan` needs no AWS."""

    run_id: str = "run"  # training job suffix: given, so builders stay clock-free
    account_id: str | None = None  # None: a `sts:caller-identity-lookup` resource and ${account.Account} refs
    bucket: str | None = None  # None: the shared bucket neurondeploy-<account>-<region>
    artifact_s3_uri: str | None = None  # compiled artifact (.tar.gz); None: s3://<bucket>/<name>/artifact/model.tar.gz
    source_s3_uri: str | None = None  # training source archive; None: s3://<bucket>/<name>/source/sourcedir-<digest>.tar.gz
    source_digest: str | None = None  # of the packed source_dir: unchanged source, same object (and role prefix)
    serving_image_uri: str | None = None  # our serving container (container.kind neurondeploy on SageMaker)
    model_size_gib: float | None = None  # sizes SageMaker volumes when deployment.volume_gib is empty
    availability_zones: tuple[str, ...] = ()  # empty: the AZs offering the instance type, looked up at apply
    ami_id: str | None = None  # None: the DLAMI from ami_ssm_parameter, looked up once at apply
    ami_ssm_parameter: str = DLAMI_SSM_PARAMETER
    neuron_venv: str = DLAMI_NEURON_VENV
    install_requirement: str = f"neurondeploy=={__version__}"  # what pip installs on EC2 instances (or a wheel URL)


# --- names and tags ------------------------------------------------------------------------------------


def aws_name(spec, suffix: str, limit: int) -> str:
    """``<spec.name>-<suffix>``, refused when over a service's length limit (specs cap names at 24)."""
    name = f"{spec.name}-{suffix}" if suffix else spec.name
    if len(name) > limit:
        raise PlanError(f"AWS name {name!r} is {len(name)} characters; the limit is {limit}",
                        f"shorten the spec name to {limit - len(suffix) - 1} characters")
    return name


def content_suffix(params: Mapping) -> str:
    """8 hex characters of the params' hash: immutable SageMaker objects get a new name when they change."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def ownership_tags(spec, **extra: str) -> dict[str, str]:
    # Ours last: the spec refuses reserved prefixes, and ownership must never be overridden.
    return {**spec.tags, **extra, DEPLOYMENT_TAG: spec.name, MANAGED_BY_TAG: MANAGED_BY}


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def ec2_tags(spec, resource_type: str, name: str | None = None) -> list[dict]:
    """``TagSpecifications`` for an EC2 create call; ``Name`` shows in the console unless the spec sets it."""
    tags = ownership_tags(spec)
    if name and "Name" not in tags:
        tags = {"Name": name, **tags}
    return [{"ResourceType": resource_type, "Tags": tag_list(tags)}]


# --- regions, ARNs and S3 ------------------------------------------------------------------------------


def partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def account(ctx: PlanContext) -> str:
    return ctx.account_id or ref("account", "Account")


def bucket_name(region: str, ctx: PlanContext) -> str:
    # Shared across deployments (like SageMaker's sagemaker-<region>-<account>): holds training outputs that
    # must outlive `destroy`, so it is not a deployment resource (see deployment.shared_bucket_resource).
    return ctx.bucket or f"neurondeploy-{account(ctx)}-{region}"


def artifact_uri(spec, ctx: PlanContext) -> str:
    return ctx.artifact_s3_uri or f"s3://{bucket_name(spec.region, ctx)}/{spec.name}/artifact/model.tar.gz"


def source_uri(spec, ctx: PlanContext) -> str:
    archive = f"sourcedir-{ctx.source_digest or ctx.run_id}.tar.gz"
    return ctx.source_s3_uri or f"s3://{bucket_name(spec.region, ctx)}/{spec.name}/source/{archive}"


_S3 = re.compile(r"^s3://([^/]+)/?(.*)$")


def split_s3(uri: str) -> tuple[str, str]:
    match = _S3.match(uri)
    if not match:
        raise PlanError(f"{uri!r} is not an S3 URI", "write it as s3://bucket/prefix")
    return match[1], match[2]


def s3_prefix_arn(uri: str, region: str, *, parent: bool = False) -> str:
    """ARN of every object under ``uri`` (``parent``: under the directory holding the object ``uri``)."""
    bucket, key = split_s3(uri)
    if parent:
        key = key.rsplit("/", 1)[0] if "/" in key else ""
    key = key.strip("/")
    return f"arn:{partition(region)}:s3:::{bucket}/{key + '/' if key else ''}*"


def parent_uri(uri: str) -> str:
    """The "directory" holding the object ``uri``: s3://b/a/model.tar.gz -> s3://b/a/."""
    bucket, key = split_s3(uri)
    return f"s3://{bucket}/{key.rsplit('/', 1)[0] + '/' if '/' in key else ''}"


def s3_bucket_arn(uri: str, region: str) -> str:
    return f"arn:{partition(region)}:s3:::{split_s3(uri)[0]}"


# --- resource helpers ----------------------------------------------------------------------------------


def resource(name: str, type: str, create: Iterable[Request], delete: Iterable[Request] = (), *,
             after: Iterable[str] = (), taggable: bool = True, hourly_usd: float | None = None,
             description: str = "", identity: Iterable[str] = (), update: Iterable[Request] = (),
             create_before_delete: bool = False) -> Resource:
    """A Resource whose ``depends_on`` is every other resource its refs name, plus ``after`` (order only)."""
    draft = Resource(name, type, tuple(create), tuple(delete), (), taggable, hourly_usd, description, tuple(identity),
                     tuple(update), create_before_delete)
    if any(find_refs(value) for value in draft.identity):
        raise ValueError(f"{name}: identity must be literal values, not refs")
    needed = {res for res, _ in draft.refs() if res != name} | set(after)
    return dataclasses.replace(draft, depends_on=tuple(sorted(needed)))


def lookup(name: str, type: str, request: Request, description: str) -> Resource:
    """A read done once at apply (AMI id, AZs, account), kept in state so every later request agrees."""
    if not type.endswith("-lookup"):
        raise ValueError(f"lookup type {type!r} must end in -lookup")
    return resource(name, type, [request], (), taggable=False, description=description)


def account_lookup() -> Resource:
    return lookup("account", "sts:caller-identity-lookup",
                  Request("sts", "GetCallerIdentity", {}, {"Account": "Account"}),
                  "The account id (sts GetCallerIdentity), for bucket names and ARNs; reads only.")


def with_lookups(resources: list[Resource]) -> list[Resource]:
    """Add the account lookup when some request uses ``${account.Account}`` and nothing provides it."""
    names = {r.name for r in resources}
    if "account" not in names and any(res == "account" for r in resources for res, _ in r.refs()):
        return [account_lookup(), *resources]
    return resources


# --- checks and order -----------------------------------------------------------------------------------


def check_resources(resources: Iterable[Resource]) -> list[str]:
    """Structural problems: duplicate or malformed names, unknown dependencies, refs to resources not
    depended on (transitively) or to attributes no request outputs, and dependency cycles."""
    resources = list(resources)
    problems: list[str] = []
    by_name: dict[str, Resource] = {}
    for r in resources:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", r.name):
            problems.append(f"{r.name}: name must match [a-z0-9][a-z0-9-]*")
        if r.name in by_name:
            problems.append(f"{r.name}: defined twice")
        by_name[r.name] = r
    for r in resources:
        for dep in r.depends_on:
            if dep not in by_name:
                problems.append(f"{r.name}: depends on unknown resource {dep}")
    closure = _closures(by_name)
    for r in resources:
        for res, attr in sorted(r.refs()):
            if res not in by_name:
                problems.append(f"{r.name}: ${{{res}.{attr}}} names no resource")
                continue
            if res != r.name and res not in closure.get(r.name, set()):
                problems.append(f"{r.name}: uses ${{{res}.{attr}}} but does not depend on {res}")
            if attr not in by_name[res].outputs:
                problems.append(f"{r.name}: ${{{res}.{attr}}}: {res} outputs only {sorted(by_name[res].outputs)}")
    try:
        creation_order(resources)
    except PlanError as exc:
        problems.append(exc.message)
    return problems


def _closures(by_name: Mapping[str, Resource]) -> dict[str, set[str]]:
    result: dict[str, set[str]] = {}
    for name in by_name:
        seen: set[str] = set()
        stack = list(by_name[name].depends_on)
        while stack:
            dep = stack.pop()
            if dep in seen or dep not in by_name:
                continue
            seen.add(dep)
            stack.extend(by_name[dep].depends_on)
        result[name] = seen
    return result


def creation_order(resources: Iterable[Resource]) -> list[Resource]:
    """Dependencies first; ties keep the builders' order. Raises PlanError on a cycle."""
    resources = list(resources)
    by_name = {r.name: r for r in resources}
    order: list[Resource] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(r: Resource, path: tuple[str, ...]) -> None:
        if state.get(r.name) == 2:
            return
        if state.get(r.name) == 1:
            cycle = " -> ".join(path[path.index(r.name):] + (r.name,))
            raise PlanError(f"dependency cycle: {cycle}", "this is a bug in a request builder")
        state[r.name] = 1
        for dep in r.depends_on:
            if dep in by_name:
                visit(by_name[dep], path + (r.name,))
        state[r.name] = 2
        order.append(r)

    for r in resources:
        visit(r, ())
    return order


# --- outputs --------------------------------------------------------------------------------------------


def extract_outputs(request: Request, response: Mapping[str, Any]) -> dict[str, Any]:
    """``request.outputs`` evaluated on ``response``. JMESPath gains one function, ``after(s, sep)``: the
    text after the first ``sep`` (the ALB/target-group "full names" that autoscaling needs are ARN tails)."""
    import jmespath
    from jmespath import functions

    class _Functions(functions.Functions):
        @functions.signature({"types": ["string", "null"]}, {"types": ["string"]})
        def _func_after(self, text, separator):
            if text is None or separator not in text:
                return None
            return text.split(separator, 1)[1]

    options = jmespath.Options(custom_functions=_Functions())
    return {name: jmespath.search(expression, response, options=options) for name, expression in request.outputs.items()}
