"""`history check --confirm`: each slowdown of a case's time or a series' lengths that a history shows,
measured again as an interleaved A/B (the commit before it against the newest run's) before it fails the
check.

A history's points are runs made hours or days apart, so a series that drifts against the others over
a night (docs/history.md measured it on this project's host) reads as a step, and a 10% step hides in
that drift as often as not. `suite ab` times two commits alternately in one sweep (A, B, B, A in
process pairs: suite.run.ab), where the drift cancels. So a slowdown the history found (by its levels,
its tail or the screen, suite.history.changes) is re-measured on its series' cases (a commit acts on a
series: every length of it in the newest run), the commit before it against the newest run's (the code
as it stands), and it is a regression only where the A/B would fail `suite ab` (suite.analyse.paired:
one of those cases called slower by its test and effect floor, or the cases slower together). An A/B
that cannot judge or cannot run (a side failed, a commit the repository lacks, no case ok in the
newest run) leaves the slowdown standing.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from suite.errors import UsageError, shown
from suite.plan.grid import Grid

CONFIRMED_KINDS = ("time", "lengths")  # an exponent is a ratio within a run: no drift between runs to cancel
FULL_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a commit as `git rev-parse` writes it (SHA-1, SHA-256)


@dataclass(frozen=True)
class Asked:
    """One A/B to run: a series' cases, the commit before its slowdown, and the newest run's (the code as it
    stands: a step anywhere since the commit before is in it)."""

    series_key: str
    series: str
    before: str
    after: str
    case_ids: tuple[str, ...]
    lengths: tuple[int, ...]


@dataclass(frozen=True)
class Answer:
    """What the A/B said: `confirmed` (None: it could not judge), its run's name, and a line of figures."""

    confirmed: bool | None
    run: str
    text: str


def asked(found: pd.DataFrame, cases: pd.DataFrame, newest: str, commit: str) -> list[Asked]:
    """The A/Bs that `found`'s slowdowns (change rows of kinds CONFIRMED_KINDS) need: one per series and
    commit before, against `commit` (the newest run `newest`'s), on the series' cases ok in that run."""
    ok = cases[(cases["run_key"] == newest) & (cases["status"] == "ok")]
    out = []
    mine = found[found["kind"].isin(CONFIRMED_KINDS)]
    for (key, before), rows in mine.groupby(["series_key", "before_commit"], sort=False):
        series = ok[ok["series_key"] == key].sort_values("seq_len")
        out.append(
            Asked(
                key,
                rows["series"].iloc[0],
                before,
                commit,
                tuple(series["case_id"]),
                tuple(int(n) for n in series["seq_len"]),
            )
        )
    return out


def narrowed(grid: Grid, ask: Asked) -> Grid:
    """`grid` with only the cases of `ask` (an adaptive series' lengths made from its ladder, as the runs
    climbed them); exit 2 where it holds none of them (the history's cases come from another grid)."""
    made = [
        *grid.cases,
        *(ladder.case(n) for ladder in grid.ladders for n in ask.lengths if ladder.low <= n <= ladder.high),
    ]
    cases = list({case.case_id: case for case in made if case.case_id in ask.case_ids}.values())
    if not cases:
        raise UsageError(
            f"--grid {grid.name}: none of {ask.series}'s {len(ask.case_ids)} cases of the newest run "
            f"(allowed: the grid the history's runs were made with)"
        )
    return replace(grid, cases=tuple(cases), ladders=())


def checked(ask: Asked) -> Asked:
    """`ask` whose two commits, read from the history, are full hashes (what the A/B checks out: never a
    name that git or the file system could take for something else); else exit 2."""
    for where, commit in (("before the slowdown", ask.before), ("of the newest run", ask.after)):
        if not isinstance(commit, str) or not FULL_HASH.fullmatch(commit):
            raise UsageError(
                f"history check --confirm: the history's git_commit {where} of {ask.series} = "
                f"{shown(commit)} (allowed: a full commit hash, 40 or 64 hex digits)"
            )
    return ask


def _unfit(ask: Asked, repo: Path) -> str | None:
    """Why `ask` cannot be measured (no case ran ok in the newest run; a commit that `repo` cannot check
    out), or None."""
    from suite.run.ab import checkouts

    if not ask.case_ids:
        return "no case of the series ran ok in the newest run"
    for field, commit in (("before the slowdown", ask.before), ("of the newest run", ask.after)):
        try:
            checkouts.resolve("base", commit, repo)
        except UsageError as err:
            return f"the commit {field} ({commit[:12]}) is not in --repo {repo}: {err}"
    return None


def answer(verdict, run: str) -> Answer:
    """The A/B's answer from its verdict (suite.analyse.paired): confirmed where it would fail `suite ab`
    (one of the cases called slower, or the series' cases slower together)."""
    table = verdict.cases
    figures = "; ".join(
        f"n={row['seq_len']} ×{row['ratio']:.3f} [{row['ratio_lo']:.3f}, {row['ratio_hi']:.3f}] {row['status']}"
        for _, row in table.sort_values("seq_len").iterrows()
    )
    called = (table["status"] == "slower").any()
    if called or verdict.code == 1:  # a case called, or the cases slower together (ab's common move)
        return Answer(True, run, f"A/B {run}: {figures}" + ("" if called else f" ({'; '.join(verdict.reasons)[:200]})"))
    if verdict.code == 2:
        return Answer(None, run, f"A/B {run} could not judge: {'; '.join(verdict.reasons)[:300]}")
    return Answer(False, run, f"A/B {run}: {figures}")


def confirm(
    asks: list[Asked],
    grid: Grid,
    repo: Path,
    results_dir: Path,
    pairs: int,
    rounds: int,
    plugins: list[str],
    rule,
    measure: Callable | None = None,
    out=None,
) -> list[Answer]:
    """Run each A/B (`measure`: suite.run.ab.session.measure) into a folder of `results_dir`; every grid
    is narrowed first, so a grid that lacks a series' cases stops the check before any work."""
    from suite.analyse import paired
    from suite.present import comparison
    from suite.run.ab import session
    from suite.store import atomic
    from suite.store.rundir import RunDir

    measure, out = measure or session.measure, out or sys.stderr
    asks = [checked(ask) for ask in asks]  # NB: a commit that is not a full hash exits 2 before any A/B
    grids = [narrowed(grid, ask) if ask.case_ids else None for ask in asks]  # NB: a wrong grid exits 2 before any A/B
    unfit = [_unfit(ask, repo) for ask in asks]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    answers = []
    for i, (ask, small, why) in enumerate(zip(asks, grids, unfit)):
        if why is not None:
            answers.append(Answer(None, "", f"not measured: {why}"))
            continue
        run = RunDir.new(results_dir, f"{stamp}-history-confirm-{i}")
        print(
            f"confirming {ask.series} ({len(small.cases)} cases): {ask.before[:10]} against {ask.after[:10]}", file=out
        )
        try:
            frame = measure(run, small, ask.before, ask.after, repo, pairs, rounds, plugins, out=out)
        except RuntimeError as err:
            answers.append(Answer(None, run.name, f"A/B {run.name} could not run: {err}"))
            continue
        verdict = paired.verdict(frame, rule)
        if run.path.is_dir():  # its table beside its blocks, as `suite ab` leaves it
            atomic.write_text(
                run.path / "compare.md",
                comparison.markdown(verdict, f"A {ask.before[:12]}", f"B {ask.after[:12]}", rule),
            )
        answers.append(answer(verdict, run.name))
    return answers
