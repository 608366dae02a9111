"""The SageMaker training toolkit inside the Neuron training DLCs (data/training_toolkit.yaml): by the image's Neuron
SDK release, the sagemaker-pytorch-training and sagemaker-training versions its build installed, and the image's
environment for them (the module `train` imports)."""

from __future__ import annotations

from dataclasses import dataclass

from neurondeploy.catalog._data import load


@dataclass(frozen=True)
class TrainingToolkit:
    sdk: str  # the release tag the image's row links to, "2.28.0"
    built: str  # that tag's date, which decides the unpinned toolkit's version
    packages: dict[str, str]  # distribution -> version: the two toolkits and what they import beside them
    image_env: dict[str, str]  # the image's ENV the toolkit reads (SAGEMAKER_TRAINING_MODULE)


def training_toolkit(sdk: str) -> TrainingToolkit | None:
    """The toolkit of the training DLC of release ``sdk``; None when the table has no row for it."""
    data = load("training_toolkit")
    for row in data["releases"]:
        if row["sdk"] == sdk:
            packages = {
                "sagemaker-training": row["sagemaker_training"],
                "sagemaker-pytorch-training": row["sagemaker_pytorch_training"],
                **data["imports_beside"],
            }
            return TrainingToolkit(row["sdk"], row["built"], packages, dict(data["image_env"]))
    return None
