"""Command line: parse, call the library, render. Thin on purpose; everything here is doable from Python.

Heavy modules (rich, botocore, torch) are imported inside the commands so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from neurondeploy import __version__
from neurondeploy.errors import NeurondeployError

EXIT_INTERNAL = 70


def _print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def cmd_validate(args) -> int:
    from neurondeploy.planner.validate import validate_files

    results = validate_files(args.specs)
    if args.json:
        _print_json([result.as_dict() for result in results])
    else:
        for result in results:
            for line in result.lines():
                print(line, file=sys.stderr if not result.ok else sys.stdout)
    return 0 if all(result.ok for result in results) else 2


def cmd_plan(args) -> int:
    from neurondeploy.planner.plan import build_plan_for_file, save_plan

    plan = build_plan_for_file(args.spec)
    if args.out:
        save_plan(plan, Path(args.out))
    if args.json:
        _print_json(plan.model_dump(mode="json"))
    else:
        from neurondeploy.planner.render import render_plan

        render_plan(plan, _console())
    return 0 if plan.all_validated else 3


def cmd_size(args) -> int:
    from neurondeploy.planner.size_command import run_size

    result = run_size(args)
    if args.json:
        _print_json(result)
    else:
        from neurondeploy.planner.render import render_size

        render_size(result, _console())
    return 0 if result["options"] else 3


def cmd_schema(args) -> int:
    from neurondeploy.specs.loader import SPEC_KINDS

    _print_json(SPEC_KINDS[args.kind].model_json_schema())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neurondeploy",
        description="From a YAML spec to an AWS Trainium training job or Inferentia2 endpoint, checked offline first.",
    )
    parser.add_argument("--version", action="version", version=f"neurondeploy {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = commands.add_parser("validate", help="check specs: schema, instance, SDK, parallel layout, memory fit")
    validate.add_argument("specs", nargs="+", metavar="SPEC")
    validate.add_argument("--json", action="store_true", help="machine-readable findings")
    validate.set_defaults(handler=cmd_validate)

    plan = commands.add_parser("plan", help="checks, cost per hour, and every AWS request apply would send (offline)")
    plan.add_argument("spec", metavar="SPEC")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--out", metavar="FILE", help="save the plan (carries the spec's hash; a changed spec makes it stale)")
    plan.set_defaults(handler=cmd_plan)

    size = commands.add_parser("size", help="which instances and TP degrees fit a model, cheapest first")
    size.add_argument("--model", metavar="DIR", help="Hugging Face model directory (reads config.json and safetensors headers)")
    size.add_argument("--layers", type=int)
    size.add_argument("--hidden", type=int, help="hidden size (d_model)")
    size.add_argument("--heads", type=int, help="attention heads")
    size.add_argument("--kv-heads", type=int, help="key/value heads (GQA); default = heads")
    size.add_argument("--vocab", type=int, default=32000)
    size.add_argument("--intermediate", type=int, help="MLP width; default 4 × hidden")
    size.add_argument("--params", type=int, help="exact parameter count, if known")
    size.add_argument("--gated-mlp", action="store_true", help="SwiGLU MLP with 3 matrices (Llama, Mistral, Qwen)")
    size.add_argument("--batch", type=int, default=1)
    size.add_argument("--seq", type=int, default=2048, help="sequence length (context) to hold in the KV cache")
    size.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16", "fp8"])
    size.add_argument("--backend", default="nxdi", choices=["nxdi", "transformers-neuronx", "trace"],
                      help="serving runtime: decides legal TP degrees and head rules")
    size.add_argument("--region", help="only instances offered in this region")
    size.add_argument("--json", action="store_true")
    size.set_defaults(handler=cmd_size)

    schema = commands.add_parser("schema", help="JSON schema of a spec kind, with every field described")
    schema.add_argument("kind", choices=["inference", "training"])
    schema.set_defaults(handler=cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except NeurondeployError as exc:
        if args.debug:
            raise
        problems = getattr(exc, "problems", [exc])
        for problem in problems:
            print(f"error: {problem.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug of ours: say so in one line; --debug shows where
        if args.debug:
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback and report it)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
