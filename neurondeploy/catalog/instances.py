"""Neuron instance types (data/instances.yaml) and legal tensor-parallel degrees (data/tp_degrees.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from neurondeploy.catalog._data import load, unknown
from neurondeploy.catalog.images import image_regions
from neurondeploy.errors import CatalogError

SAGEMAKER_PREFIX = "ml."
PRICE_REGION = "us-east-1"  # the region price_usd_per_hour refers to when the data has it


@dataclass(frozen=True)
class InstanceType:
    name: str  # EC2 name, no "ml." prefix
    family: str  # inf2 | trn1 | trn1n | trn2 | inf1
    accelerator: str  # inferentia2 | trainium | trainium2 | inferentia
    chips: int
    neuron_cores: int  # logical cores visible by default (trn2: LNC=2)
    hbm_per_core_gib: float
    vcpus: int
    host_memory_gib: int
    efa_devices: int  # 0 = no EFA multi-node
    compile_target: str | None  # neuronx-cc --target; None = not a neuronx-cc target (inf1)
    sagemaker_training: bool
    sagemaker_endpoint: bool
    nvme_instance_storage: bool  # do not send VolumeSizeInGB for endpoints
    price_usd_per_hour: float | None  # EC2 Linux on-demand in price_region (us-east-1 when known)
    price_source: str
    price_confirmed: bool
    regions: tuple[str, ...]
    source: str
    # Extras beyond the shared contract.
    sagemaker_transform: bool = False
    physical_neuron_cores: int = 0
    device_hbm_gib: float = 0.0  # the facts table's "Device HBM total", kept to cross-check hbm_total_gib
    artifact_target: str | None = None  # NEFFs are shared between instances with the same value
    price_region: str = PRICE_REGION
    prices_by_region: tuple[tuple[str, float], ...] = ()
    sagemaker_price_usd_per_hour: float | None = None  # ml.<name> on-demand, us-east-1; third-party or derived
    sagemaker_price_source: str = ""
    sagemaker_price_derived: bool = False  # EC2 price × a family's ml./EC2 ratio, not a published figure
    sagemaker_price_confirmed: bool = False  # no first-party ml.* price list was read: every figure is third-party
    ri_effective_usd_per_hour: float | None = None  # Neuron benchmarks' US East RI-effective rate
    ri_effective_source: str = ""
    regions_source: str = ""
    regions_fallback: bool = False  # regions are where the images are published, not availability
    confirmed: bool = True
    notes: str = ""

    @property
    def sagemaker_name(self) -> str:
        return SAGEMAKER_PREFIX + self.name

    @property
    def hbm_total_gib(self) -> float:
        return self.neuron_cores * self.hbm_per_core_gib

    @property
    def multi_node(self) -> bool:
        """True when the instance has EFA devices for multi-node collectives."""
        return self.efa_devices > 0

    def price_in(self, region: str) -> float | None:
        return dict(self.prices_by_region).get(region)


def _regions(row: dict, prices: dict) -> tuple[tuple[str, ...], str, bool]:
    how = row.get("regions_from", "prices")
    if how == "prices":
        return tuple(sorted(prices)), row["price_source"], False
    if how == "unknown":
        return (), "unknown: no region data in the facts file", False
    purpose = how.removeprefix("image:")
    try:
        found = image_regions(purpose)
    except CatalogError as err:
        return (), f"unknown ({err.message})", True
    return found, f"FALLBACK: regions where the {purpose} image is published (not instance availability)", True


def _build(row: dict, families: dict, sources: dict) -> InstanceType:
    family = row["name"].split(".")[0]
    merged = {**families[family], **row}
    prices = merged.get("on_demand_usd_per_hour") or {}
    price_region = PRICE_REGION if PRICE_REGION in prices or not prices else sorted(prices)[0]
    regions, regions_source, fallback = _regions(merged, prices)
    return InstanceType(
        name=merged["name"],
        family=family,
        accelerator=merged["accelerator"],
        chips=merged["chips"],
        neuron_cores=merged["neuron_cores"],
        hbm_per_core_gib=float(merged["hbm_per_core_gib"]),
        vcpus=merged["vcpus"],
        host_memory_gib=merged["host_memory_gib"],
        efa_devices=merged["efa_devices"],
        compile_target=merged["compile_target"],
        sagemaker_training=merged["sagemaker_training"],
        sagemaker_endpoint=merged["sagemaker_endpoint"],
        nvme_instance_storage=merged["nvme_instance_storage"],
        price_usd_per_hour=prices.get(price_region),
        price_source=merged["price_source"],
        price_confirmed=False,  # every on-demand price is third-party (no first-party AWS price page was read; the sources are in data/instances.yaml)
        regions=regions,
        source=f"{merged['source']}; {sources['sagemaker']}",
        sagemaker_transform=merged["sagemaker_transform"],
        physical_neuron_cores=merged["neuron_cores"] * merged["physical_cores_per_logical"],
        device_hbm_gib=float(merged["device_hbm_gib"]),
        artifact_target=merged["artifact_target"],
        price_region=price_region,
        prices_by_region=tuple(sorted((r, float(p)) for r, p in prices.items())),
        sagemaker_price_usd_per_hour=_sagemaker_price(merged),
        sagemaker_price_source=merged.get("sagemaker_price_source", ""),
        sagemaker_price_derived=merged.get("sagemaker_price_derived", False),
        sagemaker_price_confirmed=merged.get("sagemaker_price_confirmed", False),
        ri_effective_usd_per_hour=merged.get("ri_effective_usd_per_hour"),
        ri_effective_source=sources["ri_effective"] if merged.get("ri_effective_usd_per_hour") else "",
        regions_source=regions_source,
        regions_fallback=fallback,
        confirmed=merged["confirmed"],
        notes=merged.get("notes", ""),
    )


def _sagemaker_price(row: dict) -> float | None:
    price = (row.get("sagemaker_usd_per_hour") or {}).get(PRICE_REGION)
    return None if price is None else float(price)


@cache
def instance_types() -> dict[str, InstanceType]:
    """Every catalogued instance type by EC2 name."""
    data = load("instances")
    rows = (_build(row, data["families"], data["sources"]) for row in data["instances"])
    return {it.name: it for it in rows}


def get_instance(name: str) -> InstanceType:
    """Look up ``inf2.xlarge`` or ``ml.inf2.xlarge``; unknown names raise CatalogError with a suggestion."""
    key = str(name).strip().lower().removeprefix(SAGEMAKER_PREFIX)
    try:
        return instance_types()[key]
    except KeyError:
        raise unknown("instance type", name, instance_types()) from None


def regions() -> tuple[str, ...]:
    """Regions where some catalogued instance type is offered (third-party data; fallback rows excluded)."""
    return tuple(sorted({r for it in instance_types().values() if not it.regions_fallback for r in it.regions}))


def price_per_hour(
    instance: InstanceType, count: int = 1, *, region: str | None = None, platform: str = "ec2"
) -> float | None:
    """On-demand USD/hour for ``count`` instances (in ``instance.price_region`` unless ``region``); None if unknown.

    ``platform="sagemaker"`` gives the ml.* price (us-east-1 only), None where the catalogue has none."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if platform == "sagemaker":
        each = instance.sagemaker_price_usd_per_hour if region in (None, PRICE_REGION) else None
    else:
        each = instance.price_usd_per_hour if region is None else instance.price_in(region)
    return None if each is None else each * count


