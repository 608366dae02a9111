"""neurondeploy: YAML spec -> checked plan -> AWS Trainium training job or Inferentia2 endpoint.

The package import stays light (no torch, no boto3) so the CLI starts fast; the public functions
are imported on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["load_spec", "plan", "__version__"]


def __getattr__(name: str):
    if name == "load_spec":
        from neurondeploy.specs.loader import load_spec

        return load_spec
    if name == "plan":
        from neurondeploy.planner.plan import build_plan

        return build_plan
    raise AttributeError(name)
