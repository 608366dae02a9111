"""SageMaker training replay: a CreateTrainingJob request run as SageMaker runs it, one host per instance, each
running the image's own SageMaker training toolkit.

The platform's part, here: on each host ``algo-N``, ``/opt/ml`` under the sandbox root; ``input/config/
{hyperparameters,resourceconfig,inputdataconfig}.json`` written as SageMaker writes them; S3Prefix channels
downloaded to ``/opt/ml/input/data/<channel>``; the checkpoint S3Uri downloaded to ``CheckpointConfig.LocalPath``
before the start and the local path uploaded as files appear and once more at the end; every host's ``/opt/ml/model``
packed into ``<S3OutputPath>/<job>/output/model.tar.gz`` and ``/opt/ml/output/data`` into ``output.tar.gz``; the
job's ``Environment`` set as sent, its ``/opt/ml`` paths moved under the root.

The container's part is the image's: its ENTRYPOINT runs ``train``, sagemaker-training's console script, which
imports ``$SAGEMAKER_TRAINING_MODULE`` (sagemaker-pytorch-training) at the versions the image's build installed
(catalog.training_toolkit, installed for the replay from the package index): it fetches the submit directory,
installs its requirements.txt, and for ``sagemaker_torch_distributed_enabled`` launches ``torchrun --nnodes N
--nproc_per_node <NeuronCores> [--master_addr algo-1 --master_port 7777 --node_rank R]``.

Stand-ins: the hosts are processes on this machine, named through a private /etc/hosts (replay.host_names); the
image's Python is this machine's with the toolkit ahead; ``neuron-ls`` reports the instance type's NeuronCores; the
Neuron runtime is the CPU with gloo (every process gets the CPU stand-in flag). Not replayed: EFA,
``neuron_parallel_compile`` (``RUN_NEURON_PARALLEL_COMPILE``: without a Neuron compiler there is nothing to compile).

:func:`container_launch` is this module's own derivation of the toolkit's command and ``SM_*`` environment, for the
runs that have no image: ``train --local`` and the compile job's replay.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.aws.transport import AwsTransport
from neurondeploy.replay.host_names import hosts_file, with_host_names
from neurondeploy.replay.image_stack import ImageStack, installed_overlay
from neurondeploy.replay.sandbox import (
    ReplayError,
    Started,
    free_port,
    host_path,
    pack,
    process_env,
    python_standin,
    s3_download_prefix,
    s3_put,
    script,
    start,
)
from neurondeploy.resources.release import TRAINING_DLC
from neurondeploy.resources.sagemaker_endpoint import image_repository
from neurondeploy.resources.sagemaker_training import to_cmd_args

OPT_ML = "/opt/ml"
HOST = "algo-1"
LAUNCH_PREFIX = "sagemaker_"
SYNC_EVERY_S = 2.0


def decode(value: str) -> object:
    """The toolkit json-decodes each hyperparameter, keeping the text when it is not JSON."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def env_value(value: object) -> str:
    """sagemaker_training.mapping.to_env_vars: strings as they are, anything else compact sorted JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))


class CheckpointSync:
    """SageMaker's checkpoint upload: files under the local path go to the S3 URI as they appear or change."""

    def __init__(self, transport: AwsTransport, local: Path, uri: str) -> None:
        self.transport, self.local, self.uri = transport, local, uri.rstrip("/") + "/"
        self.seen: dict[Path, tuple[int, int]] = {}
        self.uploaded: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="checkpoint-sync", daemon=True)

    def mark_present(self) -> None:
        """Files downloaded at the start are already in S3."""
        for path in self.local.rglob("*"):
            if path.is_file():
                stat = path.stat()
                self.seen[path] = (stat.st_size, stat.st_mtime_ns)

    def sync(self) -> None:
        for path in sorted(self.local.rglob("*")):
            try:
                if not path.is_file():
                    continue
                stat = path.stat()
                body = path.read_bytes()
            except OSError:  # renamed or removed while we looked: the next pass sees where it went
                continue
            if self.seen.get(path) == (stat.st_size, stat.st_mtime_ns):
                continue
            key = self.uri + path.relative_to(self.local).as_posix()
            s3_put(self.transport, key, body)
            self.seen[path] = (stat.st_size, stat.st_mtime_ns)
            self.uploaded.append(key)

    def _loop(self) -> None:
        while not self.stopping.wait(SYNC_EVERY_S):
            self.sync()

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.sync()


