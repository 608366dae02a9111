"""Neuron container images: ECR accounts (data/image_accounts.yaml, generated from sagemaker-core's data files by
``image_accounts_source``) and known tags (data/images.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from neurondeploy.catalog._data import load, minor, unknown, version_tuple
from neurondeploy.catalog.dlc_releases import DLC_REPOSITORY, dlc_releases
from neurondeploy.catalog.vllm_releases import IMAGE_FAMILY, vllm_releases
from neurondeploy.errors import CatalogError


@dataclass(frozen=True)
class ImageTag:
    purpose: str
    repository: str
    tag: str
    sdk: str | None  # Neuron SDK version the image ships; None when the facts do not say
    source: str
    confirmed: bool
    # model_type values (config.json) its optimum-neuron serves for text-generation; empty: not catalogued
    text_generation_models: tuple[str, ...] = ()
    # instance families the image lists (the vLLM Neuron rows); empty: every Neuron family the catalogue knows
    instances: tuple[str, ...] = ()

    def serves(self, family: str) -> bool:
        return not self.instances or IMAGE_FAMILY.get(family, family) in self.instances


def _images() -> dict:
    return load("images")["images"]


def _supported(region: str) -> bool:
    return not region.startswith(tuple(load("images")["domains"]["unsupported_prefixes"]))


@cache
def dlc_accounts() -> dict[str, str]:
    """region -> Neuron DLC account (the union of sagemaker-core's Neuron image configs, data/images.yaml lists them)."""
    return dict(load("image_accounts")["dlc"])


@cache
def image_accounts(purpose: str) -> dict[str, str]:
    """region -> account for one image purpose (training, inference, tgi, vllm); none for an image published on
    a public registry only (vllm-neuron)."""
    _spec(purpose)
    return dict(load("image_accounts")["purposes"].get(purpose, {}))


def frozen_at(purpose: str) -> tuple[str, str] | None:
    """(the last Neuron SDK release, the source saying no later image is coming) for an image line that stopped;
    None for a maintained one."""
    spec = _spec(purpose)
    return (spec["frozen_at"], spec["frozen_source"]) if spec.get("frozen_at") else None


def public_registry(purpose: str) -> str | None:
    """Where an image published only on a public registry is (``public.ecr.aws/neuron``); None for the others."""
    return _spec(purpose).get("public_registry")


def _spec(purpose: str) -> dict:
    try:
        return _images()[purpose]
    except KeyError:
        raise unknown("image purpose", purpose, _images()) from None


def image_purposes() -> tuple[str, ...]:
    return tuple(_images())


def image_regions(purpose: str) -> tuple[str, ...]:
    return tuple(sorted(image_accounts(purpose)))


def _check_partition(region: str) -> None:
    if not _supported(region):
        raise CatalogError(
            f"region {region!r} is in an isolated AWS partition that neurondeploy does not support",
            "use a commercial or China region",
        )


def dlc_account(region: str) -> str:
    """The ECR account that publishes Neuron DLCs in ``region``."""
    _check_partition(region)
    try:
        return dlc_accounts()[region]
    except KeyError:
        raise unknown("region for Neuron containers", region, dlc_accounts()) from None


def _domain(region: str) -> str:
    domains = load("images")["domains"]
    for prefix, domain in domains["by_prefix"].items():
        if region.startswith(prefix):
            return domain
    return domains["default"]


def image_uri(repository: str, region: str, tag: str) -> str:
    """``<account>.dkr.ecr.<region>.<domain>/<repository>:<tag>``; the account is the repository's own map when known."""
    _check_partition(region)
    purposes = [p for p, spec in _images().items() if spec["repository"] == repository]
    accounts = image_accounts(purposes[0]) if purposes else dlc_accounts()
    if region not in accounts:
        raise unknown(f"region for {repository}", region, accounts)
    return f"{accounts[region]}.dkr.ecr.{region}.{_domain(region)}/{repository}:{tag}"


def known_tags(purpose: str) -> tuple[ImageTag, ...]:
    """Known tags for ``purpose``, oldest SDK first (tags without an SDK version keep file order, first); within
    one SDK release, the newest torch last. The Neuron DLCs' come from the release matrix (``tags_from``)."""
    spec = _spec(purpose)
    if spec.get("tags_from") == "vllm_releases":
        tags = [
            ImageTag(
                purpose,
                row.repository,
                row.tag,
                row.sdk,
                f"{DLC_REPOSITORY} README.md; {row.source}",
                True,
                instances=row.instances,
            )
            for row in vllm_releases()
        ]
    elif spec.get("tags_from") == "dlc_releases":
        tags = [
            ImageTag(purpose, row.repository, row.tag, row.sdk, f"{DLC_REPOSITORY} README.md; {row.source}", True)
            for row in dlc_releases()
            if row.repository == spec["repository"]
        ]
    else:
        tags = [
            ImageTag(
                purpose,
                spec["repository"],
                row["tag"],
                row["sdk"],
                row["source"],
                row["confirmed"],
                tuple(row.get("text_generation_models", ())),
            )
            for row in spec["tags"]
        ]
    return tuple(sorted(tags, key=lambda t: version_tuple(t.sdk) if t.sdk else ()))


def _matches(tag_sdk: str | None, wanted: str) -> bool:
    if tag_sdk is None:
        return False
    if len(version_tuple(wanted)) == 2:  # "2.26" matches any 2.26.x
        return minor(tag_sdk) == minor(wanted)
    return version_tuple(tag_sdk) == version_tuple(wanted)


def neuron_image(purpose: str, region: str, sdk_version: str | None = None) -> str:
    """The image URI for ``purpose`` in ``region``: the tag for ``sdk_version`` or the newest known tag."""
    spec = _spec(purpose)
    tags = known_tags(purpose)
    if sdk_version is None:
        chosen = tags[-1]
    else:
        found = [t for t in tags if _matches(t.sdk, sdk_version)]
        if not found:
            sdks = list(dict.fromkeys(t.sdk for t in tags if t.sdk))
            known = (
                "a Neuron SDK release with an image: " + ", ".join(sdks)
                if sdks
                else "one of the known tags: " + ", ".join(f"{t.tag} (SDK not recorded)" for t in tags)
            )
            last = spec.get("last_sdk")
            why = (
                f"; {spec['repository']} is not published after SDK {last} ({spec['last_sdk_source']})"
                if last and minor(sdk_version) > minor(last)
                else ""
            )
            raise CatalogError(
                f"no known {spec['repository']} tag for Neuron SDK {sdk_version}{why}",
                f"use {known}",
            )
        chosen = found[-1]
    if public_registry(purpose):
        return f"{public_registry(purpose)}/{spec['repository']}:{chosen.tag}"
    accounts = image_accounts(purpose)
    _check_partition(region)
    if region not in accounts:
        raise CatalogError(
            f"{spec['repository']} is not published in region {region!r}",
            "use one of the regions it is published in: " + ", ".join(sorted(accounts)),
        )
    return image_uri(spec["repository"], region, chosen.tag)
