"""Runs of the gather probe (suite.machine.gathers), each in a fresh process as a run's bandwidth worker
makes it (one thread, the workers' allocator), for the planted study of the gathers' term
(benchmarks/gather_study.py): how much the probe's figure at a length differs from one process to another.

    python benchmarks/gather_probes.py [--runs 9] [--longest N] [--out tests/data/gather-probes/probes.json]

Writes {"host": ..., "runs": [each run's record, as bandwidth.json's `gathers`]}. The study and
tests/test_suite/analyse/test_gathers.py read the stored sets in tests/data/gather-probes/ (its README).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE = """
import json, sys, torch
torch.set_num_threads(1)
from suite.machine import gathers, timing
json.dump(gathers.measure(timing.time_cpu, "cpu", 1, int(sys.argv[1]) if len(sys.argv) > 1 else None), sys.stdout)
"""


def main() -> None:
    from suite.machine.allocator import environment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument(
        "--longest",
        type=int,
        default=None,
        help="the probe's longest length, as a run's longest case of random gathers (default 65536)",
    )
    parser.add_argument("--out", default=str(ROOT / "tests" / "data" / "gather-probes" / "probes.json"))
    args = parser.parse_args()
    env = {**os.environ, **environment("auto"), "PYTHONPATH": str(ROOT)}
    runs = []
    for i in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-c", ONE, *([str(args.longest)] if args.longest else [])],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout))
        print(f"run {i + 1}: " + " ".join(f"{v:.2f}" for v in runs[-1]["ns_per_pair"]), flush=True)
    host = {"machine": platform.machine(), "processor": _cpu_model(), "allocator": env.get("LD_PRELOAD", "default")}
    Path(args.out).write_text(json.dumps({"host": host, "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


if __name__ == "__main__":
    main()
