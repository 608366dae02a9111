"""Where ``data/dlc_releases.yaml`` comes from: the Neuron deep learning containers repository
(github.com/aws-neuron/deep-learning-containers), its README's image tables at every release tag and at HEAD, and
each row's Dockerfile at the git tag the row links to. One row per (repository, image tag): the Neuron SDK release,
and what the image runs (Python, Ubuntu, torch, torch-neuronx, neuronx-cc, TorchServe, the SageMaker inference
toolkit), read from the Dockerfile's ``ARG`` lines, and the packages its ``pip install`` commands name (what the
image holds: a deployment's installs leave them as they are). The planner reads the generated YAML; regenerate it from a clone of that repository:

    python -m neurondeploy.catalog.dlc_releases_source REPO_DIR > neurondeploy/catalog/data/dlc_releases.yaml
    python -m neurondeploy.catalog.dlc_releases_source --vllm REPO_DIR > neurondeploy/catalog/data/vllm_releases.yaml

The second is the README's vllm-inference-neuronx table (the ``pytorch-inference-vllm-neuronx`` images: vLLM with
the vllm-neuron plugin), each row with its vLLM version, the vllm-neuron branch its Dockerfile clones
(``GITHUB_REPO_BRANCH``) and the same Dockerfile facts.

``tests/unit/test_dlc_releases.py`` checks the rows against each other always, and against the repository where
``NEURON_DLC_REPO`` names a clone of it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from neurondeploy.catalog.vllm_releases import VLLM_REPOSITORY
from neurondeploy.errors import CatalogError

REPOSITORIES = ("pytorch-inference-neuronx", "pytorch-training-neuronx")
VLLM_SECTION = "vllm-inference-neuronx"  # the README's section of the VLLM_REPOSITORY images
# The oldest release catalogued: data/sdk.yaml's lifecycle table starts there.
MIN_SDK = "2.20.0"
# A README table row: | [PyTorch X](https://github.com/aws-neuron/deep-learning-containers/blob/TAG/PATH) | packages |
# Neuron SDK | instance types | Python | image URI | extra
_ROW = re.compile(
    r"^\|\s*\[(?:PyTorch|VLLM) [^\]]+\]\(https://github\.com/aws-neuron/deep-learning-containers/blob/([^/]+)/([^)]+)\)"
)
# the leading version is the framework's: torch for the PyTorch images, vLLM for the vLLM ones
_TAG = re.compile(r"^(?P<framework>[\d.]+)-neuronx-py(?P<py>\d+)-sdk(?P<sdk>[\d.]+)-ubuntu(?P<ubuntu>[\d.]+)$")
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
    "NEURONX_RUNTIME_LIB_VERSION": "neuron_runtime",  # aws-neuronx-runtime-lib: what the host's driver must accept
}


def run_git(repo: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise CatalogError(
            f"git {' '.join(args)} in {repo}: {detail.strip()}", "give a clone of the repository"
        ) from None


def _section(readme: str, repository: str) -> list[str]:
    lines = readme.splitlines()
    if f"### {repository}" not in lines:
        return []
    start = lines.index(f"### {repository}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("### ")), len(lines))
    return lines[start:end]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def release_tags(repo: Path) -> list[str]:
    """The repository's release tags (one per Neuron SDK release, "2.21.0"), oldest first."""
    tags = [t for t in run_git(repo, "tag", "--list").split() if re.fullmatch(r"\d+\.\d+\.\d+", t)]
    return sorted(tags, key=_version)


def releases(repo: Path) -> list[dict]:
    """Every row the README's pytorch-inference-neuronx and pytorch-training-neuronx tables list at any release tag
    or at HEAD (a release's README drops the older patch releases: 2.21's rows are only in the README of 2.21.x),
    from :data:`MIN_SDK` on, each with what its Dockerfile (at the row's tag) says the image runs."""
    return _table(repo, vllm=False)[0]


def vllm_releases(repo: Path) -> list[dict]:
    """The same for the vllm-inference-neuronx table: each row's vLLM version and vllm-neuron branch too."""
    return _table(repo, vllm=True)[0]


def _table(repo: Path, *, vllm: bool) -> tuple[list[dict], list[str]]:
    """The rows, and the images left out because their README link names no Dockerfile at its tag."""
    framework = "vllm" if vllm else "torch"
    sections = {VLLM_SECTION: VLLM_REPOSITORY} if vllm else {repository: repository for repository in REPOSITORIES}
    rows: dict[tuple[str, str], dict] = {}
    left_out: set[str] = set()
    for readme_at in [*release_tags(repo), "HEAD"]:
        readme = run_git(repo, "show", f"{readme_at}:README.md")
        for section, repository in sections.items():
            for line in _section(readme, section):
                row = _row(repo, repository, line, framework)
                if row is not None and "missing" in row:
                    left_out.add(row["missing"])
                elif row is not None and _version(row["sdk"]) >= _version(MIN_SDK):
                    rows.setdefault((repository, row["tag"]), row)
    ordered = sorted(rows.values(), key=lambda r: (r["repository"], _version(r["sdk"]), _version(r[framework])))
    return ordered, sorted(left_out)


