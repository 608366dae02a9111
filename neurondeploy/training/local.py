"""`train SPEC --local`: the CreateTrainingJob request the plan renders for the spec, launched on this machine's
CPU (gloo) as the training container launches it: the command (torchrun, the entry script, the hyperparameters as
the toolkit passes them) and the environment (``SM_*`` and the job's own) come from the SageMaker replay's
derivation (:func:`neurondeploy.replay.training.container_launch`), so the script cannot tell the difference.

What differs, and is said when it runs: local directories are mounted where the container has ``/opt/ml``: the input
channels (``inputs.<name>.local_path``), the checkpoint location (``<work dir>/checkpoints``, what SageMaker syncs with
``checkpoint.s3_uri``), the model and output directories, the source directory as ``/opt/ml/code``; torchrun starts
``--processes`` workers instead of one per NeuronCore, with the spec's parallel layout scaled down to them (see
``local_layout``) in the request's hyperparameters; and the EFA variables of multi-node jobs are left out (one host).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.sizing import parameter_count
from neurondeploy.replay.training import container_launch, to_cmd_args
from neurondeploy.resources.sagemaker_training import create_training_job_request, script_hyperparameters
from neurondeploy.specs import LoadedSpec
from neurondeploy.training.entry import source_directory, with_overrides
from neurondeploy.training.token_dataset import read_marker

HOST = "algo-1"  # SageMaker's name for the first (here: only) host
CHECKPOINT_PREFIX = "step_"
COMPLETE_MARKER = "trainer.json"  # the reference script writes it last into a finished checkpoint
STOP_GRACE_S = 60  # SIGTERM lets the script finish its step and checkpoint; then it is killed
TORCHRUN_LOG = re.compile(r"^[DIWE]\d{4} \d\d:")  # glog-style lines of torchrun's agent
WORKER_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\)")  # the agent's line naming the first worker that failed


class LocalTrainingError(NeurondeployError):
    exit_code = 9


@dataclass(frozen=True)
class LocalLayout:
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int

    def describe(self) -> str:
        return f"TP={self.tensor_parallel} PP={self.pipeline_parallel} DP={self.data_parallel}"


def local_layout(tensor_parallel: int, pipeline_parallel: int, processes: int) -> LocalLayout:
    """The spec's layout scaled down to ``processes``: pipeline stages first, then tensor shards, each cut to
    the largest degree that divides both, and data parallel takes the rest. TP=8 on 2 processes runs TP=2,
    so the sharded code path (and its checkpoints) is exercised even though the degree is smaller."""
    pipeline = math.gcd(pipeline_parallel, processes)
    tensor = math.gcd(tensor_parallel, processes // pipeline)
    return LocalLayout(tensor, pipeline, processes // (pipeline * tensor))


@dataclass
class LocalTrainingResult:
    exit_code: int
    work_dir: Path
    processes: int
    layout: LocalLayout
    resumed_from_step: int | None = None
    last_step: int | None = None
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, loss) logged by this run
    checkpoints: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        data["work_dir"] = str(self.work_dir)
        return data


def script_arguments(hyperparameters: dict[str, object]) -> list[str]:
    """``--key value`` as SageMaker's training toolkit passes JSON-decoded hyperparameters (sorted, str())."""
    return to_cmd_args(hyperparameters)


def local_hyperparameters(loaded: LoadedSpec, layout: LocalLayout) -> dict[str, object]:
    """What the SageMaker job's script receives, minus the toolkit's own keys, with the scaled layout."""
    decoded = {
        key: value for key, value in script_hyperparameters(loaded.spec).items() if not key.startswith("sagemaker_")
    }
    decoded |= local_model(loaded, layout)[0]
    decoded["tensor_parallel_size"] = layout.tensor_parallel
    decoded["pipeline_parallel_size"] = layout.pipeline_parallel
    return decoded


