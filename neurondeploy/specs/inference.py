"""Inference spec: a model compiled into shape buckets and served on Inf2 (SageMaker endpoint or EC2 + ALB)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from neurondeploy import catalog
from neurondeploy.errors import SpecError
from neurondeploy.specs.common import (
    IMAGE_URI_PATTERN,
    DnsSpec,
    FieldIssue,
    Refusal,
    SpecBase,
    StrictModel,
    TlsSpec,
)
from neurondeploy.specs.screening import control_character_problem, screen_value
from neurondeploy.specs.vllm_options import sm_vllm_problem

PACKAGE_PREFIX = "pkg://"
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # RFC 3986's scheme, then an authority
MODEL_SOURCES = ("path", "factory", "hf_model_id", "s3_uri", "training_job")
# Sources a Hugging Face LLM container takes; the last three reach the endpoint as its model data (ModelDataUrl).
PLATFORM_NAMES = {"sagemaker": "SageMaker", "ec2": "EC2"}
MAX_STARTUP_S = 3600  # ContainerStartupHealthCheckTimeoutInSeconds' maximum (botocore sagemaker service-2.json)
INSTANCE_TYPE_PATTERN = r"^(ml\.)?[a-z][a-z0-9]*\.[0-9]*[a-z0-9]+$"


# The Hub's repository id rules, as huggingface_hub checks them before any request (validate_repo_id in
# huggingface_hub/utils/_validators.py): "namespace/name" or "name", each part 1 to 96 of [A-Za-z0-9_.-], neither
# starting nor ending with "-" or ".", no "--" or "..", not ending ".git". The Hub itself refuses the rest.
HUB_REPO_PART_MAX = 96
HUB_REPO_PART = re.compile(r"^(?![-.])[A-Za-z0-9_.-]+(?<![-.])$")


def hub_repo_id_problem(value: str) -> str | None:
    """Why the Hub would refuse ``value`` as a model id, or None."""
    parts = value.split("/")
    if len(parts) > 2:
        return "a Hub id is name or namespace/name"
    if any(len(part) > HUB_REPO_PART_MAX for part in parts):
        return f"each part of a Hub id has at most {HUB_REPO_PART_MAX} characters"
    if not all(HUB_REPO_PART.match(part) for part in parts):
        return "a Hub id part is letters, digits, '_', '-' and '.', not starting or ending with '-' or '.'"
    if "--" in value or ".." in value or value.endswith(".git"):
        return "a Hub id has no '--' or '..' and does not end with '.git'"
    return None


def strip_ml_prefix(value: str) -> str:
    """SageMaker spells instance types ``ml.inf2.xlarge``; specs accept both and keep the EC2 spelling."""
    return value[3:] if value.startswith("ml.") else value


class ModelArchitecture(StrictModel):
    """Shape numbers of a transformer, for sizing when no config.json is at hand (read from it otherwise)."""

    layers: Annotated[int, Field(description="Number of transformer layers (num_hidden_layers).", ge=1, le=1024)]
    hidden_size: Annotated[int, Field(description="Model width d_model (hidden_size).", ge=8, le=131072)]
    attention_heads: Annotated[int, Field(description="Query heads (num_attention_heads).", ge=1, le=1024)]
    kv_heads: Annotated[
        int | None,
        Field(
            description="Key/value heads (num_key_value_heads); less than attention_heads for GQA. Empty: = attention_heads.",
            ge=1,
            le=1024,
        ),
    ] = None
    head_dim: Annotated[
        int | None,
        Field(
            description="Width of one attention head when the config gives it (Gemma, Qwen3, Mistral-Nemo, Llama-4); "
            "sizes q/k/v/o and the KV cache. Empty: hidden_size / attention_heads.",
            ge=1,
            le=4096,
        ),
    ] = None
    vocab_size: Annotated[int, Field(description="Vocabulary size.", ge=1, le=10_000_000)] = 32000
    intermediate_size: Annotated[
        int | None, Field(description="Dense MLP width; empty: 4 × hidden_size.", ge=1, le=1_000_000)
    ] = None
    experts: Annotated[
        int | None,
        Field(
            description="Routed experts per MoE layer (num_local_experts, num_experts, n_routed_experts); all of "
            "them are resident in device memory. Empty: a dense model.",
            ge=1,
            le=4096,
        ),
    ] = None
    experts_per_token: Annotated[
        int | None,
        Field(
            description="Routed experts each token uses (num_experts_per_tok); decides the active parameters.",
            ge=1,
            le=4096,
        ),
    ] = None
    expert_intermediate_size: Annotated[
        int | None,
        Field(
            description="MLP width of one routed expert (moe_intermediate_size); empty: intermediate_size.",
            ge=1,
            le=1_000_000,
        ),
    ] = None
    shared_expert_intermediate_size: Annotated[
        int,
        Field(
            description="Total MLP width of the always-active shared experts of an MoE layer (DeepSeek "
            "n_shared_experts × moe_intermediate_size, Qwen2-MoE shared_expert_intermediate_size, Llama-4 one expert); 0: none.",
            ge=0,
            le=10_000_000,
        ),
    ] = 0
    dense_layers: Annotated[
        int,
        Field(
            description="Layers of an MoE model with a dense MLP (intermediate_size) instead of experts "
            "(DeepSeek first_k_dense_replace, Llama-4 interleave_moe_layer_step).",
            ge=0,
            le=1024,
        ),
    ] = 0
    parameters: Annotated[
        int | None,
        Field(description="Total parameter count, when known exactly; otherwise estimated from the shape.", ge=1),
    ] = None
    gated_mlp: Annotated[
        bool, Field(description="MLP has 3 matrices (SwiGLU: Llama, Mistral, Qwen) rather than 2 (BERT, GPT-2).")
    ] = False
    tied_embeddings: Annotated[
        bool, Field(description="Output projection shares the input embedding matrix (counted once).")
    ] = False

    @model_validator(mode="after")
    def _heads(self) -> ModelArchitecture:
        if self.head_dim is None and self.hidden_size % self.attention_heads:
            raise FieldIssue(
                "attention_heads",
                f"hidden_size {self.hidden_size} is not divisible by attention_heads {self.attention_heads}; "
                "give head_dim if the model sets it",
            )
        if self.kv_heads is not None and self.attention_heads % self.kv_heads:
            raise FieldIssue(
                "kv_heads", f"attention_heads {self.attention_heads} is not a multiple of kv_heads {self.kv_heads}"
            )
        if self.experts is None and (self.experts_per_token or self.expert_intermediate_size or self.dense_layers):
            raise FieldIssue("experts", "experts_per_token, expert_intermediate_size and dense_layers need experts")
        if self.experts is not None and (self.experts_per_token or 0) > self.experts:
            raise FieldIssue(
                "experts_per_token", f"experts_per_token {self.experts_per_token} is above experts {self.experts}"
            )
        if self.dense_layers > self.layers:
            raise FieldIssue("dense_layers", f"dense_layers {self.dense_layers} is above layers {self.layers}")
        return self

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.attention_heads

    @property
    def key_value_heads(self) -> int:
        return self.kv_heads or self.attention_heads

    @property
    def dense_intermediate_size(self) -> int:
        """The dense MLP's width; empty intermediate_size reads as 4 × hidden_size."""
        return self.intermediate_size or 4 * self.hidden_size


