"""ACM certificate for the endpoint's DNS name, validated through Route 53 (see dns.validation_record_resource)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neurondeploy.resources.kinds import Attr, Describe, Find, Kind, Reader, Scan, Sends, it, ours
from neurondeploy.resources.model import Request, Resource, resource
from neurondeploy.resources.naming import ownership_tags, tag_list
from neurondeploy.resources.refs import ref
from neurondeploy.resources.retag import acm_retag
from neurondeploy.specs import InferenceSpec

_VALIDATION = "Certificate.DomainValidationOptions[0].ResourceRecord"


def certificate_arn(spec: InferenceSpec) -> str | None:
    """The certificate the HTTPS listener uses: the spec's, ours (a ref), or None without TLS."""
    if not spec.tls or not spec.tls.enabled:
        return None
    return spec.tls.certificate_arn or ref("certificate", "CertificateArn")


def certificate_resource(spec: InferenceSpec) -> Resource:
    arn = ref("certificate", "CertificateArn")
    return resource(
        "certificate",
        "acm:certificate",
        [
            Request(
                "acm",
                "RequestCertificate",
                {
                    "DomainName": spec.dns.record_name,
                    "ValidationMethod": "DNS",
                    # No IdempotencyToken: a token derived from the spec would, within the hour after a destroy, name the
                    # certificate just deleted. Retries are safe without it: state records the ARN as soon as it returns.
                    "Tags": tag_list(ownership_tags(spec)),
                },
                {"CertificateArn": "CertificateArn"},
            ),
            # The validation CNAME appears a few seconds after the request: the executor retries until it is there.
            Request(
                "acm",
                "DescribeCertificate",
                {"CertificateArn": arn},
                {
                    "ValidationRecordName": f"{_VALIDATION}.Name",
                    "ValidationRecordValue": f"{_VALIDATION}.Value",
                },
            ),
        ],
        delete_certificate(arn),
        description=f"ACM certificate for {spec.dns.record_name}, DNS-validated in zone {spec.dns.zone_name}",
    )


def delete_certificate(arn: str) -> list[Request]:
    return [Request("acm", "DeleteCertificate", {"CertificateArn": arn})]


# --- kinds: how drift describes them, how the sweep finds and deletes leftovers (resources.kinds) ----------------


def _find_certificates(scan: Scan) -> None:
    """Our certificates; their descriptions go to ``scan.certificates``: the records finder needs their validation
    CNAMEs. (ListCertificates without Includes lists RSA_2048 certificates, the only kind RequestCertificate makes
    by default.)"""
    found = []
    for page in scan.paged.call("acm", "ListCertificates", {}):
        for summary in page.get("CertificateSummaryList", []):
            arn = summary["CertificateArn"]
            tags = scan.call("acm", "ListTagsForCertificate", {"CertificateArn": arn}).get("Tags")
            if ours(tags, scan.deployment):
                detail = f"certificate for {summary.get('DomainName')} ({summary.get('Status')})"
                scan.add("acm:certificate", arn, detail, tags=tags)
                found.append(scan.call("acm", "DescribeCertificate", {"CertificateArn": arn})["Certificate"])
    scan.certificates = found


def _acm_tags(aws: Reader, obj: dict, ids: Mapping) -> Any:
    return aws.call("acm", "ListTagsForCertificate", {"CertificateArn": obj["CertificateArn"]}).get("Tags")


KINDS = (
    Kind(
        "acm:certificate",
        retag=acm_retag,
        describe=Describe(
            Request("acm", "DescribeCertificate", {"CertificateArn": it("CertificateArn")}),
            "Certificate",
            (Attr("domain", "DomainName", "RequestCertificate", "DomainName"),),
            bad=("Status", ("EXPIRED", "REVOKED", "FAILED", "VALIDATION_TIMED_OUT")),
            tags=_acm_tags,
        ),
        find=Find("acm", 600, _find_certificates),  # before the records: they need its certificates
        delete=Sends(delete_certificate),
    ),
)
