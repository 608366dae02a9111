"""`invoke`: one request to any endpoint, or a chat to an LLM one. Imports only the clients: an invoke starts in
a fraction of a second, where the serving side (torch, the compiler) takes seconds to import."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from neurondeploy.cli.output import compact_json
from neurondeploy.serving.client import InvokeError, describe_answer, invoke, parse_data
from neurondeploy.serving.llm.client import chat


def say_target(target) -> None:
    print(f"invoke: {target.describe()}", file=sys.stderr)


def cmd_invoke(args) -> int:
    if args.chat is not None:
        return invoke_chat(args)
    answer = invoke(
        args.target,
        parse_data(args.data),
        region=args.region,
        state_location=args.state,
        where=args.where,
        on_target=say_target,
    )
    if args.out:
        try:
            Path(args.out).write_text(json.dumps(answer) + "\n")
        except OSError as exc:
            raise InvokeError(f"--out {args.out}: cannot write ({exc.strerror})", "check the path") from None
        print(f"wrote {describe_answer(answer)} to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(compact_json(answer) + "\n")
    return 0


def invoke_chat(args) -> int:
    def show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    answer = chat(
        args.target,
        args.chat,
        on_text=show,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        stream=not args.no_stream,
        region=args.region,
        state_location=args.state,
        where=args.where,
        on_target=say_target,
    )
    sys.stdout.write("\n")
    usage = answer.usage or {}
    print(
        f"[{answer.finish_reason}; {usage.get('completion_tokens', '?')} tokens; model {answer.model}]",
        file=sys.stderr,
    )
    return 0
