"""The stand-in for the Neuron runtime's NeuronCore reservation (neurondeploy.standin.reserve_neuron_cores): each
process reserves its cores until it exits; by default all of them; NEURON_RT_NUM_CORES takes the first free group of
that size, NEURON_RT_VISIBLE_CORES exactly those; a process that cannot have its cores fails to load."""

from __future__ import annotations

import subprocess
import sys

import pytest

from neurondeploy.standin import STANDIN_CLAIMS_ENV, STANDIN_CORES_ENV

CLAIMANT = """
import sys
from neurondeploy.standin import NeuronCoresInUse, reserve_neuron_cores
try:
    print(reserve_neuron_cores(), flush=True)
except NeuronCoresInUse as exc:
    print("refused:", exc, flush=True)
    raise SystemExit(3)
sys.stdin.readline()  # hold the cores until told to exit
"""


class Host:
    """A replayed host with ``cores`` NeuronCores; processes claim them as the runtime's would."""

    def __init__(self, tmp_path, cores: int):
        self.env = {STANDIN_CORES_ENV: str(cores), STANDIN_CLAIMS_ENV: str(tmp_path / "claims")}
        self.held: list[subprocess.Popen] = []

    def start(self, **runtime_env: str) -> tuple[str, subprocess.Popen]:
        env = {**self.env, **runtime_env, "PYTHONPATH": ":".join(sys.path)}
        process = subprocess.Popen(
            [sys.executable, "-c", CLAIMANT], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.held.append(process)
        return process.stdout.readline().strip(), process

    def stop(self) -> None:
        for process in self.held:
            if process.poll() is None:
                process.communicate("\n", timeout=10)


@pytest.fixture
def host(tmp_path):
    made: list[Host] = []

    def make(cores: int) -> Host:
        made.append(Host(tmp_path / str(len(made)), cores))
        return made[-1]

    yield make
    for each in made:
        each.stop()


def test_by_default_the_first_process_reserves_every_core_and_a_second_fails(host):
    inf2 = host(2)
    assert inf2.start()[0] == "[0, 1]"
    said, second = inf2.start()
    assert said.startswith("refused: NeuronCores all of 2 are not available") and second.wait(10) == 3


def test_num_cores_gives_each_process_the_next_free_group_until_none_is_left(host):
    inf2_8x = host(4)
    assert [inf2_8x.start(NEURON_RT_NUM_CORES="2")[0] for _ in range(2)] == ["[0, 1]", "[2, 3]"]
    assert inf2_8x.start(NEURON_RT_NUM_CORES="1")[0].startswith("refused: NeuronCores 1 of 4")


def test_visible_cores_are_exactly_those_and_an_exited_process_frees_its_cores(host):
    inf2 = host(2)
    said, first = inf2.start(NEURON_RT_VISIBLE_CORES="1")
    assert said == "[1]"
    assert inf2.start(NEURON_RT_VISIBLE_CORES="0-1")[0].startswith("refused")
    assert inf2.start(NEURON_RT_VISIBLE_CORES="0")[0] == "[0]"
    first.communicate("\n", timeout=10)
    assert inf2.start(NEURON_RT_NUM_CORES="1")[0] == "[1]"
    assert inf2.start(NEURON_RT_VISIBLE_CORES="2")[0].startswith("refused")  # no such core on this instance


def test_without_a_replayed_host_nothing_is_reserved():
    from neurondeploy.standin import reserve_neuron_cores

    assert reserve_neuron_cores({}) is None
