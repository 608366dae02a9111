"""NxD Training's published example layouts for trn1.32xlarge (data/nxd_training_examples.yaml): the configs AWS
ships for Llama-3 8B and 70B, Llama-3.1 405B and Mixtral 8x7B, each value as its file has it."""

from __future__ import annotations

from neurondeploy.catalog._data import load


def nxd_training_examples() -> list[dict]:
    """Each published example config's layout, in the file's own key names, with ``file`` and ``model``."""
    return [dict(row) for row in load("nxd_training_examples")["examples"]]


def nxd_training_examples_source() -> str:
    return load("nxd_training_examples")["source"]
