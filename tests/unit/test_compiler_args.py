"""neuronx-cc arguments are built purely from the spec (aws-neuron-sdk compiler/neuronx-cc/api-reference-guide/index.rst)."""

from __future__ import annotations

import sys

import pytest

from neurondeploy.compiler.backends import BackendError, CpuBackend, neuron_compiler_args, select_backend
from neurondeploy.specs.inference import CompileSpec


def test_default_flags_are_explicit_about_auto_cast():
    # --auto-cast defaults changed in SDK 2.27 (matmult -> none): never rely on the default.
    assert neuron_compiler_args(CompileSpec(), "inf2") == [
        "--target",
        "inf2",
        "--auto-cast",
        "none",
        "--model-type",
        "generic",
        "--optlevel=2",
    ]


def test_cast_type_only_when_something_is_cast():
    args = neuron_compiler_args(
        CompileSpec(auto_cast="all", auto_cast_type="fp8_e4m3", model_type="unet-inference", optlevel=3), "trn2"
    )
    assert args == [
        "--target",
        "trn2",
        "--auto-cast",
        "all",
        "--auto-cast-type",
        "fp8_e4m3",
        "--model-type",
        "unet-inference",
        "--optlevel=3",
    ]


def test_backend_selection(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_neuronx", None)  # as on any machine without the Neuron SDK
    assert isinstance(select_backend("cpu"), CpuBackend)
    assert isinstance(select_backend("auto"), CpuBackend)
    with pytest.raises(BackendError, match="needs the Neuron SDK"):
        select_backend("neuron")
    with pytest.raises(BackendError, match="unknown backend"):
        select_backend("gpu")
