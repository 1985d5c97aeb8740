"""Does a freed tensor's memory come back without page faults? Per allocator setting (suite.machine.allocator).

Each setting runs in a fresh process (jemalloc must be preloaded as the process starts): for each size,
a tensor is made, filled and freed, with some small Python objects made after it as any real call makes
them; then five more times, counting the minor page faults and the time of each round.

    python benchmarks/heap_reuse.py [--sizes-mb 200 67 16] [--settings retain default jemalloc]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import torch
from suite.machine import allocator
mode, sizes = sys.argv[1], [int(s) for s in sys.argv[2:]]
setting = allocator.configure(mode)

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def round_(n):
    x = torch.empty(n)
    x.fill_(1.0)
    small = [object() for _ in range(1000)]  # noqa: F841  what a call allocates after its output
    del x

out = []
for mb in sizes:
    n = mb * 2**20 // 4
    round_(n)
    f0, t0 = faults(), time.perf_counter()
    for _ in range(5):
        round_(n)
    per_round_ms = 1e3 * (time.perf_counter() - t0) / 5
    out.append({"mb": mb, "faults_per_round": (faults() - f0) / 5, "ms_per_round": per_round_ms})
print(json.dumps({"setting": setting, "rounds": out}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[200, 67, 16])
    parser.add_argument("--settings", nargs="+", default=["retain", "default", "jemalloc"])
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from suite.machine import allocator

    print("| setting | size | page faults a round | ms a round |\n|---|---|---|---|")
    for mode in args.settings:
        try:
            env = {**os.environ, **allocator.environment(mode)}
        except ValueError as err:
            print(f"| {mode} | – | not run: {err} | |")
            continue
        done = subprocess.run(
            [sys.executable, "-c", CHILD, mode, *map(str, args.sizes_mb)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for r in result["rounds"]:
            print(
                f"| {result['setting']['allocator']} | {r['mb']} MB | {r['faults_per_round']:.0f} | "
                f"{r['ms_per_round']:.2f} |"
            )


if __name__ == "__main__":
    main()
