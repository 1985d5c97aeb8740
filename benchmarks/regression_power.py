"""How small a slowdown does `suite compare` catch on this machine, and how often does it cry wolf?

    for i in 1 2 3 4; do python -m suite run --grid benchmarks/power.toml --run-id power$i --no-report; done
    python benchmarks/regression_power.py results/power1 results/power2 results/power3 results/power4

Several runs of the same grid and code, one after another (each case timed in 5 processes, the
gate's default). Every ordered pair of distinct runs is an A/A comparison with the real noise
between processes *and* between runs: the share of case comparisons called slower or faster is
the false-alarm rate. For power, each case in turn gets its new-run timings multiplied by 1 + s
(the rest of the grid as measured), and the detection rate against s gives the smallest slowdown
caught in ≥ 95% of comparisons, for the median case and per case.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pandas as pd

from suite.analyse import regression as compare
from suite.store.rundir import RunDir

SLOWDOWNS = (0.05, 0.08, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50)


def label(row) -> str:
    return f"{row['variant']}/{row['impl']} n={row['seq_len']}"


def slowed(frame: pd.DataFrame, case_id: str, factor: float) -> pd.DataFrame:
    out = frame.copy()
    i = out.index[out["case_id"] == case_id][0]
    for col in ("replicate_times_s", "samples"):
        out.at[i, col] = np.asarray(out.at[i, col]) * factor
    out.at[i, "time_s"] = out.at[i, "time_s"] * factor
    return out


def main(run_dirs: list[str]) -> None:
    runs = [RunDir(d).read_table() for d in run_dirs]
    runs = [r[r["status"] == "ok"].reset_index(drop=True) for r in runs]
    ids = sorted(set.intersection(*(set(r["case_id"]) for r in runs)))
    runs = [r[r["case_id"].isin(ids)].reset_index(drop=True) for r in runs]
    names = {row["case_id"]: label(row) for _, row in runs[0].iterrows()}
    pairs = list(itertools.permutations(range(len(runs)), 2))
    print(f"{len(runs)} runs, {len(ids)} cases, {len(pairs)} ordered run pairs")

    medians = pd.DataFrame({i: r.set_index("case_id")["time_s"] for i, r in enumerate(runs)})
    drift = np.log(medians.div(medians.median(axis=1), axis=0))
    print("run-to-run spread of each case (max − min of its run medians, %):")
    for case_id in ids:
        spread = np.expm1(drift.loc[case_id].max() - drift.loc[case_id].min())
        print(f"  {names[case_id]:<40} {medians.loc[case_id].median() * 1e3:9.3f} ms  {spread:6.1%}")

    alarms = 0
    for a, b in pairs:
        table = compare.cases(runs[a], runs[b])
        alarms += int(table["status"].isin(["slower", "faster"]).sum())
    comparisons = len(pairs) * len(ids)
    print(f"A/A: {alarms} of {comparisons} case comparisons called changed ({alarms / comparisons:.2%})")

    rates = pd.DataFrame(index=[names[c] for c in ids], columns=SLOWDOWNS, dtype=float)
    for s in SLOWDOWNS:
        for case_id in ids:
            hits = 0
            for a, b in pairs:
                table = compare.cases(runs[a], slowed(runs[b], case_id, 1 + s)).set_index("case_id")
                hits += table.loc[case_id, "status"] == "slower"
            rates.loc[names[case_id], s] = hits / len(pairs)
    print("detection rate of a slowdown of one case (columns: slowdown)")
    print(rates.to_string(float_format=lambda x: f"{x:.2f}"))
    for name, row in (("the median case", rates.median()), ("every case", rates.min())):
        found = [s for s in SLOWDOWNS if row[s] >= 0.95]
        print(
            f"smallest slowdown caught in ≥ 95% of comparisons, {name}: "
            + (f"{found[0]:.0%}" if found else f"none up to {SLOWDOWNS[-1]:.0%}")
        )


if __name__ == "__main__":
    main(sys.argv[1:])
