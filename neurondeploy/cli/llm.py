"""LLM specs and model directories under `serve`, `apply --local` and `invoke --chat`: the local endpoint that
speaks the vLLM Neuron container's API."""

from __future__ import annotations

import sys

from neurondeploy.cli.local_run import hold_local_endpoint, smoke_line
from neurondeploy.cli.output import console_err
from neurondeploy.ops.apply import apply_local as ops_apply_local
from neurondeploy.ops.smoke import smoke_llm
from neurondeploy.planner.plan import build_plan
from neurondeploy.serving.llm import serve as llm_serve
from neurondeploy.specs import LoadedSpec


def serve(args, target: llm_serve.LlmTarget) -> int:
    port = args.port or target.serving.port
    print(target.routes_line(f"http://{args.host}:{port}") + "; Ctrl-C stops", file=sys.stderr, flush=True)
    llm_serve.run(target, args.host, port, args.log_level)
    return 0


def apply_local(args, loaded: LoadedSpec) -> int:
    console = console_err()
    plan = build_plan(loaded)  # validates first: an invalid spec stops here, before loading any model
    console.print(f"[bold]{loaded.spec.name}[/]: valid; loading the model")
    started = ops_apply_local(loaded, host=args.host, port=args.port)
    endpoint, target = started.endpoint, started.llm

    def introduce() -> None:
        console.print(target.routes_line(endpoint.url))
        console.print(smoke_line(args, lambda: smoke_llm(endpoint.url)), markup=False)
        console.print("call it:")
        console.print(f'  neurondeploy invoke {endpoint.url} --chat "Hello"')
        console.print(
            f"  python -c \"import openai; c = openai.OpenAI(base_url='{endpoint.url}/v1', api_key='-'); "
            f"print(c.chat.completions.create(model='{target.lm.served_name}', "
            "messages=[{'role': 'user', 'content': 'Hello'}], max_tokens=32).choices[0].message.content)\"",
            markup=False,
        )

    return hold_local_endpoint(console, endpoint, plan, args.spec, introduce)
