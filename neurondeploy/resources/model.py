"""Resources as data: what `apply` creates and `destroy` deletes, as exact boto3 requests.

Builders are pure: they take a spec and a :class:`PlanContext` and return :class:`Resource` objects. IDs
that exist only after an earlier request are ``${resource.Attribute}`` refs (:mod:`neurondeploy.resources.refs`);
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from neurondeploy import __version__, catalog
from neurondeploy.resources.refs import find_refs
from neurondeploy.resources.tags import STATE, with_resource_tag

# The DLAMI EC2 instances boot and its PyTorch environment: catalogue data (data/dlami.yaml, with sources).
DLAMI_SSM_PARAMETER = catalog.DEFAULT_DLAMI_PARAMETER
DLAMI_NEURON_VENV = catalog.dlami(DLAMI_SSM_PARAMETER).venv


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
    # Deletes only: the create request (1-based) this delete undoes; sent only once that request completed, so a
    # half-made resource is not asked to undo a step it never took (a role never added to its instance profile)
    undoes: int | None = None
    # Updates only: JMESPath into the resource's first create request; the request is sent only when the value
    # there changed since the last apply (an instance refresh only when what instances boot changed)
    when: str | None = None


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
    artifact_sha256: str | None = None  # of the packed artifact; instances boot with it, so a new one rolls them
    source_s3_uri: str | None = (
        None  # training source archive; None: s3://<bucket>/<name>/source/sourcedir-<digest>.tar.gz
    )
    source_digest: str | None = None  # of the packed source_dir: unchanged source, same object (and role prefix)
    serving_image_uri: str | None = None  # our serving container (container.kind neurondeploy on SageMaker)
    model_size_gib: float | None = None  # sizes SageMaker volumes when deployment.volume_gib is empty
    # hf-vllm / hf-tgi: the S3 prefix `compile --remote` exported the model to, and its size in bytes (the load
    # budget); None: the container starts from the Hugging Face Neuron cache's configuration, or refuses to
    precompiled_model_uri: str | None = None
    precompiled_model_bytes: int | None = None
    availability_zones: tuple[str, ...] = ()  # empty: the AZs offering the instance type, looked up at apply
    ami_id: str | None = None  # None: the DLAMI from ami_ssm_parameter, looked up once at apply
    ami_ssm_parameter: str = DLAMI_SSM_PARAMETER
    neuron_venv: str = DLAMI_NEURON_VENV
    # The exact build EC2 instances install (neurondeploy.wheel): its sha256 and its constraints file's, filled by the
    # planner's plan_context; it is uploaded beside the artifact, under toolkit-<sha256[:16]>/.
    toolkit_wheel: str = f"neurondeploy-{__version__}-py3-none-any.whl"
    toolkit_sha256: str | None = None
    toolkit_constraints_sha256: str | None = None
    toolkit_boto3: str = "boto3"  # pip requirement for the download step when the host's venv lacks boto3


# --- names and tags ------------------------------------------------------------------------------------


# --- regions, ARNs and S3 ------------------------------------------------------------------------------


# --- resource helpers ----------------------------------------------------------------------------------


def resource(
    name: str,
    type: str,
    create: Iterable[Request],
    delete: Iterable[Request] = (),
    *,
    after: Iterable[str] = (),
    taggable: bool = True,
    hourly_usd: float | None = None,
    description: str = "",
    identity: Iterable[str] = (),
    update: Iterable[Request] = (),
    create_before_delete: bool = False,
) -> Resource:
    """A Resource whose ``depends_on`` is every other resource its refs name, plus ``after`` (order only).
    Every deployment tag in its create requests gets a ``neurondeploy:resource=<name>`` tag beside it."""
    create = [dataclasses.replace(r, params=with_resource_tag(r.params, name)) for r in create]
    update = [dataclasses.replace(r, params=with_resource_tag(r.params, name)) for r in update]
    draft = Resource(
        name,
        type,
        tuple(create),
        tuple(delete),
        (),
        taggable,
        hourly_usd,
        description,
        tuple(identity),
        tuple(update),
        create_before_delete,
    )
    if any(find_refs(value) for value in draft.identity):
        raise ValueError(f"{name}: identity must be literal values, not refs")
    needed = {res for res, _ in draft.refs() if res not in (name, STATE)} | set(after)
    return dataclasses.replace(draft, depends_on=tuple(sorted(needed)))


def lookup(name: str, type: str, request: Request, description: str) -> Resource:
    """A read done once at apply (AMI id, AZs, account), kept in state so every later request agrees."""
    if not type.endswith("-lookup"):
        raise ValueError(f"lookup type {type!r} must end in -lookup")
    return resource(name, type, [request], (), taggable=False, description=description)


def account_lookup() -> Resource:
    return lookup(
        "account",
        "sts:caller-identity-lookup",
        Request("sts", "GetCallerIdentity", {}, {"Account": "Account"}),
        "The account id (sts GetCallerIdentity), for bucket names and ARNs; reads only.",
    )


def with_lookups(resources: list[Resource]) -> list[Resource]:
    """Add the account lookup when some request uses ``${account.Account}`` and nothing provides it."""
    names = {r.name for r in resources}
    if "account" not in names and any(res == "account" for r in resources for res, _ in r.refs()):
        return [account_lookup(), *resources]
    return resources


# --- checks and order -----------------------------------------------------------------------------------


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
    return {
        name: jmespath.search(expression, response, options=options) for name, expression in request.outputs.items()
    }
