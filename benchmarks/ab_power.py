"""How small a slowdown does `suite ab` catch on this machine, and how often does it cry wolf?

    python -m suite ab --base-dir . --new-dir . --grid pr --device cpu --pairs 12 --run-id aa   # A/A, real kernels
    python benchmarks/ab_power.py results/aa [results/aa2 ...] --pairs 5 8 12 --trials 100
    python benchmarks/ab_power.py results/slow --drop-impl native   # a sweep whose native paths differed

An A/A sweep times the same code on both sides, so every difference it shows is noise: between
the processes of a pair, between blocks, and drift over the A, B, B, A order. From a sweep of P
pairs, each trial draws a subset of `--pairs` pairs (all cases share the draw, as in one gate run)
and judges it with `suite.analyse.paired`:
- A/A: the share of case judgements called slower or faster (false alarms per case), and of trials
  whose gate exits 1;
- one case slower: each case in turn gets side B's blocks multiplied by 1 + s; detected when that
  case is called slower;
- a shared path slower: a third of the cases (every third case of the grid's order, so every
  family and length is in it) slowed together; detected per slowed case, and when the gate exits 1.
Real noise, injected slowdowns: the same method as benchmarks/regression_power.py for `compare`.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from suite.analyse import paired
from suite.store.rundir import RunDir

SLOWDOWNS = (0.05, 0.08, 0.10, 0.15, 0.20)


def matrices(run_dirs: list[str], drop_impl: tuple[str, ...] = ()) -> list[pd.DataFrame]:
    """Per sweep: d_p of every case ok on both sides (rows) and pair (columns); `drop_impl`: the
    implementations whose code differed between the sides (not A/A)."""
    out = []
    for directory in run_dirs:
        lines, problems = RunDir(directory).ab_lines()
        assert not problems, problems
        frame = paired.blocks(lines)
        ok = frame.groupby("case_id")["status"].transform(lambda s: (s == "ok").all())
        frame = frame[ok & ~frame["impl"].isin(drop_impl)]
        rows = {
            case_id: pd.Series(paired.differences(group), index=sorted(group["pair"].unique()))
            for case_id, group in frame.groupby("case_id")
        }
        out.append(pd.DataFrame(rows).T.dropna(axis=1))
    return out


def estimates(d: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per case (row of d, cases × pairs): the gate's centre, variance, n and degrees of freedom."""
    rows = [paired.estimate(row) for row in d]
    centre, var, df = (np.array(column, float) for column in zip(*rows))
    return centre, var, np.full(len(d), d.shape[1], float), df


def called(est, moderated: bool, slowed_rows=None, s: float = 0.0) -> np.ndarray:
    """The gate's calls; side B of the slowed rows × (1 + s) moves their centre by log(1 + s)."""
    centre, var, n, df = est
    if slowed_rows is not None:
        centre = centre.copy()
        centre[slowed_rows] += np.log1p(s)
    return paired.calls(centre, var, n, df, moderated=moderated)


def rates(draws: list[np.ndarray], moderated: bool) -> dict:
    found = {"A/A: false alarms per case": [], "A/A: gate exits 1": []}
    prepared = [estimates(d) for d in draws]
    for est in prepared:
        calls = called(est, moderated)
        found["A/A: false alarms per case"].append(np.isin(calls, ["slower", "faster"]).mean())
        found["A/A: gate exits 1"].append(float((calls == "slower").any()))
    for s in SLOWDOWNS:
        one, shared, gate = [], [], []
        for est in prepared:
            cases = len(est[0])
            third = np.arange(cases) % 3 == 0
            for i in range(cases):
                one.append(called(est, moderated, [i], s)[i] == "slower")
            calls = called(est, moderated, third, s)
            shared.append((calls[third] == "slower").mean())
            gate.append(float((calls == "slower").any()))
        found[f"one case {s:.0%} slower: caught"] = one
        found[f"a third {s:.0%} slower: each caught"] = shared
        found[f"a third {s:.0%} slower: gate exits 1"] = gate
    return {key: float(np.mean(values)) for key, values in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--pairs", type=int, nargs="+", default=[5, 8, 12])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--drop-impl", nargs="*", default=[], help="implementations changed between the sides")
    args = parser.parse_args()
    sweeps = matrices(args.runs, tuple(args.drop_impl))
    print(f"{len(sweeps)} A/A sweep(s): {', '.join(f'{len(m)} cases × {m.shape[1]} pairs' for m in sweeps)}")
    spread = pd.concat([m.std(axis=1, ddof=1) for m in sweeps])
    print(
        f"sd of d_p per case (log time): median {spread.median():.4f}, 90th percentile {spread.quantile(0.9):.4f}, "
        f"max {spread.max():.4f} ({spread.idxmax()})"
    )
    rng = np.random.default_rng(args.seed)
    columns = {}
    for pairs in args.pairs:
        draws = []
        for t in range(args.trials):
            m = sweeps[t % len(sweeps)]
            draws.append(m.to_numpy()[:, rng.choice(m.shape[1], size=pairs, replace=False)])
        for moderated in (True, False):
            columns[f"{pairs} pairs, {'moderated' if moderated else 'plain'} t"] = rates(draws, moderated)
    print(pd.DataFrame(columns).to_string(float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
