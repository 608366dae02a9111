"""Facts as data, with a source per row: instance types, TP degrees, SDK lifecycle, container images and kinds,
prices.

Tables live in ``neurondeploy/catalog/data/*.yaml`` and are read once, on first use. Importing this
package imports neither yaml, boto3, botocore, torch nor sagemaker. ECR accounts per region are catalogue data
generated from sagemaker-core's ``image_uri_config`` JSON files (``image_accounts_source``), so planning needs no
sagemaker-core.
"""

from __future__ import annotations

from neurondeploy.catalog._data import minor, version_tuple
from neurondeploy.catalog.account_tags import sagemaker_pull_problem
from neurondeploy.catalog.containers import ContainerKind, container_kind, container_kinds, llm_container_kinds
from neurondeploy.catalog.dlami import DEFAULT_DLAMI_PARAMETER, Dlami, dlami, dlami_for, dlamis, dlamis_by_parameter
from neurondeploy.catalog.dlc_releases import DLC_REPOSITORY, DlcRelease, dlc_releases
from neurondeploy.catalog.hosts import (
    SAGEMAKER_INFERENCE_AMI,
    DriverFloor,
    InferenceAmi,
    driver_floor,
    driver_refusal,
    inference_ami,
    inference_amis,
    newest_proven_sdk,
    untested_pairing,
)
from neurondeploy.catalog.images import (
    ImageTag,
    dlc_account,
    dlc_accounts,
    frozen_at,
    image_accounts,
    image_purposes,
    image_regions,
    image_uri,
    known_tags,
    neuron_image,
    public_registry,
)
from neurondeploy.catalog.instances import (
    PRICE_REGION,
    InstanceType,
    ShardingRules,
    TpDegrees,
    get_instance,
    instance_types,
    legal_tp_degrees,
    price_per_hour,
    regions,
    replicas_per_instance,
    sharding_rules,
    tp_backends,
    tp_tables,
)
from neurondeploy.catalog.nxd_training import nxd_training_examples, nxd_training_examples_source
from neurondeploy.catalog.sdk import (
    Component,
    SdkRelease,
    check_sdk_for,
    components,
    default_auto_cast,
    family_line_end,
    get_sdk,
    latest_sdk_for,
    maintenance_warnings,
    sdk_paths,
    sdk_releases,
)
from neurondeploy.catalog.training_toolkit import TrainingToolkit, training_toolkit
from neurondeploy.catalog.vllm_releases import VLLM_REPOSITORY, VllmRelease, vllm_releases

__all__ = [
    "SAGEMAKER_INFERENCE_AMI",
    "DriverFloor",
    "InferenceAmi",
    "driver_floor",
    "driver_refusal",
    "inference_ami",
    "inference_amis",
    "sagemaker_pull_problem",
    "newest_proven_sdk",
    "untested_pairing",
    "DEFAULT_DLAMI_PARAMETER",
    "DLC_REPOSITORY",
    "minor",
    "version_tuple",
    "Dlami",
    "dlami",
    "dlami_for",
    "dlamis",
    "dlamis_by_parameter",
    "training_toolkit",
    "nxd_training_examples",
    "nxd_training_examples_source",
    "TrainingToolkit",
    "DlcRelease",
    "dlc_releases",
    "VLLM_REPOSITORY",
    "VllmRelease",
    "vllm_releases",
    "ContainerKind",
    "container_kind",
    "container_kinds",
    "llm_container_kinds",
    "PRICE_REGION",
    "Component",
    "ImageTag",
    "InstanceType",
    "SdkRelease",
    "ShardingRules",
    "TpDegrees",
    "check_sdk_for",
    "components",
    "default_auto_cast",
    "family_line_end",
    "dlc_account",
    "dlc_accounts",
    "frozen_at",
    "get_instance",
    "replicas_per_instance",
    "get_sdk",
    "image_accounts",
    "image_purposes",
    "image_regions",
    "image_uri",
    "instance_types",
    "known_tags",
    "latest_sdk_for",
    "legal_tp_degrees",
    "maintenance_warnings",
    "neuron_image",
    "public_registry",
    "price_per_hour",
    "regions",
    "sdk_paths",
    "sdk_releases",
    "sharding_rules",
    "tp_backends",
    "tp_tables",
]
