"""Cross-process timing noise: the same cases in N fresh runs (each its own worker process).

    python benchmarks/noise.py [--runs 10] [--threads 1,2]

Prints, per case, thread count and number of process replicates per run, the coefficient of
variation of the runs' results (what a comparison between two runs sees) beside the mean
within-run spread. This is how the suite's
default settings (threads, min_run_time) were chosen; the figures are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

GRID = """
name = "noise"
[settings]
threads = 1
min_run_time_s = {min_run_time}
max_samples = 50
allocator = "{allocator}"
replicates = {replicates}
[defaults]
batch = [1]
num_heads = [8]
head_dim = [64]
[[block]]
variant = ["full"]
impl = ["sdpa"]
seq_len = [2048]
[[block]]
variant = ["sliding_window"]
impl = ["native"]
seq_len = [8192]
[[block]]
variant = ["linear"]
impl = ["native"]
seq_len = [16384]
[[block]]
variant = ["strided"]
impl = ["native"]
seq_len = [4096]
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--min-run-time", type=float, default=0.2)
    parser.add_argument("--allocator", default="retain")
    parser.add_argument("--replicates", default="1", help="comma-separated: process replicates per run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="noise-"))
    frames = []
    for threads, replicates in [(int(t), int(r)) for t in args.threads.split(",") for r in args.replicates.split(",")]:
        grid = work / f"noise-r{replicates}.toml"
        grid.write_text(GRID.format(min_run_time=args.min_run_time, allocator=args.allocator, replicates=replicates))
        for i in range(args.runs):
            run_id = f"t{threads}-r{replicates}-{i}"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "suite",
                    "run",
                    "--grid",
                    str(grid),
                    "--run-id",
                    run_id,
                    "--threads",
                    str(threads),
                    "--results-dir",
                    str(work),
                ],
                check=True,
                capture_output=True,
            )
            frame = pd.read_parquet(work / run_id / "results.parquet")
            frame["threads"], frame["replicates"], frame["run"] = threads, replicates, i
            frames.append(frame)
    data = pd.concat(frames)
    data["within_cv"] = data.samples.map(lambda s: statistics.stdev(s) / statistics.median(s) if len(s) > 1 else 0)
    print(f"{args.runs} fresh processes per setting, min_run_time {args.min_run_time}s, allocator {args.allocator}")
    for (threads, replicates, variant, impl, n), group in data.groupby(
        ["threads", "replicates", "variant", "impl", "seq_len"]
    ):
        medians = group.time_s
        cv = medians.std() / medians.mean()
        print(
            f"threads={threads} replicates={replicates} {variant}/{impl} n={n}: median "
            f"{medians.median() * 1e3:8.2f} ms, "
            f"cross-process CV {cv * 100:5.2f}%, within-run CV {group.within_cv.mean() * 100:5.2f}%, "
            f"range {medians.min() * 1e3:.2f}-{medians.max() * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    main()
