"""Run a CreateTrainingJob request's entry here, the way the SageMaker training toolkit in AWS's PyTorch / Neuron
training containers runs it: what the job would run, proven by running it.

From the request alone: the archive at the ``sagemaker_submit_directory`` hyperparameter is fetched from S3 and
unpacked as the code directory (the working directory, as in the container); every other hyperparameter is
json-decoded (the SDK's framework estimators encode them) and passed as ``--key value``; the environment is the
request's ``Environment`` plus the toolkit's ``SM_*`` variables (model, output and channel directories under
``work_dir`` instead of ``/opt/ml``); channels are downloaded to ``input/data/<channel>``; then
``python <sagemaker_program> ARGS`` runs in a subprocess (under ``torchrun --nproc_per_node N`` when
``sagemaker_torch_distributed_enabled``).

Not done here (the toolkit does it in the container): ``pip install -r requirements.txt`` (this environment
already has the toolkit's dependencies), the container image itself (this Python stands in for its), the
instance (this CPU). A request with ``ContainerEntrypoint`` (the LLM export) runs that command instead, with
only the request's environment, as SageMaker does for an image without the toolkit. A general replay of CreateTrainingJob (checkpoints synced, the model packed to the output
path) replaces this small runner where it exists.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from neurondeploy.aws.paging import Paged
from neurondeploy.aws.transport import AwsTransport
from neurondeploy.replay.training import container_launch, decode
from neurondeploy.resources.naming import split_s3

OPT_ML = "/opt/ml"


def _get(transport: AwsTransport, uri: str) -> bytes:
    bucket, key = split_s3(uri)
    response = transport.call("s3", "GetObject", {"Bucket": bucket, "Key": key})
    with response["Body"] as body:
        return body.read()


def _download_prefix(transport: AwsTransport, uri: str, directory: Path) -> None:
    bucket, prefix = split_s3(uri)
    for page in Paged(transport).call("s3", "ListObjectsV2", {"Bucket": bucket, "Prefix": prefix}):
        for item in page.get("Contents", []):
            relative = item["Key"][len(prefix) :].lstrip("/") or Path(item["Key"]).name
            target = directory / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_get(transport, f"s3://{bucket}/{item['Key']}"))


def own_entrypoint_command(request: dict, work_dir: Path) -> tuple[list[str], dict[str, str], Path]:
    """A request that overrides the image's entrypoint (``ContainerEntrypoint`` + ``ContainerArguments``): SageMaker
    runs exactly that, with the request's ``Environment`` and the /opt/ml directories, no toolkit in between;
    here /opt/ml is ``work_dir`` (in the arguments and the environment's values)."""
    algorithm = request["AlgorithmSpecification"]
    argv = [*algorithm["ContainerEntrypoint"], *algorithm.get("ContainerArguments", [])]
    argv = [arg.replace(OPT_ML, str(work_dir)) for arg in argv]
    env = {key: value.replace(OPT_ML, str(work_dir)) for key, value in request.get("Environment", {}).items()}
    return argv, env, work_dir


def container_command(request: dict, work_dir: Path, processes: int = 1) -> tuple[list[str], dict[str, str], Path]:
    """(argv, environment, working directory) of the job's entry, as the toolkit would start it (the training
    replay's derivation, with /opt/ml at ``work_dir``), or, when the request overrides the entrypoint, as SageMaker
    starts that."""
    if "ContainerEntrypoint" in request["AlgorithmSpecification"]:
        return own_entrypoint_command(request, work_dir)
    launch = container_launch(request, {OPT_ML: work_dir}, processes=processes)
    return launch.command, launch.env, work_dir / "code"


def run_training_container(
    request: dict, transport: AwsTransport, work_dir: Path, *, env: dict[str, str], processes: int = 1, timeout_s=900
) -> subprocess.CompletedProcess:
    """Fetch what the request names and run its entry (see the module doc). ``env`` is this machine's base
    environment (e.g. with AWS_ENDPOINT_URL for an emulator, or a stand-in module on PYTHONPATH)."""
    argv, job_env, code = container_command(request, work_dir, processes)
    code.mkdir(parents=True, exist_ok=True)
    hyperparameters = request.get("HyperParameters", {})
    if "sagemaker_submit_directory" in hyperparameters:
        archive = _get(transport, decode(hyperparameters["sagemaker_submit_directory"]))
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tar.extractall(code, filter="data")
    for channel in request.get("InputDataConfig", []):
        source = channel["DataSource"]["S3DataSource"]["S3Uri"]
        _download_prefix(transport, source, work_dir / "input" / "data" / channel["ChannelName"])
    for directory in (work_dir / "model", work_dir / "output" / "data"):
        directory.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        argv, cwd=code, env={**env, **job_env}, capture_output=True, text=True, timeout=timeout_s, check=False
    )
