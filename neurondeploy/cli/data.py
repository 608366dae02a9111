"""`data`: a corpus as a training channel's tokenized dataset, with a progress bar while it packs and uploads."""

from __future__ import annotations

from pathlib import Path

from neurondeploy.cli.output import console_err, print_json
from neurondeploy.ops.data import prepare_data
from neurondeploy.specs import load_spec


def cmd_data(args) -> int:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    loaded = load_spec(args.spec)
    console = console_err()
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        tasks: dict[str, int] = {}

        def on_progress(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = progress.add_task(what, total=total)
            progress.update(tasks[what], completed=done)

        run = prepare_data(
            loaded,
            Path(args.corpus),
            args.tokenizer,
            channel=args.channel,
            out=Path(args.out) if args.out else None,
            upload=not args.no_upload,
            on_progress=on_progress,
        )
    packed = run.packed
    made = "packed" if run.built else "unchanged, not packed again:"
    console.print(
        f"{made} {run.directory}: {packed.rows} sequences of {packed.sequence_length} tokens from "
        f"{packed.documents} documents ({packed.tokens_dropped} tokens after the last full sequence dropped)",
        markup=False,
    )
    if run.s3_uri and run.uploaded:
        console.print(f"uploaded {len(run.uploaded)} files to {run.s3_uri}", markup=False)
        if run.removed:
            console.print(f"removed the previous dataset's {', '.join(run.removed)}", markup=False)
    elif run.s3_uri:
        console.print(f"unchanged in S3, nothing uploaded: {run.s3_uri}", markup=False)
    elif args.no_upload and run.channel_s3_uri:
        console.print(
            f"--no-upload: nothing uploaded; the job reads {run.channel_s3_uri}: run this again without --no-upload "
            f"to put the dataset there (or `aws s3 sync {run.directory} {run.channel_s3_uri}`)",
            markup=False,
        )
    else:
        console.print(f"channel {run.channel} has no s3_uri: nothing uploaded (the local dataset is all)", markup=False)
    if args.json:
        print_json(run.as_dict())
    return 0
