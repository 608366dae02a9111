"""The training toolkit table (catalog/data/training_toolkit.yaml): a row per training DLC release it covers, each
with the toolkits' versions, and the versions the development install pins are the newest image's."""

from __future__ import annotations

import re
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.resources.release import TRAINING_DLC

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def test_each_row_is_a_training_image_release_and_its_toolkit_meets_the_pytorch_toolkits_requirement():
    training_releases = {row.sdk for row in catalog.dlc_releases() if row.repository == TRAINING_DLC}
    rows = [catalog.training_toolkit(sdk) for sdk in sorted(training_releases, key=catalog.version_tuple)]
    known = [row for row in rows if row is not None]
    assert known and {row.sdk for row in known} <= training_releases
    newest = max(training_releases, key=catalog.version_tuple)
    assert catalog.training_toolkit(newest) is not None  # the newest training image is replayable
    for row in known:
        major = catalog.version_tuple(row.packages["sagemaker-training"])[0]
        assert major == 5  # sagemaker-pytorch-training 3.0.0: sagemaker-training>=5.0.0,<6.0.0
        assert row.image_env["SAGEMAKER_TRAINING_MODULE"] == "sagemaker_pytorch_container.training:main"
    assert catalog.training_toolkit("2.20.0") is None


def test_the_development_install_pins_the_newest_images_toolkit():
    newest = max(
        (r for r in catalog.dlc_releases() if r.repository == TRAINING_DLC), key=lambda r: catalog.version_tuple(r.sdk)
    )
    toolkit = catalog.training_toolkit(newest.sdk)
    text = PYPROJECT.read_text()
    for name in ("sagemaker-training", "sagemaker-pytorch-training"):
        (pinned,) = re.findall(rf'"{name}==([0-9.]+)"', text)
        assert pinned == toolkit.packages[name], name
