"""E-Divisive means (MongoDB's signal-processing-algorithms) against `history check`'s rule, on the same
synthetic histories (issue 48: choose the change-point method by measuring both).

signal-processing-algorithms 2.1.6 needs numpy < 2, so it runs in a throwaway environment of its own and
this script has three steps; only `judge` runs there, and it imports numpy and that package alone:

    python benchmarks/history_edivisive.py dump --out /tmp/edv/histories.npz           # the project's venv
    python3.11 -m venv /tmp/edv/venv && /tmp/edv/venv/bin/pip install signal-processing-algorithms==2.1.6
    /tmp/edv/venv/bin/python benchmarks/history_edivisive.py judge /tmp/edv/histories.npz --out /tmp/edv/flags.npz
    python benchmarks/history_edivisive.py table /tmp/edv/histories.npz /tmp/edv/flags.npz \
        --confirm results/SWEEP                                                         # the project's venv

SWEEP: an A/A `suite ab . . --grid benchmarks/history_steady.toml --pairs 12` sweep's folder (docs/history.md).

`dump` draws the histories benchmarks/history_study.py draws (the same seeds and streams: its `lengths`
and `auto` rows' series, on the steady grid's measured noise), each as check sees it on its first 58,
59 and 60 points, with this project's rule's flags on them, without and with the screen. `judge` runs
E-Divisive (its defaults: p = 0.05, 100 permutations, seeded) on each, and flags a check where its newest change point begins
within the newest RECENT points and the level after it is THRESHOLD or more above the one before (the
project's class `regression`, its 5%). `table` prints both rules' false alarms and detections, alone and
with `check --confirm`'s A/B drawn as history_study.py draws it (the step in it where it came after the
flagged change's last point before).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

STEPS = (0.0, 0.05, 0.10, 0.20)
CHECKS = (58, 59, 60)
RECENT = 5  # suite.history.changes.RECENT
THRESHOLD = math.log(1.05)  # suite.history.changes.THRESHOLD["time"]
STEP_AT = 57  # history_study.STEP_AT


def dump(args) -> None:
    import history_study as study
    import pandas as pd

    from suite.history import changes

    noise = study.Noise(pd.read_csv(args.noise), "time_min")
    names = np.unique(noise.series)
    out = {}
    for step in STEPS:
        rng = np.random.default_rng([args.seed, int(step * 1000), 1])  # history_study.time_trials' stream
        series = {"lengths": [], "auto": []}
        flags = {"lengths": [], "auto": []}
        screened = {"lengths": [], "auto": []}  # with check --confirm's screen
        stepped_names = []
        for _ in range(args.trials):
            logs = noise.times(rng, "joint")
            name = rng.choice(names)
            stepped = noise.series == name
            case = int(rng.choice(np.flatnonzero(stepped)))
            one = logs.copy()
            one[stepped, study.STEP_AT :] += math.log1p(step)
            stepped_names.append(name)
            for rule, values, tail in (
                ("auto", study.judged(one, noise.series, case, "auto"), False),
                ("lengths", study.together(one, noise.series, stepped), True),
            ):
                rows, marks, more = np.full((len(CHECKS), max(CHECKS)), np.nan), [], []
                for i, n in enumerate(CHECKS):
                    rows[i, :n] = np.log(values(n))
                    for screen, into in ((False, marks), (True, more)):
                        found, status = changes.judged(values(n), "time", tail=tail, screen=screen)
                        flagged = status == "regression" or (bool(found) and found[-1].rule == "screen")
                        into.append(found[-1].before if flagged else -1)
                series[rule].append(rows)
                flags[rule].append(marks)
                screened[rule].append(more)
        for rule in series:
            out[f"{rule}/{step}"] = np.array(series[rule])
            out[f"{rule}/{step}/project"] = np.array(flags[rule])
            out[f"{rule}/{step}/project, screened"] = np.array(screened[rule])
        out[f"name/{step}"] = np.array(stepped_names)
    np.savez_compressed(args.out, **out)
    print(f"{args.out}: {args.trials} histories a step and rule")


def judge(args) -> None:
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    data = np.load(args.histories)
    out = {}
    for key in data.files:
        if key.count("/") != 1 or key.startswith("name/"):  # the histories, not the project's flags
            continue
        histories = data[key]
        marks = np.full(histories.shape[:2], -1)  # a flag: the last point before the change; -1: none
        for t, rows in enumerate(histories):
            for i, n in enumerate(CHECKS):
                y = rows[i, :n]
                np.random.seed(t * 10 + i)  # its permutation test draws from numpy's global generator
                points = sorted(e_divisive(y, pvalue=args.pvalue, permutations=args.permutations))
                if points and points[-1] >= n - RECENT:
                    before = y[points[-2] if len(points) > 1 else 0 : points[-1]]
                    if np.median(y[points[-1] :]) - np.median(before) >= THRESHOLD:
                        marks[t, i] = points[-1] - 1
        out[f"{key}/edivisive"] = marks
        print(key, "flagged:", (marks >= 0).any(axis=1).mean())
    np.savez_compressed(args.out, **out)


def table(args) -> None:
    import history_study as study

    data, flags = np.load(args.histories), np.load(args.flags)
    confirm = study.Confirm(args.confirm, 6) if args.confirm else None
    print("| series | method | no step: false alarms | +5% | +10% | +20% |")
    print("|---|---|---|---|---|---|")
    for rule in ("auto", "lengths"):
        for method, source, key in (
            ("this project's rule", data, "project"),
            ("this project's rule and the screen", data, "project, screened"),
            ("E-Divisive (p 0.05)", flags, "edivisive"),
        ):
            for confirmed in (False, True) if confirm is not None else (False,):
                cells = []
                for step in STEPS:
                    marks = source[f"{rule}/{step}/{key}"]
                    names = data[f"name/{step}"]
                    rng = np.random.default_rng([args.seed, int(step * 1000), 3])
                    hit = [
                        any(m >= 0 and (not confirmed or confirm(rng, name, step if m < STEP_AT else 0.0)) for m in row)
                        for row, name in zip(marks, names)
                    ]
                    cells.append(f"{100 * np.mean(hit):.2f}%")
                label = method + (", A/B confirmed" if confirmed else "")
                print(
                    f"| {'one case' if rule == 'auto' else 'lengths together'} | {label} | " + " | ".join(cells) + " |"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--noise", default="benchmarks/history_steady_noise.csv")
    d.add_argument("--trials", type=int, default=400)
    d.add_argument("--seed", type=int, default=2)
    d.add_argument("--out", required=True)
    j = sub.add_parser("judge")
    j.add_argument("histories")
    j.add_argument("--pvalue", type=float, default=0.05)
    j.add_argument("--permutations", type=int, default=100)
    j.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("histories")
    t.add_argument("flags")
    t.add_argument("--confirm", help="an A/A `suite ab` sweep (as history_study.py --confirm)")
    t.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    {"dump": dump, "judge": judge, "table": table}[args.step](args)


if __name__ == "__main__":
    main()
