"""Where ``data/dlc_releases.yaml`` comes from: the Neuron deep learning containers repository
(github.com/aws-neuron/deep-learning-containers), its README's image tables and each row's Dockerfile at the git tag
the row links to. One row per (repository, Neuron SDK release): the image tag, and what the image runs (Python,
Ubuntu, torch, torch-neuronx, neuronx-cc, TorchServe, the SageMaker inference toolkit), read from the Dockerfile's
``ARG`` lines. The planner reads the generated YAML; regenerate it from a clone of that repository:

    python -m neurondeploy.catalog.dlc_releases_source REPO_DIR > neurondeploy/catalog/data/dlc_releases.yaml

``tests/unit/test_dlc_releases.py`` checks the rows against each other always, and against the repository where
``NEURON_DLC_REPO`` names a clone of it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from neurondeploy.errors import CatalogError

REPOSITORIES = ("pytorch-inference-neuronx", "pytorch-training-neuronx")
# A README table row: | [PyTorch X](https://github.com/aws-neuron/deep-learning-containers/blob/TAG/PATH) | packages |
# Neuron SDK | instance types | Python | image URI | extra
_ROW = re.compile(
    r"^\|\s*\[PyTorch [^\]]+\]\(https://github\.com/aws-neuron/deep-learning-containers/blob/([^/]+)/([^)]+)\)"
)
_TAG = re.compile(r"^(?P<torch>[\d.]+)-neuronx-py(?P<py>\d+)-sdk(?P<sdk>[\d.]+)-ubuntu(?P<ubuntu>[\d.]+)$")
# Dockerfile ARG -> the row's field
_ARGS = {
    "PYTHON_VERSION": "python",
    "TORCHSERVE_VERSION": "torchserve",
    "SM_TOOLKIT_VERSION": "sagemaker_toolkit",
    "NEURONX_CC_VERSION": "neuronx_cc",
    "NEURONX_FRAMEWORK_VERSION": "torch_neuronx",
    "NEURONX_DISTRIBUTED_VERSION": "neuronx_distributed",
    "NEURONX_DISTRIBUTED_INFERENCE_VERSION": "neuronx_distributed_inference",
    "NEURONX_DISTRIBUTED_TRAINING_VERSION": "neuronx_distributed_training",
}


def _git(repo: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise CatalogError(
            f"git {' '.join(args)} in {repo}: {detail.strip()}", "give a clone of the repository"
        ) from None


def _section(readme: str, repository: str) -> list[str]:
    lines = readme.splitlines()
    start = lines.index(f"### {repository}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("### ")), len(lines))
    return lines[start:end]


def releases(repo: Path) -> list[dict]:
    """Every row of the README's pytorch-inference-neuronx and pytorch-training-neuronx tables at HEAD, with
    what its Dockerfile (at the row's tag) says the image runs."""
    readme = _git(repo, "show", "HEAD:README.md")
    rows = []
    for repository in REPOSITORIES:
        for line in _section(readme, repository):
            link = _ROW.match(line)
            if not link:
                continue
            git_tag, path = link.groups()
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            image = cells[5]
            tag = image.rsplit(":", 1)[1]
            parsed = _TAG.match(tag)
            if not parsed:
                continue  # not a Neuron SDK 2.x image tag (none at the time of writing)
            dockerfile = _git(repo, "show", f"{git_tag}:{path}")
            args = dict(re.findall(r"^ARG ([A-Z_]+)=(\S+)", dockerfile, re.MULTILINE))
            ubuntu = re.search(r"^FROM \S*ubuntu:([\d.]+)", dockerfile, re.MULTILINE)
            row = {
                "repository": repository,
                "sdk": parsed["sdk"],
                "tag": tag,
                "torch": parsed["torch"],
                "ubuntu": ubuntu[1] if ubuntu else parsed["ubuntu"],
                "instances": [i.strip() for i in cells[3].split(",") if i.strip()],
                **{field: args[arg].split("+")[0] for arg, field in _ARGS.items() if arg in args},
                "source": f"{path} @ {git_tag}",
            }
            rows.append(row)
    return sorted(rows, key=lambda r: (r["repository"], tuple(int(p) for p in r["sdk"].split("."))))


def render(repo: Path) -> str:
    import yaml

    commit = _git(repo, "rev-parse", "HEAD").strip()
    header = (
        "# Neuron deep learning container images, one row per (repository, Neuron SDK release): the tag, and what the\n"
        "# image runs. GENERATED from github.com/aws-neuron/deep-learning-containers @ "
        f"{commit[:12]}: README.md's tables and each\n"
        "# row's Dockerfile at the git tag the row links to (its ARG lines; the +build suffixes dropped). Do not edit by\n"
        "# hand: python -m neurondeploy.catalog.dlc_releases_source REPO_DIR > neurondeploy/catalog/data/dlc_releases.yaml\n"
    )
    body = yaml.safe_dump({"commit": commit, "releases": releases(repo)}, sort_keys=False, width=120)
    return header + body


if __name__ == "__main__":  # pragma: no cover - a maintainer's command
    if len(sys.argv) != 2:
        print("usage: python -m neurondeploy.catalog.dlc_releases_source REPO_DIR", file=sys.stderr)
        raise SystemExit(2)
    try:
        sys.stdout.write(render(Path(sys.argv[1])))
    except CatalogError as exc:
        print(f"error: {exc.message} ({exc.hint})", file=sys.stderr)
        raise SystemExit(1) from None
