"""The reference script's Trainium path with the layouts it runs there: tensor parallel with NxD Core's parallel
layers and ZeRO-1 with NxD's NeuronZero1Optimizer, under real torchrun (2 processes), against CPU stand-ins of
torch_xla (tests/fixtures/fake_xla) and neuronx_distributed (tests/fixtures/fake_nxd: the documented calls
implemented with gloo). The losses must equal one CPU process's, which needs the sharding, the regions' all-reduces,
the data-parallel reduction, the global-norm clip and the sharded optimizer to all be right. Not Neuron."""

from __future__ import annotations

import json
import os

import pytest
import torch

from neurondeploy.specs import load_spec
from neurondeploy.training.local import run_local_training

from .test_local_training import REPO, single_process, spec_file  # noqa: F401  (single_process: a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAKES = os.pathsep.join(str(REPO / "tests" / "fixtures" / name) for name in ("fake_xla", "fake_nxd"))
FLAGSHIP = REPO / "templates" / "llama-pretrain-trn1-multinode.yaml"


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", FAKES)
    monkeypatch.setenv("FAKE_XLA_LOG", str(tmp_path / "xla.jsonl"))
    monkeypatch.setenv("FAKE_NXD_LOG", str(tmp_path / "nxd.jsonl"))

    def calls(name: str) -> list[dict]:
        return [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]

    return calls


@pytest.mark.parametrize(
    ("distribution", "files"),
    [
        ({"tensor_parallel": 2}, {"xla_state.tp00.dp00.pt", "xla_state.tp01.dp00.pt"}),
        ({"zero1": True}, {"xla_state.tp00.dp00.pt", "xla_state.tp00.dp01.pt"}),
    ],
    ids=["tp2", "zero1-dp2"],
)
def test_tp_and_zero1_on_xla_give_the_single_process_losses_and_resume(
    tmp_path,
    stand_ins,
    single_process,  # noqa: F811
    distribution,
    files,
):
    loaded = load_spec(spec_file(tmp_path, "xla", **distribution))
    work = tmp_path / "run"
    result = run_local_training(loaded, processes=2, work_dir=work, hyperparameters={"device": "xla"})
    assert result.exit_code == 0 and result.last_step == 20
    for step, loss in single_process["fp32"].items():
        assert dict(result.losses)[step] == pytest.approx(loss, abs=1e-4), (step, result.losses)
    nxd = stand_ins("nxd")
    made = [c for c in nxd if c["call"] == "initialize_model_parallel"]
    assert len(made) == 2 and made[0]["tensor_model_parallel_size"] == distribution.get("tensor_parallel", 1)
    if "tensor_parallel" in distribution:
        layers = [c["call"] for c in nxd if c["rank"] == 0 and c["call"].endswith("ParallelLinear")]
        assert (
            layers.count("ColumnParallelLinear") == 5 * 4 and layers.count("RowParallelLinear") == 2 * 4
        )  # q k v gate up
        assert [c["groups"] for c in stand_ins("xla") if c["call"] == "reduce_gradients"][0] == [[0], [1]]
    else:
        assert sum(c["call"] == "zero1_step" for c in nxd) == 2 * 20
    assert {p.name for p in (work / "checkpoints" / "step_00000020").glob("xla_state*")} == files
    final = torch.load(work / "model" / "model.pt")
    config = json.loads((work / "model" / "tiny_lm_config.json").read_text())  # config.json is the HF one
    hidden = config["hidden_size"]
    assert final["layers.0.attention.q_proj.weight"].shape == (hidden, hidden)  # the slices gathered
    assert final["layers.0.mlp.down_proj.weight"].shape == (hidden, config["intermediate_size"])
    resumed = run_local_training(loaded, processes=2, work_dir=work, hyperparameters={"device": "xla", "max_steps": 23})
    assert resumed.exit_code == 0 and resumed.resumed_from_step == 20 and resumed.last_step == 23


def test_the_flagship_training_template_runs_its_xla_path(tmp_path, stand_ins):
    """templates/llama-pretrain-trn1-multinode.yaml (TP=8 DP=8, ZeRO-1, bf16 autocast, gradient checkpointing),
    scaled to 2 processes (TP=2), on the XLA path: NxD tensor parallel and ZeRO-1 together."""
    loaded = load_spec(FLAGSHIP)
    result = run_local_training(
        loaded,
        processes=2,
        work_dir=tmp_path / "flagship",
        hyperparameters={"device": "xla", "max_steps": 6, "global_batch_size": 8, "sequence_length": 64},
    )
    assert result.exit_code == 0 and result.last_step == 6
    assert (result.layout.tensor_parallel, result.layout.data_parallel) == (2, 1)
    assert all(loss == loss and loss < 6.0 for _, loss in result.losses)  # finite, a byte LM starts near ln 256
    nxd = stand_ins("nxd")
    assert {c["call"] for c in nxd} >= {
        "initialize_model_parallel",
        "ColumnParallelLinear",
        "RowParallelLinear",
        "NeuronZero1Optimizer",
        "zero1_step",
    }
    assert sum(c["call"] == "mark_step" for c in stand_ins("xla")) == 2 * 6
    checkpoint = tmp_path / "flagship" / "checkpoints" / "step_00000006"
    assert {p.name for p in checkpoint.glob("xla_state*")} == {"xla_state.tp00.dp00.pt", "xla_state.tp01.dp00.pt"}