@dataclass
class TrainingReplay:
    job_name: str
    root: Path
    exit_code: int
    command: list[str]
    output: str
    model_artifacts: str | None
    checkpoints_downloaded: int
    checkpoints_uploaded: list[str]
    seconds: float
    uploads_by_host: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def mounted(value: str, mounts: dict[str, Path]) -> str:
    """A container path in ``value`` (an environment value that is a path) as it is mounted here: the longest
    mount prefix wins; anything else unchanged."""
    for container in sorted(mounts, key=len, reverse=True):
        if value == container or value.startswith(container.rstrip("/") + "/"):
            return str(mounts[container]) + value[len(container.rstrip("/")) :]
    return value


@dataclass(frozen=True)
class Launch:
    """What the training container runs for a job: the command and the environment it adds."""

    command: list[str]
    env: dict[str, str]
    processes: int
    channels: dict[str, Path]


def container_launch(job: dict, mounts: dict[str, Path], *, processes: int | None = None) -> Launch:
    """The command and environment sagemaker-training-toolkit derives from the CreateTrainingJob ``job`` on one host,
    with its paths where ``mounts`` (container path -> local path; ``/opt/ml`` at least) put them. ``processes``:
    torchrun's processes per host; default one per NeuronCore of the job's instance type."""
    name = job["TrainingJobName"]
    hyperparameters = {key: decode(value) for key, value in job.get("HyperParameters", {}).items()}
    program = hyperparameters.get("sagemaker_program")
    if not program or not hyperparameters.get("sagemaker_submit_directory"):
        raise ReplayError(
            f"{name} names no sagemaker_program / sagemaker_submit_directory", "train it with neurondeploy"
        )
    user = {key: value for key, value in hyperparameters.items() if not key.startswith(LAUNCH_PREFIX)}
    instance = job["ResourceConfig"]["InstanceType"]
    processes = processes or catalog.get_instance(instance.removeprefix("ml.")).neuron_cores

    def here(path: str) -> Path:
        return Path(mounted(path, mounts))

    model, output, code = here(f"{OPT_ML}/model"), here(f"{OPT_ML}/output"), here(f"{OPT_ML}/code")
    channels = {
        c["ChannelName"]: here(f"{OPT_ML}/input/data/{c['ChannelName']}") for c in job.get("InputDataConfig", [])
    }
    args = to_cmd_args(user)
    env = {
        "SM_MODEL_DIR": str(model),
        "SM_OUTPUT_DIR": str(output),
        "SM_OUTPUT_DATA_DIR": str(output / "data"),
        "SM_INPUT_DIR": str(here(f"{OPT_ML}/input")),
        "SM_INPUT_CONFIG_DIR": str(here(f"{OPT_ML}/input/config")),
        "SM_CHANNELS": json.dumps(sorted(channels)),
        "SM_HPS": json.dumps(user, sort_keys=True),
        "SM_USER_ARGS": json.dumps(args),
        "SM_HOSTS": json.dumps([HOST]),
        "SM_CURRENT_HOST": HOST,
        "SM_NUM_CPUS": str(os.cpu_count() or 1),
        "SM_NUM_GPUS": "0",
        "SM_NUM_NEURONS": str(processes),
        "SM_MODULE_NAME": Path(str(program)).stem,
        "SM_MODULE_DIR": str(hyperparameters["sagemaker_submit_directory"]),
        "SM_USER_ENTRY_POINT": str(program),
        "SM_CURRENT_INSTANCE_TYPE": instance,
        "SM_TRAINING_ENV": json.dumps(
            {
                "job_name": name,
                "hosts": [HOST],
                "current_host": HOST,
                "hyperparameters": user,
                "channel_input_dirs": {k: str(v) for k, v in channels.items()},
                "model_dir": str(model),
                "output_data_dir": str(output / "data"),
                "num_neurons": processes,
                "is_master": True,
            }
        ),
        **{f"SM_CHANNEL_{k.upper()}": str(v) for k, v in channels.items()},
        **{f"SM_HP_{k.upper()}": env_value(v) for k, v in user.items()},
        # the job's own Environment, as sent, its container paths where they are mounted
        **{key: mounted(value, mounts) for key, value in job.get("Environment", {}).items()},
    }
    launcher = []
    if hyperparameters.get("sagemaker_torch_distributed_enabled"):
        # one host: --standalone is torchrun's single-node rendezvous on a free port (the toolkit's algo-1:7777 is a
        # multi-host address; a fixed port here would collide with any other run on this machine)
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node", str(processes)]
    return Launch([sys.executable, *launcher, str(code / str(program)), *args], env, processes, channels)


