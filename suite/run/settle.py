"""A ladder's decision after a round (suite.plan.ladder): the next length, or why it stops (settled, the
range's max, the time of one call, the memory budget, a failed case) and what would settle it; the run's wall-time
budget (suite.run.budget) may stop it too, applied by suite.run.climb.
Pure: no files, no processes (suite.run.climb drives the rounds)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.analyse import terms
from suite.analyse.claim_rule import Reason, Tells, Why
from suite.analyse.exponents import claimed_exponent
from suite.analyse.fits import MIN_SPAN, TOLERANCE, fit_power, verdict
from suite.plan.ladder import Ladder
from suite.run import forecast


@dataclass(frozen=True)
class Step:
    """A ladder's decision after a round: the next length, or why it stopped and what would settle it."""

    ladder: Ladder
    next: int | None
    stop: str = ""  # settled, max, time, memory, budget, failed; fill: the midpoints before a doubling
    why: str = ""
    fill: tuple[int, ...] = ()  # with a stop: midpoints measured before it stands
    call_s: float = 0.0  # with a next length: its predicted call time (suite.run.forecast)
    probe: bool = False  # ... uncertain: tried in one process before its other replicates
    limit_s: float = 0.0  # ... the call limit it climbs under (the probe's other processes run within it)
    slope: float = 2.0  # ... the exponent its call was predicted with (the budget prices the climb on with it)

    def to_record(self, lengths: list[int]) -> dict:
        return {
            "series": self.ladder.key,
            "label": self.ladder.template.label().replace(f"n={self.ladder.low} ", ""),
            "stop": self.stop,
            "why": self.why,
            "lengths": sorted(lengths),
            **self.ladder.to_plan(),
        }