class ModelSpec(StrictModel):
    """Where the model comes from. Exactly one of path, factory or hf_model_id."""

    path: Annotated[
        str | None,
        Field(
            description="Local Hugging Face model directory (config.json + weights + tokenizer), a TorchScript .pt file, "
            "or pkg://<python package>/<subdir> for a model directory shipped inside an installed package. With an "
            "hf-vllm / hf-tgi container: a causal-LM directory, served locally and shipped to the endpoint as its "
            "model data."
        ),
    ] = None
    factory: Annotated[
        str | None,
        Field(
            description="Python factory 'package.module:function' returning a torch.nn.Module that takes the task's inputs "
            "((input_ids, attention_mask) for text, (pixel_values) for images) — for models not on disk.",
            pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        ),
    ] = None
    hf_model_id: Annotated[
        str | None,
        Field(
            description="Model id that the Hugging Face vLLM/TGI Neuron container loads itself (decoder LLMs only), e.g. "
            "meta-llama/Llama-3.1-8B-Instruct. neurondeploy never downloads it.",
            pattern=r"^[\w.\-]+(/[\w.\-]+)?$",
        ),
    ] = None
    hf_revision: Annotated[
        str | None,
        Field(
            description="Hub revision (commit sha, tag or branch) of hf_model_id that compile --remote exports and "
            "keys its cached model by. Empty: main, which can move: pin a commit sha for a reproducible cache key.",
            pattern=r"^[\w.\-/]{1,128}$",
        ),
    ] = None
    s3_uri: Annotated[
        str | None,
        Field(
            description="A model.tar.gz in S3 holding a Hugging Face causal-LM directory (e.g. a training job's "
            "model artifacts), for the hf-vllm / hf-tgi containers: the endpoint's model data, used as it is.",
            pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/.+\.tar\.gz$",
            max_length=1024,
        ),
    ] = None
    training_job: Annotated[
        str | None,
        Field(
            description="A SageMaker training job (e.g. one `neurondeploy train` ran) whose model artifacts the "
            "hf-vllm / hf-tgi container serves; apply reads them with DescribeTrainingJob (the job must be Completed).",
            pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$",
        ),
    ] = None
    architecture: Annotated[
        ModelArchitecture | None,
        Field(description="Shape numbers for sizing; read from config.json when path is a HF directory."),
    ] = None
    dtype: Annotated[
        Literal["float32", "bfloat16", "float16", "fp8"],
        Field(description="Weight dtype on the device (sizes weights: 4, 2, 2 or 1 bytes per parameter)."),
    ] = "bfloat16"
    quantization: Annotated[
        Literal["none", "int8", "fp8"],
        Field(
            description="Weight-only quantization done by the serving runtime (NxD Inference quantized=True with "
            "quantization_dtype int8 or f8e4m3; hf-vllm / hf-tgi containers only): linear-layer weights take 1 byte, "
            "embeddings and the KV cache stay in dtype."
        ),
    ] = "none"

    @field_validator("path")
    @classmethod
    def _path_on_one_line(cls, value: str | None) -> str | None:
        problem = control_character_problem(value) if value else None
        if problem:  # the OS refuses a NUL in a path; any control character is a copy-paste accident
            raise ValueError(f"the path {problem} (fix: write the path without control characters)")
        if value and URL_SCHEME.match(value) and not value.startswith(PACKAGE_PREFIX):
            # Path("http://host/m") is the relative path http:/host/m: it would be looked for beside the spec.
            raise ValueError(
                f"{value[:80]}: a URL is not a model path, which names a local directory or file (fix: a Hub model "
                "goes in model.hf_model_id, a model.tar.gz in S3 in model.s3_uri)"
            )
        return value

    @field_validator("hf_model_id")
    @classmethod
    def _hub_repo_id(cls, value: str | None) -> str | None:
        problem = hub_repo_id_problem(value) if value else None
        if problem:
            raise ValueError(
                f"{value[:60]}{'...' if len(value) > 60 else ''}: {problem} (fix: copy the id from the model's Hub page)"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        given = [name for name in MODEL_SOURCES if getattr(self, name)]
        if self.hf_revision and not self.hf_model_id:
            raise ValueError("hf_revision is the revision of hf_model_id; remove it or set hf_model_id")
        if len(given) != 1:
            raise ValueError(
                "give exactly one of path (local directory or .pt file), factory (module:function), hf_model_id, "
                "s3_uri or training_job" + (f"; got {', '.join(given)}" if given else "")
            )
        return self

    def resolved_path(self, base_dir: Path) -> Path:
        """The model path on this machine. ``pkg://<package>/<subdir>`` names a directory shipped inside an
        installed Python package (found without importing it); relative paths are relative to the spec file."""
        return local_path(self.path or "", base_dir)

    @property
    def source_kind(self) -> str:
        if self.factory:
            return "factory"
        if self.hf_model_id:
            return "hf-hub-id"
        if self.s3_uri:
            return "s3-uri"
        if self.training_job:
            return "training-job"
        return "torchscript" if self.path.endswith((".pt", ".pth", ".ts")) else "hf-directory"


class PackageNotInstalled(SpecError):
    """A pkg:// path whose package this machine does not have: what needs the files (compile, init) stops; plan and
    validate, which do not, warn (a bare install plans every template)."""


def local_path(text: str, base_dir: Path) -> Path:
    """A path a spec or the CLI names on this machine: ``pkg://<package>/<subdir>`` is a directory shipped inside an
    installed Python package (found without importing it); relative paths are relative to ``base_dir``."""
    if text.startswith(PACKAGE_PREFIX):
        package, _, subdir = text[len(PACKAGE_PREFIX) :].partition("/")
        found = importlib.util.find_spec(package) if package.isidentifier() else None
        if found is None:
            raise PackageNotInstalled(
                f"{text}: no installed Python package {package}",
                "install the package that ships it, or give the directory's path",
            )
        if not found.submodule_search_locations:
            raise SpecError(
                f"{text}: {package} is a module, not a package directory",
                "name an installed package's directory: pkg://<package>/<subdir>",
            )
        return Path(list(found.submodule_search_locations)[0]) / subdir
    path = Path(text).expanduser()
    return path if path.is_absolute() else base_dir / path


class CompileSpec(StrictModel):
    """Static shapes and neuronx-cc options. Each (batch size, sequence length) pair is one compiled bucket."""

    batch_sizes: Annotated[
        list[Annotated[int, Field(ge=1, le=1024)]],
        Field(
            description="Batch sizes to compile; requests are padded up to the smallest that fits.",
            min_length=1,
            max_length=8,
        ),
    ] = [1]
    sequence_lengths: Annotated[
        list[Annotated[int, Field(ge=1, le=131072)]],
        Field(
            description="Sequence lengths to compile (text models); longer inputs are truncated or refused per serving.on_long_input.",
            min_length=1,
            max_length=8,
        ),
    ] = [128]
    image_size: Annotated[
        list[Annotated[int, Field(ge=8, le=4096)]] | None,
        Field(description="[height, width] for image models; replaces sequence_lengths.", min_length=2, max_length=2),
    ] = None
    target: Annotated[
        Literal["inf2", "trn1", "trn2"] | None,
        Field(description="neuronx-cc --target; empty: from the instance family (inf2, trn1/trn1n -> trn1, trn2)."),
    ] = None
    auto_cast: Annotated[
        Literal["none", "matmult", "all"],
        Field(
            description="neuronx-cc --auto-cast: which FP32 ops to down-cast. 'none' is the compiler default since SDK 2.27."
        ),
    ] = "none"
    auto_cast_type: Annotated[
        Literal["bf16", "fp16", "tf32", "fp8_e4m3"],
        Field(description="neuronx-cc --auto-cast-type: the type auto-cast casts to (bf16 default)."),
    ] = "bf16"
    model_type: Annotated[
        Literal["generic", "transformer", "unet-inference"],
        Field(description="neuronx-cc --model-type: graph optimisations for the model family."),
    ] = "generic"
    optlevel: Annotated[
        int,
        Field(
            description="neuronx-cc -O: 1 fast compile, 2 default, 3 faster model, slower compile, more host RAM.",
            ge=1,
            le=3,
        ),
    ] = 2
    numerical_tolerance: Annotated[
        float, Field(description="Max abs difference allowed between a compiled bucket and eager PyTorch.", gt=0, le=1)
    ] = 1e-3

    @field_validator("batch_sizes", "sequence_lengths")
    @classmethod
    def _sorted_unique(cls, values: list[int]) -> list[int]:
        if len(set(values)) != len(values):
            raise ValueError(f"{values} has duplicates; list each size once")
        return sorted(values)

    @model_validator(mode="after")
    def _cast_type_needs_cast(self) -> CompileSpec:
        if self.auto_cast == "none" and self.auto_cast_type != "bf16":
            raise FieldIssue(
                "auto_cast_type",
                f"auto_cast_type {self.auto_cast_type} has no effect with auto_cast none; set auto_cast to matmult or all",
            )
        return self

    @property
    def buckets(self) -> list[tuple[int, int]]:
        lengths = [self.image_size[0]] if self.image_size else self.sequence_lengths
        return [(batch, length) for batch in self.batch_sizes for length in lengths]


class AutoscalingSpec(StrictModel):
    """Target tracking on invocations per instance (SageMaker) or request count per target (ALB)."""

    min_instances: Annotated[int, Field(description="Lowest instance count.", ge=1, le=100)] = 1
    max_instances: Annotated[int, Field(description="Highest instance count.", ge=1, le=100)] = 1
    target_invocations_per_instance: Annotated[
        int, Field(description="Requests per minute per instance the policy aims for.", ge=1, le=1_000_000)
    ] = 1000
    scale_in_cooldown_s: Annotated[int, Field(description="Seconds between scale-in steps.", ge=0, le=86400)] = 300
    scale_out_cooldown_s: Annotated[int, Field(description="Seconds between scale-out steps.", ge=0, le=86400)] = 60

    @model_validator(mode="after")
    def _range(self) -> AutoscalingSpec:
        if self.min_instances > self.max_instances:
            raise FieldIssue(
                "min_instances", f"min_instances {self.min_instances} is above max_instances {self.max_instances}"
            )
        return self


SECRET_ENV = "NEURONDEPLOY_SECRET_ENV"  # the container contract: {NAME: {"secret"|"ssm": ARN}}, resolved at start
SECRET_ARN = r"^arn:aws[a-z\-]*:secretsmanager:[a-z0-9\-]+:\d{12}:secret:[A-Za-z0-9/_+=.@\-]+$"
SSM_ARN = r"^arn:aws[a-z\-]*:ssm:[a-z0-9\-]+:\d{12}:parameter/[A-Za-z0-9/_.\-]+$"


def secret_reference_fix(key: str) -> str:
    """How to give a credential to a container: a reference its entrypoint resolves through the role."""
    return (
        f"store it in Secrets Manager and write {key}: {{secret: arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME}}, "
        "or {ssm: arn:aws:ssm:REGION:ACCOUNT:parameter/NAME}"
    )


class SecretReference(StrictModel):
    """An environment value read where the workload runs, through its role: never sent in a request."""

    secret: Annotated[
        str | None,
        Field(description="Secrets Manager secret ARN; its SecretString becomes the value.", pattern=SECRET_ARN),
    ] = None
    ssm: Annotated[
        str | None,
        Field(description="SSM parameter ARN (SecureString or String); its decrypted value.", pattern=SSM_ARN),
    ] = None

    @model_validator(mode="after")
    def _one(self) -> SecretReference:
        if (self.secret is None) == (self.ssm is None):
            raise ValueError("give exactly one of secret (a Secrets Manager ARN) or ssm (an SSM parameter ARN)")
        return self

    @property
    def arn(self) -> str:
        return self.secret or self.ssm

    def as_contract(self) -> dict[str, str]:
        return {"secret": self.secret} if self.secret else {"ssm": self.ssm}


def _container_kind_enum(schema: dict) -> None:
    schema["enum"] = list(catalog.container_kinds())  # the schema lists the table's kinds; read when rendered


class ContainerSpec(StrictModel):
    """What runs on the instance: neurondeploy's own server, or Hugging Face's Neuron LLM containers."""

    kind: Annotated[
        str,
        Field(
            description="The serving container (the catalogue's container kinds, data/containers.yaml): "
            "neurondeploy: our server with the compiled artifact. hf-vllm / hf-tgi: Hugging Face's Neuron LLM "
            "containers, configured from this spec (decoder LLMs).",
            json_schema_extra=_container_kind_enum,
        ),
    ] = "neurondeploy"
    image_uri: Annotated[
        str | None,
        Field(
            description="Override the image (ECR URI). Empty: resolved from the catalogue for region and SDK.",
            pattern=IMAGE_URI_PATTERN,
        ),
    ] = None
    start_from_neuron_cache: Annotated[
        bool,
        Field(
            description="A Hugging Face LLM container on SageMaker with no model exported by `neurondeploy compile "
            "SPEC --remote`: true starts it from the Hugging Face Neuron cache's compiled configuration of the model "
            "at these shapes (the container refuses to start if the cache has none, after the endpoint was created "
            "and billed); false (the default): apply refuses to deploy until compile --remote has exported it."
        ),
    ] = False
    compile_at_start: Annotated[
        bool,
        Field(
            description="vllm-neuron with no artifacts built by `neurondeploy compile SPEC --remote`: true lets the "
            "container compile the model with NxD Inference when it starts (vllm-neuron's behaviour without "
            "NEURON_COMPILED_ARTIFACTS: minutes to an hour, inside the startup health check, "
            "deployment.health_check_timeout_s, at most 3600 s); false (the default): apply refuses to deploy until "
            "compile --remote has built them."
        ),
    ] = False
    env: Annotated[
        dict[str, str | SecretReference],
        Field(
            description="Extra environment variables for the container (keys [A-Za-z_][A-Za-z0-9_]*). A value may be "
            "{secret: SECRETS_MANAGER_ARN} or {ssm: SSM_PARAMETER_ARN}: read where the container runs, through its "
            "role (which gets read on exactly those ARNs), never written to requests, plans, state or user data. "
            "Literal credentials are refused: token-like names in any case (HF_TOKEN, *_token, *_KEY, *_SECRET, "
            "*_PASSWORD, *_PASSWD) and token-shaped values under any name (hf_..., AKIA..., ghp_..., sk-..., "
            "a password in a URL); so are control characters."
        ),
    ] = {}

    @field_validator("env", mode="before")
    @classmethod
    def _references(cls, env):
        """A mapping value is a secret reference: checked here so a mistake in one is one line, not one per
        member of the union."""
        if not isinstance(env, dict):
            return env
        checked = {}
        for key, value in env.items():
            if isinstance(value, dict):
                try:
                    value = SecretReference.model_validate(value)
                except ValidationError as exc:
                    first = exc.errors(include_url=False)[0]
                    where = ".".join(str(part) for part in first["loc"])
                    raise ValueError(
                        f"{key}: {first['msg'].removeprefix('Value error, ')}"
                        + (f" ({where}: {first.get('input')!r})" if where else "")
                        + " - write {secret: arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME} or "
                        "{ssm: arn:aws:ssm:REGION:ACCOUNT:parameter/NAME}"
                    ) from None
            checked[key] = value
        return checked

    @field_validator("env")
    @classmethod
    def _env_keys(cls, env: dict[str, str | SecretReference]) -> dict[str, str | SecretReference]:
        for key, value in env.items():
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]{0,1023}", key):
                raise ValueError(f"environment key {key!r} must match [A-Za-z_][A-Za-z0-9_]*")
            if key == SECRET_ENV:
                raise ValueError(f"{SECRET_ENV} is set by neurondeploy from the {{secret: ...}} / {{ssm: ...}} values")
            problem = sm_vllm_problem(key, value if isinstance(value, str) else "")
            if problem:
                raise ValueError(f"{problem} (fix: remove {key}; other vLLM options pass as SM_VLLM_<OPTION>)")
            if isinstance(value, str):
                screen_value("environment", key, value, secret_reference_fix(key))
                if len(value.encode()) > 1024:
                    raise ValueError(f"environment value of {key} is over SageMaker's 1024-byte limit")
        return env

    @property
    def secrets(self) -> dict[str, SecretReference]:
        return {key: value for key, value in self.env.items() if isinstance(value, SecretReference)}

    def runtime_env(self) -> dict[str, str]:
        """What the container's environment carries: the literal values, and the secret references (never their
        values) as ``$NEURONDEPLOY_SECRET_ENV`` for the entrypoint to resolve at start."""
        literal = {key: value for key, value in self.env.items() if isinstance(value, str)}
        if self.secrets:
            refs = {key: ref.as_contract() for key, ref in sorted(self.secrets.items())}
            literal[SECRET_ENV] = json.dumps(refs, separators=(",", ":"))
        return literal

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in catalog.container_kinds():
            raise ValueError(f"{value!r} is not a container kind; use {' or '.join(catalog.container_kinds())}")
        return value


