"""How often `suite history check` flags a step, how soon, and how often it flags none (issue 48's study).

    python benchmarks/history_study.py --noise benchmarks/history_steady_noise.csv --trials 400 --seed 2 \
        --out benchmarks/history_study_steady.csv

Synthetic histories of 60 points whose noise is this machine's own run-to-run spread of real cases
(benchmarks/history_noise.py measured it: ten runs of a small grid, twelve cases of three series each,
as separate processes). A synthetic history is every one of those twelve cases over 60 runs:

    time      at each point a measured run r is drawn; its level (the run's median deviation over its
              cases: how busy the machine was) is shared by every case of the synthetic run, and each
              case's own deviation (its log-time from its median, less that run's level) is added:
              `--draw joint` takes every case's own deviation from the same run r (what a busy run
              does to cases together, beyond the level, is kept), `--draw independent` from a run
              drawn for each case (the level is all they share). With probability SPELL a busy spell
              of 1-3 points begins, in which the level is the busiest run's (the bimodal spells of a
              shared machine).
    exponent  point i = the series' exponent deviation in a run drawn at random (its fit less the
              series' median fit); in a spell, its deviation in the busiest run

A step of +STEP (time: one series, all its lengths ×1.10 — a commit acts on a series; exponent: +0.3)
starts at point 57 of 60; the check runs on the first 58, 59 and 60 points (1, 2, 3 points after the
step), as a nightly job would, on one case of the stepped series. Four rules judge the same histories:
`raw` (the case's own times, the rule before runs' levels), `level` (suite.history.level: each point
divided by its run's level, the median over the run's cases of other series) and `auto` (`history
check`'s default: the level where the cases' series spread less against it, level.quieter, decided on
the points each check sees; raw otherwise), and `lengths` (the stepped series' lengths together, as
`check` judges them: suite.history.series.together on the cases as `auto` judges them). `host level` rows step
every case at once and judge the host's level as a series (a change there is reported as every case
at once). A series is detected when one of the three checks classifies it `regression`; its delay is
the first such check. A step-free series is a false positive when one of the same checks says
`regression`. The rule is suite.history.changes' (its levels, and its tail where a series is judged:
lengths together, host level, exponent, as `check` does; its defaults unless --penalty/--threshold/--tail/--band
are given); `--asv-autogamma` replaces its segmentation by asv's own penalty search (detect_steps).

`--confirm SWEEP` adds `history check --confirm`'s rules (`auto, confirmed` and `lengths, confirmed`): a
series flagged by the rules above or by the screen (changes.screen_change) counts only where an
interleaved A/B of its series' cases calls one of them slower, drawn from SWEEP, a real A/A `suite ab`
sweep of the same grid (`python -m suite ab --base-dir . --new-dir . --grid benchmarks/history_steady.toml
--pairs 12`): each
check that flags draws `--confirm-pairs` of its process pairs, side B's log times moved by the step
where the series stepped after the flagged change's commit before (the A/B is that commit against the
newest run's, as `check --confirm` runs it), judged as `suite ab` judges (suite.analyse.paired.calls, as
benchmarks/ab_power.py does, and the cases' common move). A check whose A/B does not confirm leaves the
next night's check to flag again.
Their rows' `A/Bs a series` is the A/Bs run per series over its checks (what the screen costs a night).

Before the table it prints what the level explains of the measured noise (robust standard deviations
of the deviations raw, of the runs' levels, less the true level, less the rule's level), and the same
for exponents (why they are not level-adjusted: docs/history.md).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from suite.analyse import paired
from suite.history import changes, level
from suite.store.rundir import RunDir

LENGTH, STEP_AT, CHECKS = 60, 57, (1, 2, 3)
SPELL = 0.05


def robust_sd(values) -> float:
    """1.4826 · the median absolute deviation from the median (a normal's standard deviation)."""
    v = np.asarray(values, float).ravel()
    v = v[~np.isnan(v)]
    return 1.4826 * float(np.median(np.abs(v - np.median(v))))


class Noise:
    """Resamples the measured deviations (benchmarks/history_noise.py's table)."""

    def __init__(self, table: pd.DataFrame, time_kind: str, scale: float = 1.0):
        table = table.assign(value=table["value"] * scale)
        time = table[table["kind"] == time_kind]
        levels = table[table["kind"] == f"level_{time_kind}"].set_index("run")["value"].sort_index()
        self.levels = levels.to_numpy()
        self.busiest = int(np.argmax(np.abs(self.levels)))
        self.deviations = time.pivot(index="case", columns="run", values="value").reindex(columns=levels.index)
        self.series = np.array([case.split(" n=")[0] for case in self.deviations.index])
        self.own = self.deviations.to_numpy() - self.levels[None, :]  # cases × runs, the run's level taken out
        exps = table[table["kind"] == "exponent"]
        self.exps = {case: g.set_index("run")["value"] for case, g in exps.groupby("case") if len(g) >= 5}
        self.exponent_table = exps.pivot(index="case", columns="run", values="value")
        self.spread = {"time": robust_sd(time["value"]), "exponent": robust_sd(exps["value"])}

    def spells(self, rng: np.random.Generator) -> np.ndarray:
        busy = np.zeros(LENGTH, bool)
        i = 0
        while i < LENGTH:
            if rng.random() < SPELL:
                length = int(rng.integers(1, 4))
                busy[i : i + length] = True
                i += length
            else:
                i += 1
        return busy

    def times(self, rng: np.random.Generator, draw: str) -> np.ndarray:
        """Log deviations of every measured case over LENGTH synthetic runs (cases × runs): one level
        per synthetic run, shared by its cases, plus each case's own deviation."""
        runs = rng.integers(len(self.levels), size=LENGTH)
        level_of = self.levels[runs]
        level_of[self.spells(rng)] = self.levels[self.busiest]
        if draw == "joint":
            own = self.own[:, runs]
        else:
            own = np.take_along_axis(
                self.own,
                rng.integers(len(self.levels), size=self.own.shape[0] * LENGTH).reshape(self.own.shape[0], LENGTH),
                axis=1,
            )
        return own + level_of[None, :]

    def exponent(self, rng: np.random.Generator) -> np.ndarray:
        series = self.exps[rng.choice(list(self.exps))]
        out = rng.choice(series.to_numpy(), LENGTH)
        busy = self.spells(rng)
        out[busy] = series.get(self.busiest, 0.0)
        return out

    def explained(self) -> dict:
        """What the runs' level explains of the measured spread (robust sd of log deviations)."""
        d = self.deviations.to_numpy()
        own, _ = level.levels(d, self.series)
        e = self.exponent_table.to_numpy()
        others = np.array([np.median(np.delete(e, i, axis=0), axis=0) for i in range(len(e))])
        return {
            "time: every case's deviation": robust_sd(d),
            "time: the runs' levels": robust_sd(self.levels),
            "time: less its run's level (as measured)": robust_sd(self.own),
            "time: less the rule's level (other series' median)": robust_sd(d - own),
            "exponent: every series' deviation": robust_sd(e),
            "exponent: less the other series' median": robust_sd(e - others),
            "exponent: correlation of the runs' median with the time level": float(
                np.corrcoef(np.median(e, axis=0), self.levels)[0, 1]
            ),
        }


class Confirm:
    """`history check --confirm`'s A/B of a flagged series, drawn from a real A/A sweep: its cases'
    per-pair differences d_p (log B − log A), `pairs` of the sweep's pairs at a time."""

    def __init__(self, sweep: str, pairs: int):
        from ab_power import matrices

        d = matrices([sweep])[0]
        frame = paired.blocks(RunDir(sweep).ab_lines()[0]).drop_duplicates("case_id").set_index("case_id")
        self.series = np.array([f"{frame.loc[c, 'variant']}/{frame.loc[c, 'impl']}" for c in d.index])
        self.d, self.pairs, self.calls = d.to_numpy(), pairs, 0
        if not 2 <= pairs <= self.d.shape[1]:
            raise SystemExit(f"--confirm-pairs {pairs} (allowed: 2..{self.d.shape[1]}, the sweep's pairs)")

    def __call__(self, rng: np.random.Generator, series: str, step: float) -> bool:
        """Whether this A/B would fail `suite ab`: a case called slower, or the cases' common move (the
        median case by the floor, the pairs agreeing: suite.analyse.paired.grid_move)."""
        from ab_power import estimates
        from scipy import stats

        from suite.analyse import regression

        self.calls += 1
        rows = self.d[self.series == series][:, rng.choice(self.d.shape[1], self.pairs, replace=False)]
        rows = rows + math.log1p(step)
        centre, var, n, df = estimates(rows)
        if (paired.calls(centre, var, n, df) == "slower").any():
            return True
        if len(rows) < regression.MIN_CASES_FOR_SHIFT:
            return False
        agree = stats.ttest_1samp(np.median(rows, axis=0), 0.0).pvalue <= regression.Rule().alpha
        return bool(np.median(centre) >= math.log1p(regression.Rule().effect_floor) and agree)


def first_flag(values: np.ndarray, kind: str, options: dict, tail: bool = True, confirm=None) -> int | None:
    """The first check (points after the step) that classifies the series `regression`, or None;
    `values(n)` gives the series as judged on the first n points; `tail`: with the tail's rule, as
    `check` judges a series (one case's time is judged without it); `confirm(before)`: with the screen, a
    flag counts where this night's A/B of the commit before the change (its index `before`) against the
    newest confirms it (`Confirm`), as `check --confirm` measures it."""
    for k in CHECKS:
        n = STEP_AT + k
        found, status = changes.judged(values(n), kind, tail=tail, screen=confirm is not None, **options)
        flagged = status == "regression" or (bool(found) and found[-1].rule == "screen")
        if flagged and (confirm is None or confirm(found[-1].before)):
            return k
    return None


def judged(logs: np.ndarray, series: np.ndarray, case: int, rule: str):
    """The case's series as `rule` judges it on the first n points (times in seconds)."""
    if rule == "raw":
        return lambda n: 0.01 * np.exp(logs[case, :n])
    if rule == "host level":
        return lambda n: np.exp(level.levels(logs[:, :n], series)[1])

    def against(n: int) -> np.ndarray:
        own, _ = level.levels(logs[:, :n], series)
        if rule == "auto" and not level.quieter(logs[:, :n], own)[0]:
            return 0.01 * np.exp(logs[case, :n])
        return 0.01 * np.exp(logs[case, :n] - np.nan_to_num(own[case]))

    return against


def together(logs: np.ndarray, series: np.ndarray, stepped: np.ndarray):
    """The stepped series' lengths judged together, as `history check` does (suite.history.series.together)
    on its cases' times as `auto` judges them: each case's log time less its median, the median over the
    series' cases, on the first n points."""

    def values(n: int) -> np.ndarray:
        x = logs[:, :n]
        own, _ = level.levels(x, series)
        if level.quieter(x, own)[0]:
            x = x - np.nan_to_num(own)
        mine = x[stepped]
        return 0.01 * np.exp(np.median(mine - np.median(mine, axis=1, keepdims=True), axis=0))

    return values


def time_trials(
    noise: Noise, step: float, trials: int, rng, options: dict, draw: str, confirm: Confirm | None = None
) -> dict[str, list]:
    """Flags of each rule on the same histories: one series stepped (raw, level, auto: one of its cases;
    lengths: its lengths together; with `confirm`, auto and lengths confirmed by an A/B), every case (host level)."""
    flags = {"raw": [], "level": [], "auto": [], "lengths": [], "host level": []}
    if confirm is not None:
        flags.update({"auto, confirmed": [], "lengths, confirmed": []})
        flags["A/Bs"] = {"auto, confirmed": 0, "lengths, confirmed": 0}  # A/Bs run over the trials' checks
    names = np.unique(noise.series)
    ab_rng = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])  # the A/Bs' own: the other rules' draws stay
    for _ in range(trials):
        logs = noise.times(rng, draw)
        name = rng.choice(names)
        stepped = noise.series == name
        case = int(rng.choice(np.flatnonzero(stepped)))
        one = logs.copy()
        one[stepped, STEP_AT:] += math.log1p(step)
        for rule in ("raw", "level", "auto"):
            flags[rule].append(first_flag(judged(one, noise.series, case, rule), "time", options, tail=False))
        flags["lengths"].append(first_flag(together(one, noise.series, stepped), "time", options))
        if confirm is not None:

            def ab(
                before: int,
            ) -> bool:  # a new A/B each night that flags: the step is in it where it came after `before`
                return confirm(ab_rng, name, step if before < STEP_AT else 0.0)

            for rule, values, tail in (
                ("auto, confirmed", judged(one, noise.series, case, "auto"), False),
                ("lengths, confirmed", together(one, noise.series, stepped), True),
            ):
                before = confirm.calls
                flags[rule].append(first_flag(values, "time", options, tail=tail, confirm=ab))
                flags["A/Bs"][rule] += confirm.calls - before
        every = logs.copy()
        every[:, STEP_AT:] += math.log1p(step)
        flags["host level"].append(first_flag(judged(every, noise.series, case, "host level"), "time", options))
    return flags


