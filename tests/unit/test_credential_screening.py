"""One secret scanner for every value a spec sends to AWS (issue 28, item 3): container env, training environment
and hyperparameters, tags. Names match in any case, values by the published token formats; each refusal is one
line that names the fix. Ordinary names and values (tokenizer and dataset-column hyperparameters) pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.errors import SpecError
from neurondeploy.specs import parse_spec

REPO = Path(__file__).parents[2]
INFERENCE = "kind: inference\nname: web\ntask: feature-extraction\nmodel: {path: m}\n"
TRAINING = "kind: training\nname: job\nentry_point: train.py\n"
# Shapes of real credentials, made up here (none is a live key).
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
OPENAI = "sk-proj-" + "abcdefghijklmnopqrstuvwx"
URL_PASSWORD = "postgres://admin:hunter2@db.internal:5432/app"

BY_NAME = ["hf_token", "Hf_Token", "db_passwd", "DB_PASSWD", "smtp_password", "wandb_api_key", "api-token"]
BY_VALUE = {"hf": HF, "aws key id": AWS_KEY_ID, "github": GITHUB, "openai": OPENAI, "url password": URL_PASSWORD}


def where(section: str, name: str, value: str) -> str:
    """A spec that carries ``name: value`` in ``section``."""
    quoted = f"'{value}'"
    if section == "container env":
        return INFERENCE + f"deployment:\n  container:\n    env:\n      {name}: {quoted}\n"
    if section == "training environment":
        return TRAINING + f"environment:\n  {name}: {quoted}\n"
    if section == "hyperparameters":
        return TRAINING + f"hyperparameters:\n  {name}: {quoted}\n"
    if section == "inference tags":
        return INFERENCE + f"tags:\n  {name}: {quoted}\n"
    return TRAINING + f"tags:\n  {name}: {quoted}\n"


SECTIONS = ["container env", "training environment", "hyperparameters", "inference tags", "training tags"]
# Environment keys are variable names; hyperparameter names may hold '-'; tags may hold both.
NAMES_FOR = {section: [n for n in BY_NAME if "-" not in n or section in ("hyperparameters",)] for section in SECTIONS}


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as refused:
        parse_spec(text, file="s.yaml")
    line = refused.value.one_line()
    assert "\n" not in line
    return line


@pytest.mark.parametrize("section", SECTIONS)
def test_a_credential_name_in_any_case_is_refused_with_the_fix(section):
    for name in NAMES_FOR[section]:
        line = refusal(where(section, name, "abc123"))
        assert f"{name} looks like a credential" in line and "fix:" in line, line


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("kind", BY_VALUE)
def test_a_token_shaped_value_under_an_innocent_name_is_refused(section, kind):
    line = refusal(where(section, "notes", BY_VALUE[kind]))
    assert "notes looks like a credential" in line and "its value looks like" in line, line


def test_each_place_names_a_fix_that_works_there():
    assert "{secret: arn:aws:secretsmanager:" in refusal(where("container env", "hf_token", "x"))
    assert "get_secret_value through the job's role" in refusal(where("training environment", "hf_token", "x"))
    assert "keep credentials out of tags" in refusal(where("inference tags", "token", "x"))


@pytest.mark.parametrize(
    "section,name,value",
    [
        ("hyperparameters", "pad_token", "<pad>"),
        ("hyperparameters", "eos_token", "</s>"),
        ("hyperparameters", "text_key", "text"),
        ("hyperparameters", "max_tokens", "512"),
        ("hyperparameters", "tokenizer", "gpt2"),
        ("training environment", "KEYBOARD", "us"),
        ("container env", "HF_MODEL_ID", "meta-llama/Llama-3.1-8B"),
        ("container env", "MONKEY", "x"),
        ("container env", "LOG_URL", "https://logs.example.com/path"),
        ("inference tags", "team", "ml-platform"),
        ("container env", "HF_TOKEN", ""),
    ],
)
def test_ordinary_names_and_values_pass(section, name, value):
    parse_spec(where(section, name, value), file="s.yaml")


@pytest.mark.parametrize("section", ["container env", "training environment", "hyperparameters"])
def test_a_control_character_is_refused_everywhere(section):
    line = refusal(where(section, "note", "a\tb").replace("'a\tb'", '"a\\tb"'))
    assert "control character" in line


def test_every_template_passes():
    for template in sorted((REPO / "templates").glob("*.yaml")):
        parse_spec(template.read_text(), file=str(template))


def test_a_credential_given_with_hp_is_refused_in_one_line_naming_one_fix(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "train", str(REPO / "templates" / "tiny-lm-train-local.yaml")]
        + ["--local", "--work-dir", str(tmp_path / "w"), "--hp", f"note={GITHUB}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "note looks like a credential" in lines[0] and lines[0].count("fix:") == 1, lines
    assert not (tmp_path / "w").exists()  # refused before anything started