class ServingSpec(StrictModel):
    """The HTTP server's behaviour (the SageMaker container contract: /ping and /invocations on 8080)."""

    port: Annotated[
        int, Field(description="Port the server listens on; SageMaker requires 8080.", ge=1024, le=65535)
    ] = 8080
    max_batch_delay_ms: Annotated[
        float, Field(description="How long a request may wait for others to fill a batch.", ge=0, le=1000)
    ] = 5.0
    max_queue: Annotated[
        int,
        Field(
            description="Requests in the server at once (being read, parsed, queued or run); one more is answered "
            "503 with Retry-After before any work.",
            ge=1,
            le=100000,
        ),
    ] = 256
    max_body_bytes: Annotated[
        int, Field(description="Largest request body accepted (413 above).", ge=1024, le=100 * 2**20)
    ] = 2**20
    max_items_per_request: Annotated[
        int, Field(description="Most inputs in one request (400 above).", ge=1, le=4096)
    ] = 64
    on_long_input: Annotated[
        Literal["truncate", "refuse"],
        Field(description="Inputs longer than the largest sequence bucket: truncate them, or answer 400."),
    ] = "truncate"
    max_header_bytes: Annotated[
        int,
        Field(
            description="Largest request line plus headers (431 and close above); the ALB's own limit is 64 KiB.",
            ge=1024,
            le=2**20,
        ),
    ] = 64 * 2**10
    max_header_count: Annotated[
        int, Field(description="Most header fields in one request (431 and close above).", ge=8, le=10000)
    ] = 100
    header_timeout_s: Annotated[
        float,
        Field(
            description="A request's line and headers must arrive within this many seconds of its first byte (or of "
            "the connection opening); 408 and close otherwise (slow-header clients).",
            gt=0,
            le=600,
        ),
    ] = 10.0
    body_timeout_s: Annotated[
        float,
        Field(
            description="A request's body must arrive within this many seconds of its headers; 408 and close "
            "otherwise (slow-body clients).",
            gt=0,
            le=3600,
        ),
    ] = 30.0
    idle_timeout_s: Annotated[
        float,
        Field(
            description="A keep-alive connection with no request in progress is closed after this many seconds; "
            "longer than the load balancer's idle timeout (ALB default 60 s), so the ALB closes first.",
            ge=1,
            le=4000,
        ),
    ] = 65.0
    max_connections: Annotated[
        int,
        Field(
            description="Open client connections at once; one more is answered 503 and closed at once.",
            ge=1,
            le=100000,
        ),
    ] = 1000