def row(series: str, rule: str, spread: float, step: float, flags: list) -> dict:
    hit = [f for f in flags if f is not None]
    trials = len(flags)
    return {
        "series": series,
        "rule": rule,
        "noise (robust sd)": spread,
        "step": step,
        "trials": trials,
        "flagged": len(hit) / trials,
        **{f"by {k}": sum(f <= k for f in hit) / trials for k in CHECKS},
        "median delay": float(np.median(hit)) if hit else np.nan,
    }


def study(
    noise: Noise, trials: int, seed: int, options: dict, draw: str, confirm: Confirm | None = None
) -> pd.DataFrame:
    rows = []
    for step in (0.0, 0.05, 0.10, 0.20):
        rng = np.random.default_rng([seed, int(step * 1000), 1])
        flags = time_trials(noise, step, trials, rng, options["time"], draw, confirm)
        ab_runs = flags.pop("A/Bs", {})
        rows += [
            row("time" if rule != "host level" else "host level", rule, noise.spread["time"], step, flags[rule])
            | ({"A/Bs a series": ab_runs[rule] / trials} if rule in ab_runs else {})
            for rule in flags
        ]
    for step in (0.0, 0.15, 0.3):
        rng = np.random.default_rng([seed, int(step * 1000), 0])
        flags = []
        for _ in range(trials):
            y = 1.0 + noise.exponent(rng)
            y[STEP_AT:] += step
            flags.append(first_flag(lambda n, y=y: y[:n], "exponent", options["exponent"]))
        rows.append(row("exponent", "raw", noise.spread["exponent"], step, flags))
    order = {
        "raw": 0,
        "level": 1,
        "auto": 2,
        "auto, confirmed": 3,
        "lengths": 4,
        "lengths, confirmed": 5,
        "host level": 6,
    }
    out = pd.DataFrame(rows)
    return (
        out.assign(o=out["series"].map({"time": 0, "host level": 1, "exponent": 2}), r=out["rule"].map(order))
        .sort_values(["o", "r", "step"], kind="stable")
        .drop(columns=["o", "r"])
    )


