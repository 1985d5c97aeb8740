"""Power-law fits with an overhead floor, and the verdict rule (docs/CLAIMS.md, "Verdicts").

Pure numpy/scipy (scipy imported when a fit runs: `python -m suite run` starts without it):
`log(cost) = a + p·log(x)` on the points above the floor, found by fitting
`cost = floor + c·xᵖ`; the small-x points where the floor is more than FLOOR_SHARE of the cost
are left out, and named — but only where the floor is real: the model with it must fit the points
significantly better than the plain power law (an F test at FLOOR_LEVEL), or be at least
FLOOR_DOMINANT of the smallest point's cost. Without that test a
floor fitted to noise, or to a rate that merely rises with x, took one length or two off a series
in one run and not in the next, and its span with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from suite.analyse.claim_rule import Reason, Why

FLOOR_SHARE = 0.10  # a point whose modelled floor is more than this share of its cost is left out
TOLERANCE = 0.15  # docs/CLAIMS.md: confirmed when the 95% interval lies within claimed ± 0.15
FLOOR_LEVEL = 0.05  # the floor model must beat the plain power law at this significance...
FLOOR_DOMINANT = 0.5  # ... unless the floor is at least this share of the smallest point's cost
MIN_SPAN = 16.0  # docs/CLAIMS.md: a verdict needs a span of x of at least 16x
MAX_WIDTH = 0.2  # docs/CLAIMS.md: a verdict states the exponent to ±0.1 at worst
MIN_POINTS = 3
LEVEL = 0.95


@dataclass(frozen=True)
class Fit:
    """A power-law fit of y against x, with what was left out and why."""

    slope: float
    lo: float  # 95% interval of the slope
    hi: float
    intercept: float
    used: tuple[float, ...]  # the x of the points fitted
    excluded: tuple[float, ...] = ()  # the x of the points under the overhead floor
    floor: float = 0.0  # modelled constant floor, in y's unit

    @property
    def span(self) -> float:
        return max(self.used) / min(self.used) if self.used else 0.0


def floor_model(x, y, exponents=np.linspace(0.25, 4.0, 751)) -> tuple[float, float, float]:
    """(floor, c, p) minimizing the relative error of y ≈ floor + c·xᵖ, floor ≥ 0, c > 0, p ≥ 0.25.

    The cost above a floor grows with x: at p near 0 (or below) the two terms are one constant and
    a flat series (a sleep, all floor) split between them at random, often with no floor at all.

    For each p on a grid the model is linear in (floor, c): the 2x2 normal equations are solved
    for every p at once, with the floor clamped to 0 where it comes out negative.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    u = 1.0 / y  # (k,)  the floor's column, relative
    w = x[None, :] ** exponents[:, None] / y[None, :]  # (P, k)  the power term's column, relative
    suu, suw, sww = (u * u).sum(), (w * u).sum(1), (w * w).sum(1)
    su, sw = u.sum(), w.sum(1)
    det = suu * sww - suw**2
    with np.errstate(divide="ignore", invalid="ignore"):
        floor = np.where(det > 0, (su * sww - suw * sw) / det, 0.0)
        c = np.where(det > 0, (suu * sw - suw * su) / det, 0.0)
        only_c = sw / sww  # floor clamped to 0
    clamp = floor < 0
    floor, c = np.where(clamp, 0.0, floor), np.where(clamp, only_c, c)
    sse = ((1.0 - floor[:, None] * u[None, :] - c[:, None] * w) ** 2).sum(1)
    sse = np.where(c > 0, sse, np.inf)
    best = int(np.argmin(sse))
    return float(floor[best]), float(c[best]), float(exponents[best])


def floor_matters(x, y, floor: float, c: float, p: float, level: float | None = None) -> bool:
    """Does `floor + c·xᵖ` fit log(y) significantly better than a straight line in log-log?

    The extra-sum-of-squares F test (one parameter more, k − 3 degrees of freedom left)."""
    from scipy import stats

    lx, ly = np.log(x), np.log(y)
    line = stats.linregress(lx, ly)
    sse_line = float(((ly - line.intercept - line.slope * lx) ** 2).sum())
    sse_floor = float(((ly - np.log(floor + c * x**p)) ** 2).sum())
    dof, level = len(x) - 3, FLOOR_LEVEL if level is None else level
    if level >= 1.0:  # the test switched off: every fitted floor counts (the versions before it)
        return True
    if dof < 1 or sse_line <= sse_floor:
        return False
    f = (sse_line - sse_floor) / max(sse_floor / dof, 1e-300)
    return bool(stats.f.sf(f, 1, dof) < level)


