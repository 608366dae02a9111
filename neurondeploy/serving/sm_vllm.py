"""The vLLM Neuron wrapper's launcher: SageMaker runs ``docker run IMAGE serve``; the wrapper (infra/hf-secrets/Dockerfile
with this module as its entrypoint) resolves secret references, then runs this, which starts vLLM's OpenAI server on
8080 from the ``SM_VLLM_<NAME>`` variables of its environment. An EC2 instance's unit runs it the same way in the vLLM
DLAMI's venv, on the spec's port.

The convention is the one AWS's vLLM SageMaker images implement (aws/deep-learning-containers
scripts/docker/vllm/sagemaker_args.py at dceae13291323f0985f5e90923f4b332c387af6a, run by sagemaker_entrypoint.sh
there, documented in docs/vllm/configuration.md): ``--<name>`` per variable, in sorted order, after ``--port 8080``;
``true`` is the flag alone and ``false`` leaves it out; a JSON list is one value per element (an empty list leaves
the flag out); several JSON objects are one value each; anything else is one value; the four options vLLM takes a
JSON list as one value for stay one. Without ``SM_VLLM_MODEL`` the model is ``/opt/ml/model`` when it holds files,
else ``HF_MODEL_ID``. That convention is the GPU images': the Neuron vLLM image (whose entrypoint,
common/vllm_entrypoint.py, only runs its arguments) reads none of it, so this launcher is what implements it there.
(The path earlier versions cited, vllm/build_artifacts/sagemaker_entrypoint.sh, is gone from that repository; its
form passed ``true`` as a value, which vLLM's parser refuses for a flag.) vLLM's server answers SageMaker's GET /ping
and POST /invocations itself (vllm/entrypoints/sagemaker/api_router.py in current vLLM).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

from neurondeploy.specs.vllm_options import PREFIX, option_name, sm_vllm_problem

PORT = "8080"  # SageMaker's, https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html
SERVER = ("-m", "vllm.entrypoints.openai.api_server")


def left_out(environ: Mapping[str, str]) -> dict[str, str]:
    """``SM_VLLM_*`` variables that do not reach vLLM, with why: the port and host (or an abbreviation of them) are
    SageMaker's or the unit's to decide, and a value starting with '-' would be another option. Validate refuses
    them in a spec; a variable set another way is left out here, said on stderr."""
    return {key: problem for key in sorted(environ) if (problem := sm_vllm_problem(key, environ[key]))}


MODEL_DIR = "/opt/ml/model"  # where SageMaker unpacks ModelDataUrl / ModelDataSource
# Options vLLM takes a JSON list for as one value (typed json.loads, or appended one per use: its FrontendArgs, as
# sagemaker_args.py's SINGLE_TOKEN_FLAGS lists them).
ONE_VALUE = frozenset({"allowed-origins", "allowed-methods", "allowed-headers", "middleware"})


def _json_objects(text: str) -> list | None:
    """``{...} {...}``: the objects, or None when the text is not only whitespace-separated JSON objects."""
    decoder, found, index = json.JSONDecoder(), [], 0
    while index < len(text):
        try:
            value, index = decoder.raw_decode(text, index)
        except ValueError:
            return None
        if not isinstance(value, dict):
            return None
        found.append(value)
        while index < len(text) and text[index].isspace():
            index += 1
    return found or None


def _element(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def option_values(name: str, value: str) -> list[str] | None:
    """The values after ``--name`` for ``value``; [] for the flag alone; None to leave the option out."""
    text = value.strip()
    if text.lower() == "true" or not value:
        return []
    if text.lower() == "false":
        return None
    if name in ONE_VALUE:
        return [value]
    if text.startswith("[") and text.endswith("]"):
        try:
            parsed = json.loads(text)
        except ValueError:
            return [value]
        if isinstance(parsed, list):
            return [_element(item) for item in parsed] or None
        return [value]
    if text.startswith("{") and text.endswith("}"):
        objects = _json_objects(text)
        if objects is not None and len(objects) > 1:
            return [json.dumps(item, separators=(",", ":")) for item in objects]
    return [value]


def _model(environ: Mapping[str, str], model_dir: str) -> list[str]:
    if environ.get(f"{PREFIX}MODEL"):
        return []
    if os.path.isdir(model_dir) and os.listdir(model_dir):
        return ["--model", model_dir]
    if environ.get("HF_MODEL_ID"):
        return ["--model", environ["HF_MODEL_ID"]]
    return []


def vllm_arguments(environ: Mapping[str, str], port: str = PORT, model_dir: str = MODEL_DIR) -> list[str]:
    """vLLM's OpenAI server arguments for this environment, as AWS's images build them (see the module doc)."""
    arguments = ["--port", port, *_model(environ, model_dir)]
    skipped = left_out(environ)
    for key in sorted(environ):
        if not key.startswith(PREFIX) or key in skipped:
            continue
        name = option_name(key)
        values = option_values(name, environ[key])
        if values is not None:
            arguments += ["--" + name, *values]
    return arguments


def main(argv: list[str]) -> None:
    """``--port N``: where an EC2 instance's unit serves (resources/compute.py); SageMaker's own argument
    ("serve") is the contract's, not vLLM's, and is not passed on."""
    port = argv[argv.index("--port") + 1] if "--port" in argv[:-1] else PORT
    for key, problem in left_out(os.environ).items():
        print(f"sm_vllm: {key} left out: {problem}; the server listens on {port}", file=sys.stderr)
    command = [sys.executable, *SERVER, *vllm_arguments(os.environ, port)]
    print(f"sm_vllm: {' '.join(command)}", file=sys.stderr, flush=True)
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main(sys.argv[1:])
