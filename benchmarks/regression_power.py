"""How small a slowdown does `suite compare` catch here, and how often does it cry wolf?

    python -m suite run --grid benchmarks/power.toml --run-id power --no-report
    python benchmarks/regression_power.py results/power

From a run whose cases were timed in many processes (≥ 6), draws disjoint 3-vs-3 process sets
(the default gate's replicates) many times: with no change (A/A: the false-alarm rate per case)
and with one case's new timings multiplied by 1 + s (power against s, the rest of the grid
unchanged, BH over the whole grid as in a real comparison). Prints the smallest s detected in
≥ 95% of draws, for the median case and for the noisiest.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from suite import compare, results

DRAWS = 200
SLOWDOWNS = (0.02, 0.04, 0.05, 0.06, 0.07, 0.08, 0.10, 0.12, 0.15, 0.20, 0.30)


def frame_of(template: pd.DataFrame, values: dict[str, np.ndarray]) -> pd.DataFrame:
    out = template.copy()
    out["replicate_times_s"] = [list(values[c]) for c in out["case_id"]]
    out["samples"] = out["replicate_times_s"]
    out["time_s"] = [float(np.median(values[c])) for c in out["case_id"]]
    return out


def main(run_dir: str) -> None:
    frame = results.read(run_dir)
    frame = frame[frame["status"] == "ok"].reset_index(drop=True)
    noise = {row["case_id"]: np.asarray(row["replicate_times_s"]) for _, row in frame.iterrows()}
    per = min(len(v) for v in noise.values())
    assert per >= 6, f"need ≥ 6 processes per case, found {per}"
    rng = np.random.default_rng(0)
    cv = {c: v.std(ddof=1) / v.mean() for c, v in noise.items()}
    print(f"{len(noise)} cases, {per} processes each; between-process CV: median {np.median(list(cv.values())):.2%},"
          f" max {max(cv.values()):.2%}")

    def draw():
        split = {c: rng.permutation(v) for c, v in noise.items()}
        return {c: v[:3] for c, v in split.items()}, {c: v[3:6] for c, v in split.items()}

    alarms = 0
    for _ in range(DRAWS):
        base, new = draw()
        table = compare.cases(frame_of(frame, base), frame_of(frame, new))
        alarms += int(table["status"].isin(["slower", "faster"]).sum())
    print(f"A/A: {alarms} false alarms in {DRAWS * len(noise)} case comparisons "
          f"({alarms / (DRAWS * len(noise)):.3%})")

    detected = {s: {} for s in SLOWDOWNS}
    for s in SLOWDOWNS:
        for case in noise:
            hits = 0
            for _ in range(DRAWS // 4):
                base, new = draw()
                new[case] = new[case] * (1 + s)
                table = compare.cases(frame_of(frame, base), frame_of(frame, new)).set_index("case_id")
                hits += table.loc[case, "status"] == "slower"
            detected[s][case] = hits / (DRAWS // 4)
    rates = pd.DataFrame(detected)
    print("detection rate by slowdown (rows: cases, by between-process CV)")
    rates.insert(0, "cv", pd.Series(cv))
    labels = frame.set_index("case_id").apply(lambda r: f"{r['variant']}/{r['impl']} n={r['seq_len']}", axis=1)
    rates.index = labels[rates.index]
    print(rates.sort_values("cv").to_string(float_format=lambda x: f"{x:.2f}"))
    for name, row in (("median case", rates[list(SLOWDOWNS)].median()), ("worst case", rates[list(SLOWDOWNS)].min())):
        found = [s for s in SLOWDOWNS if row[s] >= 0.95]
        print(f"smallest slowdown detected at 95% power, {name}: {found[0]:.0%}" if found else
              f"{name}: not detected at 95% power up to {SLOWDOWNS[-1]:.0%}")


if __name__ == "__main__":
    main(sys.argv[1])
