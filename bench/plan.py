"""How long `neurondeploy plan` takes per template, as a user runs it (a whole new process each time).

Per template: wall time of `plan --json` (best and median of N runs, after one untimed run that fills the
per-machine caches: .pyc files and the botocore shapes a plan validates against), the child's CPU time, the
number of resources and requests, and the median as a ratio to a bare `python -c pass` measured in the same run.
Goal (issue 12): < 0.35 s wall per plan on this 2-core machine, with no AWS credentials set.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 7
GOAL_S = 0.35
TEMPLATES = sorted((Path(__file__).parents[1] / "templates").glob("*.yaml"))
ENV = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}


def run(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, its stdout)."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, env=ENV)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(command)} failed")
        out.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, out.read().decode()


def main() -> None:
    baseline = statistics.median(run([sys.executable, "-c", "pass"])[0] for _ in range(RUNS))
    print(f"python start-up baseline (median of {RUNS}): {baseline * 1000:.0f} ms; goal {GOAL_S:.2f} s per plan")
    header = f"{'template':38} {'best s':>7} {'median s':>9} {'cpu s':>6} {'x python':>9} {'resources':>9} {'requests':>8}  goal"
    print(header)
    for template in TEMPLATES:
        command = [sys.executable, "-m", "neurondeploy.cli", "plan", str(template), "--json"]
        run(command)  # fills the caches a user's second plan finds
        walls, cpus, output = [], [], ""
        for _ in range(RUNS):
            wall, cpu, output = run(command)
            walls.append(wall)
            cpus.append(cpu)
        plan = json.loads(output)
        median = statistics.median(walls)
        print(
            f"{template.name:38} {min(walls):7.2f} {median:9.2f} {statistics.median(cpus):6.2f} "
            f"{median / baseline:8.1f}x {len(plan['resources']):9d} {plan['request_count']:8d}  "
            f"{'met' if median < GOAL_S else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
