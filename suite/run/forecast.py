"""A series' next call time, read off its own measured times (suite.analyse.fits), with how sure it is.

The ladder (suite.run.settle) stops a series whose next call would pass max_call_s; the budget
(suite.run.budget) prices the next length with it. Pure: numbers in, a Forecast out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_POINTS = 4  # fewer fitted lengths than this: the slope's interval is too wide to trust alone
WIDE = 1.5  # the upper bound over the prediction above which a length is tried in one process first
RISE = 0.3  # the top interval's slope over the fit's by more than this: a rise at the top (a cache's step, a path)
DEFAULT_SLOPE = 2.0  # a series with no fit yet (fewer than 3 lengths): the all-pairs cost


@dataclass(frozen=True)
class Forecast:
    """The predicted time of one call at a length, its upper bound (the fit's 95% slope, or the top
    interval's slope where steeper), and whether it is too uncertain to spend every replicate on at once."""

    call_s: float
    hi_s: float
    uncertain: bool
    why: str = ""  # what makes it uncertain
    slope: float = DEFAULT_SLOPE  # the exponent it was extrapolated with


def call_at(n: np.ndarray, t: np.ndarray, nxt: float, fit) -> Forecast:
    """The call time at `nxt` from the series' measured lengths `n` (ascending) and fastest times `t`.

    The slope is the fit's (its points above the overhead floor), unclamped, or the top interval's where that is
    steeper by more than RISE: a series whose time rises at its top (a cache's step, a path change) keeps rising
    across the next interval rather than falling back to its fitted slope at once. Anchored on the top point."""
    top_n, top_t = float(n[-1]), float(t[-1])
    ratio = nxt / top_n
    local = _top_slope(n, t)
    if fit is None:
        slope = max(DEFAULT_SLOPE, local if local is not None else 0.0)
        return Forecast(
            top_t * ratio**slope, top_t * ratio ** (slope + 1.0), True, "fewer than 3 lengths fitted", slope
        )
    slope, hi = fit.slope, fit.hi if math.isfinite(fit.hi) else fit.slope + 1.0
    why = []
    if local is not None and local > slope + RISE:
        why.append(f"the top interval rises as n^{local:.2f}, the fit as n^{fit.slope:.2f}")
        slope, hi = local, max(hi, local + (hi - fit.slope))
    if len(fit.used) < MIN_POINTS:
        why.append(f"{len(fit.used)} lengths fitted")
    call, upper = top_t * ratio**slope, top_t * ratio ** max(hi, slope)
    if upper > WIDE * call:
        why.append(f"up to {upper / call:.1f}x the prediction")
    return Forecast(call, upper, bool(why), "; ".join(why), slope)


def _top_slope(n: np.ndarray, t: np.ndarray) -> float | None:
    """The slope in log-log between the two largest lengths; None with one length."""
    if len(n) < 2 or n[-1] <= n[-2] or t[-2] <= 0 or t[-1] <= 0:
        return None
    return float(np.log(t[-1] / t[-2]) / np.log(n[-1] / n[-2]))
