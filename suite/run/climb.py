"""Adaptive lengths, run side: after a round, each unsettled ladder's next length (suite.plan.ladder).

Writes, before the next round starts, plan.json with the grown case list (so `--resume` knows every
length chosen so far) and ladders.json with each series' decision (the report reads it).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace

import variants
from suite.analyse.terms import machines
from suite.plan.case import Case, reasons_of
from suite.plan.ladder import Ladder, rows_of
from suite.plan.settings import Settings
from suite.run.settle import Step, advance
from suite.store import table
from suite.store.row import Row
from suite.store.rundir import RunDir


def next_cases(run: RunDir, cases: list[Case], ladders: list[Ladder], settings: Settings, rows: list[Row],
               out=sys.stderr) -> list[Case]:
    """The next round's cases (one per climbing ladder); [] when every ladder has stopped."""
    frame = table.table(cases, rows)
    per_series = rows_of(frame, ladders)
    hosts = machines(run.env(), run.bandwidth())
    steps = [_step(ladder, per_series.get(ladder.key), settings, hosts) for ladder in ladders]
    lengths = {ladder.key: per_series[ladder.key]["seq_len"].astype(int).tolist() for ladder in ladders
               if ladder.key in per_series}
    run.write_json(RunDir.LADDERS, {"ladders": [s.to_record(lengths.get(s.ladder.key, [])) for s in steps]})
    known = {case.case_id for case in cases}
    wanted = [s.ladder.case(m) for s in steps for m in ((s.next,) if s.next else s.fill)]
    more = list({c.case_id: c for c in wanted if c.case_id not in known}.values())
    stopped = Counter(s.stop for s in steps if not s.next and not s.fill)
    filled = sum(bool(s.fill) for s in steps if not s.next)
    how = ", ".join(f"{n} {stop}" for stop, n in sorted(stopped.items()))
    if more:
        plan = run.plan()
        plan["cases"] = plan["cases"] + [case.key for case in more]
        run.write_json(RunDir.PLAN, plan)
        print(f"lengths: {len(more)} more" + (f" ({filled} series add midpoints before they stop)" if filled else "")
              + (f"; stopped: {how}" if how else ""), file=out, flush=True)
    else:
        print(f"lengths: every series has stopped: {how}", file=out, flush=True)
    return more


def _step(ladder: Ladder, rows, settings: Settings, hosts: dict | None = None) -> Step:
    if rows is None or rows.empty:
        return Step(ladder, None, "failed", "no rows of this series in the run")
    if (rows["status"] == "not_run").any():
        return Step(ladder, None, "failed", "the run stopped before every length was measured; --resume goes on")
    step = advance(ladder, rows, width=settings.ladder_width, max_call_s=settings.max_call_s,
                   memory_gib=settings.memory_budget_gib, hosts=hosts, stretch_call_s=settings.stretch_call_s)
    if step.next is not None:
        try:
            variants.get(ladder.template.variant).resolve(step.next, dict(ladder.template.params))
        except ValueError as err:
            return Step(ladder, None, "failed", f"n = {step.next} is not a length of this variant: {err}")
    # NB: only lengths the implementation runs (reformer-pytorch skipped 360, not a multiple of 128,
    # and the skip stopped its ladder as failed); a midpoint it cannot run moves to the nearest
    # coarser multiple it can, still between its neighbours (360 -> 384 for reformer-pytorch)
    fill = (_runnable(ladder, m) for m in step.fill)
    return replace(step, fill=tuple(dict.fromkeys(m for m in fill if m is not None)))


ROUNDINGS = (16, 32, 64, 128, 256)


def _runnable(ladder: Ladder, m: int) -> int | None:
    """m, or the nearest multiple of 16, 32, … 256 that the implementation runs, strictly between
    m/√2 and m·√2 (the ladder's own lengths on either side); None when there is none."""
    for n in (m, *(unit * round(m / unit) for unit in ROUNDINGS)):
        if m / 2**0.5 < n < m * 2**0.5 and _runs_at(ladder.case(n)):
            return n
    return None


def _runs_at(case: Case) -> bool:
    try:
        return not reasons_of(case)
    except ValueError:
        return False
