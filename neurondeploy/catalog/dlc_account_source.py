"""Where ``data/dlc_account_tags.yaml`` comes from: AWS's own list of the Deep Learning Container images published
in the accounts SageMaker pulls from, aws/deep-learning-containers ``docs/src/data/<repository>/*.yml`` (each file
one image line, ``tags:`` its tags; the list behind available_images.md). The Neuron repository's README (what
``data/dlc_releases.yaml`` is read from) lists images on public ECR as well, and not every tag there is in the DLC
account (2.27.0's pytorch-training-neuronx is not): a SageMaker job or endpoint can pull only what this list has.
Regenerate from a clone of that repository:

    python -m neurondeploy.catalog.dlc_account_source REPO_DIR > neurondeploy/catalog/data/dlc_account_tags.yaml

``tests/unit/test_dlc_account.py`` checks the file against a clone where ``AWS_DLC_REPO`` names one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from neurondeploy.catalog.dlc_releases_source import run_git

# The repositories a SageMaker job or endpoint of ours pulls from the DLC account.
REPOSITORIES = ("pytorch-training-neuronx", "pytorch-inference-neuronx", "huggingface-vllm-inference-neuronx")
DATA_DIR = "docs/src/data"


def listed_tags(repo: Path) -> dict:
    """{"commit", "repositories": {repository: sorted tags}} as the list at the clone's HEAD has them."""
    commit = run_git(repo, "rev-parse", "HEAD").strip()
    repositories = {}
    for repository in REPOSITORIES:
        names = run_git(repo, "ls-tree", "--name-only", "HEAD", f"{DATA_DIR}/{repository}/").split()
        tags = set()
        for name in names:
            if name.endswith((".yml", ".yaml")):
                tags |= set(yaml.safe_load(run_git(repo, "show", f"HEAD:{name}")).get("tags") or [])
        repositories[repository] = sorted(tags)
    return {"commit": commit, "repositories": repositories}


def render(repo: Path) -> str:
    found = listed_tags(repo)
    head = (
        "# The Deep Learning Container tags in the accounts SageMaker pulls from, as AWS lists them. GENERATED from\n"
        f"# github.com/aws/deep-learning-containers @ {found['commit'][:12]}: {DATA_DIR}/<repository>/*.yml, tags.\n"
        "# Do not edit by hand: python -m neurondeploy.catalog.dlc_account_source REPO_DIR > "
        "neurondeploy/catalog/data/dlc_account_tags.yaml\n"
    )
    return head + yaml.safe_dump(found, sort_keys=False)


def main(arguments: list[str]) -> int:
    if len(arguments) != 1:
        print("usage: python -m neurondeploy.catalog.dlc_account_source REPO_DIR", file=sys.stderr)
        return 2
    sys.stdout.write(render(Path(arguments[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
