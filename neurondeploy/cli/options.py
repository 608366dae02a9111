"""The state and the AWS transport that a command's --state and --wait-delay-s options name."""

from __future__ import annotations

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.cli.output import console_err
from neurondeploy.engine.state_s3 import open_state


def open_state_of(args):
    return open_state(args.state)


def transport_for(region: str, args) -> AwsTransport:
    console = console_err()
    return AwsTransport(
        region, wait_delay_s=args.wait_delay_s, on_progress=lambda message: console.print(f"  {message}")
    )
