"""The Neuron DLAMI table (catalog/data/dlami.yaml): EC2 instances boot the default parameter's DLAMI, whose
release the matrix knows, and every row says where its facts come from and which are unconfirmed."""

from __future__ import annotations

import pytest

from neurondeploy import catalog
from neurondeploy.errors import CatalogError
from neurondeploy.resources.model import DLAMI_NEURON_VENV, DLAMI_SSM_PARAMETER, PlanContext


def test_ec2_instances_boot_the_catalogues_default_dlami():
    assert PlanContext().ami_ssm_parameter == DLAMI_SSM_PARAMETER == catalog.DEFAULT_DLAMI_PARAMETER
    assert DLAMI_NEURON_VENV == catalog.dlami(DLAMI_SSM_PARAMETER).venv


@pytest.mark.parametrize("row", catalog.dlamis(), ids=lambda d: d.parameter)
def test_each_dlami_names_a_release_the_matrix_has_and_its_source(row):
    assert row.parameter.startswith("/aws/service/neuron/dlami/") and row.parameter.endswith("/latest/image_id")
    assert row.source.strip() and row.venv.startswith("/opt/aws_neuronx_venv_")
    # Its SDK line has an inference DLC row: the same release's compiler and runtime exist as images too.
    assert any(catalog.minor(r.sdk) == catalog.minor(row.sdk) for r in catalog.dlc_releases())
    # It serves torch-neuronx artifacts: the release still ships torch-neuronx.
    catalog.check_sdk_for("trace-inference", row.sdk)


def test_an_unknown_parameter_is_refused_with_the_known_ones():
    with pytest.raises(CatalogError) as err:
        catalog.dlami("/aws/service/neuron/dlami/pytorch-2.8/ubuntu-24.04/latest/image_id")
    assert DLAMI_SSM_PARAMETER in err.value.hint or "pytorch-2.9" in err.value.hint


def test_every_container_kind_that_runs_on_ec2_has_a_dlami_that_serves_it_on_every_family_it_lists():
    for name in catalog.container_kinds():
        kind = catalog.container_kind(name)
        serving = catalog.dlami_for(name)
        assert ("ec2" in kind.platforms) == (serving is not None), name
        if serving is not None:
            assert {"inf2", "trn1"} <= set(serving.families), serving.parameter
    assert catalog.dlami_for("neurondeploy").parameter == catalog.DEFAULT_DLAMI_PARAMETER
