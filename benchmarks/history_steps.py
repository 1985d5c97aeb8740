"""How often a step of one series at the newest nights is found by `history check` alone (issue 81's study).

    python benchmarks/history_steps.py --trials 200 --null-trials 1000 --seed 1 --out benchmarks/history_steps.csv

A synthetic history of N nights (--lengths) is the twelve measured cases (three series of four lengths)
of the project's stored noise tables (--noise: benchmarks/history_steady_noise.csv, thirty runs of the
steady grid; benchmarks/history_noise.csv, ten runs of the single-process grid on a busy host): each
night draws one measured run and takes every case's fastest-call log deviation from it, so a run's
busy host and a series' odd night strike that night's cases together, as they did. One series, drawn
at random, is made STEP slower at every length on the newest K nights (--positions); STEP 0 is an A/A
history. Each history is judged once, on its newest night, as `history check` judges it: the cases
against their runs' level where that makes them quieter (suite.history.level, `--against auto`), then
each method on the stepped series' four cases:

    step       suite.history.steps.series_step (the rule `check` uses): the series' newest nights
    step|levels  the union of `step` and `levels` (flagged by either; named as the first that flags)
    levels     the rule before it: a case, or the series' lengths together, classed `regression` by
               suite.history.changes (asv's solve_potts levels, bootstrap, rank test; the tail's rule on
               the lengths together)
    asv        asv's own detect_steps (its information-criterion penalty) on the lengths together: its
               newest step within the newest RECENT nights and THRESHOLD or more up
    otava      Apache Otava's E-Divisive (otava.analysis.compute_change_points, its default p = 0.001 and
               window) on the lengths together, the same way; left out where `otava` is not importable

A method detects where it flags the series; `named` also needs what `check` prints to be right: every
stepped case named and the change's first night the step's (its commit range). `--otava-data` adds
series made by otava-test-data's generators (a step of known index and size in normal noise) judged
as one case by the step rule and by Otava.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from suite.history import changes, level, steps

SIZES, POSITIONS, LENGTHS = (0.05, 0.10, 0.15, 0.30), (1, 2, 3, 5), (8, 11, 16, 24, 40)


def deviations(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(cases × measured runs of fastest-call log deviations, each case's series)."""
    table = pd.read_csv(path)
    time = table[table["kind"] == "time_min"].pivot(index="case", columns="run", values="value")
    return time.to_numpy(float), np.array([case.split(" n=")[0] for case in time.index])


def history(measured: np.ndarray, series: np.ndarray, nights: int, size: float, position: int, rng) -> tuple:
    """(log times as `check` judges them, cases × nights; the stepped series' rows)."""
    logs = measured[:, rng.integers(measured.shape[1], size=nights)].copy()
    stepped = series == rng.choice(np.unique(series))
    logs[np.ix_(stepped, np.arange(nights - position, nights))] += math.log1p(size)
    own, _ = level.levels(logs, series)
    if level.quieter(logs, own)[0]:
        logs = logs - np.nan_to_num(own)
    return logs, stepped


def _newest_up(starts: list[int], pooled: np.ndarray) -> int | None:
    """The first night of the newest change among `starts` where it is THRESHOLD or more up and recent."""
    if not starts or starts[-1] < len(pooled) - changes.RECENT:
        return None
    at = starts[-1]
    up = np.median(pooled[at:]) - np.median(pooled[:at]) >= changes.THRESHOLD["time"]
    return at if up else None


def by_step(x: np.ndarray) -> tuple[int | None, tuple]:
    found = steps.series_step(x)
    if found is None or found.after < x.shape[1] - changes.RECENT:
        return None, ()
    return found.after, found.cases


def by_levels(x: np.ndarray) -> tuple[int | None, tuple]:
    named, afters = [], []
    for i, row in enumerate(x):
        found, status = changes.judged(np.exp(row), "time", tail=False)
        if status == "regression":
            named.append(i)
            afters.append(found[-1].after)
    found, status = changes.judged(np.exp(_pooled(x)), "time")
    if status == "regression":
        afters.append(found[-1].after)
    return (min(afters) if afters else None), tuple(named)


def _pooled(x: np.ndarray) -> np.ndarray:
    return np.median(x - np.median(x, axis=1, keepdims=True), axis=0)


def by_asv(x: np.ndarray) -> tuple[int | None, tuple]:
    from asv.step_detect import detect_steps

    pooled = _pooled(x)
    found = detect_steps(list(map(float, np.exp(pooled))))
    return _newest_up([left for left, *_ in found][1:], pooled), ()


