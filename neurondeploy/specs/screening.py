"""What a spec value may carry towards AWS: no control characters, no credential in clear.

Every value a spec sends somewhere (container and job environments, hyperparameters, tags) passes through
:func:`screen_value`, so the rules live once:

- **Control characters** (C0, DEL, C1) are refused. A value reaches an EC2 boot script run as root, a systemd unit,
  HTTP headers and command lines; a newline there ends a heredoc or adds a directive, a NUL cuts a script. No AWS
  API needs one in these fields: tag values allow letters, digits, separators and ``_ . : / = + - @`` only
  (https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html), and SageMaker's Environment and
  HyperParameters values are ``[\\S\\s]*`` strings that a container passes to a process environment or argv.
- **Credentials** are refused as literals, by name (case-insensitive) and by value (the published token formats),
  because CreateModel / CreateTrainingJob show them to anyone with Describe*, and user data shows them to anyone
  with ec2:DescribeLaunchTemplateVersions. The fix is a reference the workload resolves through its role.
"""

from __future__ import annotations

import re

CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Names whose literal values are credentials. ``*_KEY`` counts (API keys, access keys, license keys), except the
# dataset-column and tokenizer names training scripts take as hyperparameters (text_key, pad_token, ...).
CREDENTIAL_NAME = re.compile(
    r"(^|[_\-.])(TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|APIKEY)$|[_\-.]PWD$",
    re.IGNORECASE,
)
NOT_A_CREDENTIAL_NAME = re.compile(
    r"(^|_)(PAD|EOS|BOS|UNK|SEP|CLS|MASK|SPECIAL|START|END|STOP|DECODER_START)_TOKEN$"
    r"|(^|_)(TEXT|LABELS?|INPUTS?|TARGETS?|IMAGE|AUDIO|SORT|COLUMN|FIELD|PROMPT|RESPONSE|DATASET_TEXT)_KEY$",
    re.IGNORECASE,
)
# Published token formats: each matched anywhere in a value, under any name.
CREDENTIAL_VALUES: dict[str, re.Pattern[str]] = {
    # https://huggingface.co/docs/hub/security-tokens (hf_ + 34 characters)
    "a Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    # https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids
    "an AWS access key id": re.compile(r"\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    # https://github.blog/engineering/platform-security/behind-githubs-new-authentication-token-formats/
    "a GitHub token": re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    # https://docs.gitlab.com/security/tokens/#token-prefixes
    "a GitLab token": re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    # OpenAI and Anthropic API keys (sk-..., sk-proj-..., sk-ant-...)
    "an API secret key": re.compile(r"\bsk-[A-Za-z0-9_\-]{20,}"),
    # https://api.slack.com/concepts/token-types
    "a Slack token": re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    # RFC 7468 private keys
    "a private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    # RFC 3986 userinfo with a password: scheme://user:password@host
    "a password inside a URL": re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@"),
    # RFC 7519 JSON Web Tokens: two base64url JSON objects ({"...) and a signature
    "a JSON Web Token": re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),
}


def control_character_problem(value: str) -> str | None:
    """What is wrong with a value holding a control character, or None."""
    found = CONTROL_CHARACTERS.search(value)
    if found is None:
        return None
    return f"holds the control character {found.group()!r} at position {found.start()}"


def credential_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` looks like a credential given in clear, or None. An empty value is not a credential."""
    if not value:
        return None
    for what, pattern in CREDENTIAL_VALUES.items():
        if pattern.search(value):
            return f"its value looks like {what}"
    if CREDENTIAL_NAME.search(name) and not NOT_A_CREDENTIAL_NAME.search(name):
        return "its name is a credential's name"
    return None


def screen_value(where: str, name: str, value: str, fix: str) -> None:
    """Refuse a value (``name`` under ``where``, e.g. ``environment``) that holds a control character or a
    credential; ``fix`` says how to give a credential instead. Raises ValueError with one line."""
    control = control_character_problem(name) or control_character_problem(value)
    if control:
        raise ValueError(
            f"{where} {name!r} {control}; values sent to AWS reach shells, unit files and headers "
            "(fix: write it on one line without control characters)"
        )
    credential = credential_problem(name, value)
    if credential:
        raise ValueError(
            f"{where} {name} looks like a credential given as a literal value ({credential}), which requests, "
            f"plans and state would carry (fix: {fix})"
        )
