"""Route 53 records: the alias to the ALB, its ownership TXT record, and the ACM validation CNAME.

Records cannot be tagged, so ``_neurondeploy.<record_name>`` TXT ``"deployment=<name>"`` marks the name as
ours: created first and deleted last, it lets destroy prove a record belongs to this deployment.
"""

from __future__ import annotations

from collections.abc import Mapping

from neurondeploy.resources.kinds import Caller, Describe, Expected, Find, Kind, Retag, Scan, done, it
from neurondeploy.resources.model import Request, Resource, Wait, resource
from neurondeploy.resources.refs import contains_ref, ref
from neurondeploy.resources.tags import DEPLOYMENT_TAG, LINEAGE, LINEAGE_TAG
from neurondeploy.specs import InferenceSpec

OWNER_PREFIX = "_neurondeploy."
TTL_S = 300


def owner_record_name(spec: InferenceSpec) -> str:
    return OWNER_PREFIX + spec.dns.record_name


def owner_record_value(spec: InferenceSpec) -> str:
    # TXT values are quoted strings; the second names the state that owns the records (records have no tags).
    return f'"deployment={spec.name}" "lineage={LINEAGE}"'


def owner_record_retag(zone: str, record: dict, deployment: str, lineage: str) -> Request:
    """UPSERT an ownership TXT record (as listed) so that it names ``lineage`` (``neurondeploy import``)."""
    values = [{"Value": f'"deployment={deployment}" "lineage={lineage}"'}]
    changed = {key: record[key] for key in ("Name", "Type", "TTL") if key in record} | {"ResourceRecords": values}
    change = {"Action": "UPSERT", "ResourceRecordSet": changed}
    return Request(
        "route53",
        "ChangeResourceRecordSets",
        {"HostedZoneId": zone, "ChangeBatch": {"Comment": f"neurondeploy import {deployment}", "Changes": [change]}},
    )


def owner_lineage(value: str, deployment: str) -> str | None:
    """The lineage an ownership TXT value names for ``deployment``; "" when it vouches for it without one (an older
    neurondeploy); None when it does not vouch for it."""
    strings = [part.strip('"') for part in value.split('" "')]
    if not strings or strings[0].strip('"') != f"deployment={deployment}":
        return None
    return next((s.removeprefix("lineage=") for s in strings[1:] if s.startswith("lineage=")), "")


def _change(spec: InferenceSpec, action: str, record: dict, comment: str) -> dict:
    return {
        "HostedZoneId": spec.dns.hosted_zone_id,
        "ChangeBatch": {"Comment": comment, "Changes": [{"Action": action, "ResourceRecordSet": record}]},
    }


def _record(
    name: str,
    spec,
    record: dict,
    *,
    create_action: str = "CREATE",
    wait: Wait | None = None,
    after: list[str] = (),
    description: str,
) -> Resource:
    comment = f"neurondeploy {spec.name}"
    return resource(
        name,
        "route53:record",
        [Request("route53", "ChangeResourceRecordSets", _change(spec, create_action, record, comment), wait=wait)],
        [Request("route53", "ChangeResourceRecordSets", _change(spec, "DELETE", record, comment))],
        after=after,
        taggable=False,
        description=description,
        # Same name and type: an UPSERT puts the new values in place (no moment without the record). A name known
        # only at apply (ACM's validation record) has no identity: a change replaces it.
        identity=() if contains_ref(record["Name"]) else (spec.dns.hosted_zone_id, record["Name"], record["Type"]),
        update=[Request("route53", "ChangeResourceRecordSets", _change(spec, "UPSERT", record, comment), wait=wait)],
    )


def owner_record_resource(spec: InferenceSpec) -> Resource:
    record = {
        "Name": owner_record_name(spec),
        "Type": "TXT",
        "TTL": TTL_S,
        "ResourceRecords": [{"Value": owner_record_value(spec)}],
    }
    # CREATE, not UPSERT: fails if another deployment already owns the name.
    return _record(
        "dns-owner", spec, record, description=f"Ownership TXT {owner_record_name(spec)} (records have no tags)"
    )


def alias_record_resource(spec: InferenceSpec) -> Resource:
    record = {
        "Name": spec.dns.record_name,
        "Type": "A",
        "AliasTarget": {
            "HostedZoneId": ref("alb", "CanonicalHostedZoneId"),
            "DNSName": ref("alb", "DNSName"),
            "EvaluateTargetHealth": True,
        },
    }
    # CREATE: never overwrites a record someone else made.
    return _record(
        "dns-alias", spec, record, after=["dns-owner"], description=f"A alias {spec.dns.record_name} -> load balancer"
    )


def validation_record_resource(spec: InferenceSpec) -> Resource:
    record = {
        "Name": ref("certificate", "ValidationRecordName"),
        "Type": "CNAME",
        "TTL": TTL_S,
        "ResourceRecords": [{"Value": ref("certificate", "ValidationRecordValue")}],
    }
    # UPSERT: ACM gives every certificate for the same name in an account the same CNAME, so it may exist.
    return _record(
        "cert-validation-record",
        spec,
        record,
        create_action="UPSERT",
        wait=Wait("CertificateValidated", {"CertificateArn": ref("certificate", "CertificateArn")}, "acm"),
        description="ACM DNS-validation CNAME; apply waits until the certificate is ISSUED",
    )


# --- kinds: how drift describes them, how the sweep finds and deletes leftovers (resources.kinds) ----------------

_RECORD_TYPES = ("A", "AAAA", "CNAME")


def dns(name: str) -> str:
    """A DNS name as Route 53 and ACM are compared: lower case, no trailing dot."""
    return name.lower().rstrip(".")


def record_id(zone: str, record: dict) -> str:
    """A record leftover's id: ``<zone>|<type>|<name>``."""
    return f"{zone}|{record['Type']}|{dns(record['Name'])}"


