"""Whether a case's own process tells its gathers' rate: random/native's forward (B = 1, H = 8, d = 64, float32)
and the gather probe (suite.machine.gathers) timed in the same fresh process, interleaved, at a few lengths, in
each of several processes (one thread, the workers' allocator). Were the two to move together from process to
process, a probe taken beside each case would fit its series as the plant's own probe does in the planted study
(benchmarks/gather_study.py: an n^2 of 10% caught in 99% with it, 87% with another process's).

    python benchmarks/gather_same_process.py [--runs 14] [--out benchmarks/gather_same_process.json]

Writes {"host": ..., "runs": [{"case": {n: s a call}, "probe": {n: ns a pair}}, ...]}, each the fastest of 5
interleaved rounds, and prints each length's range over the processes and the correlation between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = (8192, 32768, 65536)
ONE = f"""
import json, sys, torch
torch.set_num_threads(1)
from suite.machine import gathers, timing
from suite.plan.case import Case
from suite.run.measurement.inputs import build, inputs
lengths = {LENGTHS!r}
qkv = gathers.tables(lengths[-1], "cpu")
probe = {{n: gathers.call(n, "cpu", qkv) for n in lengths}}
cases = {{}}
for n in lengths:
    case = Case("random", "native", "cpu", "float32", "fwd", 1, n, 8, 8, 64, False)
    cases[n] = build(case, *inputs(case))[0]
out = {{"case": {{n: [] for n in lengths}}, "probe": {{n: [] for n in lengths}}}}
for _ in range(5):
    for n in lengths:
        out["case"][n].append(min(timing.time_cpu(cases[n], 0.05, 50, 1, 1)))
        pairs = gathers.HEADS * n * gathers.KEYS
        out["probe"][n].append(min(timing.time_cpu(probe[n], 0.05, 50, 1, 1)) / pairs * 1e9)
json.dump({{k: {{n: min(v) for n, v in d.items()}} for k, d in out.items()}}, sys.stdout)
"""


def main() -> None:
    from suite.machine.allocator import environment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=14)
    parser.add_argument("--out", default=str(Path(__file__).with_name("gather_same_process.json")))
    args = parser.parse_args()
    env = {**os.environ, **environment("auto"), "PYTHONPATH": str(ROOT)}
    runs = []
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, "-c", ONE], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout))
    for n in map(str, LENGTHS):
        case, probe = (np.array([r[k][n] for r in runs]) for k in ("case", "probe"))
        print(
            f"n = {n}: case range +{case.max() / case.min() - 1:.0%}, probe range "
            f"+{probe.max() / probe.min() - 1:.0%}, "
            f"correlation {np.corrcoef(case, probe)[0, 1]:.2f}"
        )
    host = {
        "processor": next(
            (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), ""
        ),
        "allocator": env.get("LD_PRELOAD", "default"),
    }
    Path(args.out).write_text(json.dumps({"host": host, "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
