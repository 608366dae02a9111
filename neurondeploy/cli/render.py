"""Human rendering of plans and sizing results with rich. JSON output never passes through here."""

from __future__ import annotations

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
        for line in plan.before_apply:
            console.print(f"  {escape(line)}")
    # One block per resource, like `terraform plan`: narrow terminals stay readable.
    for resource in plan.resources:
        after = f"  [dim]after {', '.join(resource.depends_on)}[/]" if resource.depends_on else ""
        mark = "[cyan]<=[/]" if resource.lookup else "[green]+[/]"
        console.print(f"{mark} [bold]{resource.name}[/] ({resource.type}){after}")
        _render_requests(resource, console)
    for resource in plan.shared:  # made by apply when missing, kept by destroy: shared with other deployments
        console.print(f"[green]+[/] [bold]{resource.name}[/] ({resource.type})  [dim]shared, if missing[/]")
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


def _render_requests(resource, console) -> None:
    if resource.description:  # what it is and how it is set up (encryption, exposure), in one line
        console.print(f"    [dim]{escape(resource.description)}[/]")
    for request in resource.requests:
        mark = "[green]checked[/]" if request.validated else "[red]REFUSED[/]"
        console.print(f"    {request.service}:{request.operation}  {mark}")


def render_size(result: dict, console) -> None:
    from rich.table import Table

    active = result["active_parameters"]
    moe = f" ({active / 1e9:.2f}B active per token)" if active != result["parameters"] else ""
    quantized = f", {result['quantization']} weights" if result["quantization"] != "none" else ""
    console.print(
        f"{result['parameters'] / 1e9:.2f}B parameters{moe}, batch {result['batch']}, sequence "
        f"{result['sequence_length']}, {result['dtype']}{quantized}, backend {result['backend']}"
    )
    if not result["options"]:
        console.print("[red]nothing fits[/]: reduce batch size, sequence length or dtype")
        return
    table = Table(
        "instance",
        "TP",
        "replicas",
        "heads Q/KV",
        "padding GiB (+compute)",
        "GiB/core needed",
        "GiB/core",
        "$/hour",
        box=None,
        pad_edge=False,
    )
    for option in result["options"]:
        price = f"{option['hourly_usd']:.4f}" if option["hourly_usd"] is not None else "?"
        if option["hourly_usd"] is not None and not option["price_confirmed"]:
            price += "*"
        table.add_row(
            option["instance"],
            str(option["tensor_parallel"]),
            str(option["replicas_per_instance"]),
            f"{option['padded_heads']}/{option['kv_heads']}",
            f"{option['padding_overhead_gib']:.2f} (+{option['padding_compute_pct']:g}%)"
            if option["padding_overhead_gib"]
            else "-",
            f"{option['per_core_gib']:.2f}",
            f"{option['available_per_core_gib']:g}",
            price,
        )
    console.print(table)
    console.print("[dim]* third-party on-demand price, us-east-1 (see the catalogue's sources)[/]")