def channel_dirs(loaded: LoadedSpec) -> dict[str, Path]:
    channels = {}
    for name, channel in loaded.spec.inputs.items():
        if not channel.local_path:
            raise LocalTrainingError(
                f"input channel {name} has only s3_uri; --local reads channels from local directories",
                f"set inputs.{name}.local_path (e.g. after `aws s3 sync {channel.s3_uri} data/{name}`)",
            )
        directory = (loaded.base_dir / channel.local_path).resolve()
        if not directory.is_dir():
            raise LocalTrainingError(
                f"inputs.{name}.local_path {directory} is not a directory",
                f"create it or point inputs.{name}.local_path at the channel's data",
            )
        channels[name] = directory
    return channels


# A model larger than this is scaled down for --local (a laptop's CPU trains a few steps of it in minutes).
LOCAL_MAX_PARAMETERS = 50_000_000
LOCAL_HEAD_DIM = 16  # the scaled model's head width
BYTE_VOCABULARY = 256  # the reference script reads a text channel as bytes


def local_vocabulary(loaded: LoadedSpec) -> int:
    """The ids the train channel holds: a tokenized dataset's, up to its tokenizer's size (the record `neurondeploy
    data` writes beside it; without one, the model's vocabulary), or a text channel's bytes."""
    spec = loaded.spec
    channel = spec.inputs.get("train")
    if channel is None or channel.format != "tokenized":
        return BYTE_VOCABULARY
    record = read_marker(loaded.base_dir / channel.local_path) if channel.local_path else None
    return record.vocab_size if record else spec.architecture.vocab_size


def local_model(loaded: LoadedSpec, layout: LocalLayout) -> tuple[dict[str, object], str | None]:
    """The spec's architecture scaled down for this CPU when it is larger than ``LOCAL_MAX_PARAMETERS``: the same
    kind of model (its query heads per KV head, MLP width per hidden unit, gating), split legally over the local
    layout, on the train channel's vocabulary (``local_vocabulary``); and the line that says so. ({}, None): the
    spec's model as it is."""
    spec = loaded.spec
    arch = spec.architecture
    if arch is None or parameter_count(arch) <= LOCAL_MAX_PARAMETERS:
        return {}, None
    group = max(1, arch.attention_heads // arch.key_value_heads)  # query heads per KV head
    kv_local = layout.tensor_parallel  # one whole KV head per rank
    hidden = kv_local * group * LOCAL_HEAD_DIM
    width = arch.dense_intermediate_size / arch.hidden_size
    intermediate = math.ceil(hidden * width / layout.tensor_parallel) * layout.tensor_parallel
    vocabulary = local_vocabulary(loaded)
    model = {
        "layers": max(2, layout.pipeline_parallel),
        "hidden_size": hidden,
        "heads": kv_local * group,
        "kv_heads": kv_local,
        "intermediate_size": intermediate,
        "vocab_size": vocabulary,
    }
    said = (
        f"model scaled for this CPU: {model['layers']} layers × {hidden} (heads {model['heads']}, kv_heads {kv_local}, "
        f"intermediate {intermediate}, vocabulary {vocabulary}) instead of the spec's {arch.layers} × "
        f"{arch.hidden_size} ({parameter_count(arch) / 1e9:.1f}B parameters), which the job trains; validate checks "
        "its full layout"
    )
    return model, said


LOCAL_S3 = "s3://neurondeploy-local"  # names what --local keeps in local directories, so the request can render
ONE_HOST_ONLY = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE")  # EFA between hosts: nothing here


def local_job(loaded: LoadedSpec, layout: LocalLayout) -> dict:
    """The CreateTrainingJob request the plan renders for the spec, with the local adjustments: the scaled layout
    in its hyperparameters, and S3 URIs named for what only lives locally (channels with only local_path, no
    checkpoint URI) so that it renders."""
    spec = loaded.spec
    inputs = {
        name: channel if channel.s3_uri else channel.model_copy(update={"s3_uri": f"{LOCAL_S3}/{spec.name}/{name}"})
        for name, channel in spec.inputs.items()
    }
    checkpoint = spec.checkpoint
    if not checkpoint.s3_uri:
        checkpoint = checkpoint.model_copy(update={"s3_uri": f"{LOCAL_S3}/{spec.name}/checkpoints"})
    spec = spec.model_copy(update={"inputs": inputs, "checkpoint": checkpoint})
    ctx = plan_context(dataclasses.replace(loaded, spec=spec), run_id="local", account_id="000000000000")
    job = create_training_job_request(spec, ctx)
    job["HyperParameters"] = {
        **job["HyperParameters"],
        **{key: json.dumps(value) for key, value in local_model(loaded, layout)[0].items()},
        "tensor_parallel_size": json.dumps(layout.tensor_parallel),
        "pipeline_parallel_size": json.dumps(layout.pipeline_parallel),
    }
    job["Environment"] = {k: v for k, v in job["Environment"].items() if k not in ONE_HOST_ONLY}
    return job


def sagemaker_environment(
    loaded: LoadedSpec, *, work_dir: Path, processes: int, hyperparameters: dict[str, object], channels: dict[str, Path]
) -> dict[str, str]:
    """The variables the training container sets for the spec's job (scaled to ``processes`` and the layout in
    ``hyperparameters``), with its container paths on local directories."""
    layout = LocalLayout(
        int(hyperparameters.get("tensor_parallel_size", 1)), int(hyperparameters.get("pipeline_parallel_size", 1)), 0
    )
    return local_launch(loaded, layout, work_dir=work_dir, processes=processes, channels=channels).env


def local_launch(loaded: LoadedSpec, layout: LocalLayout, *, work_dir: Path, processes: int, channels, source=None):
    job = local_job(loaded, layout)
    mounts = {
        "/opt/ml": work_dir,
        "/opt/ml/code": source or source_directory(loaded),
        job["CheckpointConfig"]["LocalPath"]: work_dir / "checkpoints",
        **{f"/opt/ml/input/data/{name}": directory for name, directory in channels.items()},
    }
    return container_launch(job, mounts, processes=processes)


def completed_checkpoints(directory: Path) -> list[Path]:
    found = [p for p in directory.glob(f"{CHECKPOINT_PREFIX}*") if (p / COMPLETE_MARKER).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]))


