"""The vLLM Neuron wrapper's launcher: SageMaker runs ``docker run IMAGE serve``; the wrapper (infra/hf-secrets/Dockerfile
with this module as its entrypoint) resolves secret references, then runs this, which starts vLLM's OpenAI server on
8080 with one ``--<name> value`` per ``SM_VLLM_<NAME>=value`` of its environment (an empty value: the flag alone). An EC2
instance's unit runs it the same way in the vLLM DLAMI's venv, on the spec's port.

That is the SageMaker convention of AWS's vLLM DLC (aws/deep-learning-containers
vllm/build_artifacts/sagemaker_entrypoint.sh) and of vLLM's example (vllm-project/vllm
examples/online_serving/sagemaker-entrypoint.sh), so a user may pass any vLLM option the same way. vLLM's server
answers SageMaker's GET /ping and POST /invocations itself (vllm/entrypoints/sagemaker/api_router.py in current
vLLM). The image's own entrypoint (common/vllm_entrypoint.py) only runs its arguments, so nothing of it is lost.
"""

from __future__ import annotations

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


def vllm_arguments(environ: Mapping[str, str], port: str = PORT) -> list[str]:
    """vLLM's OpenAI server arguments for this environment, names in sorted order."""
    arguments = ["--port", port]
    skipped = left_out(environ)
    for key in sorted(environ):
        if not key.startswith(PREFIX) or key in skipped:
            continue
        arguments.append("--" + option_name(key))
        if environ[key]:
            arguments.append(environ[key])
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