def fit_power(x, y, *, exclude_floor: bool = True, level: float = LEVEL) -> Fit | None:
    """Least squares in log-log on the points above the floor; None with fewer than 3 points."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y = x[keep], y[keep]
    order = np.argsort(x)
    x, y = x[order], y[order]
    if len(np.unique(x)) < MIN_POINTS:
        return None
    floor, excluded = 0.0, np.zeros(len(x), bool)
    if exclude_floor and len(x) > MIN_POINTS:
        floor, c, p = floor_model(x, y)
        share = floor / (floor + c * x**p) if floor > 0 else np.zeros(len(x))  # NB: p >= 0.25
        # a floor that is most of the smallest point's cost is taken as it is: a power law can only
        # mimic it by flattening (a series of sleeps fits x^0.02); a smaller one must pass the F test
        if share[0] >= FLOOR_DOMINANT or (share[0] > 0 and floor_matters(x, y, floor, c, p)):
            # only a leading run of small x: the floor's share falls as x grows
            excluded = np.cumprod(share > FLOOR_SHARE).astype(bool)
            if len(np.unique(x[~excluded])) < MIN_POINTS:  # keep the largest 3 at least
                excluded[-MIN_POINTS:] = False
    from scipy import stats

    lx, ly = np.log(x[~excluded]), np.log(y[~excluded])
    res = stats.linregress(lx, ly)
    dof = len(lx) - 2
    stderr = res.stderr
    if dof > 0 and not np.isfinite(stderr):  # NB: y exactly constant: linregress's r is 0/0
        resid = ly - (res.intercept + res.slope * lx)
        stderr = math.sqrt(float(resid @ resid) / dof / float(((lx - lx.mean()) ** 2).sum()))
    half = stats.t.ppf(0.5 + level / 2, dof) * stderr if dof > 0 else math.inf
    if not np.isfinite(half):
        half = math.inf
    return Fit(
        slope=float(res.slope),
        lo=float(res.slope - half),
        hi=float(res.slope + half),
        intercept=float(res.intercept),
        used=tuple(map(float, x[~excluded])),
        excluded=tuple(map(float, x[excluded])),
        floor=floor,
    )


def verdict(
    fit: Fit | None,
    claimed: float | None,
    *,
    tolerance: float = TOLERANCE,
    min_span: float = MIN_SPAN,
    max_width: float = MAX_WIDTH,
) -> tuple[str, Why]:
    """(verdict, why) per docs/CLAIMS.md: the 95% interval against claimed ± tolerance, and no wider
    than max_width (a wide interval's side of an edge is what one run's noise put it on)."""
    if claimed is None or (isinstance(claimed, float) and math.isnan(claimed)):
        return "no claim", Why(Reason.NO_CLAIM)
    if fit is None:
        return "inconclusive", Why(Reason.NO_FIT, {"needed": MIN_POINTS})
    if fit.span < min_span:
        return "inconclusive", Why(
            Reason.SHORT_SPAN, {"span": fit.span, "after": " after the floor", "needed": min_span}
        )
    facts = {"lo": fit.lo, "hi": fit.hi, "claimed": claimed, "tolerance": tolerance}
    low, high = claimed - tolerance, claimed + tolerance
    if fit.hi - fit.lo > max_width + 1e-9:
        return "inconclusive", Why(Reason.WIDE, {**facts, "width": fit.hi - fit.lo, "max_width": max_width})
    if low <= fit.lo and fit.hi <= high:
        return "confirmed", Why(Reason.WITHIN, facts)
    if fit.hi < low or fit.lo > high:
        return "refuted", Why(Reason.OUTSIDE, facts)
    return "inconclusive", Why(Reason.OVERLAPS, facts)
