"""Compile backends behind one interface: ``neuron`` (torch_neuronx.trace → neuronx-cc) and ``cpu`` (torch.jit.trace).

Both produce a TorchScript module saved with ``torch.jit.save`` and loaded with ``torch.jit.load``: the same
artifact layout and loading contract, so serving, upload and deploy never care which one ran.

What was verified where: the CPU backend runs here for real (tests trace real models). The Neuron SDK
(torch-neuronx, neuronx-cc) is not installable here (the PyPI names are placeholders) and no Neuron hardware
exists, so the neuron backend was NOT run on Neuron. Its compiler-argument building is pure and unit-tested
against the neuronx-cc flag reference (aws-neuron-sdk compiler/neuronx-cc/api-reference-guide/index.rst), and its call into ``torch_neuronx.trace`` is tested
against a recording stand-in module that checks the arguments it receives.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from neurondeploy.errors import NeurondeployError
from neurondeploy.resources.sagemaker_compile import CROSS_COMPILE_ENV
from neurondeploy.specs.inference import CompileSpec


class BackendError(NeurondeployError):
    exit_code = 3


def neuron_compiler_args(compile_spec: CompileSpec, target: str) -> list[str]:
    """neuronx-cc flags for torch_neuronx.trace, from the spec (aws-neuron-sdk compiler/neuronx-cc/api-reference-guide/index.rst).

    ``--auto-cast`` is always explicit because its default changed in SDK 2.27 (matmult → none); the cast type
    is only meaningful, and only passed, when something is cast.
    """
    args = ["--target", target, "--auto-cast", compile_spec.auto_cast]
    if compile_spec.auto_cast != "none":
        args += ["--auto-cast-type", compile_spec.auto_cast_type]
    args += ["--model-type", compile_spec.model_type, f"--optlevel={compile_spec.optlevel}"]
    return args


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class CpuBackend:
    """torch.jit.trace on this machine: the faithful fallback where the Neuron SDK is not installed."""

    name = "cpu"

    def versions(self) -> dict[str, str | None]:
        return {"torch": torch.__version__, "torch_neuronx": None, "neuronx_cc": None}

    def compiler_version(self) -> str:
        return f"torch-{torch.__version__}"

    def trace(
        self, module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], compiler_args: list[str], workdir: Path
    ) -> torch.jit.ScriptModule:
        with torch.no_grad(), quiet_transformers():
            # Shape-dependent Python branches are constants by design: one trace per static bucket.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # check_trace re-runs the model to compare; the compiler's own numerical check does that once, properly.
            try:
                return torch.jit.trace(module, example_inputs, check_trace=False)
            except Exception as exc:  # the model's own error, raised while running it on the example inputs
                raise BackendError(
                    f"tracing failed on inputs {describe_inputs(example_inputs)}: {first_line(exc)}", MODEL_INPUT_HINT
                ) from exc


@dataclass
class NeuronBackend:
    """torch_neuronx.trace: compiles with neuronx-cc into a ScriptModule holding one neuron::Model op (the NEFF)."""

    torch_neuronx: object
    name = "neuron"

    def versions(self) -> dict[str, str | None]:
        return {
            "torch": torch.__version__,
            "torch_neuronx": _version("torch-neuronx"),
            "neuronx_cc": _version("neuronx-cc"),
        }

    def compiler_version(self) -> str:
        return f"neuronx-cc-{_version('neuronx-cc')}"

    def trace(
        self, module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], compiler_args: list[str], workdir: Path
    ) -> torch.jit.ScriptModule:
        # On a host without NeuronCores (a CPU compile job), neuronx-cc cross-compiles for --target when asked
        # with cpu_backend=True (aws-neuron-sdk .../inference/api-torch-neuronx-trace.rst); the flag exists only there, so it is passed only then.
        extra = {"cpu_backend": True} if os.environ.get(CROSS_COMPILE_ENV) == "1" else {}
        try:
            with quiet_transformers():
                return self.torch_neuronx.trace(
                    module, example_inputs, compiler_args=compiler_args, compiler_workdir=str(workdir), **extra
                )
        except Exception as exc:  # neuronx-cc failures surface as many types; the log is in workdir
            raise BackendError(
                f"neuronx-cc failed: {first_line(exc)}",
                f"see the compiler log in {workdir}; a compile killed with -9 ran out of host memory "
                "(use a larger host or --optlevel 1)",
            ) from exc


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Tracing reads every attribute of a transformers model, deprecated ones included (``is_gradient_checkpointing``
    warns in transformers' modeling_utils): its FutureWarnings address its own API users, about calls we never
    make, and would fill the compile's screen, two per bucket. Warnings of the model's own code still show."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers(\.|$)")
        yield


MODEL_INPUT_HINT = (
    "check the model takes the task's inputs (for token ids: set model.architecture.vocab_size so "
    "example ids stay in range)"
)


def describe_inputs(inputs) -> str:
    return ", ".join(f"{tuple(t.shape)} {t.dtype}" for t in inputs)


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # TorchScript errors start with a generic banner; the cause is on the last line.
    return (
        (lines[-1] if lines and lines[0].startswith("The following operation failed") else lines[0])
        if lines
        else type(exc).__name__
    )


def select_backend(requested: str = "auto") -> CpuBackend | NeuronBackend:
    """``auto``: neuron when torch_neuronx imports, else cpu. ``neuron`` without the SDK is an error, not a fallback."""
    if requested not in ("auto", "neuron", "cpu"):
        raise BackendError(f"unknown backend {requested!r}", "use auto, neuron or cpu")
    if requested == "cpu":
        return CpuBackend()
    try:
        torch_neuronx = importlib.import_module("torch_neuronx")
    except ImportError as exc:
        if requested == "neuron":
            raise BackendError(
                f"backend neuron needs the Neuron SDK: torch_neuronx does not import ({exc})",
                "run on a Neuron DLAMI / DLC (SDK ≤ 2.31), or use --backend cpu",
            ) from None
        return CpuBackend()
    return NeuronBackend(torch_neuronx)
