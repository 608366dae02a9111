"""Human rendering of plans and sizing results with rich. JSON output never passes through here."""

from __future__ import annotations

import re

from rich.markup import escape

from neurondeploy.cli.output import dollars


def render_plan(plan, console) -> None:
    console.print(
        f"[bold]{plan.kind} {plan.name}[/] in {plan.region}  ({plan.spec_file}, sha256 {plan.spec_sha256[:12]})"
    )
    for finding in plan.findings:
        style = "red" if finding["level"] == "error" else "yellow"
        console.print(f"[{style}]{finding['level']}[/]: {finding['text']}")
    release = plan.release
    how = "pinned" if release.pinned else "the newest with every piece"
    console.print(f"Neuron SDK [bold]{release.neuron_sdk}[/] ({how})")
    for piece in release.pieces:
        console.print(f"  {piece.role}: {escape(piece.name)}  [dim]Python {piece.python}; {escape(piece.source)}[/]")
    if release.host:
        console.print(f"  endpoint host: {escape(release.host)}")
    for note in release.notes:
        console.print(f"  [yellow]note[/]: {escape(note)}")
    if plan.before_apply:
        console.print("[bold]before apply[/]:")
        for step in plan.before_apply:
            _render_step(step, console)
    for problem in plan.check_problems or []:
        console.print(f"  [red]missing[/] {escape(problem)}")
    if plan.engine_config is not None:  # the whole file is in `plan --json`; its layout here
        strategy, data = plan.engine_config["distributed_strategy"], plan.engine_config["data"]
        layout = ", ".join(f"{key} {value}" for key, value in strategy.items())
        console.print(
            f"[bold]NxD Training config[/] (plan --json: engine_config): {escape(layout)}; micro-batch "
            f"{data['micro_batch_size']}, global batch {data['global_batch_size']}"
        )
    # One block per resource, like `terraform plan`: narrow terminals stay readable.
    for resource in plan.resources:
        after = f"  [dim]after {', '.join(resource.depends_on)}[/]" if resource.depends_on else ""
        mark = "[cyan]<=[/]" if resource.lookup else "[green]+[/]"
        console.print(f"{mark} [bold]{resource.name}[/] ({resource.type}){after}")
        _render_requests(resource, console)
    for resource in plan.shared:  # made by apply when missing; the bucket is shared with other deployments
        what = "this state's, released by destroy" if resource.type == "s3:object" else "shared, if missing"
        console.print(f"[green]+[/] [bold]{resource.name}[/] ({resource.type})  [dim]{what}[/]")
        _render_requests(resource, console)
    for request in (r for resource in plan.resources + plan.shared for r in resource.requests if not r.validated):
        for problem in request.problems:
            console.print(f"[red]refused offline[/]: {request.service}:{request.operation}: {problem}")
    if plan.changes is not None:
        console.print("[bold]against state[/] (what apply would change; apply refreshes from AWS first):")
        for line in plan.changes or ["    nothing: AWS already has what the spec asks"]:
            console.print(f"  {line}")
        console.print(
            f"  {plan.changes_summary}; cost {dollars(plan.hourly_usd_before)} -> {dollars(plan.cost.hourly_usd)}"
        )
    cost = plan.cost
    total = f"${cost.hourly_usd:,.2f}/hour" if cost.hourly_usd is not None else "unknown"
    if plan.kind == "training" and cost.run_ceiling_usd is not None:
        extra = f" (${cost.run_ceiling_usd:,.0f} if a run lasts until max_runtime_s, where SageMaker stops it)"
    else:
        extra = f" (about ${cost.hourly_usd * 730:,.0f}/month)" if cost.hourly_usd else ""
    console.print(f"cost: [bold]{total}[/]" + extra)
    for item in cost.items:
        price = f"${item.hourly_usd:,.4f}/h" if item.hourly_usd is not None else "price unknown"
        console.print(f"  {item.what}: {price}  [dim]{item.source}[/]")
    for note in cost.notes:
        console.print(f"  [dim]note: {note}[/]")
    creates = sum(len(resource.requests) for resource in plan.resources)
    console.print(
        f"{plan.request_count} AWS requests ({creates} for apply, {plan.request_count - creates} for destroy), "
        f"{plan.validated_count} checked strictly against the botocore models offline; --json shows every parameter"
    )
    if plan.after_apply:
        console.print(f"after apply: {escape(plan.after_apply)}")
    console.print("[dim]+ create   <= read only[/]")


STATUS_STYLE = {"done": "green", "missing": "red", "not checked": "yellow"}