def autogamma(y: np.ndarray, kind: str, penalty: float) -> list[list[int]]:
    """asv's detect_steps segmentation (its own penalty search), short levels left out."""
    from asv.step_detect import detect_steps

    z = np.exp(y - np.median(y)) if kind == "time" else 1.0 + (y - np.median(y))
    return [list(range(a, b)) for a, b, *_ in detect_steps(list(map(float, z))) if b - a >= changes.MIN_SIZE]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", default="benchmarks/history_steady_noise.csv")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument(
        "--metric",
        default="time_min",
        choices=["time", "time_min"],
        help="which deviations stand for a point's time: the fastest call's (time_min, what "
        "`history check` judges) or the median's (time)",
    )
    parser.add_argument(
        "--scales",
        default="1",
        help="comma-separated factors on the measured deviations "
        "(1: as measured; under 1: a quieter machine, the same shape of noise)",
    )
    parser.add_argument(
        "--draw",
        default="joint",
        choices=["joint", "independent"],
        help="each case's own deviation in a synthetic run: from the same measured run as the "
        "others' (joint) or from a run drawn for each case (independent)",
    )
    parser.add_argument("--penalty", type=float)
    parser.add_argument("--time-threshold", type=float, help="smallest time change called, a fraction (0.05 = 5%%)")
    parser.add_argument("--exponent-threshold", type=float, help="smallest exponent change called")
    parser.add_argument("--asv-autogamma", action="store_true")
    parser.add_argument(
        "--tail",
        type=int,
        help="violations in a row at the end that make a change (changes.TAIL; "
        "0: the levels' change points alone, the rule before the tail's)",
    )
    parser.add_argument(
        "--band", type=float, help="a violation's distance from the level, in its robust sds (changes.BAND)"
    )
    parser.add_argument(
        "--confirm", metavar="SWEEP", help="an A/A `suite ab` sweep of the grid: add check --confirm's rules"
    )
    parser.add_argument("--confirm-pairs", type=int, default=6, help="the A/B's process pairs (default 6, ab's)")
    parser.add_argument("--out", help="also write the table here (CSV)")
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
    if args.tail is not None:
        changes.TAIL = args.tail
        if args.tail == 0:
            changes.tail_change = lambda *a, **k: None
    if args.band is not None:
        changes.BAND = args.band
    print(
        f"noise: {args.noise} ({args.metric}, draw {args.draw}); seed {args.seed}; penalty "
        f"{common.get('penalty', changes.PENALTY)}, thresholds {options}, tail {changes.TAIL} beyond {changes.BAND} sds"
        + ("; asv detect_steps' own penalty" if args.asv_autogamma else "")
    )
    for what, value in Noise(table, args.metric).explained().items():
        print(f"  {what}: {value:.3f}")
    results = []
    for scale in map(float, args.scales.split(",")):
        noise = Noise(table, args.metric, scale)
        confirm = Confirm(args.confirm, args.confirm_pairs) if args.confirm else None
        results.append(
            study(noise, args.trials, args.seed, options, args.draw, confirm).assign(scale=scale, draw=args.draw)
        )
    out = pd.concat(results, ignore_index=True)
    out = out[["scale", "draw", *out.columns[:-2]]]
    print(out.to_markdown(index=False, floatfmt=".3f"))
    if args.out:
        from suite.store import atomic

        atomic.write_text(Path(args.out), out.to_csv(index=False))


if __name__ == "__main__":
    main()
