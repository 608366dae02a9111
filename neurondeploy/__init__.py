"""neurondeploy: YAML spec -> checked plan -> AWS Trainium training job or Inferentia2 endpoint.

The package import stays light (no torch, no boto3, no pydantic) so the CLI starts fast: every module imports
``__version__`` from here, and the public functions are looked up on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> (module, attribute): the library's front door, ``from neurondeploy import load_spec, plan, apply, train``.
_PUBLIC = {
    "load_spec": ("neurondeploy.specs.loader", "load_spec"),
    "plan": ("neurondeploy.planner.plan", "build_plan"),
    "apply": ("neurondeploy.ops.apply", "apply"),
    "apply_local": ("neurondeploy.ops.apply", "apply_local"),
    "train": ("neurondeploy.ops.train", "train"),
    "compile_remote": ("neurondeploy.ops.compile_remote", "compile_remote"),
}

__all__ = [*_PUBLIC, "__version__"]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(name)
    module, attribute = _PUBLIC[name]
    return getattr(importlib.import_module(module), attribute)