def advance(
    ladder: Ladder,
    rows: pd.DataFrame,
    *,
    width: float,
    max_call_s: float,
    memory_gib: float,
    hosts: dict | None = None,
    stretch_call_s: float = 0.0,
) -> Step:
    """The ladder's next length from its series' rows (the run's table: one row per case). `hosts`:
    the run's caches (suite.analyse.terms.machines), for the cost model's verdict. A series whose overheads
    still hide its claimed term climbs on to calls of `stretch_call_s` where that is longer than `max_call_s`."""
    measured = rows.sort_values("seq_len")
    ok, bad = measured[measured["status"] == "ok"], measured[measured["status"] != "ok"]
    claimed = claimed_exponent("seq_len", "time", measured.iloc[0]) if len(measured) else None  # in n_q for cross
    fastest = ok["time_min_s"] if "time_min_s" in ok else ok["time_s"]  # what the verdict fits (older tables: median)
    n, t = ok["seq_len"].to_numpy(float), fastest.to_numpy(float)
    fit = fit_power(n, t, exclude_floor=claimed != 0)  # as the analysis fits it (a constant claimed: every point)
    fill = midpoints(ladder, n, fit)
    if not bad.empty:
        first = bad.iloc[0]
        return Step(
            ladder,
            None,
            "failed",
            f"n = {int(first['seq_len'])} {first['status']} "
            f"({str(first['reason'])[:80]}…): " + _settle(fit, claimed, width),
            fill,
        )
    status, reason, longer = _verdict(fit, claimed, ok, hosts)
    why = str(reason)
    marginal = longer and status != "inconclusive"  # its test at its level, or contested: the next length may turn it
    if (
        fit is not None
        and fit.span >= MIN_SPAN
        and fit.hi - fit.lo <= width
        and status != "inconclusive"
        and not marginal
    ):
        # NB: a 5-point fit can settle in one run and not in the next: it stands once its midpoints agree
        # (docs/performance.md, "How often two full runs agree")
        return Step(ladder, None, "settled", f"{status}: [{fit.lo:.2f}, {fit.hi:.2f}] over {fit.span:.0f}x", fill)
    if status == "inconclusive":
        todo = why
    elif marginal:
        todo = f"{status} {why}: longer lengths would tell"
    else:
        todo = _settle(fit, claimed, width)
    nxt = int(n.max()) * ladder.step
    slope = min(3.0, max(1.0, fit.slope if fit is not None else 2.0))
    # NB: a series that cannot climb, whose midpoints are measured and whose cost model still lacks
    # lengths, gets its top interval's midpoint: cheaper than the top call, which ran (a series can stop one length
    # short of a verdict where a faster host's next length fits in max_call_s: docs/performance.md, "Figures behind
    # the code's choices")
    last = fill or (
        _top(ladder, n, fit, float(t[-1]), slope, max_call_s, stretch_call_s)
        if reason.tells is Tells.MORE_LENGTHS
        else ()
    )
    if nxt > ladder.high:
        return Step(ladder, None, "max", f"stopped at the range's max n = {ladder.high}: " + todo, last)
    ahead = forecast.call_at(n, t, nxt, fit)
    call_s = ahead.call_s
    # NB: only where the length alone would tell: where the overheads still hide the claim, where the rise at the
    # span's top edge may be a higher term or a cache's step, and where the higher term's test is at its level
    # (suite.analyse.cost.MARGIN); the series that showed each: docs/CLAIMS.md, "Verdicts"
    limit = max(max_call_s, stretch_call_s) if longer else max_call_s
    if call_s > limit:
        allowed = f"max_call_s = {max_call_s:g}" + (f", stretch_call_s = {limit:g}" if limit > max_call_s else "")
        return Step(
            ladder,
            None,
            "time",
            f"n = {nxt} would take ~{call_s:{'.2g' if call_s < 10 else '.0f'}} s a call ({allowed}): " + todo,
            last,
        )
    need = _memory_at(measured, nxt)
    if need > memory_gib * 2**30:
        return Step(
            ladder,
            None,
            "memory",
            f"n = {nxt} needs ~{need / 2**30:.0f} GiB (memory_budget_gib = {memory_gib:g}): " + todo,
            last,
        )
    if status == "inconclusive" and reason.reason is Reason.FREEDOM and fill:
        # NB: the cost model has too few lengths to look for a higher term: the midpoints (~1/6 of the
        # top call) give it more before a doubling (2x the top call) is spent
        return Step(ladder, None, "fill", f"{why}: the midpoints first", fill)
    return Step(ladder, nxt, call_s=call_s, probe=ahead.uncertain, limit_s=limit, slope=ahead.slope)


def _verdict(fit, claimed, ok: pd.DataFrame, hosts: dict | None) -> tuple[str, Why, bool]:
    """The verdict the report will give: the cost model's (suite.analyse.cost), so that a series
    whose overheads still hide its leading term, or whose rise at the top may be a cache's, climbs
    on; the power law's where nothing is claimed in n; and whether only longer lengths can tell (`stretch_call_s`):
    the overheads still hide the claim, the rise at the top may be a cache's step, the higher term's test
    sits at its level (CostVerdict.at_level), or a refutation is contested by a power law that reaches the claim."""
    if claimed is None or pd.isna(claimed) or ok["seq_len"].nunique() < 3:
        return (*verdict(fit, claimed), False)
    fastest = ok.groupby("seq_len")["time_min_s" if "time_min_s" in ok else "time_s"].median()
    result = terms.judge_series(fastest, ok, "seq_len", float(claimed), hosts, bootstrap=0)
    hidden = result.verdict == "inconclusive" and result.reason.tells is Tells.LONGER_LENGTHS
    test = {"higher": result.higher, "higher_p": result.higher_p, "share": result.higher_share}
    if result.at_level:  # what the stop says: the test, not the whole why the report shows beside it
        return result.verdict, Why(Reason.AT_LEVEL, test), True
    if result.verdict == "refuted" and fit is not None and fit.lo < claimed + TOLERANCE:
        # NB: contested: the higher term's share says the time grows faster than the claim, its power law that it
        # may not: such a series settled refuted on one host and climbed to a confirmation on another (docs/CLAIMS.md,
        # "Verdicts"; docs/performance.md, "Figures behind the code's choices")
        return (
            "refuted",
            Why(
                Reason.CONTESTED,
                {**test, "lo": fit.lo, "hi": fit.hi, "claimed": float(claimed), "tolerance": TOLERANCE},
            ),
            True,
        )
    return result.verdict, result.reason, hidden


