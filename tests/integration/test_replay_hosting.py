"""The Inf2 SageMaker template applied to a moto server with the real all-MiniLM-L6-v2 artifact, then replayed as
SageMaker would host it (replay.hosting): ModelDataUrl fetched from S3 and unpacked, the image's serve command
started with the model's Environment, held to the startup health check; the endpoint answers eager PyTorch's
embeddings."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from support.ec2_deployment import transport
from support.sagemaker import MINILM, load

from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.compiler.models import load_model
from neurondeploy.engine.apply import apply_spec
from neurondeploy.engine.model_bundle import dlc_model_dir
from neurondeploy.engine.state import StateStore
from neurondeploy.planner.context import plan_context
from neurondeploy.replay.hosting import ENTRYPOINT, replay_endpoint, start_container
from neurondeploy.replay.image_stack import image_stack
from neurondeploy.replay.sandbox import ReplayError
from neurondeploy.resources.release import serving_piece
from neurondeploy.resources.sagemaker_endpoint import create_endpoint_config_request, create_model_request
from neurondeploy.standin import CPU_STANDIN_ENV, CPU_STANDIN_REASON
from neurondeploy.wheel import toolkit_wheel

from .test_serving import eager_embeddings

# apply sends a CPU trace to inf2 here, then the replay runs it on the CPU: both say so (NEURONDEPLOY_CPU_STANDIN)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("cpu_standin")]
TEXTS = ["Inferentia2 serves sentence embeddings.", "A replay runs what SageMaker would run.", "short"]


# Unpinned (the newest release, 2.31.1) and the oldest supported (2.21.0), with the sagemaker-pytorch-inference
# toolkit each image runs; both run TorchServe 0.11.0 (their Dockerfiles' SM_TOOLKIT_VERSION and TORCHSERVE_VERSION,
# pytorch/inference/2.9.0/Dockerfile.neuronx at 2.31.1, docker/pytorch/inference/2.5.1/Dockerfile.neuronx at 2.21.0).
RELEASES = {"newest": None, "2.21.0": "2.21.0"}
TOOLKIT = {None: "2.0.25", "2.21.0": "2.0.21"}


@pytest.fixture(params=RELEASES.values(), ids=RELEASES.keys())
def applied(sagemaker_world, tmp_path, request):  # noqa: F811
    """The template applied to moto, compiling its artifact as `neurondeploy apply` does (CPU backend here)."""
    pin = {"region: us-east-1\n": f"region: us-east-1\nneuron_sdk_version: {request.param}\n"} if request.param else {}
    loaded = load(tmp_path, MINILM, **pin)
    cache = CompileCache(root=tmp_path / "cache")
    compiled = {}

    def compile_artifact(loaded_spec):
        compiled["dir"] = compile_spec(
            loaded_spec, backend="cpu", cache=cache, out_dir=tmp_path / "artifact"
        ).artifact_dir
        return compiled["dir"]

    apply_spec(
        loaded, transport=transport(), state=StateStore(tmp_path / "state.db"), compile_artifact=compile_artifact
    )
    return loaded, compiled["dir"]


def test_the_replayed_endpoint_answers_eager_pytorchs_embeddings(applied, tmp_path, aws):
    loaded, artifact = applied
    hosted = replay_endpoint(transport(), "minilm-embed", tmp_path / "instance")
    try:
        # unpacked from the S3 object CreateModel names, not the local artifact directory: the artifact, and code/
        # with the handler and this toolkit's wheel, which the DLC's toolkit installed at start
        assert (hosted.model_dir / "manifest.json").read_bytes() == (artifact / "manifest.json").read_bytes()
        assert (hosted.model_dir / "code" / toolkit_wheel().filename).read_bytes() == toolkit_wheel().data
        assert "sagemaker_pytorch_serving_container" in hosted.container.command[-1]  # the DLC's serve
        # The image's serving stack ran, not this machine's: TorchServe says its version as it starts, and the
        # container's Python finds the image's toolkit.
        model = aws.client("sagemaker").describe_model(ModelName=_model_name(aws))["PrimaryContainer"]
        stack = image_stack(model["Image"])
        assert (
            stack is not None
            and stack.versions["sagemaker-pytorch-inference"] == TOOLKIT[loaded.spec.neuron_sdk_version]
        )
        assert f"Torchserve version: {stack.versions['torchserve']}" in hosted.container.log.read_text()
        found = subprocess.run(
            [hosted.container.command[0], "-c", FOUND_VERSIONS], capture_output=True, text=True, check=True
        )
        assert json.loads(found.stdout) == stack.versions
        assert any(note.startswith("serving stack: torchserve 0.11.0") for note in hosted.notes), hosted.notes
        described = _described(hosted)
        assert (described["batchSize"], described["minWorkers"]) == (8, 2), json.dumps(described)  # the spec's
        # A wrong request gets what `neurondeploy serve` answers: 4xx and one line of JSON, no traceback (the
        # toolkit's own answer to a raised error is 500 with the traceback in the body).
        for body, content_type, status in [
            (b'{"inputs": 5}', "application/json", 400),
            (b'{"foo": "x"}', "application/json", 400),
            (b"not json", "application/json", 400),
            (b"some text", "text/plain", 415),
        ]:
            got, answer = _post(f"{hosted.url}/invocations", body, content_type)
            assert got == status and answer.count(b"\n") == 0 and b"Traceback" not in answer, (got, answer)
            assert json.loads(answer)["error"]
        environ = (Path("/proc") / str(hosted.container.process.pid) / "environ").read_bytes().split(b"\0")
        assert f"{CPU_STANDIN_ENV}={CPU_STANDIN_REASON}".encode() in environ  # said, not silently bypassed
        answer = hosted.invoke(json.dumps({"inputs": TEXTS}).encode())
        assert answer["ContentType"].startswith("application/json")
        got = torch.tensor(json.loads(answer["Body"]))
        expected = eager_embeddings(artifact, load_model(loaded.spec, loaded.base_dir).module, TEXTS)
        assert got.shape == (3, 384)
        assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
        # Served by our handler, which batches what TorchServe gathers (the toolkit's would call transform_fn once
        # per request): requests sent together share runs, each still answered with its own embedding.
        assert answer["CustomAttributes"] == "neurondeploy-batched-requests=1"
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda text: hosted.invoke(json.dumps({"inputs": text}).encode()), TEXTS * 8))
        shared = [int(a["CustomAttributes"].rpartition("=")[2]) for a in answers]
        assert max(shared) > 1, shared
        for text, each in zip(TEXTS * 8, answers):
            alone = torch.tensor(json.loads(each["Body"]))
            assert torch.allclose(alone, expected[TEXTS.index(text)], atol=1e-5)
        assert any("CPU stand-in" in note for note in hosted.notes)
    finally:
        hosted.stop()
    # The model's Environment is all the container gets: a broken serving setting there is a failed endpoint.
    sm = aws.client("sagemaker")
    config = sm.describe_endpoint_config(
        EndpointConfigName=sm.describe_endpoint(EndpointName="minilm-embed")["EndpointConfigName"]
    )
    variant = config["ProductionVariants"][0]
    container = sm.describe_model(ModelName=variant["ModelName"])["PrimaryContainer"]
    broken = {**container, "Environment": {**container["Environment"], "NEURONDEPLOY_SERVING": "{not json"}}
    with pytest.raises(ReplayError, match="exited with"):
        start_container(broken, variant, hosted.model_dir, root=tmp_path / "broken")


FOUND_VERSIONS = (
    "import json, importlib.metadata as m; "
    "print(json.dumps({n: m.version(n) for n in ('torchserve', 'torch-model-archiver', 'sagemaker-pytorch-inference')}))"
)


def _model_name(aws) -> str:
    sm = aws.client("sagemaker")
    config = sm.describe_endpoint_config(
        EndpointConfigName=sm.describe_endpoint(EndpointName="minilm-embed")["EndpointConfigName"]
    )
    return config["ProductionVariants"][0]["ModelName"]


def test_our_own_image_stays_an_option_and_its_entrypoint_serves_the_model(artifact, tmp_path):  # noqa: F811
    """With deployment.container.image_uri naming our image, the model's container is infra/serving's entrypoint."""
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/neurondeploy-serving:0.1.0"
    loaded = load(
        tmp_path, MINILM, **{"  instance_count: 1\n": f"  instance_count: 1\n  container:\n    image_uri: {image}\n"}
    )
    ctx = plan_context(loaded, account_id="123456789012")
    container = create_model_request(loaded.spec, ctx)["PrimaryContainer"]
    (variant,) = create_endpoint_config_request(loaded.spec, ctx)["ProductionVariants"]
    assert container["Image"] == image and "SAGEMAKER_PROGRAM" not in container["Environment"]
    hosted = start_container(container, variant, artifact, root=tmp_path / "instance")
    try:
        assert hosted.container.command[-2:] == [str(ENTRYPOINT), "serve"]
        answer = json.loads(hosted.invoke(json.dumps({"inputs": [1, 2, 3]}).encode())["Body"])
        assert len(answer) == 16
    finally:
        hosted.stop()


def _post(url: str, body: bytes, content_type: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, body, {"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _described(hosted) -> dict:
    """TorchServe's own view of the model (its management API, on the replay's address)."""
    with urllib.request.urlopen(f"{hosted.url}/models/model", timeout=10) as response:
        return json.loads(response.read())[0]


def _workers(hosted) -> list[dict]:
    return _described(hosted)["workers"]


def _until(predicate, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    return predicate()


def test_each_torchserve_worker_reserves_its_own_neuroncores_and_one_per_vcpu_fails(artifact, tmp_path):  # noqa: F811
    """ml.inf2.xlarge has 2 NeuronCores and 4 vCPUs. The plan's workers (2, one NeuronCore each) all load and
    serve; without them TorchServe starts one worker per vCPU, the first reserves every core (the runtime's
    default) and the others fail to load as they would on the instance."""
    loaded = load(tmp_path, MINILM)
    ctx = plan_context(loaded, account_id="123456789012")
    container = create_model_request(loaded.spec, ctx)["PrimaryContainer"]
    (variant,) = create_endpoint_config_request(loaded.spec, ctx)["ProductionVariants"]
    env = container["Environment"]
    assert (env["SAGEMAKER_MODEL_SERVER_WORKERS"], env["NEURON_RT_NUM_CORES"]) == ("2", "1")
    model_dir = dlc_model_dir(artifact, toolkit_wheel(), serving_piece(loaded.spec))
    hosted = start_container(container, variant, model_dir, root=tmp_path / "planned")
    try:
        ready = _until(lambda: [w for w in _workers(hosted) if w["status"] == "READY"][1:], 90)
        assert ready and len(_workers(hosted)) == 2
        for _ in range(4):  # TorchServe hands requests to its workers in turn: each serves
            assert len(json.loads(hosted.invoke(json.dumps({"inputs": [1, 2, 3]}).encode())["Body"])) == 16
        assert "are not available" not in hosted.container.log.read_text()
    finally:
        hosted.stop()

    # Unset (the plan before): one worker per vCPU, the first holds both cores, the others cannot load, and the
    # model server stops, so the endpoint fails its health check instead of answering Healthy.
    planned_workers = ("SAGEMAKER_MODEL_SERVER_WORKERS", "NEURON_RT_NUM_CORES", "SAGEMAKER_TS_MIN_WORKERS")
    planned_workers += ("SAGEMAKER_TS_MAX_WORKERS", "SAGEMAKER_TS_BATCH_SIZE", "SAGEMAKER_TS_MAX_BATCH_DELAY")
    planned_workers += ("SAGEMAKER_TS_RESPONSE_TIMEOUT",)  # any SAGEMAKER_TS_* makes the toolkit set the workers
    unset = {k: v for k, v in env.items() if k not in planned_workers}
    log = _fails_to_serve({**container, "Environment": unset}, variant, model_dir, tmp_path / "unset")
    assert "NeuronCores all of 2 are not available" in log and "stopping TorchServe" in log, _why(log)
    assert "Torchserve version" in log and "Default workers per model: 4" in log  # the instance's 4 vCPUs


def _why(log: str) -> str:
    """The lines of a container log that say why it stopped (pytest's repr of a whole log keeps only its ends)."""
    telling = [line for line in log.splitlines() if any(word in line for word in ("ERROR", "Exception", "Error"))]
    return "\n".join(telling[-20:] or log.splitlines()[-20:])


def _fails_to_serve(container, variant, model_dir, root) -> str:
    """Start the container and return its log once it has exited (at start, or soon after /ping first answered)."""
    try:
        hosted = start_container(container, variant, model_dir, root=root)
    except ReplayError as exc:
        assert "exited with" in exc.message
        return (root / "container.log").read_text()
    try:
        assert _until(lambda: hosted.container.returncode() is not None, 90), "still serving"
        return hosted.container.log.read_text()
    finally:
        hosted.stop()


def test_a_model_that_cannot_load_fails_the_startup_health_check(artifact, tmp_path):  # noqa: F811
    """The reported failure: every worker's model_fn fails (here: a NeuronCore the instance does not have), yet
    TorchServe 0.11.0 answered /ping 200 "Healthy" from its start on, so the endpoint would go InService. Now the
    worker stops the model server and the container exits: SageMaker's health check fails."""
    loaded = load(tmp_path, MINILM)
    ctx = plan_context(loaded, account_id="123456789012")
    container = create_model_request(loaded.spec, ctx)["PrimaryContainer"]
    (variant,) = create_endpoint_config_request(loaded.spec, ctx)["ProductionVariants"]
    broken = {**container, "Environment": {**container["Environment"], "NEURON_RT_VISIBLE_CORES": "7"}}
    model_dir = dlc_model_dir(artifact, toolkit_wheel(), serving_piece(loaded.spec))
    log = _fails_to_serve(broken, variant, model_dir, tmp_path / "broken")
    assert "NeuronCores 7 of 2 are not available" in log and "stopping TorchServe" in log, _why(log)