def _torchrun_available() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise LocalTrainingError(
            "torch is not installed in this environment; --local runs the script with torchrun",
            "pip install torch==2.13.0 (CPU build), or pip install 'neurondeploy[compile]'",
        )


def _child_setup() -> None:
    """torchrun runs in its own session, so a terminal's Ctrl-C reaches only us and we send it one SIGTERM
    (torchrun handles a second signal during its shutdown badly, killing the workers mid-checkpoint). Should we
    die without cleaning up, Linux sends torchrun SIGTERM (PR_SET_PDEATHSIG), so nothing keeps running orphaned."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to torchrun (it forwards it to the workers, which finish the step, checkpoint and exit); then kill."""
    try:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _kill_if_running(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()


def run_local_training(
    loaded: LoadedSpec,
    *,
    processes: int | None = None,
    work_dir: Path | None = None,
    hyperparameters: dict[str, object] | None = None,
    on_event: Callable[[str], None] | None = None,
    notes: tuple[str, ...] = (),
) -> LocalTrainingResult:
    """The spec's entry script under torchrun here; ``on_event`` hears what happens (default: stderr), ``notes``
    first, once the run is sure to start."""
    loaded = with_overrides(loaded, hyperparameters or {})
    spec = loaded.spec
    processes = spec.local_processes if processes is None else processes
    if processes < 1:
        raise LocalTrainingError(f"--processes {processes} must be 1 or more", "e.g. --processes 2")
    script = source_directory(loaded) / spec.entry_point
    channels = channel_dirs(loaded)
    _torchrun_available()
    work_dir = (work_dir or Path(".neurondeploy") / "train" / spec.name).resolve()
    try:
        for sub in ("model", "output/data", "checkpoints", "input"):
            (work_dir / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalTrainingError(
            f"work dir {work_dir}: {exc.strerror}: {exc.filename}",
            "pass --work-dir a directory you can write (it is created if missing)",
        ) from None
    dist = spec.distribution
    layout = local_layout(dist.tensor_parallel, dist.pipeline_parallel, processes)
    launch = local_launch(
        loaded, layout, work_dir=work_dir, processes=processes, channels=channels, source=script.parent
    )
    env = {
        **os.environ,
        **launch.env,
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // processes)),
        "PYTHONUNBUFFERED": "1",
    }
    say = on_event or (lambda message: print(message, file=sys.stderr))
    for note in notes:
        say(note)
    say(
        f"{spec.name}: spec layout TP={dist.tensor_parallel} PP={dist.pipeline_parallel} on "
        f"{spec.instance_count} × {spec.instance_type}; locally {processes} processes: {layout.describe()} (gloo, CPU)"
    )
    scaled = local_model(loaded, layout)[1]
    if scaled:
        say(f"{spec.name}: {scaled}")
    say(f"work dir {work_dir} (checkpoints/ stands in for {spec.checkpoint.s3_uri or 'the checkpoint location'})")
    say("the command and environment are the training container's for the plan's CreateTrainingJob request")
    command = launch.command
    result = LocalTrainingResult(exit_code=0, work_dir=work_dir, processes=processes, layout=layout)
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=script.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_child_setup,
    )
    interrupted = False
    agent = TorchrunAgentOutput()
    try:
        while True:
            try:
                for line in process.stdout:  # until the script exits; its last words matter after Ctrl-C too
                    _observe(line, result)
                    if agent.shown(line):
                        sys.stderr.write(line)
                break
            except KeyboardInterrupt:
                if interrupted:  # a second Ctrl-C: no more waiting for the checkpoint
                    process.kill()
                    continue
                interrupted = agent.stopping = True
                say(
                    "stopping: the script finishes its step and checkpoints (Ctrl-C again kills it); "
                    "run the same command again to resume"
                )
                deadline = threading.Timer(STOP_GRACE_S, _kill_if_running, (process,))
                deadline.daemon = True  # must not keep us alive once torchrun has exited
                deadline.start()
                process.send_signal(signal.SIGTERM)
        result.exit_code = 130 if interrupted else process.wait()
    finally:
        if process.poll() is None:
            _stop(process)
    result.seconds = time.perf_counter() - started
    result.checkpoints = [str(p) for p in completed_checkpoints(work_dir / "checkpoints")]
    if result.exit_code not in (0, 130):
        code = agent.worker_exit if agent.worker_exit is not None else result.exit_code
        raise LocalTrainingError(
            f"the training script exited with {code} (its output is above)",
            "fix the script or spec; completed checkpoints are kept and the next run resumes from them",
        )
    return result


class TorchrunAgentOutput:
    """Once torchrun's workers have stopped (Ctrl-C, or one failed), its agent's own reports only repeat what they
    printed: shutdown chatter, the SignalException or ChildFailedError traceback and summary. Those are held back;
    the workers' output, the user's script's, is always shown."""

    def __init__(self) -> None:
        self.stopping = False
        self.hiding = False
        self.worker_exit: int | None = None  # the failed worker's own exit code (torchrun exits 1 whatever it was)

    def shown(self, line: str) -> bool:
        agent_line = TORCHRUN_LOG.match(line) is not None
        failed = WORKER_FAILED.search(line) if agent_line else None
        if failed and self.worker_exit is None:
            self.worker_exit, self.stopping = int(failed.group(1)), True
        self.hiding = self.hiding or (self.stopping and line.startswith("Traceback"))
        return not (self.hiding or (self.stopping and agent_line))


def _observe(line: str, result: LocalTrainingResult) -> None:
    """Progress the reference script prints (rank 0): 'step N/M loss L ...' and 'resumed from checkpoint step N'."""
    words = line.split()
    if len(words) >= 4 and words[0] == "step" and words[2] == "loss" and "/" in words[1]:
        try:
            step, loss = int(words[1].split("/")[0]), float(words[3])
        except ValueError:
            return
        result.last_step = step
        result.losses.append((step, loss))
    elif line.startswith("resumed from checkpoint step "):
        result.resumed_from_step = int(words[4])
