"""Where ``data/image_accounts.yaml`` comes from: sagemaker-core's ``image_uri_config`` JSON files.

The planner reads the generated YAML, so a bare ``pip install neurondeploy`` plans without sagemaker-core (which
pulls pandas, scipy, paramiko...). This module regenerates that file from an installed sagemaker-core, and
``tests/unit/test_catalog.py`` checks, where sagemaker-core is installed, that the file still says what it says:

    python -m neurondeploy.catalog.image_accounts_source > neurondeploy/catalog/data/image_accounts.yaml
"""

from __future__ import annotations

import json
from pathlib import Path

from neurondeploy.catalog._data import load
from neurondeploy.errors import CatalogError

INSTALL_HINT = "pip install sagemaker-core (only needed to regenerate the catalogue's image accounts)"


def config_dir() -> Path:
    """sagemaker-core's image_uri_config directory, found without importing sagemaker (slow)."""
    from importlib import metadata

    try:
        distribution = metadata.distribution("sagemaker-core")
    except metadata.PackageNotFoundError:
        raise CatalogError("sagemaker-core is not installed", INSTALL_HINT) from None
    path = Path(str(distribution.locate_file("sagemaker/core/image_uri_config")))
    if not path.is_dir():
        raise CatalogError(f"sagemaker-core is installed but has no image_uri_config at {path}", INSTALL_HINT)
    return path


def sagemaker_core_version() -> str:
    from importlib import metadata

    return metadata.version("sagemaker-core")


def registries(root: Path, file: str, scope: str | None = None) -> dict[str, str]:
    """region -> account, the union of every ``registries`` map in ``file`` (under ``scope`` if given)."""
    data = json.loads((root / file).read_text(encoding="utf-8"))
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


def merge(maps: list[dict[str, str]], unsupported_prefixes: tuple[str, ...]) -> dict[str, str]:
    """One region -> account map; the isolated partitions, which neurondeploy refuses, are left out."""
    merged: dict[str, str] = {}
    for mapping in maps:
        for region, account in mapping.items():
            if region.startswith(unsupported_prefixes):
                continue
            if merged.setdefault(region, account) != account:
                raise CatalogError(
                    f"two Neuron DLC accounts for {region}: {merged[region]}, {account}", "report this data conflict"
                )
    return dict(sorted(merged.items()))


def accounts_from_sagemaker_core(root: Path | None = None) -> dict:
    """The content of ``data/image_accounts.yaml``, derived as ``data/images.yaml`` says (which files, scopes)."""
    root = root or config_dir()
    spec = load("images")
    unsupported = tuple(spec["domains"]["unsupported_prefixes"])
    return {
        "dlc": merge([registries(root, file) for file in spec["dlc_account_files"]], unsupported),
        "purposes": {
            purpose: merge(
                [registries(root, src["file"], src.get("scope")) for src in image["accounts_from"]], unsupported
            )
            for purpose, image in spec["images"].items()
        },
    }


def render_yaml(accounts: dict, version: str) -> str:
    import yaml

    header = (
        "# ECR accounts per region for the Neuron container images, GENERATED from sagemaker-core\n"
        f"# {version}'s sagemaker/core/image_uri_config/*.json ([SMSDK] sagemaker-core/src/sagemaker/core/\n"
        "# image_uri_config/) as data/images.yaml says (dlc_account_files, accounts_from). Do not edit by hand:\n"
        "#   python -m neurondeploy.catalog.image_accounts_source > neurondeploy/catalog/data/image_accounts.yaml\n"
        "# tests/unit/test_catalog.py fails when an installed sagemaker-core says otherwise.\n"
    )
    body = {"source": f"[SMSDK] sagemaker-core {version} image_uri_config", **accounts}
    return header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


if __name__ == "__main__":
    print(render_yaml(accounts_from_sagemaker_core(), sagemaker_core_version()), end="")
