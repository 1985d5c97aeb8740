"""`compare --confirm`: re-run the flagged cases with the code checked out now, in fresh processes,
and judge them against the base with the first pass's grid shift and run noise (never re-estimated
from the flagged subset, which would remove a regression shared by many cases)."""

from __future__ import annotations

import sys
import time

import pandas as pd

from suite.analyse import regression
from suite.plan.grid import check_plan
from suite.run import executors, runner
from suite.store.rundir import RunDir


def confirm(
    verdict: regression.Verdict,
    base: pd.DataFrame,
    new: RunDir,
    rule: regression.Rule,
    force: bool = False,
    out=sys.stderr,
    given_plugins: list[str] = (),
) -> regression.Verdict:
    """`given_plugins`: those named on the command line (and loaded); the run's own must be among them."""
    from suite.run import plugins

    flagged = verdict.cases[verdict.cases["status"] == "slower"]
    if flagged.empty:  # a shift of the whole grid blocked, no case on its own: nothing to re-run
        print("confirming: no case flagged on its own; the grid's shift stands", file=out)
        return verdict
    plan = runner.load(new)
    by_id = {case.case_id: case for case in plan.cases}
    cases = [by_id[case_id] for case_id in flagged["case_id"] if case_id in by_id]
    plugins.require(plan.plugins, list(given_plugins), new.name)
    check_plan(cases, [], str(new.path / RunDir.PLAN))  # NB: as --resume does: an edited case fails here
    executors.check("local", None, None, plan.settings.allocator)  # NB: a run on jemalloc, here without it
    rerun = RunDir.new(new.path.parent, f"{new.name}-confirm-{time.strftime('%H%M%S')}")
    rerun.path.mkdir(parents=True)
    print(f"confirming {len(cases)} flagged case(s) in {rerun.path}", file=out)
    runner.run(run=rerun, cases=cases, settings=plan.settings, plugins=plan.plugins, resume=False, out=out)
    first = verdict.cases.attrs
    again = regression.cases(
        base[base["case_id"].isin(flagged["case_id"])],
        rerun.read_table(),
        rule,
        shift=first.get("applied_shift", 0.0),
        run_sigma=first.get("run_sigma"),
    )
    still = set(again.loc[again["status"] == "slower", "case_id"])
    return regression.reconfirm(verdict, still, rule, force)
