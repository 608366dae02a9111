"""One exception hierarchy: every error a user can cause carries a one-line message and a hint.

The CLI prints ``error: <message> (hint: <hint>)`` and exits non-zero; tracebacks only with ``--debug``.
"""

from __future__ import annotations

import errno


class NeurondeployError(Exception):
    """Base of every error the toolkit raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message} (fix: {self.hint})"
        return " ".join(text.split())


class NeurondeployWarning(UserWarning):
    """Something worked around, worth a line: the CLI prints ``warning: <message>``, without Python's source path."""


class SpecError(NeurondeployError):
    """A spec file that cannot be read or does not validate."""

    exit_code = 2


class CatalogError(NeurondeployError):
    """An instance type, region, image or SDK version the catalogue does not know."""

    exit_code = 2


class PlanError(NeurondeployError):
    """A spec that validates but cannot work: does not fit, illegal parallel layout, stale plan."""

    exit_code = 3


class AwsRequestError(NeurondeployError):
    """A request that the AWS service model refuses (checked offline, before sending)."""

    exit_code = 3


class CacheError(NeurondeployError):
    """The compile cache cannot be used: lock wait timed out, unknown entry, bad key or S3 URI, bad build output."""


# What the OS says when a write finds no room: the device is full, or the user's quota is.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(NeurondeployError):
    """A write found no room; the message names the place, what is free and what is needed (``needed``, bytes,
    when known). Made by :func:`neurondeploy.compiler.disk_space.disk_full`."""

    exit_code = 1
    needed: int | None = None


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS
