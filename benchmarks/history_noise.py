"""This machine's run-to-run spread, as the history study's noise (benchmarks/history_study.py).

    python benchmarks/history_noise.py --runs 10 --results-dir results/history-noise \
        --out benchmarks/history_noise.csv

Runs the grid benchmarks/history_noise.toml RUNS times, each run its own `python -m suite run` (fresh
worker processes, as a nightly job's runs are), then writes one CSV row per (run, case) and per (run,
series):

    kind=time      the case's log(time_s / its median over the runs): a point's deviation in a history
    kind=time_min  the same of its fastest call (time_min_s)
    kind=level_time, level_time_min   the run's median deviation over its cases: the whole machine's
                   shift during that run (a busy spell moves every case of a run together)
    kind=exponent  the series' fitted time exponent in n minus its median over the runs

`--reuse` reads runs already in --results-dir (named history-noise-K) instead of measuring again (their
journals hold every call's time; their tables are rebuilt from them):

    python benchmarks/history_noise.py --reuse --results-dir results/history-noise

Every figure comes from the runs' own rows; nothing is made up here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
GRID = HERE / "history_noise.toml"


def measure(results_dir: Path, runs: int, reuse: bool, grid: Path = GRID) -> list[Path]:
    folders = []
    for k in range(runs):
        folder = results_dir / f"history-noise-{k}"
        if not (reuse and (folder / "plan.json").is_file()):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "suite",
                    "run",
                    "--grid",
                    str(grid),
                    "--run-id",
                    folder.name,
                    "--results-dir",
                    str(results_dir),
                    "--no-report",
                ],
                check=True,
            )
        folders.append(folder)
    return folders


def deviations(folders: list[Path]) -> pd.DataFrame:
    from suite.analyse.exponents import all_exponents
    from suite.store.rundir import RunDir

    frames, fits = [], []
    for k, folder in enumerate(folders):
        frame = RunDir.resolve(str(folder), folder.parent).read_table()  # NB: the table rebuilt from a journal
        frames.append(frame.assign(run=k))
        exps = all_exponents(frame)
        exps = exps[(exps["axis"] == "seq_len") & (exps["metric"] == "time")]
        fits.append(exps.assign(run=k, case=exps["variant"] + "/" + exps["series"]))
    data = pd.concat(frames, ignore_index=True)
    data = data[data["status"] == "ok"]
    data["case"] = data["variant"] + "/" + data["impl"] + " n=" + data["seq_len"].astype(str)
    parts = []
    for column, kind in (("time_s", "time"), ("time_min_s", "time_min")):
        logs = np.log(data[column].astype(float))
        one = data[["run", "case"]].assign(value=logs - logs.groupby(data["case"]).transform("median"), kind=kind)
        level = one.groupby("run", as_index=False)["value"].median().assign(kind=f"level_{kind}", case="")
        parts += [one, level]
    slopes = pd.concat(fits, ignore_index=True).dropna(subset=["slope"])
    slopes["value"] = slopes["slope"] - slopes.groupby("case")["slope"].transform("median")
    exponent = slopes[["run", "case", "value"]].assign(kind="exponent")
    return pd.concat([*parts, exponent], ignore_index=True)[["kind", "run", "case", "value"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--results-dir", default="results/history-noise")
    parser.add_argument("--out", default=str(HERE / "history_noise.csv"))
    parser.add_argument("--reuse", action="store_true", help="read the runs already measured")
    parser.add_argument(
        "--grid",
        default=str(GRID),
        help="the grid each run measures (history_steady.toml: the same cases, each timed longer in three processes)",
    )
    args = parser.parse_args()
    folders = measure(Path(args.results_dir), args.runs, args.reuse, Path(args.grid))
    table = deviations(folders)
    from suite.store import atomic

    atomic.write_text(Path(args.out), table.to_csv(index=False))
    for kind, group in table.groupby("kind"):
        spread = group["value"].abs()
        print(
            f"{kind:>8}: {len(group)} deviations, median |dev| {spread.median():.4f}, 90th pct "
            f"{spread.quantile(0.9):.4f}, "
            f"max {spread.max():.4f}"
        )
    print(f"table: {args.out}")


if __name__ == "__main__":
    main()
