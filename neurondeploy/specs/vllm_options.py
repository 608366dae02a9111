"""vLLM server options given as ``SM_VLLM_<NAME>`` environment variables (``serving.sm_vllm`` turns each into
``--<name> value``): which of them a spec may set.

The port and host are SageMaker's or the unit's to decide (its health check probes them). vLLM's argument parser is
Python's argparse with abbreviations allowed (``allow_abbrev``, its default:
https://docs.python.org/3/library/argparse.html#allow-abbrev), so ``--por 9999`` is ``--port 9999``: a name that is
a prefix of a fixed option is the option. A value starting with ``-`` would be read as another option, not the value.
Stdlib only: the container's launcher imports it.
"""

from __future__ import annotations

PREFIX = "SM_VLLM_"
FIXED_OPTIONS = ("port", "host")


def option_name(key: str) -> str:
    """``SM_VLLM_MAX_MODEL_LEN`` -> ``max-model-len``."""
    return key[len(PREFIX) :].lower().replace("_", "-")


def sm_vllm_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` must not reach vLLM's command line, or None (keys without the prefix are not options)."""
    if not key.startswith(PREFIX):
        return None
    name = option_name(key)
    if not name:
        return f"{key} names no option"
    fixed = next((option for option in FIXED_OPTIONS if option.startswith(name)), None)
    if fixed:
        what = "is" if name == fixed else f"abbreviates --{fixed} (vLLM's parser takes abbreviations), so it is"
        return f"{key} {what} the server's --{fixed}, which the platform sets (its health check probes it)"
    if value.startswith("-"):
        return f"{key}'s value {value[:40]!r} starts with '-': vLLM would read it as another option, not the value"
    return None
