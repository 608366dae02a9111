"""One Neuron SDK release per deployment: every piece that must agree comes from the same row of the release matrix.

What a spec runs on AWS, by kind and platform (the pieces):

* a SageMaker endpoint of our container: the ``pytorch-inference-neuronx`` DLC of the release serves the artifact;
  ``compile --remote`` compiles it in the ``pytorch-training-neuronx`` DLC of the same release, or in its inference
  DLC where no training DLC is published (from 2.31);
* an EC2 deployment of our container: the Neuron DLAMI its SSM parameter resolves to (the newest build only:
  ``catalog.dlami``) serves the artifact, so the release is that DLAMI's; ``compile --remote`` as above;
* a SageMaker training job: the ``pytorch-training-neuronx`` DLC of the release (unless the spec names its image);
* a Hugging Face LLM container from the catalogue: its image, built for one SDK (``data/images.yaml``: the SDK of
  the optimum-neuron release inside it);
* an image the spec names for a Hugging Face kind: taken as infra/hf-secrets/Dockerfile builds it, FROM that
  kind's catalogue image, whose release it runs;
* any other image the spec names: no piece (the operator matches its SDK).

The artifact's Neuron SDK (its manifest, its compile cache key) is the release's. Unpinned, a spec gets the newest
release in which every piece exists, preferring one where ``compile --remote`` can run too; pinned
(``neuron_sdk_version``: "2.21" for the newest 2.21.x, or "2.21.0"), the pin's newest patch that has them, or an
error naming the missing piece and the releases that have them all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from neurondeploy import catalog
from neurondeploy.catalog import DlcRelease
from neurondeploy.errors import CatalogError
from neurondeploy.specs import InferenceSpec, Spec, TrainingSpec
from neurondeploy.wheel import constraints_for

INFERENCE_DLC = "pytorch-inference-neuronx"
WRAPPER_BUILD = "infra/hf-secrets/Dockerfile"  # builds a wrapper FROM a catalogue image (data/containers.yaml)
TRAINING_DLC = "pytorch-training-neuronx"


@dataclass(frozen=True)
class Piece:
    """One thing a deployment runs that is built for one Neuron SDK release."""

    role: str  # "serving image", "training image", "compile job image", "instance DLAMI"
    name: str  # the image tag or the SSM parameter
    sdk: str  # the release it is built for ("2.30.0"; a DLAMI's minor line, "2.31")
    python: str  # the Python it runs (the target's, for resolving what we install there)
    source: str
    held: tuple[str, ...] = ()  # packages it has, "name" or "name<spec>" (an image's Dockerfile's pip installs, torch)
    base: str | None = None  # a wrapper's: the catalogue image tag it is built FROM


@dataclass(frozen=True)
class DeploymentRelease:
    sdk: str  # the artifact's compiler and every piece's release, "2.30.0"
    pieces: tuple[Piece, ...]  # what runs the deployment; empty for local runs and the Hugging Face containers
    compile_image: DlcRelease | None  # where compile --remote runs; None: no image for this release
    pinned: bool
    notes: tuple[str, ...] = ()  # what this release cannot do that the deployment may want (compile --remote)
    host: str | None = None  # what the serving image runs on when it is not the release's own (SageMaker's host)

    def piece(self, role: str) -> Piece | None:
        return next((p for p in self.pieces if p.role == role), None)


@dataclass(frozen=True)
class _Needs:
    path: str  # catalog SDK path: training, trace-inference, nxdi-inference
    serving_dlc: bool = False
    training_dlc: bool = False
    dlami: catalog.Dlami | None = None
    compile_dlc: bool = False  # wanted (compile --remote), not required
    hf_purpose: str | None = None  # a Hugging Face container's catalogue image, when its tags carry their SDK
    host: catalog.InferenceAmi | None = None  # the SageMaker host image under the serving image: its driver
    wrapper: str | None = None  # the spec's image, built FROM the hf_purpose image (infra/hf-secrets)
    family: str | None = None  # the instance family: an image that lists its families must list this one


def wrapper_base(spec: InferenceSpec) -> str | None:
    """The full reference of the catalogue image a wrapper (the spec's image_uri, or the one it needs) is built FROM
    for this deployment's release and instance family; None when the kind runs no catalogue image."""
    kind = spec.container
    if kind.ours:
        return None
    needs = _needs(spec, instance_dlami_parameter(spec))
    if needs.hf_purpose is None:
        return None
    release = _release_for(spec, replace(needs, wrapper=needs.wrapper or "the wrapper"))
    piece = release.piece("serving image") or release.piece("compile job image")
    if piece is None or piece.base is None:
        return None
    registry = catalog.public_registry(kind.image_purpose)
    repository = tags_repository(kind.image_purpose)
    return (
        f"{registry}/{repository}:{piece.base}" if registry else catalog.image_uri(repository, spec.region, piece.base)
    )


def serving_piece(spec: InferenceSpec) -> Piece | None:
    """The image that serves the deployment (what our requirements install into), when the catalogue knows it."""
    return deployment_release(spec).piece("serving image")


def instance_piece(spec: InferenceSpec, dlami_parameter: str) -> Piece | None:
    """The EC2 instances' DLAMI environment (what our wheel installs into), when the catalogue knows the DLAMI."""
    return deployment_release(spec, dlami_parameter).piece("instance DLAMI")


def target_constraints(constraints: str, target: Piece | None) -> str:
    """This machine's pins as ``target`` can take them: for its Python, none for what it has (unknown target: as
    they are)."""
    return constraints_for(constraints, target.python, target.held).text if target else constraints


def sdk_path(spec: Spec) -> str:
    """The toolkit path whose lifecycle decides which releases the spec can run on."""
    if spec.kind == "training":
        return "training"
    return "trace-inference" if spec.container.runtime == "trace" else "nxdi-inference"


def _needs(spec: Spec, dlami_parameter: str) -> _Needs:
    path = sdk_path(spec)
    if isinstance(spec, TrainingSpec):
        on_sagemaker = spec.platform == "sagemaker" and not spec.image_uri
        return _Needs(path, training_dlc=on_sagemaker)
    assert isinstance(spec, InferenceSpec)
    platform = spec.deployment.platform
    image_uri = spec.deployment.container.image_uri
    if image_uri and spec.container.ours:
        return _Needs(path)
    host = catalog.inference_ami(spec.deployment.host_image) if platform == "sagemaker" else None
    if not spec.container.ours:
        purpose = spec.container.image_purpose
        with_sdk = any(tag.sdk for tag in catalog.known_tags(purpose))
        if not with_sdk:
            return _Needs(path)
        family = catalog.get_instance(spec.deployment.instance_type).family
        # On EC2 the kind's DLAMI serves and the image runs only compile --remote's job (a SageMaker job).
        dlami = catalog.dlamis_by_parameter().get(dlami_parameter) if platform == "ec2" else None
        return _Needs(path, hf_purpose=purpose, host=host, wrapper=image_uri, family=family, dlami=dlami)
    if platform == "ec2":
        # A parameter the catalogue does not know (apply --ami-ssm-parameter): its SDK is the operator's to match.
        return _Needs(path, dlami=catalog.dlamis_by_parameter().get(dlami_parameter), compile_dlc=True)
    return _Needs(path, serving_dlc=True, compile_dlc=True, host=host)


def _rows(repository: str) -> dict[str, DlcRelease]:
    """The newest-torch row per SDK release (rows run oldest torch first within a release)."""
    return {row.sdk: row for row in catalog.dlc_releases() if row.repository == repository}


def compile_image_for(sdk: str) -> DlcRelease | None:
    """Where ``compile --remote`` runs for release ``sdk``: its training DLC (the SageMaker training toolkit runs the
    job), else its inference DLC (the same neuronx-cc and torch-neuronx; the job brings its own few steps), else
    nowhere. A SageMaker job: only a tag in the DLC account will do."""
    for repository in (TRAINING_DLC, INFERENCE_DLC):
        row = _rows(repository).get(sdk)
        if row is not None and catalog.sagemaker_pull_problem(repository, row.tag) is None:
            return row
    return None


def _in_pin(version: str, pin: str | None) -> bool:
    if pin is None:
        return True
    if len(catalog.version_tuple(pin)) == 2:
        return catalog.minor(version) == catalog.minor(pin)
    return catalog.version_tuple(version) == catalog.version_tuple(pin)


def _path_refusal(path: str, version: str) -> str | None:
    try:
        catalog.check_sdk_for(path, version)
    except CatalogError as exc:
        return exc.message
    return None


def _pieces(needs: _Needs, version: str) -> tuple[list[Piece], list[str]]:
    """The pieces of release ``version`` for ``needs``, and what is missing."""
    pieces: list[Piece] = []
    missing: list[str] = []
    for wanted, repository, role in (
        (needs.serving_dlc, INFERENCE_DLC, "serving image"),
        (needs.training_dlc, TRAINING_DLC, "training image"),
    ):
        row = _rows(repository).get(version) if wanted else None
        # A training image always runs on SageMaker; a serving image on SageMaker when there is a host under it.
        on_sagemaker = role == "training image" or needs.host is not None
        unpullable = catalog.sagemaker_pull_problem(repository, row.tag) if row and on_sagemaker else None
        if unpullable:
            missing.append(f"the {role}: {unpullable}")
        elif row is not None:
            source = f"{catalog.DLC_REPOSITORY}: {row.source}"
            pieces.append(Piece(role, row.tag, row.sdk, row.python, source, image_holds(row)))
        elif wanted:
            missing.append(f"no {repository} image")
    if needs.hf_purpose is not None:
        image_role = "compile job image" if needs.dlami is not None else "serving image"
        tags = [tag for tag in catalog.known_tags(needs.hf_purpose) if tag.sdk == version]
        served = [tag for tag in tags if needs.family is None or tag.serves(needs.family)]
        if served:
            python = re.search(r"-py(\d)(\d+)-", served[-1].tag)
            version_of_python = f"{python[1]}.{python[2]}" if python else "unknown"
            name, source, base = served[-1].tag, served[-1].source, None
            if needs.wrapper:
                name, source, base = needs.wrapper, f"built FROM {name} as {WRAPPER_BUILD} builds it; {source}", name
            pieces.append(Piece(image_role, name, version, version_of_python, source, base=base))
        elif tags:
            missing.append(f"its {tags_repository(needs.hf_purpose)} images do not list {needs.family} instances")
        else:
            missing.append(f"no {tags_repository(needs.hf_purpose)} image")
    if needs.dlami is not None:
        dlami = needs.dlami
        if catalog.minor(dlami.sdk) != catalog.minor(version):
            missing.append(f"the DLAMI of {dlami.parameter} is Neuron SDK {dlami.sdk}")
        elif needs.family is not None and needs.family not in dlami.families:
            missing.append(f"{dlami.ami_name} does not list {needs.family} instances")
        else:
            pieces.append(Piece("instance DLAMI", dlami.parameter, dlami.sdk, dlami.python, dlami.source))
    refusal = _path_refusal(needs.path, version)
    if refusal:
        missing.append(refusal)
    runtime = release_runtime(version) if needs.host is not None and pieces else None
    if runtime is not None:
        refusal = catalog.driver_refusal(runtime, needs.host)
        if refusal:
            missing.append(f"the serving image: {refusal} (on EC2 it runs on its DLAMI's own driver)")
    return pieces, missing


def release_runtime(version: str) -> str | None:
    """The Neuron runtime (aws-neuronx-runtime-lib) release ``version`` ships: its DLCs' (every image built for a
    release carries that release's runtime, the Hugging Face ones too: optimum-neuron installs the SDK's packages)."""
    rows = [row for row in catalog.dlc_releases() if row.sdk == version and row.neuron_runtime]
    return rows[-1].neuron_runtime if rows else None


def _host_line(host: catalog.InferenceAmi, version: str) -> str:
    runtime = release_runtime(version)
    floor = catalog.driver_floor(runtime) if runtime else None
    needs = f"needs driver {floor.driver}+" if floor else "no documented driver floor"
    return (
        f"SageMaker host image {host.name} (Neuron driver {host.neuron_driver}; {host.source}) under "
        f"Neuron Runtime {runtime or 'unknown'} ({needs})"
    )


def image_holds(row: DlcRelease) -> tuple[str, ...]:
    """The packages a DLC image has: what its Dockerfile pip-installs (with the versions it asks for), and torch
    (torch-neuronx's own build, whose requirements are torch's)."""
    return tuple(sorted({*row.preinstalled, "torch"}))


def tags_repository(purpose: str) -> str:
    return catalog.known_tags(purpose)[0].repository


def _candidates(needs: _Needs) -> list[str]:
    """Every release the matrix knows, oldest first: the DLC rows' SDKs, and the DLAMI's line."""
    versions = {row.sdk for row in catalog.dlc_releases()}
    if needs.hf_purpose is not None:
        versions |= {tag.sdk for tag in catalog.known_tags(needs.hf_purpose) if tag.sdk}
    if needs.dlami is not None and not any(catalog.minor(v) == catalog.minor(needs.dlami.sdk) for v in versions):
        versions.add(f"{needs.dlami.sdk}.0")
    return sorted(versions, key=catalog.version_tuple)


def deployment_release(spec: Spec, dlami_parameter: str | None = None) -> DeploymentRelease:
    """The one release ``spec`` runs (module doc), its EC2 instances booting ``dlami_parameter`` (None: the
    kind's, :func:`instance_dlami_parameter`). Raises :class:`CatalogError` (one line, with the fix) when the pin
    lacks a piece or no release has them all."""
    return _release_for(spec, _needs(spec, dlami_parameter or instance_dlami_parameter(spec)))


def instance_dlami_parameter(spec: Spec) -> str:
    """The SSM parameter of the DLAMI an EC2 deployment of ``spec`` boots unless told otherwise: the first
    catalogued DLAMI that serves its container kind (data/dlami.yaml), else the default."""
    serving = catalog.dlami_for(spec.container.name) if isinstance(spec, InferenceSpec) else None
    return serving.parameter if serving else catalog.DEFAULT_DLAMI_PARAMETER


def _nearest(releases: list[str], pin: str) -> str:
    """The release nearest ``pin``: the newest of its minor line, else the newest before it, else the oldest after."""
    wanted = catalog.version_tuple(pin)
    ordered = sorted(releases, key=catalog.version_tuple)
    same_line = [v for v in ordered if catalog.version_tuple(v)[:2] == wanted[:2]]
    before = [v for v in ordered if catalog.version_tuple(v) < wanted]
    return (same_line or before or ordered[:1])[-1]


def _release_for(spec: Spec, needs: _Needs) -> DeploymentRelease:
    pin = spec.neuron_sdk_version
    working: list[tuple[str, list[Piece]]] = []
    refusals: list[str] = []
    for version in _candidates(needs):
        pieces, missing = _pieces(needs, version)
        if not missing:
            working.append((version, pieces))
        elif _in_pin(version, pin):
            refusals.append(f"{version}: {'; '.join(missing)}")
    chosen = [(v, p) for v, p in working if _in_pin(v, pin)]
    family = catalog.get_instance(spec.instance_type).family if pin else None
    ended = catalog.family_line_end(family, needs.path, pin) if pin else None
    if not chosen and ended:  # a line AWS ended on this family: the refusal names what replaces it there
        before = [v for v, _ in working if catalog.minor(v) <= catalog.minor(ended["last"])]
        raise CatalogError(
            f"Neuron SDK {pin} has no {needs.path} path on {family}: {ended['fact']} (source: {ended['source']})",
            f"use {ended['replaced_by']}"
            + (f"; or pin neuron_sdk_version to {before[-1]}, the newest release of the line" if before else ""),
        )
    if not chosen:
        releases = [v for v, _ in working]
        have = ", ".join(releases[-3:]) + (f" (or one of {len(releases) - 3} older)" if len(releases) > 3 else "")
        raise CatalogError(
            f"no Neuron SDK release{f' {pin}' if pin else ''} has every piece this deployment runs ("
            + (refusals[-1] if refusals else f"the catalogue has no release {pin}")
            + ")",
            (
                f"set neuron_sdk_version to {_nearest(releases, pin)}, the nearest release that has them all (of {have})"
                if pin
                else f"set neuron_sdk_version to a release that has them all: {have}"
            )
            if working
            else "no catalogued release fits: change the platform or instance type",
        )
    with_compile = [(v, p) for v, p in chosen if compile_image_for(v)] if needs.compile_dlc else []
    version, pieces = (with_compile or chosen)[-1]
    compile_image = compile_image_for(version) if needs.compile_dlc else None
    notes: tuple[str, ...] = ()
    if compile_image is not None:
        source = f"{catalog.DLC_REPOSITORY}: {compile_image.source}"
        pieces = [
            *pieces,
            Piece(
                "compile job image",
                compile_image.tag,
                version,
                compile_image.python,
                source,
                image_holds(compile_image),
            ),
        ]
    elif needs.compile_dlc:
        notes = (
            f"compile --remote needs a Neuron DLC of SDK {version} and the catalogue has none: compile on a Neuron "
            "host with `neurondeploy compile`",
        )
    host = _host_line(needs.host, version) if needs.host is not None else None
    return DeploymentRelease(version, tuple(pieces), compile_image, pin is not None, notes, host)