def midpoints(ladder: Ladder, n: np.ndarray, fit, top: bool = False) -> tuple[int, ...]:
    """Lengths halfway (geometrically) between the ladder's own lengths above the floor, below the
    top interval (`top`: in it alone), that are not measured yet.

    A series that stops (settled, time, memory, the range's max, a failed length) gets these once: they cost
    at most ~1/6 of the series' largest call for an O(n²) one (the top interval, the dear one, is left
    alone) and take a 5-point fit's interval to ~0.7 of its width (more points, more degrees of freedom).
    """
    if fit is None:
        return ()
    lengths, m = [], ladder.low  # the ladder's own lengths: low·stepᵏ up to the largest measured
    while m <= n.max():
        lengths += [m] if m >= min(fit.used) else []
        m *= ladder.step
    pairs = zip(lengths[-2:-1], lengths[-1:]) if top else zip(lengths[:-2], lengths[1:-1])
    halves = (int(8 * round(math.sqrt(a * b) / 8)) for a, b in pairs)
    return tuple(m for m in halves if m not in n)


def _top(
    ladder: Ladder, n: np.ndarray, fit, top_s: float, slope: float, max_call_s: float, stretch_call_s: float
) -> tuple[int, ...]:
    """The top interval's midpoint, where its call (from the top call's time and the fit's slope) is within
    max_call_s, or within stretch_call_s where the top call ran past max_call_s (a stretched series whose top
    path is fitted alone asks for one more length so: docs/performance.md, "(28) Random gathers at the
    machine's measured rate, and the card on it", item (29))."""
    limit = max(max_call_s, stretch_call_s) if top_s > max_call_s else max_call_s
    return tuple(m for m in midpoints(ladder, n, fit, top=True) if top_s * (m / n.max()) ** slope <= limit)


def _memory_at(measured: pd.DataFrame, n: int) -> float:
    """Peak bytes at n, extrapolated from the largest point with the peak-memory exponent (2 without a fit)."""
    peaks = measured[["seq_len", "peak_bytes"]].dropna()
    peaks = peaks[peaks["peak_bytes"] > 0]
    if peaks.empty:
        return 0.0
    fit = fit_power(peaks["seq_len"].to_numpy(float), peaks["peak_bytes"].to_numpy(float))
    slope = min(3.0, max(0.0, fit.slope)) if fit is not None else 2.0
    last = peaks.iloc[-1]
    return float(last["peak_bytes"]) * (n / float(last["seq_len"])) ** slope


def _settle(fit, claimed, width: float) -> str:
    """What would settle the verdict, read off the fit (the verdict's own reason says how it stands)."""
    if fit is None:
        return "a lower min would add points"
    if fit.span < MIN_SPAN:
        return f"extend to n = {int(max(fit.used) * MIN_SPAN / fit.span)} for a {MIN_SPAN:.0f}x span above the floor"
    if (
        claimed is not None
        and fit.lo < claimed + TOLERANCE
        and fit.hi > claimed - TOLERANCE
        and not (claimed - TOLERANCE <= fit.lo and fit.hi <= claimed + TOLERANCE)
    ):
        return (
            "larger n (the asymptotic regime) would tell"
            if abs(fit.slope - claimed) > TOLERANCE
            else "a narrower interval would tell"
        )
    if fit.hi - fit.lo > width:
        return f"interval {fit.hi - fit.lo:.2f} wide, {width:g} wanted: more lengths or replicates would narrow it"
    return f"the fit is settled nonetheless ([{fit.lo:.2f}, {fit.hi:.2f}] over {fit.span:.0f}x)"