TRAINING_GROUP = "homogeneousCluster"  # the group name SageMaker gives a job's hosts without instance groups


def resource_config(host: str, hosts: list[str], instance_type: str) -> dict:
    """/opt/ml/input/config/resourceconfig.json as SageMaker writes it on ``host`` (the SageMaker developer guide,
    "Distributed Training Configuration": current_host, current_instance_type, current_group_name, hosts,
    instance_groups, network_interface_name)."""
    return {
        "current_host": host,
        "current_instance_type": instance_type,
        "current_group_name": TRAINING_GROUP,
        "hosts": hosts,
        "instance_groups": [{"instance_group_name": TRAINING_GROUP, "instance_type": instance_type, "hosts": hosts}],
        "network_interface_name": "eth0",
    }


def image_toolkit(job: dict) -> tuple[catalog.TrainingToolkit, ImageStack]:
    """The training toolkit inside the job's image (catalog.training_toolkit, by the image's release) and the
    packages a replay installs for it."""
    image = job["AlgorithmSpecification"]["TrainingImage"]
    repository, tag = image_repository(image), image.rsplit(":", 1)[-1]
    row = next((r for r in catalog.dlc_releases() if (r.repository, r.tag) == (repository, tag)), None)
    toolkit = catalog.training_toolkit(row.sdk) if row and repository == TRAINING_DLC else None
    if toolkit is None:
        known = ", ".join(sorted({r.sdk for r in catalog.dlc_releases() if catalog.training_toolkit(r.sdk)}))
        raise ReplayError(
            f"{job['TrainingJobName']} runs {image}, whose SageMaker training toolkit the catalogue does not know",
            f"replay a job on a pytorch-training-neuronx image of release {known}",
        )
    source = f"data/training_toolkit.yaml, the {toolkit.sdk} image built {toolkit.built}"
    return toolkit, ImageStack(image, toolkit.packages, source)


def image_python(host_root: Path, overlay: Path | None, neuron_cores: int) -> Path:
    """The image's Python for one host: this machine's packages behind the toolkit's (:func:`python_standin`), with
    the commands the image has on its PATH: ``train`` (the toolkit's console script, which SageMaker's ``docker run
    IMAGE train`` runs), ``torchrun``, and ``neuron-ls`` reporting ``neuron_cores`` NeuronCores (the toolkit counts
    its processes from it) in place of the Neuron driver."""
    venv = python_standin(host_root / ".replay" / "image-python", host_root, ahead=overlay)
    python = venv / "bin" / "python"
    script(venv / "bin" / "train", f'exec "{python}" -c "from sagemaker_training.cli.train import main; main()"')
    script(venv / "bin" / "torchrun", f'exec "{python}" -m torch.distributed.run "$@"')
    script(venv / "bin" / "neuron-ls", f"echo '{json.dumps([{'neuron_device': 0, 'nc_count': neuron_cores}])}'")
    return venv


@dataclass
class HostRun:
    """One host of the job: its /opt/ml, its checkpoint sync and its container's process."""

    host: str
    opt_ml: Path
    command: list[str]
    env: dict[str, str]
    sync: CheckpointSync | None
    downloaded: int
    started: Started | None = None


