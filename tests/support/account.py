"""What a user has in their account before a paid command, as the preflight checks it (neurondeploy/engine/
preflight.py): the role a spec names, its channels' data, its output and checkpoint buckets, the secrets its
container reads. Tests that run `train`, `compile --remote` or `apply` against the emulator make them first."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

SAGEMAKER_TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}


def _bucket(aws, uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    s3 = aws.client("s3")
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    return bucket, prefix


def provision(aws, spec_path: Path, *, channels: bool = True) -> None:
    """Make what ``spec_path`` names outside itself, as its user would before running it (``channels``: with an
    object under each input channel; a test that fills them itself says False)."""
    spec = yaml.safe_load(Path(spec_path).read_text())
    role = (spec.get("iam") or {}).get("role_arn")
    if role:
        aws.client("iam").create_role(
            RoleName=role.rsplit("/", 1)[-1], AssumeRolePolicyDocument=json.dumps(SAGEMAKER_TRUST)
        )
    for channel in (spec.get("inputs") or {}).values() if channels else ():
        if channel.get("s3_uri"):
            bucket, prefix = _bucket(aws, channel["s3_uri"])
            aws.client("s3").put_object(Bucket=bucket, Key=f"{prefix.rstrip('/')}/part-0", Body=b"data")
    for uri in (spec.get("output_s3_uri"), (spec.get("checkpoint") or {}).get("s3_uri")):
        if uri:
            _bucket(aws, uri)
    env = ((spec.get("deployment") or {}).get("container") or {}).get("env") or {}
    for value in env.values():
        if isinstance(value, dict) and value.get("secret"):
            name = value["secret"].split(":secret:", 1)[1]
            aws.client("secretsmanager").create_secret(Name=name, SecretString="a token")
