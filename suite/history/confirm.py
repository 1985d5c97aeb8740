"""`history check --confirm`: each slowdown of a case's time or a series' lengths that a history shows,
measured again as an interleaved A/B of its two commits before it fails the check.

A history's points are runs made hours or days apart, so a series that drifts against the others over
a night (docs/history.md measured it on this project's host) reads as a step, and a 10% step hides in
that drift as often as not. `suite ab` times the two commits alternately in one sweep (A, B, B, A in
process pairs: suite.run.ab), where the drift cancels. So a slowdown the history found (by its levels,
its tail or the screen, suite.history.changes) is re-measured on its series' cases (a commit acts on a
series: every length of it in the newest run), the commit before it against the first after it, and it
is a regression only where the A/B calls one of those cases slower (suite.analyse.paired, `ab`'s own
test and effect floor). An A/B that cannot judge (a side failed) leaves the slowdown standing.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from suite.errors import UsageError
from suite.plan.grid import Grid

CONFIRMED_KINDS = ("time", "lengths")  # an exponent is a ratio within a run: no drift between runs to cancel


@dataclass(frozen=True)
class Asked:
    """One A/B to run: a series' cases, the commit before its slowdown and the first after it."""

    series_key: str
    series: str
    before: str
    after: str
    case_ids: tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    """What the A/B said: `confirmed` (None: it could not judge), its run's name, and a line of figures."""

    confirmed: bool | None
    run: str
    text: str


def asked(found: pd.DataFrame, cases: pd.DataFrame) -> list[Asked]:
    """The A/Bs that `found`'s slowdowns (change rows of kinds CONFIRMED_KINDS) need: one per series and
    commit pair, on the series' cases that ran ok in the history's newest run."""
    newest = cases["run_key"].iloc[-1] if not cases.empty else None
    ok = cases[(cases["run_key"] == newest) & (cases["status"] == "ok")]
    out = []
    mine = found[found["kind"].isin(CONFIRMED_KINDS)]
    for (key, before, after), rows in mine.groupby(["series_key", "before_commit", "after_commit"], sort=False):
        ids = tuple(sorted(ok.loc[ok["series_key"] == key, "case_id"]))
        out.append(Asked(key, rows["series"].iloc[0], before, after, ids))
    return out


def narrowed(grid: Grid, ask: Asked) -> Grid:
    """`grid` with only the cases of `ask`; exit 2 where it holds none of them (the history's cases
    come from another grid)."""
    cases = [case for case in grid.cases if case.case_id in ask.case_ids]
    if not cases:
        raise UsageError(f"--grid {grid.name}: none of {ask.series}'s {len(ask.case_ids)} cases of the newest run "
                         f"(allowed: the grid the history's runs were made with)")
    return replace(grid, cases=tuple(cases), ladders=())


def answer(verdict, run: str) -> Answer:
    """The A/B's answer from its verdict (suite.analyse.paired): confirmed where one of the cases is called slower."""
    table = verdict.cases
    figures = "; ".join(f"n={row['seq_len']} ×{row['ratio']:.3f} [{row['ratio_lo']:.3f}, {row['ratio_hi']:.3f}] "
                        f"{row['status']}" for _, row in table.sort_values("seq_len").iterrows())
    if (table["status"] == "slower").any():
        return Answer(True, run, f"A/B {run}: {figures}")
    if verdict.code == 2:
        return Answer(None, run, f"A/B {run} could not judge: {'; '.join(verdict.reasons)[:300]}")
    return Answer(False, run, f"A/B {run}: {figures}")


def confirm(asks: list[Asked], grid: Grid, repo: Path, results_dir: Path, pairs: int, rounds: int,
            plugins: list[str], rule, measure: Callable | None = None, out=None) -> list[Answer]:
    """Run each A/B (`measure`: suite.run.ab.session.measure) into a folder of `results_dir`; every grid
    is narrowed first, so a grid that lacks a series' cases stops the check before any work."""
    from suite.analyse import paired
    from suite.present import comparison
    from suite.run.ab import session
    from suite.store import atomic
    from suite.store.rundir import RunDir

    measure, out = measure or session.measure, out or sys.stderr
    grids = [narrowed(grid, ask) for ask in asks]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    answers = []
    for i, (ask, small) in enumerate(zip(asks, grids)):
        run = RunDir.new(results_dir, f"{stamp}-history-confirm-{i}")
        print(f"confirming {ask.series} ({len(small.cases)} cases): {ask.before[:10]} against {ask.after[:10]}",
              file=out)
        try:
            frame = measure(run, small, ask.before, ask.after, repo, pairs, rounds, plugins, out=out)
        except RuntimeError as err:
            answers.append(Answer(None, run.name, f"A/B {run.name} could not run: {err}"))
            continue
        verdict = paired.verdict(frame, rule)
        if run.path.is_dir():  # its table beside its blocks, as `suite ab` leaves it
            atomic.write_text(run.path / "compare.md",
                              comparison.markdown(verdict, f"A {ask.before[:12]}", f"B {ask.after[:12]}", rule))
        answers.append(answer(verdict, run.name))
    return answers
