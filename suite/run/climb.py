"""Adaptive lengths, run side: after a round, each unsettled ladder's next length (suite.plan.ladder).

Writes, before the next round starts, plan.json with the grown case list (so `--resume` knows every
length chosen so far) and ladders.json with each series' decision (the report reads it).
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass, field, replace

import pandas as pd

import variants
from suite.analyse.fits import fit_power
from suite.analyse.terms import machines
from suite.plan.case import Case, reasons_of, series_key
from suite.plan.ladder import Ladder, rows_of
from suite.plan.settings import Settings
from suite.run import budget, forecast
from suite.run.budget import Offer
from suite.run.settle import Step, advance
from suite.store import table
from suite.store.row import Row
from suite.store.rundir import RunDir


@dataclass(frozen=True)
class Round:
    """The next round: its cases, those tried in one process first (case id -> the call limit that process must be
    within for the others to run), each case's predicted wall (s, every process), and the climbs' after it."""

    cases: list[Case]
    probes: dict[str, float] = field(default_factory=dict)
    cost_s: dict[str, float] = field(default_factory=dict)
    climbs_s: float = 0.0

    def tasks(self, replicates: int) -> list[tuple[Case, int]]:
        return [(case, r) for case in self.cases for r in range(1 if case.case_id in self.probes else replicates)]


def next_cases(
    run: RunDir,
    cases: list[Case],
    ladders: list[Ladder],
    settings: Settings,
    rows: list[Row],
    out=sys.stderr,
    spent_s: float = 0.0,
) -> Round:
    """The next round (one case per climbing ladder, or its midpoints); no cases when every ladder has stopped.
    `spent_s`: the run's wall time so far, against its budget (settings.budget_min; 0: none)."""
    frame = table.table(cases, rows)
    per_series = rows_of(frame, ladders)
    hosts = machines(run.env(), run.bandwidth())
    steps = [_step(ladder, per_series.get(ladder.key), settings, hosts) for ladder in ladders]
    at = budget.pace_of(rows, cases, settings.replicates, settings)
    if settings.budget_min > 0:
        steps = within(steps, per_series, settings, at, settings.budget_min * 60 - spent_s)
    lengths = {
        ladder.key: per_series[ladder.key]["seq_len"].astype(int).tolist()
        for ladder in ladders
        if ladder.key in per_series
    }
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
        print(
            f"lengths: {len(more)} more"
            + (f" ({filled} series add midpoints before they stop)" if filled else "")
            + (f"; stopped: {how}" if how else ""),
            file=out,
            flush=True,
        )
    else:
        print(f"lengths: every series has stopped: {how}", file=out, flush=True)
    return _round(more, steps, settings, at, per_series)


def _step(ladder: Ladder, rows, settings: Settings, hosts: dict | None = None) -> Step:
    if rows is None or rows.empty:
        return Step(ladder, None, "failed", "no rows of this series in the run")
    if (rows["status"] == "not_run").any():
        return Step(ladder, None, "failed", "the run stopped before every length was measured; --resume goes on")
    step = advance(
        ladder,
        rows,
        width=settings.ladder_width,
        max_call_s=settings.max_call_s,
        memory_gib=settings.memory_budget_gib,
        hosts=hosts,
        stretch_call_s=settings.stretch_call_s,
    )
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


def _round(more: list[Case], steps: list[Step], settings: Settings, at: budget.Pace, per_series: dict) -> Round:
    """The round's cases with their probes and predicted walls, and the ladders' climbs after it."""
    steps_of = {s.ladder.key: s for s in steps}
    probes, cost, climbs = {}, {}, 0.0
    for case in more:
        step = steps_of.get(series_key(case.key))
        call = step.call_s if step is not None and step.next == case.seq_len else _top_call(per_series, case)
        cost[case.case_id] = _price(case, call, per_series, settings, at)
        if step is not None and step.next == case.seq_len and step.probe:
            probes[case.case_id] = step.limit_s
    for step in steps:
        if step.next:
            lengths = round(math.log(step.ladder.high / step.next, step.ladder.step))
            climbs += budget.climb_s(
                step.call_s * step.ladder.step**step.slope,
                step.slope,
                step.ladder.step,
                lengths,
                step.limit_s,
                settings.replicates,
                at,
            )
    return Round(more, probes, cost, climbs)


