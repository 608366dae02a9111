"""`size`: a model's shape in, every (instance, TP) that fits out, cheapest first."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from pydantic import ValidationError

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.planner import sizing
from neurondeploy.specs.inference import ModelArchitecture


def architecture_of(
    model: str | Path | None = None,
    *,
    layers: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    kv_heads: int | None = None,
    vocab: int | None = None,
    intermediate: int | None = None,
    params: int | None = None,
    gated_mlp: bool = False,
    head_dim: int | None = None,
    experts: int | None = None,
    experts_per_token: int | None = None,
    expert_intermediate: int | None = None,
    tied_embeddings: bool = False,
) -> ModelArchitecture:
    """From a model directory's config.json, or from the shape given number by number."""
    if model:
        return sizing.architecture_from_config(model)
    missing = [
        flag for flag, value in (("--layers", layers), ("--hidden", hidden), ("--heads", heads)) if value is None
    ]
    if missing:
        raise PlanError(
            f"size needs --model DIR or the model's shape; missing {', '.join(missing)}",
            "e.g. --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --vocab 128256 --intermediate 14336 --gated-mlp",
        )
    try:
        return ModelArchitecture(
            layers=layers,
            hidden_size=hidden,
            attention_heads=heads,
            kv_heads=kv_heads,
            vocab_size=vocab,
            intermediate_size=intermediate,
            parameters=params,
            gated_mlp=gated_mlp,
            head_dim=head_dim,
            experts=experts,
            experts_per_token=experts_per_token,
            expert_intermediate_size=expert_intermediate,
            tied_embeddings=tied_embeddings,
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "shape"
        raise PlanError(
            f"model shape: {field}: {first['msg']}", "check the numbers against the model's config.json"
        ) from None


def serving_load(
    profile: str = sizing.DEFAULT_SERVING_PROFILE, batch: int | None = None, seq: int | None = None
) -> tuple[int, int, sizing.ServingProfile | None]:
    """The batch and sequence length to size for: the profile's, each unless given. The profile is returned only
    when both figures are its own, so nothing claims a load it did not assume."""
    chosen = sizing.SERVING_PROFILES[profile]
    batch = chosen.batch if batch is None else batch
    seq = chosen.sequence if seq is None else seq
    for flag, value in (("--batch", batch), ("--seq", seq)):
        if value < 1:
            raise PlanError(f"{flag} must be at least 1, got {value}", f"pass a positive {flag}")
    same = (batch, seq) == (chosen.batch, chosen.sequence)
    return batch, seq, chosen if same else None


def size_report(
    arch: ModelArchitecture,
    *,
    batch: int,
    seq: int,
    dtype: str,
    backend: str,
    region: str | None = None,
    quantization: str = "none",
    platform: str = "ec2",
    profile: sizing.ServingProfile | None = None,
) -> dict:
    """``profile``: the serving profile ``batch`` and ``seq`` came from, if they did (printed with the table)."""
    batch, seq, _ = serving_load(batch=batch, seq=seq)
    supported = catalog.sharding_rules(backend).weight_quantization
    if quantization != "none" and quantization not in supported:
        raise PlanError(
            f"--quantization {quantization}: {backend} does not load {quantization} weights",
            f"use one of {', '.join(supported)}" if supported else "leave --quantization out for this backend",
        )
    options = sizing.size_options(arch, batch, seq, dtype, backend, region, quantization, platform)
    best = sizing.recommended(options)
    return {
        "platform": platform,
        # where the prices are from: the region's own EC2 price where the catalogue has one, else us-east-1's;
        # SageMaker's ml.* prices are us-east-1's only
        "price_region": region if region and platform == "ec2" else catalog.PRICE_REGION,
        "recommended": None if best is None else options.index(best),
        "model": arch.model_dump(),
        "parameters": sizing.parameter_count(arch),
        "active_parameters": sizing.active_parameter_count(arch),
        "quantization": quantization,
        "batch": batch,
        "sequence_length": seq,
        "profile": None if profile is None else asdict(profile),
        "dtype": dtype,
        "backend": backend,
        "headroom_fraction": sizing.RUNTIME_HEADROOM_FRACTION,
        "options": [asdict(option) for option in options],
    }
