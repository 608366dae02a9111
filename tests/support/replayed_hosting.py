"""SageMaker hosting inside the moto server, done by the hosting replay (neurondeploy.replay.hosting): test-only
patches so that an endpoint's container really starts here and is held to its startup health check, as SageMaker
does, and InvokeEndpoint reaches it. The moto server runs in this process, so patching its classes reaches it.

- CreateEndpoint: the endpoint is Creating while its config's container starts (in a thread); InService once
  ``/ping`` answers within ContainerStartupHealthCheckTimeoutInSeconds, Failed with a FailureReason otherwise.
- UpdateEndpoint (on top of tests/support/sagemaker._update_endpoint's checks): Updating while the new config's
  container starts; healthy, the endpoint moves to the new config; not, the endpoint is InService on the old
  config, served again, with a FailureReason: SageMaker's rollback of a failed update. One difference: SageMaker
  starts the new fleet beside the old one (blue/green), while the replay runs one TorchServe per machine, so the
  old container stops first and starts again on a rollback.
- InvokeEndpoint: the body, Content-Type and Accept go to the serving container's ``/invocations``; its answer
  (and CustomAttributes) comes back; a non-2xx answer is the runtime's ModelError.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.errors import NeurondeployError
from neurondeploy.replay.hosting import replay_config
from neurondeploy.replay.sandbox import ReplayError
from support import sagemaker

LOAD_TIMEOUT_S = 120


def loaded_within(hosted, timeout_s: float) -> None:
    """TorchServe answers /ping "Healthy" before any worker has loaded the model; our handler stops it when the
    model cannot load (serving/sagemaker_handler.stop_the_model_server), which SageMaker sees as a failed container.
    Here: every worker READY in TorchServe's management API (the replay binds it to the same address), or the
    container's exit, which raises."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if hosted.container.returncode() is not None:
            hosted.stop()
            raise ReplayError(f"the container exited with {hosted.container.returncode()}", "see container.log")
        try:
            with urllib.request.urlopen(f"{hosted.url}/models/model", timeout=5) as response:
                workers = json.loads(response.read())[0]["workers"]
            if workers and all(worker["status"] == "READY" for worker in workers):
                return
        except urllib.error.HTTPError:
            return  # no TorchServe management API: not the DLC route, /ping is the whole check
        except urllib.error.URLError:
            pass
        time.sleep(0.5)
    hosted.stop()
    raise ReplayError(f"the model did not load within {timeout_s:.0f} s", "see container.log")


class ReplayedHosting:
    """Containers start on one thread of their own that lives until :meth:`stop`: the replay's processes die with
    the thread that started them (PR_SET_PDEATHSIG, replay/sandbox.py), as a container dies with its host."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.serving: dict[str, object] = {}  # endpoint name -> the HostedContainer answering it
        self.started: list[object] = []
        self.starts: queue.Queue = queue.Queue()
        self.runs = 0
        self.host = threading.Thread(target=self._host, daemon=True)
        self.host.start()

    def install(self, monkeypatch) -> ReplayedHosting:
        from moto.sagemaker.responses import SageMakerResponse
        from moto.sagemakerruntime.responses import SageMakerRuntimeResponse

        hosting = self
        create = SageMakerResponse.create_endpoint

        def create_endpoint(self):
            result = create(self)
            endpoint = self.sagemaker_backend.endpoints[self._get_param("EndpointName")]
            endpoint.endpoint_status = "Creating"
            hosting._start(endpoint, endpoint.endpoint_config_name, old=None)
            return result

        def update_endpoint(self):
            endpoint = self.sagemaker_backend.endpoints.get(self._get_param("EndpointName"))
            old_config = endpoint.endpoint_config_name if endpoint else None
            result = sagemaker._update_endpoint(self)  # its checks, then the move to the new config
            new_config = endpoint.endpoint_config_name
            endpoint.endpoint_config_name, endpoint.endpoint_status = old_config, "Updating"
            hosting._start(endpoint, new_config, old=old_config)
            return result

        def invoke_endpoint(self):
            return hosting._invoke(self._get_param("EndpointName"), self.raw_body, self.headers)

        monkeypatch.setattr(SageMakerResponse, "create_endpoint", create_endpoint)
        monkeypatch.setattr(SageMakerResponse, "update_endpoint", update_endpoint, raising=False)
        monkeypatch.setattr(SageMakerRuntimeResponse, "invoke_endpoint", invoke_endpoint)
        return self

    def _start(self, endpoint, config_name: str, old: str | None) -> None:
        self.starts.put((endpoint, config_name, old))

    def _host(self) -> None:
        """One start at a time, until stop() sends None."""
        while (job := self.starts.get()) is not None:
            endpoint, config_name, old = job
            previous = self.serving.pop(endpoint.endpoint_name, None)
            if (
                previous is not None
            ):  # one TorchServe per machine: the old fleet stops first (SageMaker's keeps running)
                previous.stop()
            try:
                self._serve(endpoint, config_name)
            except NeurondeployError as exc:
                # SageMaker's wording, with what the replay saw
                endpoint.failure_reason = (
                    "The primary container for production variant AllTraffic did not pass the ping health check "
                    f"({config_name}: {exc.message})"
                )[:1024]
                if old is None:
                    endpoint.endpoint_status = "Failed"
                    continue
                self._serve(endpoint, old)  # SageMaker's rollback: the old config serves again
            endpoint.endpoint_status = "InService"

    def _serve(self, endpoint, config_name: str) -> None:
        self.runs += 1
        root = self.root / f"{endpoint.endpoint_name}-{self.runs}"
        hosted = replay_config(AwsTransport("us-east-1"), config_name, root)
        self.started.append(hosted)
        loaded_within(hosted, LOAD_TIMEOUT_S)
        self.serving[endpoint.endpoint_name] = hosted
        endpoint.endpoint_config_name = config_name

    def _invoke(self, name: str, body: bytes, headers) -> tuple[int, dict, bytes]:
        hosted = self.serving.get(name)
        if hosted is None:
            return (
                400,
                {"Content-Type": "application/json"},
                b'{"message": "Endpoint %s is not serving"}' % name.encode(),
            )
        sent = {key: headers[key] for key in ("Content-Type", "Accept") if headers.get(key)}
        request = urllib.request.Request(f"{hosted.url}/invocations", body, sent)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = {"Content-Type": response.headers.get("Content-Type", "")}
                attributes = response.headers.get("X-Amzn-SageMaker-Custom-Attributes")
                if attributes:
                    answer["X-Amzn-SageMaker-Custom-Attributes"] = attributes
                return 200, answer, response.read()
        except urllib.error.HTTPError as exc:
            message = f'Received client error ({exc.code}) from primary with message "{exc.read().decode()}"'
            error = {"x-amzn-ErrorType": "ModelError", "Content-Type": "application/json"}
            return 424, error, json.dumps({"message": message}).encode()

    def stop(self) -> None:
        for hosted in self.started:
            hosted.stop()
        self.starts.put(None)
        self.host.join(timeout=30)
