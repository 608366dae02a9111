"""What `train` packs and uploads stays inside the spec's project (issue 28, item 4): source_dir inside the spec
file's directory (symlinks resolved) unless the spec opts out, never the filesystem root or a system directory;
entry_point inside source_dir; the checkpoint directory one of the job's own. Each refused in one line by validate
and by plan, which never walks the tree it refuses."""

from __future__ import annotations

import subprocess
import time

import pytest
from support.cli import run_cli

from neurondeploy.errors import SpecError
from neurondeploy.specs import parse_spec

SPEC = "kind: training\nname: job\nentry_point: {entry}\nsource_dir: {source}\n"


def cli(command: str, spec) -> subprocess.CompletedProcess:
    return run_cli(command, str(spec), timeout=120)


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('training')\n")
    return root


def write(project, extra: str = "", entry: str = "train.py", source: str = "code"):
    spec = project / "job.yaml"
    spec.write_text(SPEC.format(entry=entry, source=source) + extra)
    return spec


@pytest.mark.parametrize("command", ["validate", "plan"])
@pytest.mark.parametrize(
    "source,expected",
    [
        ("/", "a system directory"),
        ("/etc", "a system directory"),
        ("/proc", "a system directory"),
        ("../..", "outside the spec's project"),
        ("..", "outside the spec's project"),
    ],
)
def test_a_source_dir_outside_the_project_is_refused_in_one_line(project, command, source, expected):
    started = time.monotonic()
    done = cli(command, write(project, source=source))
    assert done.returncode not in (0, 70), done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "source_dir" in errors[0] and expected in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60  # the refusal comes before any walk of the tree (`/` took minutes)


def test_a_symlink_out_of_the_project_is_refused(project, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "train.py").write_text("")
    (project / "linked").symlink_to(outside)
    done = cli("validate", write(project, source="linked"))
    assert done.returncode != 0 and "outside the spec's project" in done.stderr


def test_the_opt_out_allows_a_shared_checkout_but_never_a_system_directory(project, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "train.py").write_text("")
    done = cli("validate", write(project, "source_dir_outside_project: true\n", source=str(shared)))
    assert done.returncode == 0, done.stderr
    done = cli("validate", write(project, "source_dir_outside_project: true\n", source="/usr"))
    assert done.returncode != 0 and "a system directory" in done.stderr


def test_inside_the_project_passes(project):
    done = cli("validate", write(project))
    assert done.returncode == 0, done.stderr


def test_the_project_is_the_git_work_tree_holding_the_spec(project):
    """configs/job.yaml beside src/ is one project when a repository holds both; without one, it is not."""
    configs = project / "configs"
    configs.mkdir()
    spec = write(configs, source="../code")
    assert cli("validate", spec).returncode != 0
    (project / ".git").mkdir()
    done = cli("validate", spec)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("entry", ["../../etc/passwd", "/etc/passwd", "code/../../x.py"])
def test_an_entry_point_that_leaves_source_dir_is_refused(entry):
    with pytest.raises(SpecError, match="leaves source_dir"):
        parse_spec(SPEC.format(entry=entry, source="."), file="s.yaml")


@pytest.mark.parametrize("path", ["/etc", "/", "checkpoints", "/opt/ml/../../etc", "/root/.ssh"])
def test_a_checkpoint_directory_outside_the_jobs_own_is_refused(path):
    with pytest.raises(SpecError, match="not a directory of the job's own"):
        parse_spec(SPEC.format(entry="t.py", source=".") + f"checkpoint:\n  local_path: {path}\n", file="s.yaml")


@pytest.mark.parametrize("path", ["/opt/ml/checkpoints", "/tmp/ckpt"])
def test_the_jobs_own_checkpoint_directories_pass(path):
    loaded = parse_spec(SPEC.format(entry="t.py", source=".") + f"checkpoint:\n  local_path: {path}\n", file="s.yaml")
    assert loaded.spec.checkpoint.local_path == path


def test_the_reference_script_shipped_in_the_package_is_a_source_dir_anywhere(project):
    """pkg://neurondeploy/training/reference is the installed package's directory, wherever the spec lives: plan
    names the archive of that directory, and the entry check finds train.py in it."""
    from neurondeploy.archive import artifact_digest
    from neurondeploy.training.entry import REFERENCE_DIR

    spec = write(project, "instance_type: trn1.2xlarge\n", source="pkg://neurondeploy/training/reference")
    done = cli("validate", spec)
    assert done.returncode == 0 and "entry_point" not in done.stderr, done.stderr
    planned = run_cli("plan", str(spec), "--json", timeout=120)
    assert planned.returncode == 0, planned.stderr
    assert f"sourcedir-{artifact_digest(REFERENCE_DIR)[:16]}.tar.gz" in planned.stdout


def test_a_package_source_dir_may_not_leave_its_package(project):
    done = cli("validate", write(project, source="pkg://neurondeploy/../../etc"))
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode != 0 and len(errors) == 1 and "leaves its package" in errors[0], done.stderr
