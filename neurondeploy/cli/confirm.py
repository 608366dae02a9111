"""The question `apply`, `destroy`, `compile --remote` and `train` ask before changing anything: on a terminal, ``Proceed? [y/N]``; with
``--yes``, no question; with neither a terminal nor ``--yes``, a refusal (a pipeline must say yes explicitly)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from neurondeploy.errors import NeurondeployError
from neurondeploy.ops.sagemaker_job import JobToStart


class NotConfirmed(NeurondeployError):
    exit_code = 1


def confirm(args, console, what: str) -> None:
    """Return when the user agreed to ``what``; raise :class:`NotConfirmed` (nothing changed) otherwise."""
    if getattr(args, "yes", False):
        return
    if not sys.stdin.isatty():
        raise NotConfirmed(
            f"{what}: not confirmed, and there is no terminal to ask; nothing was changed",
            "review the changes above and pass --yes to proceed",
        )
    console.print(f"{what}. Proceed? [y/N] ", end="")
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise NotConfirmed(f"{what}: declined; nothing was changed", "run it again and answer y to proceed")


def job_review(args, console, live, what: str) -> Callable[[JobToStart], None]:
    """What `compile --remote` and `train` show before a new SageMaker job: what it creates, its price, the
    question. ``live`` (a rich status line) is paused while it asks."""

    def review(job: JobToStart) -> None:
        live.stop()
        for line in job.lines():
            console.print(f"  {line}", markup=False)
        confirm(args, console, what)
        live.start()

    return review
