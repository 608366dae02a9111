"""What an ``hf-tgi`` spec's container takes besides the OpenAI API: TGI's ``{"inputs", "parameters"}`` bodies at
``POST /generate`` and SageMaker's ``POST /invocations``, refused as TGI's router refuses them (422,
``{"error": "Input validation error: …", "error_type": "validation"}``; the sentences of
``router/src/validation.rs``, read with the search tool). Sampling is on when ``do_sample`` is true or any of
``temperature``, ``top_k``, ``top_p`` is given (TGI's rule); otherwise greedy. Limits: MAX_TOTAL_TOKENS is the
compiled sequence length and MAX_INPUT_TOKENS half of it, as the plan sets them for the container.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from neurondeploy.serving.llm.errors import InvalidRequest
from neurondeploy.serving.llm.protocol import SamplingParams

MAX_STOP_SEQUENCES = 4  # TGI's --max-stop-sequences default


class TgiInvalid(InvalidRequest):
    def __init__(self, message: str, prefix: str = "Input validation error: ") -> None:
        super().__init__(prefix + message, status=422, kind="validation")

    def body(self) -> dict:
        return {"error": self.message, "error_type": self.kind}


class TgiParameters(BaseModel):
    model_config = ConfigDict(extra="allow")

    max_new_tokens: Annotated[int | None, Field(strict=True, ge=0)] = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    do_sample: bool = False
    stop: list[str] = []
    seed: int | None = None
    return_full_text: bool = False


class TgiRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    inputs: str
    parameters: TgiParameters = TgiParameters()


def parse_tgi(body: object) -> TgiRequest:
    try:
        return TgiRequest.model_validate(body)
    except ValidationError as exc:
        raise TgiInvalid(f"Failed to deserialize the JSON body into the target type: {exc}", prefix="") from None


def tgi_sampling(request: TgiRequest, prompt_tokens: int, max_total_tokens: int) -> tuple[SamplingParams, int]:
    """(sampling parameters, tokens it may generate), checked in the order TGI's router checks them."""
    given = request.parameters
    sampling = given.do_sample or any(v is not None for v in (given.temperature, given.top_k, given.top_p))
    temperature = 1.0 if given.temperature is None else given.temperature
    if temperature <= 0.0:
        raise TgiInvalid("`temperature` must be strictly positive")
    if given.top_p is not None and not 0.0 < given.top_p < 1.0:
        raise TgiInvalid("`top_p` must be > 0.0 and < 1.0")
    if given.top_k is not None and given.top_k <= 0:
        raise TgiInvalid("`top_k` must be strictly positive")
    if given.max_new_tokens == 0:
        raise TgiInvalid("`max_new_tokens` must be strictly positive")
    if len(given.stop) > MAX_STOP_SEQUENCES:
        raise TgiInvalid(f"`stop` supports up to {MAX_STOP_SEQUENCES} stop sequences. Given: {len(given.stop)}")
    if not request.inputs:
        raise TgiInvalid("`inputs` cannot be empty")
    max_new_tokens = given.max_new_tokens or max(0, max_total_tokens - prompt_tokens)
    if prompt_tokens + max_new_tokens > max_total_tokens:
        raise TgiInvalid(
            f"`inputs` tokens + `max_new_tokens` must be <= {max_total_tokens}. Given: {prompt_tokens} `inputs` "
            f"tokens and {max_new_tokens} `max_new_tokens`"
        )
    max_input_tokens = max_total_tokens // 2
    if prompt_tokens > max_input_tokens:
        raise TgiInvalid(f"`inputs` must have less than {max_input_tokens} tokens. Given: {prompt_tokens}")
    params = SamplingParams(
        max_tokens=max_new_tokens,
        temperature=temperature if sampling else 0.0,
        top_p=given.top_p or 1.0,
        top_k=given.top_k or 0,
        seed=given.seed,
        stop=list(given.stop),
    )
    return params, max_new_tokens