SERVING_ENV = "NEURONDEPLOY_SERVING"  # the container contract: the serving section, as JSON, in the environment


def serving_env_value(serving: ServingSpec) -> str:
    """``$NEURONDEPLOY_SERVING`` for a serving section (SageMaker's container env, the EC2 unit's)."""
    return json.dumps(serving.model_dump(mode="json"), separators=(",", ":"))


class DeploymentSpec(StrictModel):
    """Where and on what the model runs."""

    platform: Annotated[
        Literal["sagemaker", "ec2"],
        Field(
            description="sagemaker: a real-time endpoint on ml.inf2. ec2: Inf2 instances in an Auto Scaling group behind an ALB."
        ),
    ] = "sagemaker"
    instance_type: Annotated[
        str, Field(description="Instance type, e.g. inf2.xlarge (ml. prefix optional).", pattern=INSTANCE_TYPE_PATTERN)
    ] = "inf2.xlarge"
    instance_count: Annotated[int, Field(description="Instances to start with.", ge=1, le=100)] = 1
    tensor_parallel: Annotated[
        int,
        Field(description="NeuronCores one model replica is sharded over (LLMs); 1 for encoder models.", ge=1, le=128),
    ] = 1
    autoscaling: Annotated[
        AutoscalingSpec | None, Field(description="Scale between min and max instances on load.")
    ] = None
    container: Annotated[ContainerSpec, Field(description="Serving container.")] = Field(default_factory=ContainerSpec)
    health_check_timeout_s: Annotated[
        int,
        Field(
            description="ContainerStartupHealthCheckTimeoutInSeconds: how long loading may take before /ping must pass (60-3600).",
            ge=60,
            le=MAX_STARTUP_S,
        ),
    ] = 600
    model_download_timeout_s: Annotated[
        int,
        Field(
            description="ModelDataDownloadTimeoutInSeconds: how long fetching the artifact may take (60-3600).",
            ge=60,
            le=3600,
        ),
    ] = 600
    host_image: Annotated[
        str,
        Field(
            description="SageMaker only: the host image under the container (ProductionVariant.InferenceAmiVersion), "
            "which brings the Neuron driver the container's runtime talks to. botocore lists one for Neuron instances "
            "today, al2-ami-sagemaker-inference-neuron-2 (driver 2.19); this picks another once it lists more.",
        ),
    ] = catalog.SAGEMAKER_INFERENCE_AMI
    volume_gib: Annotated[
        int | None,
        Field(
            description="EBS volume per instance (1-512 on SageMaker). Empty: sized from the model. Never sent for trn1 (NVMe).",
            ge=1,
            le=16384,
        ),
    ] = None

    @field_validator("instance_type")
    @classmethod
    def _strip_ml(cls, value: str) -> str:
        return strip_ml_prefix(value)

    @field_validator("host_image")
    @classmethod
    def _host_image(cls, value: str) -> str:
        known = [ami.name for ami in catalog.inference_amis()]
        if value not in known:
            raise Refusal(f"{value!r} is not a SageMaker host image for Neuron instances", f"use one of {known}")
        return value

    @property
    def capacity(self) -> tuple[int, int, int]:
        """(min, max, desired) instances from instance_count and autoscaling."""
        count, scaling = self.instance_count, self.autoscaling
        if not scaling:
            return count, count, count
        return (
            scaling.min_instances,
            scaling.max_instances,
            min(max(count, scaling.min_instances), scaling.max_instances),
        )


