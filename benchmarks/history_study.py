"""How often `suite history check` flags a step, how soon, and how often it flags none (issue 48's study).

    python benchmarks/history_study.py --noise benchmarks/history_noise.csv --trials 400 --seed 2

Synthetic histories of 60 points whose noise is this machine's own run-to-run spread of real cases
(benchmarks/history_noise.py measured it: ten runs of a small grid, as separate processes):

    time      point i = the case's own deviation in a run drawn at random (its log-time from its median,
              less that run's level) + a run level drawn at random (the run's median deviation over its
              cases: how busy the machine was) — and with probability SPELL a busy spell of 1-3 points
              begins, in which the level is the busiest run's (the bimodal spells of a shared machine)
    exponent  point i = the series' exponent deviation in a run drawn at random (its fit less the
              series' median fit); in a spell, its deviation in the busiest run

A step of +STEP (time: ×1.10; exponent: +0.3) starts at point 57 of 60; the check runs on the first
58, 59 and 60 points (1, 2, 3 points after the step), as a nightly job would. A series is detected
when one of those checks classifies it `regression`; its delay is the first such check. A step-free
series is a false positive when one of the same three checks says `regression`. The decision rule is
suite.history.changes' (its defaults unless --penalty/--threshold are given); `--asv-autogamma`
replaces its segmentation by asv's own penalty search (detect_steps), for comparison.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from suite.history import changes

LENGTH, STEP_AT, CHECKS = 60, 57, (1, 2, 3)
SPELL = 0.05


class Noise:
    """Resamples the measured deviations (benchmarks/history_noise.py's table)."""

    def __init__(self, table: pd.DataFrame, time_kind: str, scale: float = 1.0):
        table = table.assign(value=table["value"] * scale)
        time = table[table["kind"] == time_kind]
        levels = table[table["kind"] == f"level_{time_kind}"].set_index("run")["value"]
        self.levels = levels.to_numpy()
        self.busiest = int(levels.abs().idxmax())
        own = time.assign(value=time["value"] - time["run"].map(levels))
        self.own = {case: g.set_index("run")["value"] for case, g in own.groupby("case")}
        exps = table[table["kind"] == "exponent"]
        self.exps = {case: g.set_index("run")["value"] for case, g in exps.groupby("case") if len(g) >= 5}
        self.busy_level = float(levels[self.busiest])
        spread = lambda v: 1.4826 * float(np.median(np.abs(v)))  # noqa: E731  (a robust standard deviation)
        self.spread = {"time": spread(time["value"]), "exponent": spread(exps["value"])}

    def spells(self, rng: np.random.Generator) -> np.ndarray:
        busy = np.zeros(LENGTH, bool)
        i = 0
        while i < LENGTH:
            if rng.random() < SPELL:
                length = int(rng.integers(1, 4))
                busy[i:i + length] = True
                i += length
            else:
                i += 1
        return busy

    def time(self, rng: np.random.Generator) -> np.ndarray:
        own = self.own[rng.choice(list(self.own))].to_numpy()
        level = rng.choice(self.levels, LENGTH)
        level[self.spells(rng)] = self.busy_level
        return rng.choice(own, LENGTH) + level

    def exponent(self, rng: np.random.Generator) -> np.ndarray:
        series = self.exps[rng.choice(list(self.exps))]
        out = rng.choice(series.to_numpy(), LENGTH)
        busy = self.spells(rng)
        out[busy] = series.get(self.busiest, 0.0)
        return out


def first_flag(values: np.ndarray, kind: str, options: dict) -> int | None:
    """The first check (points after the step) that classifies the series `regression`, or None."""
    for k in CHECKS:
        n = STEP_AT + k
        if changes.classify(n, changes.change_points(values[:n], kind, **options)) == "regression":
            return k
    return None


def trial(noise: Noise, kind: str, step: float, rng: np.random.Generator, options: dict) -> int | None:
    if kind == "time":
        y = noise.time(rng)
        y[STEP_AT:] += math.log1p(step)
        return first_flag(0.01 * np.exp(y), kind, options)
    y = 1.0 + noise.exponent(rng)
    y[STEP_AT:] += step
    return first_flag(y, kind, options)


def study(noise: Noise, trials: int, seed: int, options: dict) -> pd.DataFrame:
    rows = []
    for kind, steps in (("time", (0.0, 0.05, 0.10, 0.20)), ("exponent", (0.0, 0.15, 0.3))):
        for step in steps:
            rng = np.random.default_rng([seed, int(step * 1000), kind == "time"])
            flags = [trial(noise, kind, step, rng, options[kind]) for _ in range(trials)]
            hit = [f for f in flags if f is not None]
            rows.append({"series": kind, "noise (robust sd)": noise.spread[kind], "step": step, "trials": trials,
                         "flagged": len(hit) / trials, **{f"by {k}": sum(f <= k for f in hit) / trials for k in CHECKS},
                         "median delay": float(np.median(hit)) if hit else np.nan})
    return pd.DataFrame(rows)


def autogamma(y: np.ndarray, kind: str, penalty: float) -> list[list[int]]:
    """asv's detect_steps segmentation (its own penalty search), short levels left out."""
    from asv.step_detect import detect_steps

    z = np.exp(y - np.median(y)) if kind == "time" else 1.0 + (y - np.median(y))
    return [list(range(a, b)) for a, b, *_ in detect_steps(list(map(float, z))) if b - a >= changes.MIN_SIZE]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", default="benchmarks/history_noise.csv")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--metric", default="time", choices=["time", "time_min"],
                        help="which deviations stand for a point's time: the median's (time) or the fastest call's")
    parser.add_argument("--scales", default="1", help="comma-separated factors on the measured deviations "
                        "(1: as measured; under 1: a quieter machine, the same shape of noise)")
    parser.add_argument("--penalty", type=float)
    parser.add_argument("--time-threshold", type=float, help="smallest time change called, a fraction (0.05 = 5%%)")
    parser.add_argument("--exponent-threshold", type=float, help="smallest exponent change called")
    parser.add_argument("--asv-autogamma", action="store_true")
    args = parser.parse_args()
    table = pd.read_csv(args.noise)
    common = {} if args.penalty is None else {"penalty": args.penalty}
    options = {"time": dict(common), "exponent": dict(common)}
    if args.time_threshold is not None:
        options["time"]["threshold"] = math.log1p(args.time_threshold)
    if args.exponent_threshold is not None:
        options["exponent"]["threshold"] = args.exponent_threshold
    if args.asv_autogamma:
        changes._segments = autogamma
    print(f"noise: {args.noise} ({args.metric}); seed {args.seed}; penalty {common.get('penalty', changes.PENALTY)}, "
          f"thresholds {options}" + ("; asv detect_steps' own penalty" if args.asv_autogamma else ""))
    results = []
    for scale in map(float, args.scales.split(",")):
        noise = Noise(table, args.metric, scale)
        results.append(study(noise, args.trials, args.seed, options).assign(scale=scale))
    out = pd.concat(results, ignore_index=True)
    print(out[["scale", *out.columns[:-1]]].to_markdown(index=False, floatfmt=".3f"))


if __name__ == "__main__":
    main()