def _prepare_host(
    transport: AwsTransport,
    job: dict,
    host: str,
    hosts: list[str],
    host_root: Path,
    overlay: Path | None,
    toolkit: catalog.TrainingToolkit,
    names: Path,
    neuron_cores: int,
) -> HostRun:
    """What SageMaker does on ``host`` before its container starts: /opt/ml/input/config written, channels and
    checkpoints downloaded; and the container's command, ``train`` (the image's ENTRYPOINT runs it)."""
    instance = job["ResourceConfig"]["InstanceType"]
    opt_ml = host_path(host_root, OPT_ML)
    mounts = {OPT_ML: opt_ml}
    config = opt_ml / "input" / "config"
    for directory in (opt_ml / "model", opt_ml / "output" / "data", config):
        directory.mkdir(parents=True, exist_ok=True)
    (config / "hyperparameters.json").write_text(json.dumps(job.get("HyperParameters", {})))
    (config / "resourceconfig.json").write_text(json.dumps(resource_config(host, hosts, instance)))
    channels = job.get("InputDataConfig", [])
    (config / "inputdataconfig.json").write_text(
        json.dumps(
            {
                c["ChannelName"]: {
                    "TrainingInputMode": "File",
                    "S3DistributionType": c["DataSource"]["S3DataSource"].get(
                        "S3DataDistributionType", "FullyReplicated"
                    ),
                    "RecordWrapperType": "None",
                }
                for c in channels
            }
        )
    )
    for channel in channels:
        directory = opt_ml / "input" / "data" / channel["ChannelName"]
        directory.mkdir(parents=True, exist_ok=True)
        s3_download_prefix(transport, channel["DataSource"]["S3DataSource"]["S3Uri"], directory)
    sync, downloaded = None, 0
    checkpoint = job.get("CheckpointConfig")
    if checkpoint:  # every host downloads the whole prefix and uploads what it writes
        local_path = checkpoint.get("LocalPath", "/opt/ml/checkpoints")
        local = mounts[local_path] = host_path(host_root, local_path)
        local.mkdir(parents=True, exist_ok=True)
        downloaded = len(s3_download_prefix(transport, checkpoint["S3Uri"], local))
        sync = CheckpointSync(transport, local, checkpoint["S3Uri"])
        sync.mark_present()
    venv = image_python(host_root, overlay, neuron_cores)
    env = process_env(
        toolkit.image_env,
        {key: mounted(value, mounts) for key, value in job.get("Environment", {}).items()},
        {
            "SAGEMAKER_BASE_DIR": str(opt_ml),  # the toolkit's own override of /opt/ml (environment.py)
            "TRAINING_JOB_NAME": job["TrainingJobName"],
            "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // (neuron_cores * len(hosts)))),
            # One host: the toolkit runs torchrun without --master_port, whose default (29500) any other run on
            # this machine may hold; torchrun takes its default from PET_MASTER_PORT. Several: the toolkit's 7777.
            "PET_MASTER_PORT": str(free_port()),
        },
        aws=True,  # the execution role, stood in for by the caller's credentials
    )
    command = with_host_names([str(venv / "bin" / "train")], names, opt_ml)
    return HostRun(host, opt_ml, command, env, sync, downloaded)


