"""Two runs of one grid on two allocator settings: the spread between each case's processes, by the size of
its output, and the second's time over the first's (docs/performance.md (21)).

    python benchmarks/allocator_compare.py results/RETAIN results/JEMALLOC

RETAIN and JEMALLOC: two `python -m suite run --grid full` runs, the second with `allocator = "jemalloc"`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from suite.store.rundir import RunDir  # noqa: E402

BANDS = ((0, 8), (8, 32), (32, None))  # the output's size, MB (B·H·n·d float32)


def cases(folder: str) -> pd.DataFrame:
    table = RunDir(Path(folder)).read_table()
    table = table[(table["status"] == "ok") & (table["device"] == "cpu")].copy()
    table["span"] = table["replicate_times_s"].map(
        lambda t: max(t) / min(t) - 1 if t is not None and len(t) > 1 else np.nan
    )
    table["out_mb"] = table["batch"] * table["num_heads"] * table["seq_len"] * table["head_dim"] * 4 / 2**20
    return table.set_index("case_id")


def band(table: pd.DataFrame, low: float, high: float | None) -> pd.DataFrame:
    return table[(table["out_mb"] >= low) & ((table["out_mb"] < high) if high else True)]


def main(first: str, second: str) -> None:
    a, b = cases(first), cases(second)
    common = a.index.intersection(b.index)
    ratio = b.loc[common, "time_s"] / a.loc[common, "time_s"]
    print(
        f"| output | spread between processes, median (> 10%, > 20%): {Path(first).name} | the same: "
        f"{Path(second).name} "
        f"| time, second over first: median [IQR] |\n|---|---|---|---|"
    )
    for low, high in BANDS:
        cells = []
        for table in (a, b):
            spans = band(table, low, high)["span"].dropna()
            cells.append(f"{100 * spans.median():.1f}% of {len(spans)} ({(spans > 0.1).sum()}, {(spans > 0.2).sum()})")
        r = ratio[band(a.loc[common], low, high).index]
        label = f"{low}–{high} MB" if high else f"{low} MB and more"
        print(
            f"| {label} | {cells[0]} | {cells[1]} | {r.median():.3f} [{r.quantile(0.25):.3f}, {r.quantile(0.75):.3f}] |"
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
