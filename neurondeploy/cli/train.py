"""`train` (local or SageMaker), `stop`, `logs`."""

from __future__ import annotations

import sys
from pathlib import Path

from neurondeploy.cli.confirm import job_review
from neurondeploy.cli.options import open_state_of
from neurondeploy.cli.output import console_err, print_json
from neurondeploy.errors import NeurondeployError
from neurondeploy.ops.logs import no_logs_line, read_training_logs
from neurondeploy.ops.sagemaker_job import EXIT_DETACHED, outcome_lines
from neurondeploy.ops.train import StartedJob, stop_exit_code, stop_training_job, train
from neurondeploy.specs import load_spec


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
    overrides = hyperparameter_overrides(args.hp)
    console = console_err()
    if args.local:
        run = train(
            loaded,
            local=True,
            processes=args.processes,
            work_dir=Path(args.work_dir) if args.work_dir else None,
            hyperparameters=overrides,
            on_event=console.print,
        )
        if args.json:
            print_json(run.as_dict())
        return run.exit_code
    say = _printer(console)
    name = loaded.spec.name
    follow = f"follow it with `neurondeploy logs {name} --follow`, stop it with `neurondeploy stop {name}`"
    job: list[StartedJob] = []  # the job once it runs: Ctrl-C while waiting names it

    with console.status(f"{name}: starting") as live:

        def started(started: StartedJob) -> None:
            job.append(started)
            if not started.attached:
                say(f"started training job {started.job_name}")
            if args.no_wait:
                say(follow)
            live.update(f"{started.job_name}: waiting for DescribeTrainingJob")

        try:
            run = train(
                loaded,
                hyperparameters=overrides,
                state=open_state_of(args),
                wait=not args.no_wait,
                wait_delay_s=args.wait_delay_s,
                on_event=lambda message: say(f"  {message}"),
                on_log=say,
                on_status=live.update,
                on_started=started,
                review=job_review(args, console, live, f"start this training job for {name}"),
            )
        except KeyboardInterrupt:
            if not job:
                raise
            say(f"stopped waiting; {job[0].job_name} keeps running: {follow}")
            return EXIT_DETACHED
    if run.job is not None:
        for line in outcome_lines(run.job):
            say(line)
    if args.json:
        print_json(run.as_dict())
    return run.exit_code


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
