"""`train SPEC --local`: the reference script under real torchrun (gloo, 2 processes) on this CPU.

The layouts are checked against each other through the loss: the same model and data under TP=2, PP=2 and
one process must give the same loss step after step, which needs the sharding, the pipeline schedule, the
gradient averaging and the optimizer to all be right (a wrong gradient shows from the second step on).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from neurondeploy.specs import load_spec
from neurondeploy.training.local import run_local_training

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).parents[2]
TEMPLATE = REPO / "templates" / "tiny-lm-train-local.yaml"
CORPUS_DIR = REPO / "templates" / "training" / "data"


def spec_file(tmp_path: Path, name: str = "layout", **distribution) -> Path:
    data = yaml.safe_load(TEMPLATE.read_text())
    data["inputs"]["train"]["local_path"] = str(CORPUS_DIR)
    data["distribution"] = {"precision": "fp32", **distribution}
    data["hyperparameters"].update(max_steps=20, log_every=5)
    data["checkpoint"]["every_steps"] = 100
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def losses_of(tmp_path: Path, name: str, processes: int, **distribution) -> dict[int, float]:
    loaded = load_spec(spec_file(tmp_path, name, **distribution))
    result = run_local_training(loaded, processes=processes, work_dir=tmp_path / name)
    assert result.exit_code == 0 and result.last_step == 20
    return dict(result.losses)


@pytest.fixture(scope="module")
def single_process(tmp_path_factory) -> dict[str, dict[int, float]]:
    tmp_path = tmp_path_factory.mktemp("single")
    return {
        precision: losses_of(tmp_path, f"single-{precision}", 1, precision=precision)
        for precision in ("fp32", "bf16-autocast")
    }


@pytest.mark.parametrize(
    ("distribution", "precision", "tolerance"),
    [
        ({"tensor_parallel": 2}, "fp32", 1e-4),
        ({"pipeline_parallel": 2, "microbatches": 2}, "fp32", 1e-4),
        ({"tensor_parallel": 2}, "bf16-autocast", 3e-2),  # bf16 matmuls summed in another order
        ({"pipeline_parallel": 2, "microbatches": 4}, "bf16-autocast", 3e-2),
    ],
    ids=["tp2-fp32", "pp2-fp32", "tp2-bf16", "pp2-bf16"],
)
def test_tensor_and_pipeline_parallel_match_one_process(tmp_path, single_process, distribution, precision, tolerance):
    losses = losses_of(tmp_path, "parallel", 2, precision=precision, **distribution)
    reference = single_process[precision]
    assert sorted(losses) == sorted(reference) == [1, 5, 10, 15, 20]
    for step, loss in reference.items():
        assert losses[step] == pytest.approx(loss, abs=tolerance), (step, losses, reference)
    assert reference[20] < reference[1] - 2.0  # and the model learns


def _cli(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "neurondeploy.cli", "train", str(TEMPLATE), "--local", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def _finish(process: subprocess.Popen, timeout: float = 240) -> tuple[dict, str]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return json.loads(out), err


def _checkpoints(work: Path) -> list[int]:
    return sorted(
        int(p.name.split("_")[1]) for p in (work / "checkpoints").glob("step_*") if (p / "trainer.json").exists()
    )


def kill_run_hard(process: subprocess.Popen, work: Path) -> None:
    """SIGKILL every worker, torchrun and the launcher, like a lost machine: nobody gets to checkpoint.
    (torchrun runs in a session of its own, so it and the workers are found by their environment.)"""
    marker = f"NEURONDEPLOY_CHECKPOINT_DIR={work / 'checkpoints'}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    assert len(pids) >= 3, pids  # torchrun and 2 workers
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    os.kill(process.pid, signal.SIGKILL)  # last: its death would send torchrun SIGTERM (PDEATHSIG), a graceful stop
    process.wait()


def test_train_local_learns_checkpoints_and_resumes_after_being_killed(tmp_path):
    steps = ["--hp", "max_steps=40", "--json"]
    whole, err = _finish(_cli("--work-dir", str(tmp_path / "whole"), *steps))
    assert "locally 2 processes: TP=1 PP=1 DP=2" in err and "Traceback" not in err
    assert whole["processes"] == 2 and whole["resumed_from_step"] is None and whole["last_step"] == 40
    losses = dict(whole["losses"])
    assert losses[40] < losses[1] - 2.0, losses  # byte-level loss starts near ln(256) = 5.5
    assert _checkpoints(tmp_path / "whole") == [25, 40]
    assert (tmp_path / "whole" / "model" / "model.pt").is_file()

    # The same run, killed hard (the whole process group: a lost machine) once step 25 is saved.
    work = tmp_path / "killed"
    process = _cli("--work-dir", str(work), *steps, start_new_session=True)
    deadline = time.monotonic() + 180
    while not _checkpoints(work) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    kill_run_hard(process, work)
    saved = _checkpoints(work)
    assert saved and saved[-1] < 40, saved

    resumed, err = _finish(_cli("--work-dir", str(work), *steps))
    assert resumed["resumed_from_step"] == saved[-1]
    assert f"resumed from checkpoint step {saved[-1]}" in err
    assert resumed["losses"][0][0] == saved[-1] + 1 and resumed["last_step"] == 40  # the step count continues
    # Same data per step and the optimizer state restored: the resumed run ends where the unbroken one did.
    assert dict(resumed["losses"])[40] == pytest.approx(losses[40], abs=2e-3)


def test_ctrl_c_checkpoints_the_current_step_and_the_next_run_resumes_from_it(tmp_path):
    work = tmp_path / "interrupted"
    process = _cli("--work-dir", str(work), "--hp", "max_steps=200", "--hp", "log_every=1", start_new_session=True)
    for line in process.stderr:
        if line.startswith("step 12/"):
            break
    os.killpg(process.pid, signal.SIGINT)  # what a terminal sends its foreground group on Ctrl-C
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 130
    assert "on a stop signal" in rest and "Traceback" not in rest, rest
    stopped_at = _checkpoints(work)[-1]
    assert stopped_at >= 12 and stopped_at % 25 != 0  # saved because of the signal, not the schedule
    resumed, _ = _finish(_cli("--work-dir", str(work), "--hp", f"max_steps={stopped_at + 3}", "--json"))
    assert resumed["resumed_from_step"] == stopped_at and resumed["last_step"] == stopped_at + 3


def test_a_checkpoint_moves_between_layouts(tmp_path):
    """Sharded checkpoints are keyed by parameter name: a DDP run's checkpoint resumes under TP=2."""
    data_parallel = load_spec(spec_file(tmp_path, "dp"))
    first = run_local_training(data_parallel, processes=2, work_dir=tmp_path / "run", hyperparameters={"max_steps": 10})
    assert first.last_step == 10
    tensor_parallel = load_spec(spec_file(tmp_path, "tp", tensor_parallel=2))
    second = run_local_training(tensor_parallel, processes=2, work_dir=tmp_path / "run")
    assert second.resumed_from_step == 10 and second.layout.tensor_parallel == 2 and second.last_step == 20
    reference = run_local_training(data_parallel, processes=2, work_dir=tmp_path / "straight")
    assert dict(second.losses)[20] == pytest.approx(dict(reference.losses)[20], abs=1e-4)