def replay_training_job(
    transport: AwsTransport,
    job: dict,
    root: Path,
    *,
    timeout_s: float | None = None,
    neuron_cores: int | None = None,
) -> TrainingReplay:
    """Run the CreateTrainingJob request ``job`` (as sent: state records it) in ``root``, one host per instance
    (``root/algo-N`` when there are several); waits until every host ends (``StoppingCondition.MaxRuntimeInSeconds``,
    or ``timeout_s`` when shorter). A host that fails fails the job: the others are stopped, as SageMaker does.
    ``neuron_cores``: what each host's neuron-ls reports, when fewer than the instance type's (a trn1.32xlarge's 32
    processes per host do not fit this machine); the notes say so."""
    root = Path(root).resolve()
    name = job["TrainingJobName"]
    resources = job["ResourceConfig"]
    if job.get("Environment", {}).get("RUN_NEURON_PARALLEL_COMPILE") == "1":
        raise ReplayError(
            f"{name} sets RUN_NEURON_PARALLEL_COMPILE=1: the container runs neuron_parallel_compile, a graph-extraction "
            "trial that only fills the compile cache, and there is no Neuron compiler here",
            "replay it with parallel_compile: false",
        )
    count = resources.get("InstanceCount", 1)
    hosts = [f"algo-{i}" for i in range(1, count + 1)]
    toolkit, stack = image_toolkit(job)
    overlay = installed_overlay(stack)
    names = hosts_file(root / ".replay", hosts)
    instance = resources["InstanceType"]
    cores = catalog.get_instance(instance.removeprefix("ml.")).neuron_cores
    runs = [
        _prepare_host(
            transport,
            job,
            host,
            hosts,
            root if count == 1 else root / host,
            overlay,
            toolkit,
            names,
            neuron_cores or cores,
        )
        for host in hosts
    ]
    limit = float(job.get("StoppingCondition", {}).get("MaxRuntimeInSeconds", 86400))
    limit = min(limit, timeout_s) if timeout_s else limit
    began = time.monotonic()
    for run in runs:
        if run.sync:
            run.sync.start()
        run.started = start(run.command, env=run.env, cwd=run.opt_ml, log=root / f"training-{run.host}.log")
    try:
        exit_code = _wait_for_hosts(runs, began + limit)
    except BaseException:
        for run in runs:
            run.started.stop()
        raise
    finally:
        for run in runs:
            if run.sync:
                run.sync.finish()
    if exit_code is None:
        output = runs[0].started.output(600)
        raise ReplayError(f"{name} ran past {limit:.0f} s and was stopped: {output!r}", f"its output is in {root}")
    seconds = time.monotonic() - began
    artifacts = None
    if exit_code == 0:  # every host's model and output data, in one archive each (names must not clash)
        prefix = f"{job['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{name}/output/"
        artifacts = prefix + "model.tar.gz"
        s3_put(transport, artifacts, pack(_merged(root, [r.opt_ml / "model" for r in runs], "model")))
        s3_put(
            transport,
            prefix + "output.tar.gz",
            pack(_merged(root, [r.opt_ml / "output" / "data" for r in runs], "data")),
        )
    notes = [
        *(
            [f"neuron-ls reports {neuron_cores} NeuronCores per host where {instance} has {cores}"]
            if neuron_cores
            else []
        ),
        f"{count} × {instance} as processes on this machine, {', '.join(hosts)} at 127.0.0.1..{count} through a "
        "private /etc/hosts; the image's Python is this machine's with the image's training toolkit "
        f"({', '.join(f'{k} {v}' for k, v in toolkit.packages.items())}) ahead of it",
        "the toolkit counts NeuronCores with a stand-in neuron-ls; the processes run on this CPU with gloo (the "
        "Neuron runtime is a CPU stand-in); the image's hostname library (LD_PRELOAD) is not loaded",
    ]
    output = "".join(f"=== {run.host}\n{run.started.output(200_000)}" for run in runs)
    return TrainingReplay(
        name,
        root,
        exit_code,
        runs[0].command,
        output,
        artifacts,
        sum(run.downloaded for run in runs),
        [key for run in runs if run.sync for key in run.sync.uploaded],
        seconds,
        {run.host: list(run.sync.uploaded) if run.sync else [] for run in runs},
        notes,
    )


def _wait_for_hosts(runs: list[HostRun], deadline: float) -> int | None:
    """The job's exit code once every host ended (the first failure stops the others); None past ``deadline``."""
    while time.monotonic() < deadline:
        codes = [run.started.process.poll() for run in runs]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            for run in runs:
                run.started.stop()
            return failed[0]
        if all(code == 0 for code in codes):
            return 0
        time.sleep(0.2)
    for run in runs:
        run.started.stop()  # SageMaker stops the job at MaxRuntimeInSeconds (SIGTERM, then SIGKILL)
    return None


def _merged(root: Path, directories: list[Path], name: str) -> Path:
    """The hosts' ``directories`` copied into one (SageMaker aggregates every host's /opt/ml/model into one archive)."""
    if len(directories) == 1:
        return directories[0]
    merged = root / ".replay" / f"merged-{name}"
    shutil.rmtree(merged, ignore_errors=True)
    merged.mkdir(parents=True)
    for directory in directories:
        shutil.copytree(directory, merged, dirs_exist_ok=True)
    return merged
