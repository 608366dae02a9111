"""`systemctl` for a replayed boot: the few verbs a boot script uses, on the units under the sandbox root.

Run as a script (stdlib only) with ``NEURONDEPLOY_REPLAY_ROOT`` set. ``daemon-reload`` reads nothing (units are read
when started); ``enable`` links the unit into its target's ``.wants`` directory as systemd does; ``start`` (and
``enable --now``) starts ``ExecStart`` in its own session with systemd's default PATH plus the unit's
``Environment=`` lines (quotes and ``%%`` as systemd reads them) and ``EnvironmentFile=`` files (as systemd parses
them), its output in ``<root>/var/log/<unit>.log`` and its pid in ``<root>/run/<unit>.pid``; ``is-active`` and ``stop`` use that pid. Resource limits and sandboxing directives
(LimitNOFILE, NoNewPrivileges, PrivateTmp) are not applied: they are reported as ignored.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
UNIT_DIR = "etc/systemd/system"
IGNORED = ("LimitNOFILE", "NoNewPrivileges", "PrivateTmp")
PASSED = ("NEURONDEPLOY_CPU_STANDIN", "LANG")  # the replay's announced CPU stand-in reaches the service


def _root() -> Path:
    return Path(os.environ["NEURONDEPLOY_REPLAY_ROOT"])


def _unescape(text: str) -> str:
    return text.replace("%%", "%")


def read_unit(path: Path) -> dict[str, list[str]]:
    """``key -> values`` of a unit file (every section; repeated keys kept in order)."""
    values: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")) or "=" not in line:
            continue
        key, value = line.split("=", 1)
        values.setdefault(key.strip(), []).append(value.strip())
    return values


def read_environment_file(text: str) -> dict[str, str]:
    """Assignments of an ``EnvironmentFile=`` as systemd reads them (systemd.exec(5), EnvironmentFile=): lines
    starting with ``#`` or ``;`` are comments, a line without ``=`` is skipped; whitespace around keys and around
    unquoted values is dropped; unquoted, a backslash keeps the next character (a newline: continues the line);
    single quotes keep everything up to the next one; in double quotes a backslash before one of ``" \\ ` $``
    keeps that character, before a newline drops both, before anything else stays; quoted parts may span lines
    and join what follows them."""
    env: dict[str, str] = {}
    state, key, value, blanks = "pre-key", "", "", ""
    for char in text:
        if state == "pre-key":
            if char in "#;":
                state = "comment"
            elif not char.isspace():
                state, key = "key", char
        elif state == "comment":
            if char == "\n":
                state = "pre-key"
        elif state == "key":
            if char == "\n":
                state = "pre-key"
            elif char == "=":
                state, key, value, blanks = "pre-value", key.strip(), "", ""
            else:
                key += char
        elif state in ("pre-value", "value"):
            if char == "\n":
                env[key], state = value, "pre-key"
            elif char in "'\"" and state == "pre-value":
                state = "single" if char == "'" else "double"
            elif char == "\\":
                state, value, blanks = ("value-escape", value + blanks, "")
            elif char in " \t\r":
                blanks += char if state == "value" else ""
            else:
                state, value, blanks = "value", value + blanks + char, ""
        elif state == "value-escape":
            state, value = "value", value + ("" if char == "\n" else char)
        elif state == "single":
            state, value = ("pre-value", value) if char == "'" else ("single", value + char)
        elif state == "double":
            if char == '"':
                state = "pre-value"
            elif char == "\\":
                state = "double-escape"
            else:
                value += char
        elif state == "double-escape":
            state = "double"
            if char in '"\\`$':
                value += char
            elif char != "\n":
                value += "\\" + char
    if state not in ("pre-key", "comment", "key"):
        env[key] = value  # the last assignment, with no newline after it or left open
    return env


def service_environment(unit: dict[str, list[str]]) -> dict[str, str]:
    env = {"PATH": SYSTEMD_PATH}
    env.update({key: os.environ[key] for key in PASSED if key in os.environ})
    for line in unit.get("Environment", []):
        for item in shlex.split(line):
            key, _, value = item.partition("=")
            env[key] = _unescape(value)
    for name in unit.get("EnvironmentFile", []):
        optional = name.startswith("-")
        path = Path(name.removeprefix("-"))
        if path.is_file():
            env.update(read_environment_file(path.read_text()))
        elif not optional:
            raise SystemExit(f"replay systemctl: EnvironmentFile {path} is missing (systemd fails the unit)")
    return env


def _pid_file(name: str) -> Path:
    return _root() / "run" / f"{name}.pid"


def _running(name: str) -> int | None:
    try:
        pid = int(_pid_file(name).read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def start(name: str) -> int:
    path = _root() / UNIT_DIR / name
    if not path.is_file():
        print(f"Failed to start {name}: Unit {name} not found.", file=sys.stderr)
        return 5
    if _running(name):
        return 0
    unit = read_unit(path)
    ignored = [key for key in IGNORED if key in unit]
    if ignored:
        print(f"replay systemctl: {name}: not applied here: {', '.join(ignored)}", file=sys.stderr)
    command = [_unescape(part) for part in shlex.split(unit["ExecStart"][-1])]
    log = _root() / "var" / "log" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    _pid_file(name).parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle:
        process = subprocess.Popen(
            command,
            cwd=unit.get("WorkingDirectory", ["/"])[-1],
            env=service_environment(unit),
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _pid_file(name).write_text(str(process.pid))
    print(f"replay systemctl: started {name} (pid {process.pid}): {shlex.join(command)}", file=sys.stderr)
    return 0


def enable(name: str) -> int:
    path = _root() / UNIT_DIR / name
    if not path.is_file():
        print(f"Failed to enable unit: Unit file {name} does not exist.", file=sys.stderr)
        return 1
    for target in read_unit(path).get("WantedBy", []):
        wants = _root() / UNIT_DIR / f"{target}.wants"
        wants.mkdir(parents=True, exist_ok=True)
        link = wants / name
        if not link.exists():
            link.symlink_to(path)
    return 0


def stop(name: str) -> int:
    pid = _running(name)
    if pid:
        os.killpg(pid, signal.SIGTERM)
    return 0


def main(argv: list[str]) -> int:
    now = "--now" in argv
    words = [word for word in argv if not word.startswith("--")]
    if not words:
        print("replay systemctl: no verb", file=sys.stderr)
        return 1
    verb, names = words[0], words[1:]
    if verb == "daemon-reload":
        return 0
    if verb == "enable":
        return max([enable(n) for n in names] + [start(n) for n in names if now] + [0])
    if verb in ("start", "restart"):
        return max([start(n) for n in names] + [0])
    if verb == "stop":
        return max([stop(n) for n in names] + [0])
    if verb == "is-active":
        return 0 if all(_running(n) for n in names) else 3
    print(f"replay systemctl: {verb} is not supported here", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
