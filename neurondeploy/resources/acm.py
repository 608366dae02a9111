"""ACM certificate for the endpoint's DNS name, validated through Route 53 (see dns.validation_record_resource)."""

from __future__ import annotations

from neurondeploy.resources.refs import ref
from neurondeploy.resources.model import Request, Resource, resource
from neurondeploy.resources.naming import ownership_tags, tag_list

_VALIDATION = "Certificate.DomainValidationOptions[0].ResourceRecord"


def certificate_arn(spec) -> str | None:
    """The certificate the HTTPS listener uses: the spec's, ours (a ref), or None without TLS."""
    if not spec.tls or not spec.tls.enabled:
        return None
    return spec.tls.certificate_arn or ref("certificate", "CertificateArn")


def certificate_resource(spec) -> Resource:
    arn = ref("certificate", "CertificateArn")
    return resource("certificate", "acm:certificate", [
        Request("acm", "RequestCertificate", {
            "DomainName": spec.dns.record_name, "ValidationMethod": "DNS",
            # No IdempotencyToken: a token derived from the spec would, within the hour after a destroy, name the
            # certificate just deleted. Retries are safe without it: state records the ARN as soon as it returns.
            "Tags": tag_list(ownership_tags(spec)),
        }, {"CertificateArn": "CertificateArn"}),
        # The validation CNAME appears a few seconds after the request: the executor retries until it is there.
        Request("acm", "DescribeCertificate", {"CertificateArn": arn}, {
            "ValidationRecordName": f"{_VALIDATION}.Name",
            "ValidationRecordValue": f"{_VALIDATION}.Value",
        }),
    ], [Request("acm", "DeleteCertificate", {"CertificateArn": arn})],
        description=f"ACM certificate for {spec.dns.record_name}, DNS-validated in zone {spec.dns.zone_name}")
