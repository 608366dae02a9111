"""`init`: write a first spec for a model directory or Hub id and a target, then validate it."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from neurondeploy.errors import PlanError
from neurondeploy.planner.sizing import read_config
from neurondeploy.planner.starter import ModelSource, spec_name, starter_spec
from neurondeploy.planner.validate import validate_files
from neurondeploy.specs import parse_spec
from neurondeploy.specs.inference import PACKAGE_PREFIX, ModelSpec
from neurondeploy.specs.screening import control_character_problem

FIX_MISSING = "give a Hugging Face model directory"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _cached_config(model_id: str) -> Path | None:
    """The Hub model's config.json in the local Hugging Face cache, if it is there (never downloads)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(model_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def model_source(model: str, config: str | None, spec_dir: Path) -> ModelSource:
    """``model`` as the spec will name it, with its config.json: a directory (or pkg://package/dir) becomes
    ``path:``, written relative to the spec's directory when it is under it; a Hub id ``hf_model_id:``, its config
    from ``config`` or the local Hugging Face cache."""
    problem = control_character_problem(model)
    if problem:  # the spec refuses such a path (ModelSpec.path), so init would write one that cannot load
        raise PlanError(f"the model path {problem}", "rename the directory without control characters")
    if model.startswith(PACKAGE_PREFIX) or Path(model).expanduser().is_dir():
        directory = ModelSpec(path=model).resolved_path(Path.cwd()).resolve()
        value = model
        if not model.startswith(PACKAGE_PREFIX):
            try:
                value = str(directory.relative_to(spec_dir.resolve()))
            except ValueError:
                value = str(directory)
        config_path = Path(config or directory / "config.json")
        return ModelSource("path", value, read_config(config_path, FIX_MISSING), model)
    if not HUB_ID.match(model):
        raise PlanError(
            f"{model} is neither a model directory nor a Hugging Face Hub id (org/name)",
            "give the directory holding config.json and the weights, or an id such as meta-llama/Llama-3.1-8B-Instruct",
        )
    found = Path(config) if config else _cached_config(model)
    if found is None:
        raise PlanError(
            f"{model}: its config.json is not in the local Hugging Face cache, and init never downloads",
            f"fetch it (huggingface-cli download {model} config.json) or pass --config FILE",
        )
    return ModelSource("hf_model_id", model, read_config(found, FIX_MISSING), model)


def cmd_init(args) -> int:
    out = Path(args.out) if args.out else None
    spec_dir = (out.parent if out else Path.cwd()).resolve()
    source = model_source(args.model, args.config, spec_dir)
    name = args.name or spec_name(source.label)
    out = out or Path(f"{name}.yaml")
    if out.exists() and not args.force:
        raise PlanError(f"{out} exists", "choose another --out, or --force to replace it")
    command = shlex.join(["neurondeploy", "init", *sys.argv[2:]]) if len(sys.argv) > 2 else "neurondeploy init"
    text = starter_spec(
        source, target=args.target, name=name, region=args.region, command=command, image_uri=args.image_uri
    )
    parse_spec(text, file=str(out), path=out.resolve())  # a bad --name or --image-uri: one line, nothing written
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    (result,) = validate_files([str(out)])
    for line in result.lines():
        print(line, file=sys.stdout if result.ok else sys.stderr)
    if result.ok:
        print(f"next: neurondeploy plan {shlex.quote(str(out))}")
    return 0 if result.ok else 2
