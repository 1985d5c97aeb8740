"""A step at the newest nights of a series: its lengths' times judged together against the level before.

The levels' rule (suite.history.changes) cannot call three slow nights after a level of eight: a
two-sided Mann-Whitney test of 3 points against 8 has no p-value under 2/C(11, 3) = 0.012, above its
ALPHA, whatever the sizes; and one case's time is not judged by the tail's rule (one case's odd nights
come too often). A commit acts on a series, at one or more of its lengths at once, and on every night
since it came in; so the newest TAIL nights of a series are judged here as one step:

    deviation  each case's log time (as judged: against its run's level, or raw) less the median of
               its level: since the series' last older change point, the points before the step's
               first night (the split of the newest RECENT nights that fits the pooled deviations best)
    noise      each case's robust scale from its successive differences (1.4826 · their median absolute
               deviation / √2): a step adds one large difference among many, so it barely moves it
    a case     steps where the median of its newest TAIL deviations is beyond max(threshold, BAND · its
               noise): two of the three nights past the band (one odd night is no step, nor is one fast
               night of a step a miss)
    pooled     the median over the series' cases of their deviations, each night: the same test on it
    the series steps where the pooled deviations step, or where two or more of its cases step (a step at
               some lengths only: the median over four lengths moves by half of two lengths' step)

The step begins where one split of the newest RECENT nights fits the pooled deviations (or the stepped
cases' median) best, so a step older than TAIL nights keeps its commit range. A
series with fewer than MIN_POINTS points has no step; benchmarks/history_steps.py measured the rule's
false alarms and detections on the project's measured noise (docs/history.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from suite.history.changes import MIN_POINTS, MIN_SIZE, RECENT, TAIL, THRESHOLD, level_changes

BAND = 3.0  # a step's newest nights lie beyond the level by this many robust noise scales (and THRESHOLD)
MIN_CASES = 2  # cases of one series that step together make the series step


@dataclass(frozen=True)
class Step:
    """A series' step: the last point before it and the first after it, its size (the ratio after/before
    minus 1, the pooled deviations'), and the indices of the cases whose own newest nights are THRESHOLD
    or more slower (each slowed case: `sizes` holds every case's ratio minus 1)."""

    before: int
    after: int
    size: float
    cases: tuple[int, ...]
    sizes: tuple[float, ...]


def noise_scale(y: np.ndarray) -> float:
    """A series' robust noise scale from its successive differences (its finite points, in order)."""
    y = y[np.isfinite(y)]
    if len(y) < 3:
        return float("nan")
    diffs = np.diff(y)
    return 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2)


def _level_start(pooled: np.ndarray, threshold: float) -> int:
    """The first point of the level the newest nights are judged against: after the older points' last change
    before the newest RECENT (a change among them is the step's own first nights)."""
    older = [c for c in level_changes(pooled[:-TAIL], "time", threshold) if c.after < len(pooled) - RECENT]
    return older[-1].after if older else 0


def _beyond(dev: np.ndarray, width: float) -> bool:
    return bool(np.median(dev[-TAIL:]) > width)


def _start(dev: np.ndarray) -> int:
    """The first night of the step among the newest RECENT (leaving MIN_SIZE after it at least): where one
    split into two levels fits `dev` best in L1 (each side about its median)."""

    def cost(at: int) -> float:
        return float(np.abs(dev[:at] - np.median(dev[:at])).sum() + np.abs(dev[at:] - np.median(dev[at:])).sum())

    return min(range(len(dev) - RECENT, len(dev) - MIN_SIZE + 1), key=cost)


def _deviations(logs: np.ndarray) -> np.ndarray:
    """Each case's log times less the median of its level before the step: the points before the split
    of the newest RECENT nights that fits the pooled deviations best (a step older than TAIL nights
    leaves its own first nights out of the level it is judged against)."""
    dev = logs - np.median(logs[:, :-TAIL], axis=1, keepdims=True)
    at = _start(np.median(dev, axis=0))
    return logs - np.median(logs[:, :at], axis=1, keepdims=True)


def series_step(logs, threshold: float = THRESHOLD["time"], band: float = BAND) -> Step | None:
    """The step of one series' newest nights, or None. `logs`: its cases' log times, cases × runs (runs in
    order, every case measured in each; the values as `history check` judges them)."""
    logs = np.atleast_2d(np.asarray(logs, float))
    if logs.shape[1] < MIN_POINTS or not np.isfinite(logs).all():
        return None
    pooled_raw = np.median(logs - np.median(logs, axis=1, keepdims=True), axis=0)
    first = _level_start(pooled_raw, threshold)
    if logs.shape[1] - TAIL - first < MIN_POINTS - TAIL:
        return None
    logs = logs[:, first:]
    dev = _deviations(logs)
    widths = np.array([max(threshold, band * noise_scale(row)) for row in logs])
    stepped = [i for i, row in enumerate(dev) if _beyond(row, widths[i])]
    pooled = np.median(dev, axis=0)
    pooled_width = max(threshold, band * noise_scale(pooled))
    if not (_beyond(pooled, pooled_width) or (len(logs) >= MIN_CASES and len(stepped) >= MIN_CASES)):
        return None
    start = _start(pooled if _beyond(pooled, pooled_width) else np.median(dev[stepped], axis=0))
    sizes = [float(np.median(row[start:]) - np.median(row[:start])) for row in logs]
    together = np.median(logs[:, start:] - np.median(logs[:, :start], axis=1, keepdims=True), axis=0)
    return Step(
        first + start - 1,
        first + start,
        math.expm1(float(np.median(together))),
        tuple(i for i, s in enumerate(sizes) if s >= threshold),
        tuple(math.expm1(s) for s in sizes),
    )
