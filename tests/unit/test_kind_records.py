"""The kind records (resources.kinds.Kind, collected by resources.registry): every kind the sweep can find says
how `import` gives it a state's lineage, and each retag request is valid against botocore's models, strictly."""

from __future__ import annotations

import pytest

from neurondeploy.resources.kinds import Retag
from neurondeploy.resources.registry import registry
from neurondeploy.resources.tags import LINEAGE_TAG
from neurondeploy.resources.validation import check_request

# A plausible id per kind, in the form the sweep names it by.
IDS = {
    "ec2:": "vpc-0123456789abcdef0",
    "elbv2:": "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/web/0123456789abcdef",
    "acm:": "arn:aws:acm:us-east-1:123456789012:certificate/01234567-89ab-cdef-0123-456789abcdef",
    "iam:": "neurondeploy-web-role",
    "autoscaling:": "neurondeploy-web-asg",
    "sagemaker:": "minilm-embed",
}


class NoReads:
    def call(self, *args, **kwargs):
        raise AssertionError("this retagger must not read AWS")


FOUND = sorted(kind.type for kind in registry().values() if kind.find is not None)


@pytest.mark.parametrize("kind_type", FOUND)
def test_every_kind_the_sweep_finds_can_be_imported(kind_type):
    kind = registry()[kind_type]
    assert (kind.retag is not None) != kind.tagless, f"{kind_type}: a retagger, or tagless, not both"


@pytest.mark.parametrize("kind_type", [t for t in FOUND if registry()[t].retag and not t.startswith("route53:")])
def test_each_retag_request_is_valid_and_carries_the_lineage(kind_type):
    context = Retag("web", "0f0f0f", "us-east-1", "123456789012", NoReads())
    ident = next(value for prefix, value in IDS.items() if kind_type.startswith(prefix))
    request = registry()[kind_type].retag(context, ident)
    check_request(request.service, request.operation, request.params)
    assert f"'{LINEAGE_TAG}'" in repr(request.params) and "'0f0f0f'" in repr(request.params)
    assert ident.lower() in repr(request.params).lower()
