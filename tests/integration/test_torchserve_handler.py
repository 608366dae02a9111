"""The DLC route's TorchServe handler (serving/sagemaker_handler.handle) on a batch as TorchServe hands it over:
TorchServe's own Context and RequestProcessor (the `ts` package of the DLC's TorchServe), the bodies as its
protocol decodes them (JSON parsed, text as str, anything else bytes). Every request of the batch runs in the same
compiled buckets and gets its own answer; a wrong one gets its own 4xx and one-line JSON error, the rest are
answered as if alone."""

from __future__ import annotations

import json

import pytest
from ts.context import Context, RequestProcessor

from neurondeploy.serving import sagemaker_handler
from neurondeploy.serving.runtime import ModelRunner
from neurondeploy.serving.server import serving_from_env

pytestmark = pytest.mark.integration
JSON = {"Content-Type": "application/json"}


def torchserve_context(artifact, headers: list[dict]) -> Context:
    context = Context("model", str(artifact), {}, len(headers), None, "0.11.0")
    context.request_processor = [RequestProcessor(header) for header in headers]
    return context


def test_a_batch_runs_together_and_each_request_gets_its_own_answer(artifact, monkeypatch):
    monkeypatch.setattr(sagemaker_handler, "_RUNNER", {})
    loading = torchserve_context(artifact, [])
    assert sagemaker_handler.handle(None, loading) is None  # TorchServe's initialize call loads the model
    requests = [
        ({"body": {"inputs": [5, 6, 7]}}, JSON),
        ({"body": {"inputs": 5}}, JSON),
        ({"body": {"inputs": [[1, 2], [3, 4, 5]]}}, JSON),
        ({"body": b"not json {"}, JSON),  # TorchServe forwards what it cannot parse as bytes
        ({"body": "some text"}, {"Content-Type": "text/plain"}),
        ({"body": {"inputs": [5, 6, 7]}}, {"content-type": "application/json"}),
    ]
    context = torchserve_context(artifact, [headers for _, headers in requests])
    answers = sagemaker_handler.handle([body for body, _ in requests], context)

    statuses = [context.get_response_status(index)[0] for index in range(len(requests))]
    assert statuses == [200, 400, 200, 400, 415, 200]
    for index in (1, 3, 4):
        assert answers[index].count("\n") == 0 and json.loads(answers[index])["error"]
    alone = ModelRunner(artifact, serving_from_env(), replicas=1)
    (single,) = alone.run(0, alone.parse({"inputs": [[5, 6, 7]]})[0])
    pair = [alone.run(0, alone.parse({"inputs": [ids]})[0])[0] for ids in ([1, 2], [3, 4, 5])]
    assert json.loads(answers[0]) == pytest.approx(single.tolist(), abs=1e-5)
    assert json.loads(answers[5]) == json.loads(answers[0])
    for got, vector in zip(json.loads(answers[2]), pair, strict=True):
        assert got == pytest.approx(vector.tolist(), abs=1e-5)
    for index in (0, 2, 5):
        headers = context.get_response_headers(index)
        assert headers["content-type"] == "application/json"
        assert headers[sagemaker_handler.CUSTOM_ATTRIBUTES] == "neurondeploy-batched-requests=3"
