"""`train` (local or SageMaker), `stop`, `logs`."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.cli.options import open_state_of
from neurondeploy.cli.output import console_err, print_json
from neurondeploy.errors import NeurondeployError
from neurondeploy.specs import load_spec
from neurondeploy.training.jobs import (
    EXIT_DETACHED,
    exit_code_of,
    job_summary,
    no_logs_line,
    outcome_lines,
    read_training_logs,
    start_training_job,
    stop_exit_code,
    stop_training_job,
    wait_for_job,
)
from neurondeploy.training.local import run_local_training


def hyperparameter_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise NeurondeployError(f"--hp {pair!r} is not KEY=VALUE", "e.g. --hp max_steps=20")
        overrides[key] = value  # typed once, by training.entry.parse_override (both local and SageMaker runs)
    return overrides


def _printer(console):
    # Log lines carry brackets rich would read as markup.
    return lambda text: console.print(text, markup=False, highlight=False)


def cmd_train(args) -> int:
    loaded = load_spec(args.spec)
    if loaded.spec.kind != "training":
        raise NeurondeployError(
            f"{args.spec} is an inference spec; train runs training specs", "use neurondeploy apply for endpoints"
        )
    overrides = hyperparameter_overrides(args.hp)
    console = console_err()
    if args.local:
        result = run_local_training(
            loaded,
            processes=args.processes,
            work_dir=Path(args.work_dir) if args.work_dir else None,
            hyperparameters=overrides,
            on_event=console.print,
        )
        if args.json:
            print_json(result.as_dict())
        return result.exit_code
    say = _printer(console)
    transport = AwsTransport(loaded.spec.region, wait_delay_s=args.wait_delay_s)
    started = start_training_job(
        loaded,
        transport=transport,
        state=open_state_of(args),
        hyperparameters=overrides,
        on_event=lambda message: say(f"  {message}"),
    )
    name = started.deployment
    follow = f"follow it with `neurondeploy logs {name} --follow`, stop it with `neurondeploy stop {name}`"
    if not started.attached:
        say(f"started training job {started.job_name}")
    if args.no_wait:
        say(follow)
        if args.json:
            print_json(dataclasses.asdict(started))
        return 0
    try:
        with console.status(f"{started.job_name}: waiting for DescribeTrainingJob") as live:
            job = wait_for_job(
                transport, started.job_name, delay_s=args.wait_delay_s, on_event=say, on_status=live.update
            )
    except KeyboardInterrupt:
        say(f"stopped waiting; {started.job_name} keeps running: {follow}")
        return EXIT_DETACHED
    for line in outcome_lines(job):
        say(line)
    code = exit_code_of(job["TrainingJobStatus"])
    if args.json:
        print_json(
            {**job_summary(job), "attached": started.attached, "source_uri": started.source_uri, "exit_code": code}
        )
    return code


def cmd_stop(args) -> int:
    say = _printer(console_err())
    stopped = stop_training_job(open_state_of(args), args.name, wait_delay_s=args.wait_delay_s, on_event=say)
    for line in outcome_lines(stopped.job):
        say(line)
    return stop_exit_code(stopped)


def cmd_logs(args) -> int:
    def write(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        read = read_training_logs(
            open_state_of(args),
            args.name,
            region=args.region,
            follow=args.follow,
            wait_delay_s=args.wait_delay_s,
            on_line=write,
        )
    except KeyboardInterrupt:
        return EXIT_DETACHED
    if not read.printed:
        print(no_logs_line(read), file=sys.stderr)
    return 0
