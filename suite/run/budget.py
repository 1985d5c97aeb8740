"""The run's wall-time budget: the pace the run has measured of itself, the time its work left will take, and
which next lengths the time left buys.

A case's wall time is, per process, an overhead plus a number of calls times its call time (`Pace`), both
fitted to the (case, process) walls measured so far; a case whose call time is not predicted yet (the first round)
is priced by suite.plan.shard's prior, scaled by how far the run's measured walls are from that prior so far.
A ladder's further climb is priced from its next call (suite.run.forecast) up to the call limit or the range's max.
Pure: numbers in, numbers and decisions out (suite.run.climb and suite.run.runner apply them).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from suite.errors import UsageError
from suite.plan.shard import CALLS_PER_REPLICATE, START_S

UNITS = {"s": 1 / 60, "m": 1.0, "min": 1.0, "h": 60.0}
MOST_MIN = 7 * 24 * 60.0  # a week
MIN_FIT = 5  # (case, process) walls before the overhead and the calls are fitted, not assumed


def parse(text: str, field: str = "--budget") -> float:
    """Minutes from a time with its unit (s, m, min, h) or a bare number of minutes; 0 is no budget. UsageError
    names the rule."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(s|m|min|h)?\s*", str(text))
    minutes = float(match[1]) * UNITS[match[2] or "m"] if match else math.nan
    if not 0 <= minutes <= MOST_MIN:
        raise UsageError(
            f"{field} {text!r} (allowed: a time such as 90s, 20m or 1.5h, a bare number in minutes, "
            f"up to {MOST_MIN / 60:.0f}h; 0 for none)"
        )
    return minutes


@dataclass(frozen=True)
class Pace:
    """A process's wall time on a case: overhead_s + calls × its call time; `scale`: the measured walls of the
    cases done over the prior's for them (how much slower or faster this host is than the prior assumes)."""

    overhead_s: float = START_S
    calls: float = CALLS_PER_REPLICATE
    scale: float = 1.0

    def replicate_s(self, call_s: float) -> float:
        return self.overhead_s + self.calls * call_s


def pace(walls, calls, priors) -> Pace:
    """The pace from each finished (case, process): its wall, its call time (NaN where it failed) and the
    prior's price of it (suite.plan.shard.predicted_s over the replicates)."""
    wall, call, prior = (np.asarray(v, float) for v in (walls, calls, priors))
    if wall.size == 0:
        return Pace()
    scale = float(wall.sum() / prior.sum()) if prior.sum() > 0 else 1.0
    ok = np.isfinite(call) & np.isfinite(wall)
    if ok.sum() < MIN_FIT or np.ptp(call[ok]) <= 0:
        return Pace(scale=scale)
    from scipy.optimize import nnls

    (overhead, k), _ = nnls(np.column_stack([np.ones(ok.sum()), call[ok]]), wall[ok])
    return Pace(float(overhead), float(k) if k > 0 else CALLS_PER_REPLICATE, scale)


def climb_s(call_s: float, slope: float, step: int, lengths: int, limit_s: float, replicates: int, at: Pace) -> float:
    """The wall time of a ladder's next `lengths` lengths from its next call `call_s`, each `step`x longer and
    its call step**slope x dearer, up to the first whose call would pass `limit_s`."""
    total = 0.0
    for _ in range(max(0, lengths)):
        if call_s > limit_s:
            break
        total += replicates * at.replicate_s(call_s)
        call_s *= step ** max(slope, 0.0)
    return total


@dataclass(frozen=True)
class Offer:
    """A ladder's next lengths and their predicted wall time, offered to the budget."""

    key: str
    cost_s: float
    spare: bool = False  # a settled series that would climb on: bought only with time nothing else needs


def ration(offers: list[Offer], left_s: float) -> set[str]:
    """The keys of the offers the time left buys: those that would change a verdict first, then the spare ones,
    each group cheapest first (the most lengths for the time), while the running total fits in `left_s`."""
    bought, spent = set(), 0.0
    for offer in sorted(offers, key=lambda o: (o.spare, o.cost_s, o.key)):
        if spent + offer.cost_s <= left_s:
            bought.add(offer.key)
            spent += offer.cost_s
    return bought


def remaining_s(round_s: float, climbs_s: float, spent_s: float, budget_s: float) -> float:
    """The run's time left: this round's cases left and the ladders' climbs, within the budget where one is set."""
    left = round_s + climbs_s
    return min(left, max(budget_s - spent_s, round_s)) if budget_s > 0 else left


def pace_of(rows, cases, replicates: int, settings) -> Pace:
    """The pace from the run's journal rows (suite.store.row.Row) of these cases, their setup (a compile, a path's
    tables) left out: a series' own setup is added to its next length's price (suite.run.climb)."""
    from suite.plan.shard import predicted_s

    by_id = {case.case_id: case for case in cases}
    done = [row for row in rows if row.case_id in by_id and row.wall_s is not None and row.status != "killed"]
    prior = {cid: predicted_s(case, settings) / replicates for cid, case in by_id.items()}
    return pace(
        [row.wall_s - (row.setup_s or 0.0) for row in done],
        [row.time_s if row.status == "ok" and row.time_s is not None else math.nan for row in done],
        [prior[row.case_id] for row in done],
    )


def prior_climbs_s(ladders, settings) -> float:
    """Before anything is measured: each ladder's climb past its first round, from the prior's call time at its
    next length and its claimed exponent, up to max_call_s or its range's max."""
    from suite.plan.ladder import start_lengths
    from suite.plan.shard import predicted_call_s

    total = 0.0
    for ladder in ladders:
        top = start_lengths(ladder.low, ladder.high, ladder.step)[-1]
        lengths = int(math.log(ladder.high / top, ladder.step) + 1e-9)
        if lengths < 1:
            continue
        here, there = predicted_call_s(ladder.case(top)), predicted_call_s(ladder.case(top * ladder.step))
        slope = math.log(there / here, ladder.step) if here > 0 and there > 0 else 2.0
        total += climb_s(there, slope, ladder.step, lengths, settings.max_call_s, settings.replicates, Pace())
    return total
