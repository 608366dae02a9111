"""`size`: a model's shape in, every (instance, TP) that fits out, cheapest first."""

from __future__ import annotations

from dataclasses import asdict

from pydantic import ValidationError

from neurondeploy.errors import PlanError
from neurondeploy.planner import sizing
from neurondeploy.specs.inference import ModelArchitecture


def architecture_from_args(args) -> ModelArchitecture:
    if args.model:
        return sizing.architecture_from_config(args.model)
    missing = [flag for flag, value in (("--layers", args.layers), ("--hidden", args.hidden), ("--heads", args.heads)) if value is None]
    if missing:
        raise PlanError(f"size needs --model DIR or the model's shape; missing {', '.join(missing)}",
                        "e.g. --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --vocab 128256 --intermediate 14336 --gated-mlp")
    try:
        return ModelArchitecture(layers=args.layers, hidden_size=args.hidden, attention_heads=args.heads, kv_heads=args.kv_heads,
                                 vocab_size=args.vocab, intermediate_size=args.intermediate, parameters=args.params,
                                 gated_mlp=args.gated_mlp)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "shape"
        raise PlanError(f"model shape: {field}: {first['msg']}", "check the numbers against the model's config.json") from None


def run_size(args) -> dict:
    for flag, value in (("--batch", args.batch), ("--seq", args.seq)):
        if value < 1:
            raise PlanError(f"{flag} must be at least 1, got {value}", f"pass a positive {flag}")
    arch = architecture_from_args(args)
    options = sizing.size_options(arch, args.batch, args.seq, args.dtype, args.backend, args.region)
    return {
        "model": arch.model_dump(),
        "parameters": sizing.parameter_count(arch),
        "batch": args.batch,
        "sequence_length": args.seq,
        "dtype": args.dtype,
        "backend": args.backend,
        "headroom_fraction": sizing.RUNTIME_HEADROOM_FRACTION,
        "options": [asdict(option) for option in options],
    }
