"""Route 53 records: the alias to the ALB, its ownership TXT record, and the ACM validation CNAME.

Records cannot be tagged, so ``_neurondeploy.<record_name>`` TXT ``"deployment=<name>"`` marks the name as
ours: created first and deleted last, it lets destroy prove a record belongs to this deployment.
"""

from __future__ import annotations

from neurondeploy.resources.refs import ref
from neurondeploy.resources.model import Request, Resource, Wait, resource

OWNER_PREFIX = "_neurondeploy."
TTL_S = 300


def owner_record_name(spec) -> str:
    return OWNER_PREFIX + spec.dns.record_name


def owner_record_value(spec) -> str:
    return f'"deployment={spec.name}"'  # TXT values are quoted strings


def _change(spec, action: str, record: dict, comment: str) -> dict:
    return {"HostedZoneId": spec.dns.hosted_zone_id,
            "ChangeBatch": {"Comment": comment, "Changes": [{"Action": action, "ResourceRecordSet": record}]}}


def _record(name: str, spec, record: dict, *, create_action: str = "CREATE", wait: Wait | None = None,
            after: list[str] = (), description: str) -> Resource:
    comment = f"neurondeploy {spec.name}"
    return resource(name, "route53:record",
                    [Request("route53", "ChangeResourceRecordSets", _change(spec, create_action, record, comment), wait=wait)],
                    [Request("route53", "ChangeResourceRecordSets", _change(spec, "DELETE", record, comment))],
                    after=after, taggable=False, description=description)


def owner_record_resource(spec) -> Resource:
    record = {"Name": owner_record_name(spec), "Type": "TXT", "TTL": TTL_S,
              "ResourceRecords": [{"Value": owner_record_value(spec)}]}
    # CREATE, not UPSERT: fails if another deployment already owns the name.
    return _record("dns-owner", spec, record, description=f"Ownership TXT {owner_record_name(spec)} (records have no tags)")


def alias_record_resource(spec) -> Resource:
    record = {"Name": spec.dns.record_name, "Type": "A", "AliasTarget": {
        "HostedZoneId": ref("alb", "CanonicalHostedZoneId"), "DNSName": ref("alb", "DNSName"),
        "EvaluateTargetHealth": True}}
    # CREATE: never overwrites a record someone else made.
    return _record("dns-alias", spec, record, after=["dns-owner"],
                   description=f"A alias {spec.dns.record_name} -> load balancer")


def validation_record_resource(spec) -> Resource:
    record = {"Name": ref("certificate", "ValidationRecordName"), "Type": "CNAME", "TTL": TTL_S,
              "ResourceRecords": [{"Value": ref("certificate", "ValidationRecordValue")}]}
    # UPSERT: ACM gives every certificate for the same name in an account the same CNAME, so it may exist.
    return _record("cert-validation-record", spec, record, create_action="UPSERT",
                   wait=Wait("CertificateValidated", {"CertificateArn": ref("certificate", "CertificateArn")}, "acm"),
                   description="ACM DNS-validation CNAME; apply waits until the certificate is ISSUED")