def _render_step(step, console) -> None:
    """``- what`` (``[done]``/``[missing]``/``[not checked]`` after `plan --check`), then its commands, one a line."""
    mark = f"[{STATUS_STYLE[step.status]}]{step.status}[/]" if step.status else "-"
    detail = f" [dim]({escape(step.detail)})[/]" if step.detail and step.status != "done" else ""
    console.print(f"  {mark} {escape(step.what)}{detail}")
    if step.status != "done":
        for command in step.commands:
            console.print(f"      $ {escape(command)}", soft_wrap=True)


def _render_requests(resource, console) -> None:
    if resource.description:  # what it is and how it is set up (encryption, exposure), in one line
        console.print(f"    [dim]{escape(resource.description)}[/]")
    for request in resource.requests:
        mark = "[green]checked[/]" if request.validated else "[red]REFUSED[/]"
        console.print(f"    {request.service}:{request.operation}  {mark}")


def render_size(result: dict, console, rows: int | None = None) -> None:
    """The options table, the first ``rows`` of them (None: all), its notes, and the recommended one to paste."""
    from rich.table import Table

    active = result["active_parameters"]
    moe = f" ({active / 1e9:.2f}B active per token)" if active != result["parameters"] else ""
    quantized = f", {result['quantization']} weights" if result["quantization"] != "none" else ""
    console.print(
        f"{result['parameters'] / 1e9:.2f}B parameters{moe}, batch {result['batch']}, sequence "
        f"{result['sequence_length']}, {result['dtype']}{quantized}, backend {result['backend']}"
    )
    if result["profile"]:
        profile = result["profile"]
        console.print(
            f"[dim]serving profile {profile['name']}: {profile['use']} (--profile interactive, chat, throughput or "
            "long-context; --batch / --seq for your own)[/]"
        )
    if not result["options"]:
        console.print("[red]nothing fits[/]: reduce batch size, sequence length or dtype")
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("instance", no_wrap=True)  # never "inf2.8xlar…": the name is what gets pasted
    table.add_column("TP", no_wrap=True)
    table.add_column("replicas", no_wrap=True)
    table.add_column("heads Q/KV (padding)")
    table.add_column("GiB/core of", no_wrap=True)
    table.add_column("$/hour", no_wrap=True)
    table.add_column("note")
    recommended = result["recommended"]
    legend: dict[str, str] = {}
    shown = result["options"] if rows is None else result["options"][: max(rows, (recommended or 0) + 1)]
    for index, option in enumerate(shown):
        price = f"{option['hourly_usd']:.4f}" if option["hourly_usd"] is not None else "?"
        if option["hourly_usd"] is not None and not option["price_confirmed"]:
            price += "*"
        labels = []
        for warning in option["warnings"]:  # "label: why"; the table shows the label, the legend the why
            label, _, why = warning.partition(": ")
            labels.append(label)
            legend[re.sub(r"\s*\d.*$", "", label)] = why  # "host RAM 16 GiB" -> "host RAM"
        padding = (
            f" +{option['padding_overhead_gib']:.2f} GiB, +{option['padding_compute_pct']:g}% compute"
            if option["padding_overhead_gib"]
            else ""
        )
        table.add_row(
            option["instance"],
            str(option["tensor_parallel"]),
            str(option["replicas_per_instance"]),
            f"{option['padded_heads']}/{option['kv_heads']}{padding}",
            f"{option['per_core_gib']:.2f} of {option['available_per_core_gib']:g}",
            price,
            "recommended" if index == recommended else ", ".join(labels),
            style="bold" if index == recommended else None,
        )
    console.print(table)
    if len(shown) < len(result["options"]):
        console.print(f"[dim]({len(result['options']) - len(shown)} more, none cheaper: --all or --json lists them)[/]")
    platform = "SageMaker ml.*" if result["platform"] == "sagemaker" else "EC2"
    console.print(
        f"[dim]* third-party {platform} on-demand price, {result['price_region']} (the catalogue's sources)[/]"
    )
    for label, why in legend.items():
        console.print(f"[dim]{label}: {why}[/]")
    if recommended is None:
        console.print("[yellow]no option without a warning[/]: each fits, but see its note")
        return
    option = result["options"][recommended]
    console.print(
        f"recommended: {option['instance']} at TP {option['tensor_parallel']} "
        f"({option['replicas_per_instance']} replica(s) per instance; the cheapest that fits without a note). "
        "In a spec:"
    )
    console.print(
        f"  deployment: {{instance_type: {option['instance']}, tensor_parallel: {option['tensor_parallel']}}}\n"
        f"  compile: {{batch_sizes: [{result['batch']}], sequence_lengths: [{result['sequence_length']}]}}",
        soft_wrap=True,
        highlight=False,
    )
