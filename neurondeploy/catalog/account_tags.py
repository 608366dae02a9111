"""Whether an image tag is in the Deep Learning Container account SageMaker pulls from (data/dlc_account_tags.yaml,
AWS's own list: catalog/dlc_account_source.py). The list starts at a release (2.23.0 for the Neuron PyTorch images):
an older tag is neither confirmed nor refused by it."""

from __future__ import annotations

import re
from functools import cache

from neurondeploy.catalog._data import load, version_tuple

_SDK = re.compile(r"-sdk(\d+\.\d+\.\d+)-")
LIST_SOURCE = "aws/deep-learning-containers docs/src/data/{repository}"


@cache
def listed_tags(repository: str) -> tuple[str, ...] | None:
    """The tags AWS lists for ``repository`` in the DLC account, or None when the list does not cover it."""
    tags = load("dlc_account_tags")["repositories"].get(repository)
    return tuple(tags) if tags is not None else None


def _sdk_of(tag: str) -> str | None:
    found = _SDK.search(tag)
    return found[1] if found else None


def sagemaker_pull_problem(repository: str, tag: str) -> str | None:
    """Why SageMaker cannot pull ``repository:tag`` from the DLC account, or None (listed, or older than the list)."""
    tags = listed_tags(repository)
    if tags is None or tag in tags:
        return None
    sdks = [version_tuple(sdk) for sdk in map(_sdk_of, tags) if sdk]
    sdk = _sdk_of(tag)
    if sdk is None or not sdks or version_tuple(sdk) < min(sdks):
        return None  # before the list begins: it says nothing of this tag
    commit = load("dlc_account_tags")["commit"][:8]
    return (
        f"its {repository} tag {tag} is not in the DLC account SageMaker pulls from (AWS's list, "
        f"{LIST_SOURCE.format(repository=repository)} @ {commit}, has {', '.join(_sdk_of(t) or t for t in tags[-4:])} "
        "of that line): it is on public ECR only"
    )