@dataclass(frozen=True)
class TpDegrees:
    backend: str
    accelerator: str
    degrees: tuple[int, ...]
    source: str
    confirmed: bool


@cache
def tp_tables() -> dict[tuple[str, str], TpDegrees]:
    """The documented TP degree sets, by (backend, accelerator), before fitting them to an instance."""
    out = {}
    for backend, spec in load("tp_degrees")["backends"].items():
        for accel, row in spec["accelerators"].items():
            out[(backend, accel)] = TpDegrees(backend, accel, tuple(row["degrees"]), row["source"], row["confirmed"])
    return out


def tp_backends() -> tuple[str, ...]:
    return tuple(load("tp_degrees")["backends"])


@dataclass(frozen=True)
class ShardingRules:
    """How a runtime splits attention over TP ranks, and which weight quantization it loads (tp_degrees.yaml)."""

    backend: str
    pads_attention_heads: bool
    replicates_kv_heads: bool
    weight_quantization: tuple[str, ...]
    source: str
    confirmed: bool


@cache
def sharding_rules(backend: str) -> ShardingRules:
    backends = load("tp_degrees")["backends"]
    if backend not in backends:
        raise unknown("tensor-parallel backend", backend, backends)
    row = backends[backend]["sharding"]
    return ShardingRules(
        backend,
        row["pads_attention_heads"],
        row["replicates_kv_heads"],
        tuple(row["weight_quantization"]),
        row["source"],
        row["confirmed"],
    )


def legal_tp_degrees(instance: InstanceType, backend: str) -> tuple[int, ...]:
    """TP degrees ``backend`` allows on ``instance``'s accelerator that fit its visible NeuronCores.

    ``()`` when the facts document no set for that backend on that accelerator (e.g. training on inf2,
    anything on inf1): nothing is known to be legal. An unknown backend name raises CatalogError.
    """
    if backend not in tp_backends():
        raise unknown("tensor-parallel backend", backend, tp_backends())
    table = tp_tables().get((backend, instance.accelerator))
    if table is None:
        return ()
    return tuple(d for d in table.degrees if d <= instance.neuron_cores)


def replicas_per_instance(instance_type: str, tensor_parallel: int) -> int:
    """Model replicas one instance serves: one per group of ``tensor_parallel`` NeuronCores."""
    return max(1, get_instance(instance_type).neuron_cores // tensor_parallel)