def test_the_xla_path_runs_the_same_steps_as_the_cpu_path(tmp_path, single_process, monkeypatch):
    """The script's Trainium path (torch-xla: xla process group, reduce_gradients, mark_step, xm.save) against a
    recording stand-in of torch_xla that runs on the CPU (tests/fixtures/fake_xla): the calls are the documented
    ones, and with the device being the CPU the losses equal the CPU path's. Not Neuron numerics."""
    log = tmp_path / "xla.jsonl"
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests" / "fixtures" / "fake_xla"))
    monkeypatch.setenv("FAKE_XLA_LOG", str(log))
    loaded = load_spec(spec_file(tmp_path, "xla"))
    result = run_local_training(loaded, processes=2, work_dir=tmp_path / "xla", hyperparameters={"device": "xla"})
    assert result.last_step == 20 and result.layout.data_parallel == 2
    for step, loss in single_process["fp32"].items():
        assert dict(result.losses)[step] == pytest.approx(loss, abs=1e-4), (step, result.losses)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    for rank in (0, 1):
        mine = [c["call"] for c in calls if c["rank"] == rank]
        assert mine.count("xla_device") == 1 and mine.count("reduce_gradients") == 20 and mine.count("mark_step") == 20
    assert {c["path"].rsplit("/", 1)[1] for c in calls if c["call"] == "save"} == {"xla_state.pt"}
    assert (tmp_path / "xla" / "checkpoints" / "step_00000020" / "xla_state.pt").is_file()
    assert (tmp_path / "xla" / "model" / "model.pt").is_file()
    resumed = run_local_training(
        loaded, processes=2, work_dir=tmp_path / "xla", hyperparameters={"device": "xla", "max_steps": 23}
    )
    assert resumed.resumed_from_step == 20 and resumed.last_step == 23  # xm.save'd state loads back


def test_a_failing_script_is_reported_with_its_own_exit_code_and_without_torchruns_traceback(tmp_path):
    process = _cli("--work-dir", str(tmp_path / "bad"), "--hp", "max_steps=abc")
    out, err = process.communicate(timeout=120)
    assert process.returncode == 9
    assert "train.py: error: argument --max_steps: invalid int value: 'abc'" in err  # the script's own words
    assert err.strip().splitlines()[-1].startswith("error: the training script exited with 2 ")
    assert "Traceback" not in err and "ChildFailedError" not in err