def by_otava(x: np.ndarray) -> tuple[int | None, tuple]:
    from otava.analysis import compute_change_points

    pooled = _pooled(x)
    found, _ = compute_change_points(list(map(float, pooled)))
    return _newest_up([int(c.index) for c in found], pooled), ()


def methods() -> dict:
    out = {"step": by_step, "levels": by_levels, "asv": by_asv}
    try:
        import otava.analysis  # noqa: F401

        out["otava"] = by_otava
    except ImportError:
        print("otava not importable: its rows left out (pip install --no-deps apache-otava)")
    return out


def cell(measured, series, nights: int, size: float, position: int, trials: int, seed: int, chosen: dict) -> list[dict]:
    """One cell of the grid: every method's detection (or false-alarm) rate over the same histories; with
    both `step` and `levels`, also their union `step|levels` (a series flagged by either)."""
    rng = np.random.default_rng([seed, nights, int(size * 1000), position])
    union = "step" in chosen and "levels" in chosen
    hits = {name: [0, 0] for name in [*chosen, *(["step|levels"] if union else [])]}
    for _ in range(trials):
        logs, stepped = history(measured, series, nights, size, position, rng)
        x = logs[stepped]
        found = {name: method(x) for name, method in chosen.items()}
        if union:
            found["step|levels"] = found["step"] if found["step"][0] is not None else found["levels"]
        for name, (after, named) in found.items():
            hits[name][0] += after is not None
            hits[name][1] += after == nights - position and len(named) == len(x) if size else after is not None
    return [
        {
            "method": name,
            "nights": nights,
            "step": size,
            "position": position if size else 0,
            "trials": trials,
            "flagged": flagged / trials,
            "named": right / trials,
        }
        for name, (flagged, right) in hits.items()
    ]


def otava_data(trials: int, seed: int, chosen: dict) -> list[dict]:
    """Single series from otava-test-data's generators: normal noise of sd 3% on 100, a step of `size` at
    the newest `position` points of 24, judged as one case (the step rule and Otava)."""
    from otava_test_data.generators import basic

    rows = []
    for size, position in [(0.0, 0), *((s, p) for s in SIZES for p in (3, 5))]:
        hits = {name: 0 for name in ("step", "otava") if name in chosen}
        for t in range(trials):
            made = basic.noise_normal(24, 100.0, 3.0, seed=seed * 100003 + t).data
            if size:
                made = made * basic.step_function(24, 1.0, 1.0 + size, 24 - position).data
            for name in hits:
                hits[name] += chosen[name](np.log(made)[None, :])[0] is not None
        rows += [
            {
                "method": f"{name} (otava-test-data)",
                "nights": 24,
                "step": size,
                "position": position,
                "trials": trials,
                "flagged": n / trials,
                "named": np.nan,
            }
            for name, n in hits.items()
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--noise", nargs="+", default=["benchmarks/history_steady_noise.csv", "benchmarks/history_noise.csv"]
    )
    parser.add_argument("--trials", type=int, default=200, help="histories a cell with a step")
    parser.add_argument("--null-trials", type=int, default=1000, help="A/A histories a cell")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--positions", default=",".join(map(str, POSITIONS)))
    parser.add_argument("--methods", default="step,levels,asv,otava")
    parser.add_argument("--otava-data", type=int, default=0, help="trials of otava-test-data's series (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="also write the table here (CSV)")
    parser.add_argument("--append", action="store_true", help="add the rows to --out's table")
    args = parser.parse_args()
    chosen = {k: v for k, v in methods().items() if k in args.methods.split(",")}
    rows = []
    for path in args.noise:
        measured, series = deviations(path)
        for nights in map(int, args.lengths.split(",")):
            rows += [
                r | {"noise": Path(path).stem}
                for r in cell(measured, series, nights, 0.0, 0, args.null_trials, args.seed, chosen)
            ]
            for size in map(float, args.sizes.split(",")):
                for position in map(int, args.positions.split(",")):
                    rows += [
                        r | {"noise": Path(path).stem}
                        for r in cell(measured, series, nights, size, position, args.trials, args.seed, chosen)
                    ]
    if args.otava_data:
        rows += [r | {"noise": "otava-test-data normal 3%"} for r in otava_data(args.otava_data, args.seed, chosen)]
    out = pd.DataFrame(rows)
    print(out.to_markdown(index=False, floatfmt=".3f"))
    if args.out:
        from suite.store import atomic

        if args.append and Path(args.out).exists():
            out = pd.concat([pd.read_csv(args.out), out], ignore_index=True)
        atomic.write_text(Path(args.out), out.to_csv(index=False))


if __name__ == "__main__":
    main()
