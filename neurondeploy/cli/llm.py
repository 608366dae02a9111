"""LLM specs and model directories under `serve`, `apply --local` and `invoke --chat`: the local endpoint that
speaks the vLLM Neuron container's API."""

from __future__ import annotations

import sys

from neurondeploy.cli.local_run import hold_local_endpoint, progress, say_ready_once_answering, smoke_line
from neurondeploy.cli.output import console_err
from neurondeploy.ops.apply import apply_local as ops_apply_local
from neurondeploy.ops.smoke import smoke_llm
from neurondeploy.planner.plan import build_plan
from neurondeploy.serving.llm import serve as llm_serve
from neurondeploy.serving.llm.client import chat
from neurondeploy.specs import LoadedSpec


def first_chat(url: str) -> None:
    """One token of a chat completion, not judged: what `ready` waits for."""
    chat(url, "Hello", on_text=lambda text: None, max_tokens=1, stream=False)


def serve(args, target: llm_serve.LlmTarget) -> int:
    port = args.port or target.serving.port
    print(target.routes_line(f"http://{args.host}:{port}") + "; Ctrl-C stops", file=sys.stderr, flush=True)
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{port}"
    say_ready_once_answering(console_err(), url, lambda: first_chat(url))
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

        def warm() -> str:
            first_chat(endpoint.url)
            return "smoke test: skipped (--no-smoke); a first chat completion answered"

        with progress(console, "the first chat completion"):
            console.print(smoke_line(args, lambda: smoke_llm(endpoint.url), warm), markup=False)
        console.print("call it:")
        console.print(f'  neurondeploy invoke {endpoint.url} --chat "Hello"')
        console.print(
            f"  python -c \"import openai; c = openai.OpenAI(base_url='{endpoint.url}/v1', api_key='-'); "
            f"print(c.chat.completions.create(model='{target.lm.served_name}', "
            "messages=[{'role': 'user', 'content': 'Hello'}], max_tokens=32).choices[0].message.content)\"",
            markup=False,
        )

    return hold_local_endpoint(console, endpoint, plan, args.spec, introduce)
