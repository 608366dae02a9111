"""`init`: a first spec for a model and a target, written with comments that say where each value came from.

Pure: the model's config.json (read by the caller) and the target in, the spec's text out. Every value is one the
checks accept (the test validates what this writes for each kind of model and target); what only the user can know
(a Hugging Face token for a gated model, who may reach a load balancer, a DNS name) is a comment saying so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.planner import sizing
from neurondeploy.specs.common import NAME_MAX
from neurondeploy.specs.inference import DEFAULT_LLM_CONTAINER, LLM_TASK, task_from_config

# The encoder templates' shapes: an embedding or classification request is short, and batch 8 lets the server's
# dynamic batching fill a NeuronCore; each (batch, length) pair is one compiled graph.
ENCODER_BATCH_SIZES = (1, 8)
ENCODER_SEQUENCE_LENGTHS = (128,)
TARGETS = ("sagemaker", "ec2")
GENERIC_DIRECTORIES = {"model", "models", "pkg", "final", "output", "hf", "checkpoint"}
COMMENT_COLUMN = 36


def _commented(text: str, comment: str) -> str:
    """``text`` with ``comment`` after it, the comments of a block aligned."""
    return f"{text.ljust(COMMENT_COLUMN - 1)} # {_one_line(comment)}"


def _one_line(text: str) -> str:
    """``text`` as it may stand in a comment: a value read from the model's config.json (whoever published the
    model wrote it) or from the command line keeps every character, but a line break (YAML's: also U+0085, U+2028,
    U+2029) or other control character is written escaped, so no value can end the comment and add a key."""
    if text.isprintable() and text.isascii():
        return text
    return json.dumps(text)[1:-1]


@dataclass(frozen=True)
class ModelSource:
    """How the spec names the model (``path: ...`` or ``hf_model_id: ...``) and its config.json."""

    key: str  # "path" or "hf_model_id"
    value: str
    config: dict
    label: str  # the model as the user gave it, for the header comment


def spec_name(label: str) -> str:
    """A deployment name from a model's directory or Hub id: lowercase, dashes, starting with a letter."""
    parts = [part for part in re.split(r"[/:]+", label.rstrip("/")) if part]
    named = [part for part in parts if part.lower() not in GENERIC_DIRECTORIES] or parts or ["model"]
    last = named[-1].lower()
    name = re.sub(r"[^a-z0-9]+", "-", last).strip("-")
    name = re.sub(r"^[^a-z]+", "", name)[:NAME_MAX].rstrip("-")
    return name or "model"


def starter_spec(
    source: ModelSource, *, target: str, name: str, region: str, command: str, image_uri: str | None = None
) -> str:
    """The commented spec ``init`` writes. ``command`` is how it was asked for, quoted in the header."""
    task = task_from_config(source.config)
    if task == LLM_TASK and target != "sagemaker":
        kinds = [kind for kind in catalog.container_kinds() if catalog.container_kind(kind).llm]
        raise PlanError(
            f"{source.label} is a causal LM: the LLM containers ({', '.join(kinds)}) run on SageMaker only",
            "use --target sagemaker",
        )
    where = "config.json of " + source.label
    arch = sizing.architecture_from_config_values(source.config, where=where)
    model_type = source.config.get("model_type", "a model")
    lines = [
        _one_line(f"# Written by `{command}` on {date.today().isoformat()}."),
        _one_line(f"# {source.label}: {model_type} from its config.json, served as {task}."),
        "# Next: neurondeploy validate SPEC (checks), neurondeploy plan SPEC (what AWS would receive, and what to do",
        "# before apply), neurondeploy apply SPEC --local (this machine, on CPU), neurondeploy apply SPEC (AWS).",
        "kind: inference",
        f"name: {name}",
        f"region: {region}",
        _commented(
            f"task: {task}",
            "from config.json's architectures: "
            + ", ".join(str(a) for a in (source.config.get("architectures") or ["none given"])),
        ),
        "model:",
        f"  {source.key}: {json.dumps(source.value)}",
    ]
    if task == LLM_TASK:
        lines += _llm_lines(source, arch, target, region, image_uri)
    else:
        lines += _encoder_lines(source, arch, target, region)
    return "\n".join(lines) + "\n"


def _recommended(arch, batch: int, sequence: int, dtype: str, backend: str, target: str, region: str):
    options = sizing.size_options(arch, batch, sequence, dtype, backend, region=region, platform=target)
    best = sizing.recommended(options)
    if best is None:
        raise PlanError(
            f"no instance holds this model at batch {batch} × {sequence} tokens without a warning",
            "see `neurondeploy size` for what fits, then write deployment.instance_type yourself",
        )
    return best