def within(steps: list[Step], per_series: dict, settings: Settings, at: budget.Pace, left_s: float) -> list[Step]:
    """The steps the budget's `left_s` buys (suite.run.budget.ration): a next length not bought stops the series
    (stop "budget"), midpoints not bought are left out, and a settled series whose next length is within max_call_s
    climbs on with time nothing else needs."""
    offers, spare = [], {}
    for step in steps:
        if step.next:
            offers.append(Offer(step.ladder.key, _price(step, step.call_s, per_series, settings, at)))
        elif step.fill:
            top = _top_call(per_series, step.ladder.case(max(step.fill)))
            offers.append(Offer(step.ladder.key, _price(step, top, per_series, settings, at, len(step.fill))))
        elif step.stop == "settled" and (on := _spare(step, per_series.get(step.ladder.key), settings)):
            spare[step.ladder.key] = on
            offers.append(Offer(step.ladder.key, _price(step, on.call_s, per_series, settings, at), spare=True))
    bought, price = budget.ration(offers, left_s), {o.key: o.cost_s for o in offers}
    return [_bought(step, step.ladder.key in bought, price.get(step.ladder.key, 0.0), left_s, spare) for step in steps]


def _bought(step: Step, bought: bool, cost: float, left_s: float, spare: dict) -> Step:
    if step.ladder.key in spare:
        return spare[step.ladder.key] if bought else step
    if bought or not (step.next or step.fill):
        return step
    if step.fill and step.stop != "fill":  # a stop that stands without its midpoints
        return replace(step, fill=(), why=f"{step.why}; its midpoints not measured within the budget")
    lengths = ", ".join(map(str, (step.next,) if step.next else step.fill))
    return Step(
        step.ladder,
        None,
        "budget",
        f"n = {lengths} not reached within the budget (~{cost:.0f} s of "
        f"measuring, {max(left_s, 0):.0f} s left); " + (step.why or "it was still climbing"),
    )


def _spare(step: Step, rows, settings: Settings) -> Step | None:
    """A settled series' next length, where its predicted call is within max_call_s and its range allows it."""
    ok = rows[rows["status"] == "ok"].sort_values("seq_len") if rows is not None else None
    if ok is None or ok.empty or int(ok["seq_len"].max()) * step.ladder.step > step.ladder.high:
        return None
    n = ok["seq_len"].to_numpy(float)
    t = (ok["time_min_s"] if "time_min_s" in ok else ok["time_s"]).to_numpy(float)
    nxt = int(n[-1]) * step.ladder.step
    ahead = forecast.call_at(n, t, nxt, fit_power(n, t))
    if ahead.call_s > settings.max_call_s:
        return None
    return Step(
        step.ladder,
        nxt,
        why=f"{step.why}; climbs on in the budget's spare time",
        call_s=ahead.call_s,
        probe=ahead.uncertain,
        limit_s=settings.max_call_s,
        slope=ahead.slope,
    )


def _top_call(per_series: dict, case: Case, column: str = "time_s") -> float:
    """The call time (or `column`) of the series' largest measured length (a midpoint's call costs at most that;
    its setup is the one its next length's process repeats)."""
    rows = per_series.get(series_key(case.key))
    ok = rows[rows["status"] == "ok"] if rows is not None and column in rows else None
    if ok is None or ok.empty:
        return 0.0
    value = ok.sort_values("seq_len")[column].iloc[-1]
    return float(value) if pd.notna(value) else 0.0


def _price(step_or_case, call_s: float, per_series: dict, settings: Settings, at: budget.Pace, lengths: int = 1):
    """Predicted wall of `lengths` lengths of a series at `call_s` a call: every process's overhead, calls and the
    series' own setup at its top."""
    case = step_or_case.ladder.case(step_or_case.ladder.low) if isinstance(step_or_case, Step) else step_or_case
    setup = _top_call(per_series, case, "setup_s")
    return lengths * settings.replicates * (at.replicate_s(call_s) + setup)
