"""Resolve ``$NEURONDEPLOY_SECRET_ENV`` where the workload runs: each ``{NAME: {"secret"|"ssm": ARN}}`` is read
with the credentials of the machine (the SageMaker execution role, the EC2 instance role) and set as ``NAME`` in
this process's environment only. Nothing here logs, prints or returns a value; errors name the variable and the
ARN, never what was read.

``neurondeploy serve`` calls :func:`resolve_secret_env` before loading the model (our container on SageMaker, the
systemd unit on EC2). For images that are not ours (the Hugging Face LLM containers), ``python -m
neurondeploy.aws.secrets -- COMMAND...`` resolves, then replaces itself with COMMAND (infra/hf-secrets wraps the
Hugging Face image's entrypoint with it).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import MutableMapping

from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.errors import NeurondeployError
from neurondeploy.specs.inference import SECRET_ENV


class SecretEnvError(NeurondeployError):
    exit_code = 1


def _region_of(arn: str) -> str:
    parts = arn.split(":")
    if len(parts) < 6 or not parts[3]:
        raise SecretEnvError(f"{arn!r} is not a regional ARN", "give the secret's or parameter's full ARN")
    return parts[3]


def read_reference(reference: dict, transport: AwsTransport | None = None) -> str:
    """The value behind one reference (``{"secret": ARN}`` or ``{"ssm": ARN}``)."""
    if set(reference) not in ({"secret"}, {"ssm"}):
        raise SecretEnvError(f"{reference!r} is not a secret reference", 'write {"secret": ARN} or {"ssm": ARN}')
    arn = reference.get("secret") or reference["ssm"]
    transport = transport or AwsTransport(_region_of(arn))
    if "secret" in reference:
        answer = transport.call("secretsmanager", "GetSecretValue", {"SecretId": arn})
        if "SecretString" not in answer:
            raise SecretEnvError(f"secret {arn} holds binary data", "store the value as a string (SecretString)")
        return answer["SecretString"]
    return transport.call("ssm", "GetParameter", {"Name": arn, "WithDecryption": True})["Parameter"]["Value"]


def resolve_secret_env(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set every referenced variable in ``environ`` (default: this process's) from its secret; returns the names."""
    environ = os.environ if environ is None else environ
    raw = environ.get(SECRET_ENV)
    if not raw:
        return []
    try:
        references = json.loads(raw)
    except ValueError:
        raise SecretEnvError(
            f"${SECRET_ENV} is not JSON", "it is written by neurondeploy's plan; do not edit it"
        ) from None
    transports: dict[str, AwsTransport] = {}
    for name, reference in sorted(references.items()):
        arn = reference.get("secret") or reference.get("ssm") or ""
        region = _region_of(arn)
        transport = transports.setdefault(region, AwsTransport(region))
        try:
            environ[name] = read_reference(reference, transport)
        except AwsCallError as exc:
            raise SecretEnvError(
                f"{name}: cannot read {arn} ({exc.code or 'error'})",
                "grant this machine's role secretsmanager:GetSecretValue / ssm:GetParameter (and kms:Decrypt for a "
                "customer key) on it; roles neurondeploy creates get exactly that",
            ) from None
    environ.pop(SECRET_ENV, None)
    return sorted(references)


def main(argv: list[str]) -> int:
    """``python -m neurondeploy.aws.secrets -- COMMAND ARGS...``: resolve, then exec COMMAND with them set."""
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m neurondeploy.aws.secrets -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    try:
        resolve_secret_env()
    except NeurondeployError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    os.execvp(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
