"""Where ``data/hosts.yaml``'s SageMaker host images come from: botocore's SageMaker service model, whose
documentation of ``ProductionVariant.InferenceAmiVersion`` lists each AMI version with its accelerator and driver.
``tests/unit/test_hosts.py`` compares the catalogue with the installed botocore's."""

from __future__ import annotations

import re


def inference_amis_documented() -> dict[str, dict[str, str]]:
    """Each ``InferenceAmiVersion`` botocore documents for Neuron: {name: {"accelerator", "neuron_driver"}}."""
    import botocore.session  # deferred: the catalogue imports no botocore

    model = botocore.session.get_session().get_service_model("sagemaker")
    text = model.shape_for("ProductionVariant").members["InferenceAmiVersion"].documentation
    found: dict[str, dict[str, str]] = {}
    for name, body in re.findall(r"<dt>\s*([\w.-]+)\s*</dt>\s*<dd>(.*?)</dd>", text, re.DOTALL):
        plain = re.sub(r"<[^>]+>", " ", body)
        driver = re.search(r"Neuron driver version:\s*([\d.]+)", plain)
        accelerator = re.search(r"Accelerator:\s*(.+?)\s{2,}", plain + "  ")
        if driver:
            found[name] = {"accelerator": accelerator[1].strip() if accelerator else "", "neuron_driver": driver[1]}
    return found
