"""An image in the account's own ECR (our serving image, the wrapper of infra/hf-secrets, a custom training image):
the exact commands that build it and put it where the spec says, for that account and region. Pure: `plan` lists
them before apply, and apply, `compile --remote` and `train` name them when ``DescribeImages`` finds the image
missing.

SageMaker pulls a model's or a job's image only from a private ECR registry
(https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-containers-inference-private.html), so an image
on a public registry is wrapped and pushed; AWS's Deep Learning Containers are in AWS's accounts and pulled as
they are.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from neurondeploy import catalog
from neurondeploy.errors import CatalogError
from neurondeploy.resources.release import wrapper_base
from neurondeploy.resources.sagemaker_endpoint import SERVING_REPOSITORY, image_repository
from neurondeploy.specs import TrainingSpec

ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/(?P<repository>[^:@]+)"
    r"(?::(?P<tag>[^@]+))?(?:@(?P<digest>.+))?$"
)
SERVING_DOCKERFILE = "infra/serving/Dockerfile"
WRAPPER_DOCKERFILE = "infra/hf-secrets/Dockerfile"


@dataclass(frozen=True)
class EcrImage:
    uri: str
    account: str
    region: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def registry(self) -> str:
        return self.uri.split("/", 1)[0]

    @property
    def image_id(self) -> dict[str, str]:
        """What ``DescribeImages`` looks the image up by."""
        return {"imageDigest": self.digest} if self.digest else {"imageTag": self.tag or "latest"}


def ecr_image(uri: str) -> EcrImage | None:
    """``uri`` as a private ECR image, or None (a public registry, Docker Hub...)."""
    match = ECR_IMAGE.match(uri)
    if match is None:
        return None
    return EcrImage(uri, match["account"], match["region"], match["repository"], match["tag"], match["digest"])


def _login(registry: str, region: str) -> str:
    return f"aws ecr get-login-password --region {region} | docker login --username AWS --password-stdin {registry}"


def push_commands(image: EcrImage, *, dockerfile: str | None, build_args: dict[str, str] | None = None) -> list[str]:
    """``docker build`` (in a checkout of neurondeploy, the build context its Dockerfiles copy from), ``docker tag``
    to the spec's URI, the repository made if missing, the login to it and ``docker push``. ``dockerfile`` None: the
    user's own image, built from their directory. A base image in an ECR registry (a DLC) needs its own login to be
    pulled; public.ecr.aws does not."""
    local = f"{image.repository}:{image.tag or 'latest'}"
    commands = []
    base = (build_args or {}).get("BASE_IMAGE")
    base_image = ecr_image(base) if base else None
    if base_image is not None:
        commands.append(_login(base_image.registry, base_image.region))
    arguments = " ".join(f"--build-arg {key}={shlex.quote(value)}" for key, value in (build_args or {}).items())
    source = f"-f {dockerfile} " if dockerfile else ""
    commands.append(
        f"docker build {source}{arguments + ' ' if arguments else ''}-t {local} {'.' if dockerfile else 'DIR'}"
    )
    target = (
        image.uri if not image.digest else f"{image.uri.split('@', 1)[0].rsplit(':', 1)[0]}:{image.tag or 'latest'}"
    )
    region = f"--region {image.region}"
    commands += [
        f"docker tag {local} {target}",
        f"(aws ecr describe-repositories --repository-names {image.repository} {region} >/dev/null || "
        f"aws ecr create-repository --repository-name {image.repository} {region})",
        _login(image.registry, image.region),
        f"docker push {target}",
    ]
    if image.digest:  # a digest is what the push makes, not something to choose
        commands.append("then set image_uri to the digest docker push printed")
    return commands


@dataclass(frozen=True)
class ImageToPush:
    field: str  # the spec field naming it
    image: EcrImage
    commands: tuple[str, ...]
    what: str  # "neurondeploy's serving image", "the vllm-neuron wrapper", "your training image"


def aws_account(account: str) -> bool:
    """An account AWS publishes images from (the DLCs, the Hugging Face containers): nothing of ours to push."""
    known = set(catalog.dlc_accounts().values())
    for purpose in catalog.image_purposes():
        known |= set(catalog.image_accounts(purpose).values())
    return account in known


def image_to_push(spec, image_uri: str) -> ImageToPush | None:
    """The image of ``spec`` (``image_uri``: what its endpoint or job runs) that must be in the account's ECR
    before it runs, with the commands that put it there; None for AWS's own images."""
    image = ecr_image(image_uri)
    if image is None or aws_account(image.account):
        return None
    if isinstance(spec, TrainingSpec):
        return ImageToPush("image_uri", image, tuple(push_commands(image, dockerfile=None)), "the training image")
    field = "deployment.container.image_uri"
    kind = spec.container
    if kind.ours and image_repository(image_uri) == SERVING_REPOSITORY:
        commands = push_commands(image, dockerfile=SERVING_DOCKERFILE)
        return ImageToPush(field, image, tuple(commands), "neurondeploy's serving image")
    if kind.ours:
        return ImageToPush(field, image, tuple(push_commands(image, dockerfile=None)), "your serving image")
    try:
        base = wrapper_base(spec)
    except CatalogError:
        base = None  # check_sdk says why
    arguments = {"BASE_IMAGE": base or "BASE", "HF_ENTRYPOINT": kind.wrapper_entrypoint or "ENTRYPOINT"}
    commands = push_commands(image, dockerfile=WRAPPER_DOCKERFILE, build_args=arguments)
    return ImageToPush(field, image, tuple(commands), f"the {kind.name} wrapper (infra/hf-secrets)")
