"""What users write: strict spec models and the YAML loader."""

from neurondeploy.specs.inference import InferenceSpec
from neurondeploy.specs.loader import LoadedSpec, SourceMap, Spec, SpecErrors, load_spec, parse_spec
from neurondeploy.specs.training import TrainingSpec

__all__ = ["InferenceSpec", "TrainingSpec", "Spec", "LoadedSpec", "SourceMap", "SpecErrors", "load_spec", "parse_spec"]
