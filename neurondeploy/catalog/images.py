"""Neuron container images: ECR accounts (from sagemaker-core's data files) and known tags (data/images.yaml)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from neurondeploy.catalog._data import load, minor, unknown, version_tuple
from neurondeploy.errors import CatalogError

INSTALL_HINT = "pip install 'neurondeploy[images]'"


@dataclass(frozen=True)
class ImageTag:
    purpose: str
    repository: str
    tag: str
    sdk: str | None  # Neuron SDK version the image ships; None when the facts do not say
    source: str
    confirmed: bool


@cache
def _config_dir() -> Path:
    """sagemaker-core's image_uri_config directory, found without importing sagemaker (slow)."""
    from importlib import metadata

    try:
        path = Path(str(metadata.distribution("sagemaker-core").locate_file("sagemaker/core/image_uri_config")))
    except metadata.PackageNotFoundError:
        raise CatalogError(
            "container image accounts need sagemaker-core's image_uri_config data, which is not installed",
            INSTALL_HINT,
        ) from None
    if not path.is_dir():
        raise CatalogError(f"sagemaker-core is installed but has no image_uri_config at {path}", INSTALL_HINT)
    return path


@cache
def _registries(file: str, scope: str | None = None) -> dict[str, str]:
    """region -> account, the union of every ``registries`` map in ``file`` (under ``scope`` if given)."""
    data = json.loads((_config_dir() / file).read_text(encoding="utf-8"))
    if scope is not None:
        data = data[scope]
    found: dict[str, str] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for region, account in node.get("registries", {}).items():
                if found.setdefault(region, account) != account:
                    raise CatalogError(f"{file} gives two ECR accounts for {region}", "report this data conflict")
            for key, value in node.items():
                if key != "registries":
                    walk(value)

    walk(data)
    return found


def _images() -> dict:
    return load("images")["images"]


def _supported(region: str) -> bool:
    return not region.startswith(tuple(load("images")["domains"]["unsupported_prefixes"]))


def _merge(maps: list[dict[str, str]]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for m in maps:
        for region, account in m.items():
            if _supported(region) and merged.setdefault(region, account) != account:
                raise CatalogError(
                    f"two Neuron DLC accounts for {region}: {merged[region]}, {account}", "report this data conflict"
                )
    return merged


@cache
def dlc_accounts() -> dict[str, str]:
    """region -> Neuron DLC account, from sagemaker-core's Neuron image configs (data/images.yaml lists them)."""
    return _merge([_registries(f) for f in load("images")["dlc_account_files"]])


@cache
def image_accounts(purpose: str) -> dict[str, str]:
    """region -> account for one image purpose (training, inference, tgi, vllm)."""
    spec = _spec(purpose)
    return _merge([_registries(src["file"], src.get("scope")) for src in spec["accounts_from"]])


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
    """Known tags for ``purpose``, oldest SDK first (tags without an SDK version keep file order, first)."""
    spec = _spec(purpose)
    tags = [
        ImageTag(purpose, spec["repository"], row["tag"], row["sdk"], row["source"], row["confirmed"])
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
            known = ", ".join(f"{t.tag} (SDK {t.sdk or 'not recorded'})" for t in tags)
            last = spec.get("last_sdk")
            why = (
                f"; {spec['repository']} is not published after SDK {last} ({spec['last_sdk_source']})"
                if last and minor(sdk_version) > minor(last)
                else ""
            )
            raise CatalogError(
                f"no known {spec['repository']} tag for Neuron SDK {sdk_version}{why}",
                f"use one of the known tags: {known}",
            )
        chosen = found[-1]
    accounts = image_accounts(purpose)
    _check_partition(region)
    if region not in accounts:
        raise CatalogError(
            f"{spec['repository']} is not published in region {region!r}",
            "use one of the regions it is published in: " + ", ".join(sorted(accounts)),
        )
    return image_uri(spec["repository"], region, chosen.tag)