_PIP_INSTALL = re.compile(r"(?:^|\s)(?:\$\{?PIP\}?|pip3?|python3? -m pip)\s+install\s+(.*)$")
_OPTIONS_WITH_VALUE = {"--index-url", "-i", "--extra-index-url", "--trusted-host", "-r", "-c", "--target", "-f"}


def pip_installed(dockerfile: str, args: dict[str, str]) -> list[str]:
    """What the Dockerfile's ``pip install`` commands name, as ``name`` or ``name<spec>`` with its ARGs expanded
    (names normalised: lower case, ``-`` for ``_``), sorted: the packages the image holds."""
    lines = [line for line in dockerfile.splitlines() if not line.lstrip().startswith("#")]
    logical = re.sub(r"\\\n", " ", "\n".join(lines))  # a RUN's continuation lines as one
    found: dict[str, str] = {}
    for command in (part for line in logical.splitlines() for part in line.split("&&")):
        match = _PIP_INSTALL.search(command.strip())
        if not match:
            continue
        tokens = iter(match.group(1).split())
        for token in tokens:
            if token in _OPTIONS_WITH_VALUE:
                next(tokens, None)
                continue
            token = re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: args.get(m.group(1), m.group(0)), token.strip("\"'"))
            parsed = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?((?:[=<>!~]=?|===)\S+)?", token)
            if token.startswith("-") or not parsed:
                continue
            name = re.sub(r"[-_.]+", "-", parsed.group(1)).lower()
            found[name] = (parsed.group(3) or "").split("+")[0] or found.get(name, "")  # a pin wins
    return [f"{name}{spec}" for name, spec in sorted(found.items())]


def _row(repo: Path, repository: str, line: str, framework: str = "torch") -> dict | None:
    """One README table row with its Dockerfile's facts; None for a line that is no image row."""
    link = _ROW.match(line)
    if not link:
        return None
    git_tag, path = link.groups()
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    tag = cells[5].rsplit(":", 1)[1]
    parsed = _TAG.match(tag)
    if not parsed:
        return None  # not a Neuron SDK 2.x image tag (none at the time of writing)
    try:
        dockerfile = run_git(repo, "show", f"{git_tag}:{path}")
    except CatalogError:
        # The README links a Dockerfile its git tag does not hold (vllm 0.13.0 at 2.27.1, listed from 2.28.0 on):
        # nothing says what that image runs, so it is left out rather than read from another release's file.
        return {"missing": f"{tag} ({path} is not at {git_tag})"}
    args = dict(re.findall(r"^ARG ([A-Z_]+)=(\S+)", dockerfile, re.MULTILINE))
    ubuntu = re.search(r"^FROM \S*ubuntu:([\d.]+)", dockerfile, re.MULTILINE)
    # vllm-neuron's branch, "release-0.5.3": the plugin's version the image installs from /opt/vllm
    branch = re.fullmatch(r"release-(\S+)", args.get("GITHUB_REPO_BRANCH", ""))
    return {
        "repository": repository,
        "sdk": parsed["sdk"],
        "tag": tag,
        framework: parsed["framework"],
        **({"vllm_neuron": branch[1]} if framework == "vllm" and branch else {}),
        "ubuntu": ubuntu[1] if ubuntu else parsed["ubuntu"],
        "instances": [i.strip() for i in cells[3].split(",") if i.strip()],
        **{field: re.split(r"[+-]", args[arg])[0] for arg, field in _ARGS.items() if arg in args},
        "preinstalled": pip_installed(dockerfile, args),
        "source": f"{path} @ {git_tag}",
    }


def render(repo: Path, vllm: bool = False) -> str:
    import yaml

    commit = run_git(repo, "rev-parse", "HEAD").strip()
    what, flag, name = (
        ("vLLM Neuron", "--vllm ", "vllm_releases") if vllm else ("Neuron deep learning", "", "dlc_releases")
    )
    header = (
        f"# {what} container images, one row per image tag: its Neuron SDK release, and what the\n"
        "# image runs. GENERATED from github.com/aws-neuron/deep-learning-containers @ "
        f"{commit[:12]}: README.md's tables (at each\n"
        "# release tag and HEAD) and each row's Dockerfile at the git tag the row links to (its ARG lines; the +build suffixes dropped). Do not edit by\n"
        f"# hand: python -m neurondeploy.catalog.dlc_releases_source {flag}REPO_DIR > neurondeploy/catalog/data/{name}.yaml\n"
    )
    rows, left_out = _table(repo, vllm=vllm)
    for missing in left_out:
        header += f"# left out, its README link names no Dockerfile: {missing}\n"
    body = yaml.safe_dump({"commit": commit, "releases": rows}, sort_keys=False, width=120)
    return header + body


if __name__ == "__main__":  # pragma: no cover - a maintainer's command
    arguments = sys.argv[1:]
    vllm = arguments[:1] == ["--vllm"]
    if len(arguments) != 1 + vllm:
        print("usage: python -m neurondeploy.catalog.dlc_releases_source [--vllm] REPO_DIR", file=sys.stderr)
        raise SystemExit(2)
    try:
        sys.stdout.write(render(Path(arguments[-1]), vllm=vllm))
    except CatalogError as exc:
        print(f"error: {exc.message} ({exc.hint})", file=sys.stderr)
        raise SystemExit(1) from None
