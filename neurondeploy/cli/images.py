"""The --ami-ssm-parameter / --ami-id options, shared by apply and plan (kept apart from the AWS options so that
plan imports no AWS client)."""

from __future__ import annotations


def image_context(args) -> dict:
    """The plan context the --ami-ssm-parameter / --ami-id options give (apply and plan)."""
    pairs = (("ami_ssm_parameter", args.ami_ssm_parameter), ("ami_id", args.ami_id))
    return {key: value for key, value in pairs if value}