def _price(option) -> str:
    return f"${option.hourly_usd:.2f}/hour" if option.hourly_usd is not None else "price not catalogued"


def _llm_lines(source: ModelSource, arch, target: str, region: str, image_uri: str | None) -> list[str]:
    profile = sizing.SERVING_PROFILES[sizing.DEFAULT_SERVING_PROFILE]
    best = _recommended(arch, profile.batch, profile.sequence, "bfloat16", "nxdi", target, region)
    lines = ["  dtype: bfloat16"]
    if source.key == "hf_model_id":
        shape = arch.model_dump(exclude_none=True, exclude_defaults=True)
        lines.append(_commented("  architecture:", "from config.json: plan and validate size the model offline"))
        lines += [f"    {key}: {json.dumps(value)}" for key, value in shape.items()]
    return lines + [
        "compile:",
        _commented(f"  batch_sizes: [{profile.batch}]", f"serving profile {profile.name}: {profile.use}"),
        _commented(
            f"  sequence_lengths: [{profile.sequence}]", "prompt + completion; others: neurondeploy size --profile"
        ),
        "deployment:",
        f"  platform: {target}",
        _commented(
            f"  instance_type: {best.instance}",
            f"what `neurondeploy size --platform {target}` recommends: {_price(best)}",
        ),
        _commented(
            f"  tensor_parallel: {best.tensor_parallel}",
            f"one vLLM server per instance on {best.tensor_parallel} of its "
            f"{catalog.get_instance(best.instance).neuron_cores} NeuronCores, {best.per_core_gib:.1f} of "
            f"{best.available_per_core_gib:g} GiB per NeuronCore",
        ),
        _commented("  health_check_timeout_s: 3600", "the Hub download and the compile at start must fit in it"),
        "  container:",
        _commented(f"    kind: {DEFAULT_LLM_CONTAINER}", "AWS's vLLM Neuron container (the default for LLMs)"),
        (
            _commented(f"    image_uri: {image_uri}", "the wrapper in your ECR (infra/hf-secrets FROM AWS's image)")
            if image_uri
            else "    # image_uri: the wrapper in your ECR; `neurondeploy validate SPEC` prints the docker build for it"
        ),
        _commented("    compile_at_start: true", "the container compiles the model when it starts"),
        "    # A gated model (meta-llama, ...) needs a Hugging Face token, as a Secrets Manager reference:",
        "    # env: {HF_TOKEN: {secret: arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME}}",
    ]


def _encoder_lines(source: ModelSource, arch, target: str, region: str) -> list[str]:
    best = _recommended(
        arch, max(ENCODER_BATCH_SIZES), max(ENCODER_SEQUENCE_LENGTHS), "float32", "trace", target, region
    )
    lines = [
        "  dtype: float32",
        "compile:",
        _commented(
            f"  batch_sizes: {list(ENCODER_BATCH_SIZES)}", "each (batch, length) is one compiled graph: a request"
        ),
        _commented(
            f"  sequence_lengths: {list(ENCODER_SEQUENCE_LENGTHS)}", "is padded up to the smallest that holds it"
        ),
    ]
    if source.config.get("model_type") in ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet"):
        lines += [
            _commented("  auto_cast: matmult", "an encoder on Inf2: matmuls in bf16, the rest fp32"),
            "  auto_cast_type: bf16",
        ]
    if task_from_config(source.config) == "image-classification":
        size = source.config.get("image_size", 224)
        if not isinstance(size, int) or isinstance(size, bool):
            raise PlanError(
                f"config.json of {_one_line(source.label)}: image_size is {_one_line(repr(size))}, not a number",
                "fix the model's config.json, or write the spec's compile.image_size yourself",
            )
        lines.append(_commented(f"  image_size: [{size}, {size}]", "config.json's image_size"))
    lines += [
        "deployment:",
        f"  platform: {target}",
        _commented(f"  instance_type: {best.instance}", f"the cheapest that fits: {_price(best)}, {region}"),
        "  instance_count: 1",
        "serving:",
        _commented("  max_batch_delay_ms: 5", "how long the server waits to fill a batch"),
    ]
    if target == "ec2":
        lines += [
            _commented("network:", "a VPC of its own: instances in private subnets, a load balancer in front"),
            "  availability_zones: 2",
            _commented("  allowed_cidrs: [0.0.0.0/0]", "who may reach the load balancer: narrow it to your network"),
            "# A name and a certificate: uncomment, with a Route 53 hosted zone you own.",
            "# dns: {hosted_zone_id: Z..., zone_name: example.com, record_name: embed.example.com}",
            "# tls: {enabled: true}",
        ]
    return lines