def _find_records(scan: Scan, zone: str) -> None:
    """In one hosted zone: our ownership TXT records, the A/AAAA/CNAME records at the names they vouch for, and
    the DNS-validation CNAMEs of our certificates (``scan.certificates``) at such names."""
    records = [
        r
        for page in scan.paged.call("route53", "ListResourceRecordSets", {"HostedZoneId": zone})
        for r in page.get("ResourceRecordSets", [])
    ]
    owned: dict[str, dict] = {}  # vouched-for name -> the tags its ownership record stands for
    for r in records:
        if r["Type"] != "TXT" or not dns(r["Name"]).startswith(OWNER_PREFIX):
            continue
        lineages = [owner_lineage(v.get("Value", ""), scan.deployment) for v in r.get("ResourceRecords", [])]
        lineage = next((item for item in lineages if item is not None), None)
        if lineage is not None:
            tags = {DEPLOYMENT_TAG: scan.deployment, **({LINEAGE_TAG: lineage} if lineage else {})}
            owned[dns(r["Name"])[len(OWNER_PREFIX) :]] = tags
            detail = f"ownership TXT {dns(r['Name'])} in {zone}"
            scan.add("route53:owner-record", record_id(zone, r), detail, "global", tags=tags)
    validation = {
        (dns(o["ResourceRecord"]["Name"]), dns(o["ResourceRecord"]["Value"]))
        for c in scan.certificates
        if dns(c.get("DomainName", "")) in owned
        for o in c.get("DomainValidationOptions", [])
        if o.get("ResourceRecord")
    }
    for r in records:
        name = dns(r["Name"])
        values = {dns(v.get("Value", "")) for v in r.get("ResourceRecords", [])}
        if (name in owned and r["Type"] in _RECORD_TYPES) or (
            r["Type"] == "CNAME" and any((name, v) in validation for v in values)
        ):
            tags = owned.get(name) or next(iter(owned.values()), None)  # a validation CNAME: of the names owned
            scan.add("route53:record", record_id(zone, r), f"{r['Type']} {name} in {zone}", "global", tags=tags)


_FIND = Find("route53 zone {zone}", 700, _find_records, per_zone=True)


def find_record(d: Caller, ident: str) -> dict | None:
    """The record a record leftover's id names, if it is still there."""
    zone, record_type, name = ident.split("|", 2)
    page = (
        d.call(
            "route53",
            "ListResourceRecordSets",
            {"HostedZoneId": zone, "StartRecordName": name, "StartRecordType": record_type, "MaxItems": "1"},
        )
        or {}
    )
    for record in page.get("ResourceRecordSets", [])[:1]:  # the first record at or after (name, type)
        if dns(record["Name"]) == name and record["Type"] == record_type:
            return record
    return None


def _delete_record(d: Caller, ident: str) -> bool:
    record = find_record(d, ident)
    if record is None:
        return False
    return done(
        d.call(
            "route53",
            "ChangeResourceRecordSets",
            {
                "HostedZoneId": ident.split("|", 1)[0],
                "ChangeBatch": {
                    "Comment": "neurondeploy destroy (sweep)",
                    "Changes": [{"Action": "DELETE", "ResourceRecordSet": record}],
                },
            },
        )
    )


def _same_record(record: dict, ids: Mapping) -> bool:
    # ListResourceRecordSets starts at the name: the next record is not this one.
    want = ids.get("_record") or {}
    return dns(record.get("Name", "")) == dns(want.get("Name", "")) and record.get("Type") == want.get("Type")


def _compare_record(aws: Caller, record: dict, ids: Mapping, expected: Expected) -> list[str]:
    want = ids.get("_record") or {}
    problems = []
    if "TTL" in want and record.get("TTL") != want["TTL"]:
        problems.append(f"TTL {record.get('TTL')}, expected {want['TTL']}")
    values = lambda r: sorted(v.get("Value") for v in r.get("ResourceRecords", []))
    if "ResourceRecords" in want and values(record) != values(want):
        problems.append(f"values {values(record)}, expected {values(want)}")
    if "AliasTarget" in want:
        live = dns((record.get("AliasTarget") or {}).get("DNSName", ""))
        target = dns(want["AliasTarget"].get("DNSName", ""))
        if live.removeprefix("dualstack.") != target.removeprefix("dualstack."):
            problems.append(f"alias target {live or 'none'}, expected {target}")
    return problems


def _retag_owner_record(context: Retag, ident: str) -> Request | None:
    """An ownership TXT record has no tags: its value names the lineage, so it is rewritten (None: it is gone)."""
    record = find_record(context.aws, ident)
    if record is None:
        return None
    return owner_record_retag(ident.split("|", 1)[0], record, context.deployment, context.lineage)


KINDS = (
    # The recorded delete request holds the whole record: what it should be, with or without create requests.
    # In state every record is route53:record; the sweep tells the ownership TXT records apart (deleted last).
    Kind(
        "route53:record",
        tagless=True,
        describe=Describe(
            Request(
                "route53",
                "ListResourceRecordSets",
                {
                    "HostedZoneId": it("HostedZoneId"),
                    "StartRecordName": it("RecordName"),
                    "StartRecordType": it("RecordType"),
                    "MaxItems": "1",
                },
            ),
            "ResourceRecordSets[0]",
            extra=_compare_record,
            tags=None,
            same=_same_record,
        ),
        find=_FIND,
        delete=_delete_record,
        # Its ownership TXT record vouches for it: created first, deleted last.
        uses=("route53:owner-record", "elbv2:load-balancer", "acm:certificate"),
    ),
    Kind("route53:owner-record", retag=_retag_owner_record, find=_FIND, delete=_delete_record),
)
