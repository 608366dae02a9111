"""How long `neurondeploy plan` takes per template, as a user runs it (a whole new process each time).

Prints, per template: wall time of `plan --json` (best and median of N runs), the number of resources and
requests, and the share spent before the first line of our code runs (`python -c pass` as the baseline).
Goal: < 1 s wall per plan on a 2-core machine, with no AWS credentials set.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 5
TEMPLATES = sorted((Path(__file__).parents[1] / "templates").glob("*.yaml"))
ENV = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}


def wall(command: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, check=True)
    return time.perf_counter() - start, result.stdout


def main() -> None:
    baseline = min(wall([sys.executable, "-c", "pass"])[0] for _ in range(RUNS))
    print(f"python start-up baseline: {baseline * 1000:.0f} ms")
    print(f"{'template':40} {'best s':>7} {'median s':>9} {'resources':>9} {'requests':>8} {'vs 1 s goal':>11}")
    for template in TEMPLATES:
        timings, output = [], ""
        for _ in range(RUNS):
            elapsed, output = wall([sys.executable, "-m", "neurondeploy.cli", "plan", str(template), "--json"])
            timings.append(elapsed)
        plan = json.loads(output)
        best, median = min(timings), statistics.median(timings)
        print(
            f"{template.name:40} {best:7.2f} {median:9.2f} {len(plan['resources']):9d} {plan['request_count']:8d} {median / 1.0:10.2f}x"
        )


if __name__ == "__main__":
    main()
