"""SageMaker training replay: a CreateTrainingJob request run as SageMaker and the PyTorch/Neuron training container
(sagemaker-training-toolkit) run it, on one host here.

The platform's part: ``/opt/ml`` under the sandbox root; ``input/config/{hyperparameters,resourceconfig,
inputdataconfig}.json`` written; S3Prefix channels downloaded to ``/opt/ml/input/data/<channel>``; the checkpoint
S3Uri downloaded to ``CheckpointConfig.LocalPath`` before the start and the local path uploaded as files appear and
once more at the end; ``/opt/ml/model`` packed to ``<S3OutputPath>/<job>/output/model.tar.gz`` and
``/opt/ml/output/data`` to ``output.tar.gz``. The toolkit's part: ``sagemaker_submit_directory`` fetched and unpacked
into ``/opt/ml/code``; every other hyperparameter JSON-decoded and passed as ``--key value`` in sorted order
(``mapping.to_cmd_args``) and as ``SM_HP_<KEY>``; the ``SM_*`` environment; with
``sagemaker_torch_distributed_enabled``, ``torchrun --nnodes 1 --nproc_per_node <NeuronCores>``. The job's own
``Environment`` is set as sent, its ``/opt/ml`` paths moved under the root.

Not replayed: more than one host (EFA, ``algo-N`` rendezvous), ``neuron_parallel_compile``
(``RUN_NEURON_PARALLEL_COMPILE``: without a Neuron compiler there is nothing to compile), the Neuron runtime (the
processes run on the CPU with gloo; every one gets the CPU stand-in flag).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.aws.transport import AwsTransport
from neurondeploy.replay.sandbox import (
    ReplayError,
    host_path,
    pack,
    process_env,
    s3_bytes,
    s3_download_prefix,
    s3_put,
    start,
    unpack,
)

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


def to_cmd_args(hyperparameters: dict[str, object]) -> list[str]:
    """sagemaker_training.mapping.to_cmd_args: sorted keys, ``--key`` (``-k`` for one letter), ``str(value)``."""
    args: list[str] = []
    for key in sorted(hyperparameters):
        value = hyperparameters[key]
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in sorted(value.items()))
        args += [f"--{key}" if len(key) > 1 else f"-{key}", "" if value is None else str(value)]
    return args


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


def replay_training_job(
    transport: AwsTransport,
    job: dict,
    root: Path,
    *,
    timeout_s: float | None = None,
) -> TrainingReplay:
    """Run the CreateTrainingJob request ``job`` (as sent: state records it) in ``root``; waits until it ends
    (``StoppingCondition.MaxRuntimeInSeconds``, or ``timeout_s`` when shorter)."""
    root = Path(root).resolve()
    name = job["TrainingJobName"]
    resources = job["ResourceConfig"]
    if resources.get("InstanceCount", 1) != 1:
        raise ReplayError(
            f"{name} asks for {resources['InstanceCount']} hosts; the replay runs one",
            "replay a one-instance job (instance_count: 1)",
        )
    if job.get("Environment", {}).get("RUN_NEURON_PARALLEL_COMPILE") == "1":
        raise ReplayError(
            f"{name} sets RUN_NEURON_PARALLEL_COMPILE=1: the container runs neuron_parallel_compile, a graph-extraction "
            "trial that only fills the compile cache, and there is no Neuron compiler here",
            "replay it with parallel_compile: false",
        )
    opt_ml = host_path(root, OPT_ML)
    mounts = {OPT_ML: opt_ml}
    checkpoint = job.get("CheckpointConfig")
    local = None
    if checkpoint:
        local_path = checkpoint.get("LocalPath", "/opt/ml/checkpoints")
        local = mounts[local_path] = host_path(root, local_path)
    launch = container_launch(job, mounts)
    code, model, output = opt_ml / "code", opt_ml / "model", opt_ml / "output"
    config = opt_ml / "input" / "config"
    for directory in (code, model, output / "data", config):
        directory.mkdir(parents=True, exist_ok=True)
    (config / "hyperparameters.json").write_text(json.dumps(job.get("HyperParameters", {})))
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": HOST, "hosts": [HOST]}))
    (config / "inputdataconfig.json").write_text(
        json.dumps({c["ChannelName"]: {"TrainingInputMode": "File"} for c in job.get("InputDataConfig", [])})
    )
    unpack(s3_bytes(transport, str(decode(job["HyperParameters"]["sagemaker_submit_directory"]))), code)
    for channel in job.get("InputDataConfig", []):
        directory = launch.channels[channel["ChannelName"]]
        directory.mkdir(parents=True, exist_ok=True)
        s3_download_prefix(transport, channel["DataSource"]["S3DataSource"]["S3Uri"], directory)
    sync = None
    downloaded = 0
    if checkpoint:
        local.mkdir(parents=True, exist_ok=True)
        downloaded = len(s3_download_prefix(transport, checkpoint["S3Uri"], local))
        sync = CheckpointSync(transport, local, checkpoint["S3Uri"])
        sync.mark_present()

    env = process_env(
        launch.env,
        {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // launch.processes))},
        aws=True,  # the execution role, stood in for by the caller's credentials
    )
    limit = float(job.get("StoppingCondition", {}).get("MaxRuntimeInSeconds", 86400))
    limit = min(limit, timeout_s) if timeout_s else limit
    began = time.monotonic()
    if sync:
        sync.start()
    started = start(launch.command, env=env, cwd=code, log=root / "training.log")
    try:
        exit_code = started.process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        started.stop()  # SageMaker stops the job at MaxRuntimeInSeconds (SIGTERM, then SIGKILL)
        raise ReplayError(
            f"{name} ran past {limit:.0f} s and was stopped: {started.output(600)!r}", f"its output is in {started.log}"
        ) from None
    except BaseException:
        started.stop()
        raise
    finally:
        if sync:
            sync.finish()
    seconds = time.monotonic() - began
    artifacts = None
    if exit_code == 0:
        prefix = f"{job['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{name}/output/"
        artifacts = prefix + "model.tar.gz"
        s3_put(transport, artifacts, pack(model))
        s3_put(transport, prefix + "output.tar.gz", pack(output / "data"))
    notes = [
        f"{resources['InstanceType']}: {launch.processes} processes (one per NeuronCore) on this CPU with gloo; the "
        "Neuron runtime is a CPU stand-in",
        f"/opt/ml is {opt_ml}",
    ]
    return TrainingReplay(
        name,
        root,
        exit_code,
        launch.command,
        started.output(200_000),
        artifacts,
        downloaded,
        sync.uploaded if sync else [],
        seconds,
        notes,
    )
