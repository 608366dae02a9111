"""neurondeploy: YAML spec -> checked plan -> AWS Trainium training job or Inferentia2 endpoint.

The package import stays light (no torch, no boto3, no pydantic) so the CLI starts fast: every module imports
``__version__`` from here, and the public functions are looked up on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> (module, attribute): the library's front door, ``from neurondeploy import load_spec, plan``.
_PUBLIC = {
    "load_spec": ("neurondeploy.specs.loader", "load_spec"),
    "plan": ("neurondeploy.planner.plan", "build_plan"),
}

__all__ = [*_PUBLIC, "__version__"]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(name)
    module, attribute = _PUBLIC[name]
    return getattr(importlib.import_module(module), attribute)
