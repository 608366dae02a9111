"""Command line: parse, call the library, render. Thin on purpose; everything here is doable from Python.

Each command lives in a module of this package that is imported only when that command runs, so ``--help``
and ``validate`` never load what ``serve`` or ``apply`` need (rich, botocore, torch).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from neurondeploy import __version__
from neurondeploy.errors import DiskFull, NeurondeployError, NeurondeployWarning, is_disk_full

EXIT_INTERNAL = 70


def _image_options(parser) -> None:
    parser.add_argument(
        "--ami-ssm-parameter",
        metavar="NAME",
        help="SSM parameter holding the Neuron DLAMI id (default: the public DLAMI that serves the container kind)",
    )
    parser.add_argument("--ami-id", metavar="AMI", help="pin the instance image instead of resolving the SSM parameter")


def _state_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        metavar="FILE_OR_S3_URI",
        help="state: a SQLite file, or s3://bucket/prefix for a team "
        "(default $NEURONDEPLOY_STATE or ~/.neurondeploy/state.db)",
    )
    parser.add_argument("--wait-delay-s", type=int, default=15, help="seconds between waiter polls")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neurondeploy",
        description="From a YAML spec to an AWS Trainium training job or Inferentia2 endpoint, checked offline first.",
    )
    parser.add_argument("--version", action="version", version=f"neurondeploy {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    init = commands.add_parser(
        "init", help="write a first spec for a model directory or Hub id and a target, then validate it"
    )
    init.add_argument(
        "model", metavar="MODEL", help="a Hugging Face model directory (or pkg://package/dir), or a Hub id org/name"
    )
    init.add_argument(
        "--target",
        default="sagemaker",
        choices=["sagemaker", "ec2"],
        help="sagemaker: a real-time endpoint; ec2: instances behind a load balancer (apply --local runs either)",
    )
    init.add_argument("--name", help="deployment name (default: from the model's name)")
    init.add_argument("--region", default="us-east-1")
    init.add_argument("--config", metavar="FILE", help="the model's config.json, for a Hub id not in the local cache")
    init.add_argument(
        "--image-uri", metavar="URI", help="an LLM on SageMaker: the vllm-neuron wrapper image in your ECR"
    )
    init.add_argument("--out", metavar="FILE", help="where to write the spec (default NAME.yaml here)")
    init.add_argument("--force", action="store_true", help="replace --out if it exists")
    init.set_defaults(handler="init:cmd_init")

    validate = commands.add_parser("validate", help="check specs: schema, instance, SDK, parallel layout, memory fit")
    validate.add_argument("specs", nargs="+", metavar="SPEC")
    validate.add_argument("--json", action="store_true", help="machine-readable findings")
    validate.set_defaults(handler="check:cmd_validate")

    plan = commands.add_parser("plan", help="checks, cost per hour, and every AWS request apply would send (offline)")
    plan.add_argument("spec", metavar="SPEC")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument(
        "--out",
        metavar="FILE_OR_S3_URI",
        help="save the plan (carries the spec's hash; a changed spec makes it stale); apply --plan checks it",
    )
    plan.add_argument(
        "--state",
        metavar="FILE",
        help="diff against this state (default $NEURONDEPLOY_STATE or ~/.neurondeploy/state.db)",
    )
    plan.add_argument(
        "--check",
        action="store_true",
        help="also read the account (read-only): each before-apply step done or missing, and what apply's preflight "
        "would refuse; exit 2 when something is missing",
    )
    _image_options(plan)  # as apply gets them, so the diff against state compares like with like
    plan.set_defaults(handler="check:cmd_plan")

    size = commands.add_parser("size", help="which instances and TP degrees fit a model, cheapest first")
    size.add_argument(
        "--model", metavar="DIR", help="Hugging Face model directory (reads config.json and safetensors headers)"
    )
    size.add_argument("--layers", type=int)
    size.add_argument("--hidden", type=int, help="hidden size (d_model)")
    size.add_argument("--heads", type=int, help="attention heads")
    size.add_argument("--kv-heads", type=int, help="key/value heads (GQA); default = heads")
    size.add_argument("--vocab", type=int, default=32000)
    size.add_argument("--intermediate", type=int, help="MLP width; default 4 × hidden")
    size.add_argument("--params", type=int, help="exact parameter count, if known")
    size.add_argument("--gated-mlp", action="store_true", help="SwiGLU MLP with 3 matrices (Llama, Mistral, Qwen)")
    size.add_argument(
        "--head-dim", type=int, help="attention head width when the config sets it; default hidden / heads"
    )
    size.add_argument("--experts", type=int, help="MoE: routed experts per layer (all resident)")
    size.add_argument("--experts-per-token", type=int, help="MoE: experts each token uses")
    size.add_argument("--expert-intermediate", type=int, help="MoE: one expert's MLP width; default --intermediate")
    size.add_argument("--tied-embeddings", action="store_true", help="output head shares the embedding matrix")
    size.add_argument(
        "--profile",
        default="chat",
        choices=["interactive", "chat", "throughput", "long-context"],
        help="the load to size for when --batch / --seq are not given (default chat: batch 4 × 4096 tokens)",
    )
    size.add_argument("--batch", type=int, help="concurrent sequences (default: the profile's)")
    size.add_argument(
        "--seq", type=int, help="sequence length (context) to hold in the KV cache (default: the profile's)"
    )
    size.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16", "fp8"])
    size.add_argument(
        "--quantization",
        default="none",
        choices=["none", "int8", "fp8"],
        help="weight-only quantization by the runtime (nxdi: int8, fp8; transformers-neuronx: int8)",
    )
    size.add_argument(
        "--backend",
        default="nxdi",
        choices=["nxdi", "transformers-neuronx", "trace"],
        help="serving runtime: decides legal TP degrees and head rules",
    )
    size.add_argument("--region", help="only instances offered in this region, at its prices where catalogued")
    size.add_argument("--all", action="store_true", help="every option, not only the 12 cheapest")
    size.add_argument(
        "--platform",
        default="ec2",
        choices=["ec2", "sagemaker"],
        help="sagemaker: the instances SageMaker hosts endpoints on, by their ml.* names and prices",
    )
    size.add_argument("--json", action="store_true")
    size.set_defaults(handler="check:cmd_size")

    compile_ = commands.add_parser(
        "compile", help="compile an inference spec's model into an artifact, one module per bucket, cached"
    )
    compile_.add_argument("spec", metavar="SPEC")
    compile_.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "neuron", "cpu"],
        help="auto: neuron when torch_neuronx imports, else the CPU fallback",
    )
    compile_.add_argument("--out", metavar="DIR", help="artifact directory (default artifacts/<name>)")
    compile_.add_argument(
        "--cache-dir", metavar="DIR", help="local cache (default $NEURONDEPLOY_CACHE_DIR or ~/.cache/neurondeploy)"
    )
    compile_.add_argument("--cache-s3", metavar="S3_URI", help="team cache shared through an S3 prefix")
    compile_.add_argument(
        "--json", action="store_true", help="print a JSON summary (artifact, cache hit per bucket, times)"
    )
    compile_.add_argument(
        "--remote",
        action="store_true",
        help="compile with the Neuron SDK in a SageMaker job (Neuron DLC) into the S3 compile cache, which apply "
        "reads; no job when the artifact is already there (--cache-s3 default: s3://neurondeploy-ACCOUNT-REGION/"
        "compile-cache)",
    )
    compile_.add_argument(
        "--instance-type",
        help="with --remote: the job's instance (default ml.trn1.2xlarge; for an LLM the smallest Neuron type whose "
        "host RAM and HBM fit the export); a CPU type (ml.c5.4xlarge ...) cross-compiles for the target",
    )
    compile_.add_argument("--no-wait", action="store_true", help="with --remote: start the job and return")
    compile_.add_argument(
        "--yes",
        action="store_true",
        help="with --remote: do not ask before starting a paid job (needed without a terminal)",
    )
    _state_options(compile_)
    compile_.set_defaults(handler="build:cmd_compile")

    serve = commands.add_parser(
        "serve",
        help="serve an artifact (or a spec, compiled from the cache) over the SageMaker contract; an LLM spec or "
        "causal-LM directory over the vLLM container's OpenAI API",
    )
    serve.add_argument("target", metavar="ARTIFACT_SPEC_OR_MODEL_DIR")
    serve.add_argument(
        "--artifact", metavar="DIR", help="with a spec: serve this compiled artifact instead of compiling"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 on instances)")
    serve.add_argument("--port", type=int, help="default serving.port (8080)")
    serve.add_argument(
        "--replicas", type=int, help="model replicas (default: one per NeuronCore group on Neuron, 1 on CPU)"
    )
    serve.add_argument("--backend", default="auto", choices=["auto", "neuron", "cpu"], help="when compiling a spec")
    serve.add_argument("--cache-dir", metavar="DIR")
    serve.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(handler="serve:cmd_serve")

    apply = commands.add_parser(
        "apply", help="apply a spec; --local: compile, serve on this machine, send a sample request"
    )
    apply.add_argument("spec", metavar="SPEC")
    apply.add_argument("--local", action="store_true", help="run on this machine: CPU compile and a loopback endpoint")
    apply.add_argument("--yes", action="store_true", help="do not ask before changing AWS (needed without a terminal)")
    apply.add_argument("--host", default="127.0.0.1")
    apply.add_argument("--port", type=int, default=8080)
    apply.add_argument("--backend", default="auto", choices=["auto", "neuron", "cpu"])
    apply.add_argument("--cache-dir", metavar="DIR")
    apply.add_argument("--out", metavar="DIR", help="artifact directory (default artifacts/<name>)")
    apply.add_argument("--artifact", metavar="DIR", help="an already compiled artifact to upload instead of compiling")
    apply.add_argument(
        "--cache-s3",
        metavar="S3_URI",
        help="where compile --remote left the Neuron artifact (default s3://neurondeploy-ACCOUNT-REGION/compile-cache)",
    )
    apply.add_argument(
        "--rollback",
        action="store_true",
        help="on failure, delete what this apply created (default: keep and record it)",
    )
    apply.add_argument(
        "--sequential",
        action="store_true",
        help="create one resource at a time (default: independent ones in parallel)",
    )
    _image_options(apply)
    apply.add_argument(
        "--plan",
        metavar="FILE_OR_S3_URI",
        help="apply only if this saved plan (plan --out) is of this spec "
        "and still what apply would send; refused if stale",
    )
    apply.add_argument(
        "--no-smoke",
        action="store_true",
        help="skip the smoke test (one request after the deploy, its answer checked against the model's at compile time)",
    )
    apply.add_argument(
        "--smoke-url",
        metavar="URL",
        help="EC2: send the smoke test's request here instead of the load balancer's name "
        "(an internal load balancer, reached through a tunnel)",
    )
    apply.add_argument("--json", action="store_true")
    _state_options(apply)
    apply.set_defaults(handler="apply:cmd_apply", local_handler="serve:cmd_apply_local")

    train = commands.add_parser(
        "train", help="run a training spec: a SageMaker job on Trn1, or --local with torchrun on this CPU"
    )
    train.add_argument("spec", metavar="SPEC")
    train.add_argument(
        "--local",
        action="store_true",
        help="run the entry script here with torchrun (gloo), the SageMaker contract set",
    )
    train.add_argument(
        "--processes", type=int, help="--local: processes torchrun starts (default: the spec's local_processes)"
    )
    train.add_argument(
        "--work-dir", metavar="DIR", help="--local: model, output, checkpoints (default .neurondeploy/train/<name>)"
    )
    train.add_argument(
        "--hp", action="append", default=[], metavar="KEY=VALUE", help="override a hyperparameter (repeatable)"
    )
    train.add_argument(
        "--no-wait", action="store_true", help="start the SageMaker job and return (follow it with logs/status)"
    )
    train.add_argument(
        "--yes", action="store_true", help="do not ask before starting a paid SageMaker job (needed without a terminal)"
    )
    train.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    _state_options(train)
    train.set_defaults(handler="train:cmd_train")

    data = commands.add_parser(
        "data", help="tokenize and pack a text corpus into a training channel's dataset, and upload it to its S3 prefix"
    )
    data.add_argument("spec", metavar="SPEC")
    data.add_argument(
        "--corpus",
        required=True,
        metavar="PATH",
        help='a .jsonl file ({"text": ...} per line), a .txt file (a document per line), or a directory of them',
    )
    data.add_argument(
        "--tokenizer", required=True, metavar="DIR", help="the model's tokenizer: its directory (or pkg://package/dir)"
    )
    data.add_argument("--channel", help="the input channel (default: the one with format: tokenized)")
    data.add_argument(
        "--out",
        metavar="DIR",
        help="the local dataset (default: the channel's local_path, else .neurondeploy/data/...)",
    )
    data.add_argument("--no-upload", action="store_true", help="write the local dataset only")
    data.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    data.set_defaults(handler="data:cmd_data")

    stop = commands.add_parser(
        "stop", help="stop a deployment's running SageMaker training job (checkpoints stay in S3)"
    )
    stop.add_argument("name", metavar="NAME")
    _state_options(stop)
    stop.set_defaults(handler="train:cmd_stop")

    logs = commands.add_parser("logs", help="a training job's CloudWatch logs (every host), optionally following them")
    logs.add_argument("name", metavar="NAME", help="deployment name (its latest job) or a training job name")
    logs.add_argument("--follow", action="store_true", help="keep printing until the job ends")
    logs.add_argument("--region", help="when the state has no record of NAME")
    _state_options(logs)
    logs.set_defaults(handler="train:cmd_logs")

    destroy = commands.add_parser(
        "destroy", help="delete everything a deployment created (state + tag sweep) and prove nothing is left"
    )
    destroy.add_argument("name", metavar="NAME")
    destroy.add_argument("--region", help="needed only when the state has no record of the deployment")
    destroy.add_argument("--yes", action="store_true", help="do not ask before deleting (needed without a terminal)")
    destroy.add_argument(
        "--keep-artifacts",
        action="store_true",
        help="keep the deployment's objects in the shared bucket (artifact, wheel, sources, flow logs); by default "
        "they go, every version, and a training job's output/ is kept",
    )
    _state_options(destroy)
    destroy.set_defaults(handler="deploy:cmd_destroy")

    import_ = commands.add_parser(
        "import", help="adopt a deployment that exists in AWS (another or a lost state made it) into this state"
    )
    import_.add_argument("name", metavar="NAME")
    import_.add_argument("--region", required=True, help="where the deployment lives")
    import_.add_argument(
        "--zone", action="append", default=[], metavar="HOSTED_ZONE_ID", help="hosted zone of its DNS records"
    )
    _state_options(import_)
    import_.set_defaults(handler="deploy:cmd_import")

    status = commands.add_parser(
        "status", help="a deployment's URL, health, $/hour, age and last change (or every deployment's)"
    )
    status.add_argument("name", metavar="NAME", nargs="?")
    status.add_argument("--resources", action="store_true", help="also list every resource and its id")
    status.add_argument("--json", action="store_true", help="everything, resources included, as JSON")
    _state_options(status)
    status.set_defaults(handler="deploy:cmd_status")

    drift = commands.add_parser("drift", help="what changed in AWS outside neurondeploy since it applied")
    drift.add_argument("name", metavar="NAME")
    drift.add_argument("--json", action="store_true")
    _state_options(drift)
    drift.set_defaults(handler="deploy:cmd_drift")

    unlock = commands.add_parser(
        "unlock", help="release a deployment's lock left by a killed apply (one whose holder still runs: confirmed)"
    )
    unlock.add_argument("name", metavar="NAME")
    unlock.add_argument("--yes", action="store_true", help="release a lock whose holder still runs without asking")
    _state_options(unlock)
    unlock.set_defaults(handler="deploy:cmd_unlock")

    invoke = commands.add_parser(
        "invoke", help="send one request to an endpoint: URL, sagemaker:NAME, a spec file or a deployment name"
    )
    invoke.add_argument("target", metavar="TARGET")
    body = invoke.add_mutually_exclusive_group(required=True)
    body.add_argument("--data", help='JSON body, @file, or plain text sent as {"inputs": text}')
    body.add_argument(
        "--chat", metavar="TEXT", help="LLM endpoints: a chat completion (OpenAI shape), printed as it streams"
    )
    invoke.add_argument("--max-tokens", type=int, help="--chat: most tokens to generate")
    invoke.add_argument("--temperature", type=float, help="--chat: 0 for greedy (default: the server's, 1.0)")
    invoke.add_argument("--no-stream", action="store_true", help="--chat: ask for the whole answer at once")
    invoke.add_argument(
        "--target",
        dest="where",
        choices=["local", "cloud"],
        help="a spec or name: local (its apply --local endpoint, the default) or cloud (its endpoint in AWS)",
    )
    invoke.add_argument("--region", help="for SageMaker endpoints (default: the spec's, or the AWS default)")
    invoke.add_argument(
        "--out", metavar="FILE", help="write the whole answer to FILE as JSON (a one-line summary on stderr)"
    )
    invoke.add_argument(
        "--state", metavar="FILE_OR_S3_URI", help="where to look up a deployment name (default as apply)"
    )
    invoke.set_defaults(handler="invoke:cmd_invoke")

    cache = commands.add_parser("cache", help="list, remove or prune compiled entries in the local cache")
    cache.add_argument("--cache-dir", metavar="DIR")
    cache_commands = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    cache_ls = cache_commands.add_parser("ls", help="entries, newest first")
    cache_ls.add_argument("--json", action="store_true")
    cache_rm = cache_commands.add_parser("rm", help="remove entries by key or key prefix (6+ characters)")
    cache_rm.add_argument("key")
    cache_commands.add_parser(
        "verify", help="hash every file of every entry (lookups trust untouched files); drop corrupt ones"
    )
    cache_prune = cache_commands.add_parser("prune", help="drop entries unused for a while, then least recently used")
    cache_prune.add_argument("--older-than-days", type=float)
    cache_prune.add_argument("--max-gib", type=float)
    cache.set_defaults(handler="build:cmd_cache")

    schema = commands.add_parser("schema", help="JSON schema of a spec kind, with every field described")
    schema.add_argument("kind", choices=["inference", "training"])
    schema.set_defaults(handler="check:cmd_schema")
    return parser


def _command(args: argparse.Namespace):
    """The function of the command ``args`` names ("module:function" in this package), imported now."""
    where = args.local_handler if getattr(args, "local", False) and hasattr(args, "local_handler") else args.handler
    module, function = where.split(":")
    return getattr(importlib.import_module(f"neurondeploy.cli.{module}"), function)


# What the bare package leaves out on purpose (pyproject's extras): planning and AWS need none of these.
EXTRA_OF_OPTIONAL_MODULE = {"torch": "compile", "transformers": "compile", "tokenizers": "compile", "litserve": "bench"}


_python_showwarning = warnings.showwarning


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Our warnings as one line in our words; anything else as Python shows it."""
    if issubclass(category, NeurondeployWarning):
        print(f"warning: {message}", file=file or sys.stderr)
        return
    _python_showwarning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = show_warning
    # pydantic looks for plugins among every installed distribution's entry points the first time it builds a
    # validator (~10-20 ms a command); the CLI uses none. A user who wants one sets the variable themselves.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _command(args)(args)
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
        if is_disk_full(exc):  # a write no place above named (those raise DiskFull): the OS's words, and the file
            where = exc.filename or "a file this command writes"
            print(
                f"error: no space left on the device of {where} ({exc.strerror}) (fix: free space there)",
                file=sys.stderr,
            )
            return DiskFull.exit_code
        missing = (getattr(exc, "name", None) or "").partition(".")[0] if isinstance(exc, ImportError) else ""
        extra = EXTRA_OF_OPTIONAL_MODULE.get(missing)
        if extra:
            print(
                f"error: neurondeploy {args.command} needs {exc.name}, which the bare package does not install "
                f"(fix: pip install 'neurondeploy[{extra}]')",
                file=sys.stderr,
            )
            return 1
        print(
            f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback and report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
