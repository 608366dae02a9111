"""The exact build shipped to instances and containers: a reproducible wheel of this toolkit, its constraints, and the
DLC's model.tar.gz layout (artifact + code/)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile

from neurondeploy import __version__
from neurondeploy.archive import artifact_digest
from neurondeploy.engine.model_bundle import HANDLER, dlc_model_dir
from neurondeploy.wheel import toolkit_wheel


def test_the_wheel_is_reproducible_complete_and_its_record_matches_its_files():
    first, second = toolkit_wheel.__wrapped__(), toolkit_wheel.__wrapped__()
    assert first.data == second.data and first.sha256 == hashlib.sha256(first.data).hexdigest()
    assert first.filename == f"neurondeploy-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(io.BytesIO(first.data)) as wheel:
        names = set(wheel.namelist())
        assert {"neurondeploy/__init__.py", "neurondeploy/catalog/data/instances.yaml"} <= names
        assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
        dist_info = f"neurondeploy-{__version__}.dist-info"
        metadata = wheel.read(f"{dist_info}/METADATA").decode()
        assert "Requires-Dist: pydantic" in metadata and "Name: neurondeploy" in metadata
        assert "neurondeploy = neurondeploy.cli.main:main" in wheel.read(f"{dist_info}/entry_points.txt").decode()
        for line in wheel.read(f"{dist_info}/RECORD").decode().splitlines():
            name, digest, size = line.split(",")
            if name.endswith("RECORD"):
                continue
            data = wheel.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data), name


def test_the_constraints_pin_the_installed_runtime_dependencies_and_never_torch():
    lines = toolkit_wheel().constraints.splitlines()
    names = {line.split("==")[0] for line in lines}
    assert {"pydantic", "boto3", "uvicorn", "starlette"} <= names and all("==" in line for line in lines)
    assert not {"torch", "torch-neuronx", "pytest", "moto"} & names


def test_the_dlc_model_is_the_artifact_plus_code_and_rebuilds_to_the_same_digest(tmp_path):
    artifact = tmp_path / "artifacts" / "m"
    (artifact / "buckets").mkdir(parents=True)
    (artifact / "manifest.json").write_text("{}")
    (artifact / "buckets" / "b1_s8.pt").write_bytes(b"module")
    wheel = toolkit_wheel()
    bundle = dlc_model_dir(artifact, wheel, None)  # no catalogued Python: this machine's pins
    assert bundle == tmp_path / "artifacts" / "m.sagemaker"
    assert (bundle / "buckets" / "b1_s8.pt").stat().st_ino == (artifact / "buckets" / "b1_s8.pt").stat().st_ino
    assert (bundle / "code" / "inference.py").read_text() == HANDLER
    assert (bundle / "code" / "requirements.txt").read_text().splitlines() == [
        "-c constraints.txt",
        f"/opt/ml/model/code/{wheel.filename}",
    ]
    assert (bundle / "code" / wheel.filename).read_bytes() == wheel.data
    assert (bundle / "code" / "constraints.txt").read_text() == wheel.constraints
    handler = json.loads((bundle / "MAR-INF" / "MANIFEST.json").read_text())["model"]["handler"]
    assert handler == "neurondeploy.serving.sagemaker_handler:handle"  # TorchServe's handler: ours, which batches
    digest = artifact_digest(bundle)
    assert artifact_digest(dlc_model_dir(artifact, wheel, None)) == digest
    # a bundle given as the artifact (CI found it: apply of an unchanged spec twice): bundled again, unharmed
    again = dlc_model_dir(bundle, wheel, None)
    assert json.loads((again / "MAR-INF" / "MANIFEST.json").read_text())["model"]["handler"] == handler
    assert artifact_digest(bundle) == digest


def _identity_in_fresh_process(cache_dir) -> dict:
    """toolkit_identity() in a new interpreter (no wheel built yet), and whether it had to build the wheel."""
    code = (
        "import json\n"
        "from neurondeploy import wheel\n"
        "identity = wheel.toolkit_identity()\n"
        "print(json.dumps({**identity.__dict__, 'built': wheel.toolkit_wheel.cache_info().currsize}))\n"
    )
    env = {**os.environ, "NEURONDEPLOY_CACHE_DIR": str(cache_dir)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_a_plan_names_the_wheel_without_building_it_when_this_machine_built_the_same_files(tmp_path):
    built = toolkit_wheel()
    cold = _identity_in_fresh_process(tmp_path)
    warm = _identity_in_fresh_process(tmp_path)
    assert cold["built"] == 1 and warm["built"] == 0  # the second plan reads the record, builds nothing
    for identity in (cold, warm):
        assert (identity["filename"], identity["sha256"], identity["constraints"]) == (
            built.filename,
            built.sha256,
            built.constraints,
        )
    (record,) = (tmp_path / "toolkit-wheel").iterdir()
    record.write_text("{not json")  # a damaged record costs a build, never a wrong name
    assert _identity_in_fresh_process(tmp_path)["sha256"] == built.sha256