LLM_TASK = "text-generation"
DEFAULT_LLM_CONTAINER = "vllm-neuron"  # what a text-generation spec runs when it names no container
CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def task_from_config(config: dict) -> str:
    """The spec's task for a Hugging Face config, from the class its ``architectures`` names."""
    listed = config.get("architectures")
    names = [name for name in listed if isinstance(name, str)] if isinstance(listed, list) else []
    if any(name.endswith(CAUSAL_LM_SUFFIXES) for name in names):
        return LLM_TASK
    if any(name.endswith("ForSequenceClassification") for name in names):
        return "text-classification"
    if any(name.endswith("ForImageClassification") for name in names):
        return "image-classification"
    return "feature-extraction"


class InferenceSpec(SpecBase):
    """An inference deployment: model -> compiled buckets -> endpoint."""

    kind: Annotated[Literal["inference"], Field(description="Spec kind.")]
    model: Annotated[ModelSpec, Field(description="The model to serve.")]
    task: Annotated[
        Literal["feature-extraction", "text-classification", "image-classification", "text-generation"],
        Field(
            description="What the model does; decides pre/post-processing. text-generation needs an hf-vllm/hf-tgi container."
        ),
    ]
    compile: Annotated[CompileSpec, Field(description="Shape buckets and compiler options.")] = Field(
        default_factory=CompileSpec
    )
    deployment: Annotated[DeploymentSpec, Field(description="Platform, instances and container.")] = Field(
        default_factory=DeploymentSpec
    )
    serving: Annotated[ServingSpec, Field(description="HTTP server settings.")] = Field(default_factory=ServingSpec)
    dns: Annotated[DnsSpec | None, Field(description="Route 53 record for the endpoint (ec2 platform).")] = None
    tls: Annotated[
        TlsSpec | None, Field(description="HTTPS with ACM (ec2 platform); needs dns unless certificate_arn is given.")
    ] = None

    @property
    def platform(self) -> Literal["sagemaker", "ec2"]:
        return self.deployment.platform

    @property
    def instance_type(self) -> str:
        return self.deployment.instance_type

    @property
    def instance_count(self) -> int:
        return self.deployment.instance_count

    @property
    def instance_type_field(self) -> str:
        return "deployment.instance_type"

    @property
    def ships_model_data(self) -> bool:
        """Whether the endpoint gets its model from our S3 upload (ModelDataUrl, unpacked in /opt/ml/model): our
        compiled artifact, or a local model directory for a Hugging Face container (which otherwise fetches
        hf_model_id from the Hub itself)."""
        return self.container.ours or self.model.source_kind != "hf-hub-id"

    @property
    def dns_url(self) -> str | None:
        """The deployment's address by its DNS record: https:// with TLS, else http://; None without dns."""
        if not self.dns:
            return None
        return f"{'https' if self.tls and self.tls.enabled else 'http'}://{self.dns.record_name}"

    @property
    def container(self) -> catalog.ContainerKind:
        """The catalogue's row for ``deployment.container.kind``."""
        return catalog.container_kind(self.deployment.container.kind)

    @model_validator(mode="before")
    @classmethod
    def _llm_container_by_default(cls, data: Any) -> Any:
        """A text-generation spec that names no container runs AWS's vLLM Neuron container (the LLM path Neuron
        supports now); the others default to our server."""
        if not isinstance(data, dict) or data.get("task") != LLM_TASK:
            return data
        deployment = data.get("deployment")
        deployment = {} if deployment is None else deployment
        if not isinstance(deployment, dict):
            return data
        container = deployment.get("container")
        container = {} if container is None else container
        if not isinstance(container, dict) or "kind" in container:
            return data
        return {**data, "deployment": {**deployment, "container": {**container, "kind": DEFAULT_LLM_CONTAINER}}}

    @model_validator(mode="after")
    def _consistent(self) -> InferenceSpec:
        container, kind = self.deployment.container.kind, self.container
        llms = catalog.llm_container_kinds()
        others = [name for name in catalog.container_kinds() if name not in llms]
        if self.task == LLM_TASK and not kind.llm:
            raise FieldIssue(
                "deployment.container.kind",
                "task text-generation is served by the LLM containers; set deployment.container.kind "
                f"to {' or '.join(llms)}",
            )
        if kind.llm and self.task != LLM_TASK:
            raise FieldIssue(
                "task",
                f"container {container} serves decoder LLMs only; use task text-generation or container kind "
                f"{' or '.join(others)}",
            )
        source = self.model.source_kind
        if source not in kind.model_sources and not kind.ours:
            raise FieldIssue(
                "model",
                f"container {container} loads a Hugging Face model itself; set model.hf_model_id, model.path "
                "to a Hugging Face causal-LM directory (e.g. one `neurondeploy train` saved), model.s3_uri or "
                "model.training_job",
            )
        if source not in kind.model_sources and source in ("s3-uri", "training-job"):
            raise FieldIssue(
                f"model.{source.replace('-', '_')}",
                f"{container} compiles the model here from a local copy; download it and give model.path",
            )
        if source not in kind.model_sources:
            raise FieldIssue(
                "model.hf_model_id",
                f"model.hf_model_id is only for the {' / '.join(llms)} containers; give model.path for a model "
                f"{container} compiles",
            )
        if self.deployment.container.compile_at_start and not kind.compiles_at_start:
            raise FieldIssue(
                "deployment.container.compile_at_start",
                f"compile_at_start is for a container that compiles the model when it starts (vllm-neuron); "
                f"{container} does not: remove it",
            )
        if self.deployment.container.start_from_neuron_cache and kind.compiles_at_start:
            raise FieldIssue(
                "deployment.container.start_from_neuron_cache",
                f"{container} does not read the Hugging Face Neuron cache; to let it compile when it starts, set "
                "deployment.container.compile_at_start: true instead",
            )
        if self.model.quantization != "none" and not kind.quantization:
            raise FieldIssue(
                "model.quantization",
                f"weight quantization is done by NxD Inference in the {' / '.join(llms)} containers; "
                "torch_neuronx.trace artifacts keep dtype weights: remove model.quantization",
            )
        if not kind.secret_env and self.deployment.container.secrets and not self.deployment.container.image_uri:
            raise FieldIssue(
                "deployment.container.env",
                f"container {container} starts its own entrypoint, which cannot read {{secret: ...}} / {{ssm: ...}} "
                "values (SageMaker passes literal environment values only); build the wrapper image of "
                "infra/hf-secrets (it resolves them through the execution role, then starts the Hugging Face one) "
                "and set deployment.container.image_uri to it",
            )
        if self.task == "image-classification" and not self.compile.image_size:
            raise FieldIssue("compile", "task image-classification needs compile.image_size: [height, width]")
        if self.deployment.platform == "sagemaker" and (self.dns or self.tls):
            raise FieldIssue(
                "dns" if self.dns else "tls",
                "dns and tls apply to platform ec2 (SageMaker endpoints have their own HTTPS URL); remove them or use platform ec2",
            )
        if self.tls and self.tls.enabled and not self.tls.certificate_arn and not self.dns:
            raise FieldIssue(
                "tls",
                "tls without certificate_arn needs dns (the certificate is validated through Route 53); add dns or certificate_arn",
            )
        if self.deployment.platform not in kind.platforms:
            platform = self.deployment.platform
            hosts = [name for name in catalog.container_kinds() if platform in catalog.container_kind(name).platforms]
            raise FieldIssue(
                "deployment.container.kind",
                f"container {container} runs on {' and '.join(PLATFORM_NAMES[p] for p in kind.platforms)} only; "
                f"use platform {kind.platforms[0]}, or container kind {' or '.join(hosts)} on {platform}",
            )
        if self.deployment.platform == "ec2" and not kind.ours and self.model.source_kind != "hf-hub-id":
            raise FieldIssue(
                "model",
                f"on EC2, container {container} serves model.hf_model_id (from the model compile --remote built, "
                "or compiled at start); use platform sagemaker for a model directory, an S3 URI or a training job",
            )
        if self.deployment.platform == "ec2":
            network = self.network
            if network.creates_vpc and network.availability_zones < 2:
                raise FieldIssue(
                    "network.availability_zones",
                    "an application load balancer needs 2 or more availability zones; set 2",
                )
            if not network.creates_vpc and len(network.public_subnet_ids) < 2:
                raise FieldIssue(
                    "network.public_subnet_ids",
                    "an application load balancer needs 2 or more public subnets in different AZs; list them",
                )
            # Only when asked for: with an existing VPC the default is the subnets listed.
            if not network.creates_vpc and network.instance_subnets == "private" and not network.instance_subnet_ids:
                raise FieldIssue(
                    "network.instance_subnet_ids",
                    "instance_subnets is private: list private subnets that route to a NAT gateway",
                )
        if self.deployment.platform == "sagemaker" and self.serving.port != 8080:
            raise FieldIssue("serving.port", "SageMaker containers must listen on 8080; remove serving.port")
        return self
