"""Training spec: an entry script run with torchrun on Trn1 (SageMaker) or on this machine's CPU (--local)."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from neurondeploy.specs.common import (
    IMAGE_URI_PATTERN,
    S3_URI_PATTERN,
    FieldIssue,
    SpecBase,
    StrictModel,
    s3_key_problem,
)
from neurondeploy.specs.inference import (
    INSTANCE_TYPE_PATTERN,
    PACKAGE_PREFIX,
    ModelArchitecture,
    local_path,
    strip_ml_prefix,
)
from neurondeploy.specs.screening import screen_value

REFERENCE_SOURCE = "pkg://neurondeploy/training/reference"  # the reference training script, shipped in the package
# Where a checkpoint directory may live in the training container: SageMaker's own tree and scratch space.
CHECKPOINT_ROOTS = ("/opt/ml/", "/tmp/")
# Room a channel's S3 prefix leaves for the names of the files under it: `neurondeploy data`'s shards
# (data-00000-of-00001.arrow) and records are under 40 bytes; a script's own files may be longer.
CHANNEL_FILE_NAME_BYTES = 128
# CreateTrainingJob's Environment and HyperParameters are shown by DescribeTrainingJob and kept with the job for
# good; the job environment takes no {secret: ARN} reference (yet), so a script reads its credential itself.
JOB_CREDENTIAL_FIX = (
    "store it in Secrets Manager and have the script read it at start with boto3's "
    "secretsmanager get_secret_value through the job's role (iam.role_arn), passing only the secret's ARN"
)

HyperparameterValue = str | int | float | bool


class DistributionSpec(StrictModel):
    """How the model and data are split over NeuronCores (or local processes with --local)."""

    tensor_parallel: Annotated[
        int, Field(description="Tensor-parallel degree (TP): cores one layer is sharded over.", ge=1, le=128)
    ] = 1
    pipeline_parallel: Annotated[
        int, Field(description="Pipeline-parallel degree (PP): stages the layers are cut into.", ge=1, le=64)
    ] = 1
    data_parallel: Annotated[
        int | None,
        Field(
            description="Data-parallel degree (DP). Empty: total NeuronCores / (TP × PP). Given: TP × PP × DP must equal the total.",
            ge=1,
            le=4096,
        ),
    ] = None
    microbatches: Annotated[
        int,
        Field(
            description="Pipeline micro-batches per step (PP > 1); at least PP keeps every stage busy.", ge=1, le=1024
        ),
    ] = 1
    precision: Annotated[
        Literal["fp32", "bf16-autocast", "bf16-stochastic-rounding", "bf16-mixed", "bf16-mixed-stochastic-rounding"],
        Field(
            description="fp32; bf16-autocast (torch.autocast around the forward, --auto-cast=none); or full bf16 weights "
            "with stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN=1), the Neuron docs' recommended replacement for "
            "XLA_USE_BF16. NxD Training only: bf16-mixed, bf16 weights and compute with an fp32 master copy of the "
            "weights and fp32 gradient accumulation, stochastic rounding off (its mixed_precision, what its published "
            "configs use); bf16-mixed-stochastic-rounding, the same with stochastic rounding (mixed_precision_SR)."
        ),
    ] = "bf16-autocast"
    gradient_checkpointing: Annotated[
        bool, Field(description="Recompute activations in the backward pass to save memory.")
    ] = False
    zero1: Annotated[bool, Field(description="Shard optimizer state over data-parallel ranks (ZeRO-1).")] = False
    sequence_parallel: Annotated[
        bool,
        Field(
            description="Sequence parallelism (Megatron; NxD Training's sequence_parallel): the activations tensor "
            "parallelism would replicate (norms, the inputs of the first matmuls) are split over the TP ranks along "
            "the sequence instead. NxD Training only; the reference script does not."
        ),
    ] = False
    checkpoint_granularity: Annotated[
        Literal["full", "selective"],
        Field(
            description="With gradient_checkpointing: full keeps each layer's input and recomputes the layer; "
            "selective keeps the layer's activations but those of `recompute` (NxD Training's "
            "activations_checkpoint_granularity). The reference script checkpoints full layers."
        ),
    ] = "full"
    recompute: Annotated[
        list[Literal["attention", "mlp"]],
        Field(
            description="Selective checkpointing: what is recomputed in the backward pass, the core attention and/or "
            "the MLP (NxD Training's activations_checkpoint_recompute: CoreAttention, LlamaMLP).",
            max_length=2,
        ),
    ] = ["attention"]
    expert_capacity_factor: Annotated[
        float,
        Field(
            description="Mixture-of-experts models with NxD Training: the tokens each expert takes per step, as a "
            "multiple of an even share; tokens routed beyond it are dropped (NxD Training's model.moe."
            "capacity_factor; the published Mixtral config uses 2.0). 0: dropless, every token reaches its "
            "experts (model.moe.dropless; it needs a gated SiLU MLP).",
            ge=0,
            le=64,
        ),
    ] = 2.0

    @property
    def selective_checkpointing(self) -> bool:
        """Whether the backward pass recomputes only ``recompute`` (else whole layers, or nothing)."""
        return self.gradient_checkpointing and self.checkpoint_granularity == "selective"

    @model_validator(mode="after")
    def _pipeline(self) -> DistributionSpec:
        if self.pipeline_parallel == 1 and self.microbatches != 1:
            raise FieldIssue(
                "microbatches",
                f"microbatches {self.microbatches} needs pipeline_parallel > 1; remove it or set pipeline_parallel",
            )
        return self


class CheckpointSpec(StrictModel):
    """Where checkpoints go and whether a run resumes from the newest."""

    s3_uri: Annotated[
        str | None,
        Field(description="S3 prefix SageMaker syncs local_path to (needed for spot).", pattern=S3_URI_PATTERN),
    ] = None
    local_path: Annotated[
        str,
        Field(
            description="Directory inside the container the script writes to and SageMaker syncs to s3_uri: an "
            f"absolute path under {' or '.join(CHECKPOINT_ROOTS)} (SageMaker's default is /opt/ml/checkpoints)."
        ),
    ] = "/opt/ml/checkpoints"
    every_steps: Annotated[int, Field(description="Save every N optimizer steps.", ge=1, le=10_000_000)] = 100
    resume: Annotated[bool, Field(description="Start from the newest checkpoint found, if any.")] = True

    @field_validator("local_path")
    @classmethod
    def _inside_the_job(cls, value: str) -> str:
        """SageMaker uploads everything under LocalPath to s3_uri: ``/etc`` there would ship the container's system
        files, and the training replay maps it under its sandbox, which ``..`` would leave."""
        path = PurePosixPath(value)
        if not path.is_absolute() or ".." in path.parts or not any(value.startswith(r) for r in CHECKPOINT_ROOTS):
            raise ValueError(
                f"{value!r} is not a directory of the job's own: give an absolute path under "
                f"{' or '.join(CHECKPOINT_ROOTS)} without '..', e.g. /opt/ml/checkpoints"
            )
        return value


class SpotSpec(StrictModel):
    """Managed spot training: cheaper, may be interrupted; needs checkpoints to resume."""

    enabled: Annotated[bool, Field(description="Use managed spot capacity.")] = False
    max_wait_s: Annotated[
        int | None,
        Field(
            description="MaxWaitTimeInSeconds: total time including waiting for capacity; ≥ max_runtime_s.",
            ge=1,
            le=2_419_200,
        ),
    ] = None


class InputChannel(StrictModel):
    """A named data channel: S3 on SageMaker, a local directory with --local."""

    s3_uri: Annotated[str | None, Field(description="S3 prefix of the channel's data.", pattern=S3_URI_PATTERN)] = None
    local_path: Annotated[
        str | None,
        Field(
            description="Local directory standing in for the channel with --local, and where `neurondeploy data` "
            "writes a tokenized dataset: inside the spec's project (its git work tree, else its directory)."
        ),
    ] = None
    distribution: Annotated[
        Literal["FullyReplicated", "ShardedByS3Key"],
        Field(description="Every host gets all data, or a shard of the keys."),
    ] = "FullyReplicated"
    format: Annotated[
        Literal["files", "tokenized"],
        Field(
            description="What the channel holds: files, read by the script as it likes (the reference script "
            "reads text); tokenized, a Hugging Face datasets directory (save_to_disk) of token sequences packed to "
            "hyperparameters.sequence_length with input_ids, attention_mask and labels, which NxD Training's HF "
            "data module loads (datasets.load_from_disk) and `neurondeploy data` writes from a text corpus."
        ),
    ] = "files"

    @field_validator("s3_uri")
    @classmethod
    def _keys_fit(cls, value: str | None) -> str | None:
        problem = s3_key_problem(value, CHANNEL_FILE_NAME_BYTES) if value else None
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _somewhere(self) -> InputChannel:
        if not self.s3_uri and not self.local_path:
            raise FieldIssue("s3_uri", "a channel needs s3_uri (SageMaker) or local_path (--local), or both")
        return self


class TrainingSpec(SpecBase):
    """A training job on Trn1 (SageMaker) that runs the same way on this machine with --local."""

    kind: Annotated[Literal["training"], Field(description="Spec kind.")]
    engine: Annotated[
        Literal["reference", "nxd-training"],
        Field(
            description="What trains: reference, the script in source_dir (the reference script, "
            "pkg://neurondeploy/training/reference, or yours), torchrun-launched by the SageMaker training toolkit, "
            "and what `train --local` runs; nxd-training, NxD Training (aws-neuron/neuronx-distributed-training) as "
            "the pytorch-training-neuronx image ships it: "
            "pipeline and sequence parallel, the layouts AWS publishes for Llama-class models. validate and plan size "
            "an nxd-training layout as NxD Training runs it (1F1B pipeline schedule); its job runs NxD Training's "
            "training_orchestrator.py (entry_point) from its examples directory (source_dir) with the config plan "
            "renders. NxD Training needs torch-xla and Neuron devices: `train --local` runs the reference script in "
            "its place, on the same layout rules and the tokenized channel's local copy, at a scaled-down size."
        ),
    ] = "reference"
    entry_point: Annotated[str, Field(description="Training script, relative to source_dir.", min_length=1)]
    source_dir: Annotated[
        str,
        Field(
            description="Directory packed and uploaded with the script (relative to the spec file); it must lie "
            "inside the spec's project (the git work tree holding the spec file, else its directory) unless "
            "source_dir_outside_project is true. pkg://<python package>/<subdir> names a directory shipped inside "
            "an installed package: pkg://neurondeploy/training/reference is the reference training script."
        ),
    ] = "."
    source_dir_outside_project: Annotated[
        bool,
        Field(
            description="Allow a source_dir outside the spec's project (a shared code checkout). Everything "
            "in it is uploaded to S3; the filesystem root and system directories are refused even so."
        ),
    ] = False
    instance_type: Annotated[
        str,
        Field(
            description="Trainium instance type, e.g. trn1.32xlarge (ml. prefix optional).",
            pattern=INSTANCE_TYPE_PATTERN,
        ),
    ] = "trn1.2xlarge"
    instance_count: Annotated[
        int,
        Field(
            description="Instances; more than 1 needs an EFA type (trn1.32xlarge, trn1n.32xlarge, trn2).", ge=1, le=64
        ),
    ] = 1
    distribution: Annotated[DistributionSpec, Field(description="Parallel layout and precision.")] = Field(
        default_factory=DistributionSpec
    )
    architecture: Annotated[
        ModelArchitecture | None,
        Field(
            description="Shape of the model the script trains; when given, the planner checks it fits per NeuronCore."
        ),
    ] = None
    checkpoint: Annotated[CheckpointSpec, Field(description="Checkpoint location and resume.")] = Field(
        default_factory=CheckpointSpec
    )
    spot: Annotated[SpotSpec, Field(description="Managed spot training.")] = Field(default_factory=SpotSpec)
    max_runtime_s: Annotated[int, Field(description="Stop the job after this many seconds.", ge=60, le=2_419_200)] = (
        86400
    )
    hyperparameters: Annotated[
        dict[str, HyperparameterValue],
        Field(description="Passed to the script as --key value (at most 90; SageMaker allows 100)."),
    ] = {}
    inputs: Annotated[
        dict[str, InputChannel], Field(description="Data channels by name (SM_CHANNEL_<NAME>).", max_length=20)
    ] = {}
    output_s3_uri: Annotated[
        str | None,
        Field(
            description="S3 prefix for the model and output data. Empty: s3://<default bucket>/<name>/output.",
            pattern=S3_URI_PATTERN,
        ),
    ] = None
    compile_cache_uri: Annotated[
        str | None,
        Field(
            description="Persistent Neuron compile cache (NEURON_COMPILE_CACHE_URL) shared by runs, so jobs stop recompiling.",
            pattern=S3_URI_PATTERN,
        ),
    ] = None
    parallel_compile: Annotated[
        bool,
        Field(
            description="Make this job a pre-compile run: the training container prefixes torchrun with "
            "neuron_parallel_compile (RUN_NEURON_PARALLEL_COMPILE=1), which runs the script in graph-extraction mode "
            "(its outputs are invalid) and compiles every graph into compile_cache_uri. It trains nothing: run the "
            "same spec again with false to train from the filled cache."
        ),
    ] = False
    image_uri: Annotated[
        str | None,
        Field(
            description="Override the training image. Empty: pytorch-training-neuronx for region and SDK.",
            pattern=IMAGE_URI_PATTERN,
        ),
    ] = None
    environment: Annotated[dict[str, str], Field(description="Extra environment variables for the job.")] = {}
    inter_container_encryption: Annotated[
        bool,
        Field(
            description="Encrypt the traffic between a multi-node job's instances (CreateTrainingJob's "
            "EnableInterContainerTrafficEncryption, sent when instance_count > 1). SageMaker notes it can lengthen "
            "training where hosts exchange much, and that given security groups must admit UDP 500 and ESP (IP "
            "protocol 50) from themselves (https://docs.aws.amazon.com/sagemaker/latest/dg/train-encrypt.html); the "
            "group neurondeploy creates admits all traffic between the hosts. false: plan warns."
        ),
    ] = True
    local_processes: Annotated[
        int,
        Field(
            description="Processes torchrun starts with --local (the parallel layout is scaled down to them).",
            ge=1,
            le=64,
        ),
    ] = 2

    @property
    def platform(self) -> Literal["sagemaker"]:
        """Where it runs: training jobs run on SageMaker (``--local`` aside)."""
        return "sagemaker"

    @property
    def instance_type_field(self) -> str:
        return "instance_type"

    @field_validator("instance_type")
    @classmethod
    def _strip_ml(cls, value: str) -> str:
        return strip_ml_prefix(value)

    @field_validator("entry_point")
    @classmethod
    def _entry_inside_source(cls, value: str) -> str:
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(f"{value!r} leaves source_dir: give the script's path inside source_dir, e.g. train.py")
        return value

    @field_validator("source_dir")
    @classmethod
    def _package_dir_inside_package(cls, value: str) -> str:
        if value.startswith(PACKAGE_PREFIX) and ".." in PurePosixPath(value[len(PACKAGE_PREFIX) :]).parts:
            raise ValueError(f"{value!r} leaves its package: name a directory inside it, e.g. {REFERENCE_SOURCE}")
        return value

    def resolved_source_dir(self, base_dir: Path) -> Path:
        """source_dir on this machine: relative to the spec file, or inside an installed package (pkg://)."""
        return local_path(self.source_dir, base_dir)

    @field_validator("hyperparameters")
    @classmethod
    def _hyperparameters(cls, values: dict[str, HyperparameterValue]) -> dict[str, HyperparameterValue]:
        if len(values) > 90:
            raise ValueError(
                f"{len(values)} hyperparameters; at most 90 fit beside the ones neurondeploy adds (SageMaker allows 100)"
            )
        for key, value in values.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]{0,255}", key):
                raise ValueError(
                    f"hyperparameter name {key!r} must be letters, digits, _ or -, starting with a letter or _"
                )
            if isinstance(value, str):
                screen_value("hyperparameter", key, value, JOB_CREDENTIAL_FIX)
        return values

    @field_validator("inputs")
    @classmethod
    def _channel_names(cls, values: dict[str, InputChannel]) -> dict[str, InputChannel]:
        for name in values:
            # SageMaker mounts a channel at /opt/ml/input/data/<name> and `data` writes under .neurondeploy/data/<name>:
            # "." or ".." would be the directory above.
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9\.\-_]{0,63}", name):
                raise ValueError(
                    f"channel name {name[:80]!r} must start with a letter or digit and be 1-64 of letters, digits, "
                    "'.', '-' or '_' (SageMaker mounts it at /opt/ml/input/data/<name>)"
                )
        return values

    @field_validator("environment")
    @classmethod
    def _environment(cls, values: dict[str, str]) -> dict[str, str]:
        for key, value in values.items():
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]{0,511}", key) or len(value) > 512:
                raise ValueError(
                    f"environment {key!r}: keys match [A-Za-z_][A-Za-z0-9_]* and values are at most 512 characters"
                )
            screen_value("environment", key, value, JOB_CREDENTIAL_FIX)
        return values

    @model_validator(mode="after")
    def _consistent(self) -> TrainingSpec:
        if self.spot.enabled:
            if not self.checkpoint.s3_uri:
                raise FieldIssue(
                    "spot.enabled", "spot training is interrupted and resumes from checkpoints; set checkpoint.s3_uri"
                )
            if self.spot.max_wait_s is None:
                raise FieldIssue(
                    "spot.max_wait_s", f"spot training needs spot.max_wait_s (≥ max_runtime_s {self.max_runtime_s})"
                )
            if self.spot.max_wait_s < self.max_runtime_s:
                raise FieldIssue(
                    "spot.max_wait_s",
                    f"spot.max_wait_s {self.spot.max_wait_s} is below max_runtime_s {self.max_runtime_s}; raise it",
                )
        elif self.spot.max_wait_s is not None:
            raise FieldIssue("spot.max_wait_s", "spot.max_wait_s needs spot.enabled: true")
        return self
