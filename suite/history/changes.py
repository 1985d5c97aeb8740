"""Change points of one series over commits, and the class of its tail (as PyTorch's HUD names them).

Pure numpy/scipy on one ordered series (no files, no tables). The levels are asv's: its exact
penalised piecewise-constant L1 fit (`asv.step_detect.solve_potts`, the solver under asv's own
`detect_steps`), a step costing PENALTY of the series' robust noise scale, each level MIN_SIZE points
at least, so one slow point at the end is not yet a change (HUD: a regression is two violations in a
row). asv's `detect_steps` picks its penalty by an information criterion instead; on this machine's
noise it needed about ten points after a step before it split one off (docs/history.md), too late for
a nightly gate. On those levels:

- each boundary's size is the difference of the two levels' medians (time: in log, so a ratio; an
  exponent: as it is) with a 95% bootstrap interval (scipy.stats.bootstrap, percentile, seeded);
- a boundary is a change point where the size is at least THRESHOLD, its interval excludes zero, and
  a rank test (Mann-Whitney U, scipy) says the two levels differ at ALPHA — a level whose own points
  stray far (a busy machine's) makes two high points after it no surprise; the other boundaries are
  merged away, weakest first, and the sizes measured again on the larger levels.

The newest points of a series (not of one case: suite.history.series) are also judged as PyTorch's HUD
judges them (`tail_change`): TAIL violations in a row at the end, each beyond the band of the level
before them (its median ± BAND robust sds, and THRESHOLD at least), is a change point where the levels
did not already show one. A level fit and a rank test weigh the tail's points by rank among every older
point, so a series with one slow night in ten (a shared host's) needs a step well past those nights;
three nights in a row past the band are rare on such a series (each beyond it about one night in ten:
about one in a thousand), and a step's three nights are past it nearly always. One case's odd nights
come more often (one length of sliding_window was 10-31% slow in 4 of 30 runs), and three in a row
there raised the study's false alarms over 1%.

With `history check --confirm` a third rule screens a time series (`screen_change`, through `judged`):
the newest TAIL points' median SCREEN or more above the level before them. It flags many step-free
series of a drifting host as well as the steps, so it gives a series no class: `check --confirm`
re-measures each slowdown it or the other rules found as an interleaved A/B of the commit before it
against the newest run's (suite.history.confirm), where the host's drift between runs cancels, and only
a slowdown the A/B calls is a regression.

The tail's class: `insufficient data` under MIN_POINTS points; `regression` where the newest level
is the after-side of a slowdown change point that came in within the last RECENT points; `improvement`
the same for a speedup; `suspicious` where a slowdown change point is elsewhere in the series (older,
or since undone); otherwise `no change`. benchmarks/history_study.py measures how often and how soon
these rules flag a step (docs/history.md has its table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from suite.errors import UsageError

MIN_POINTS = 8  # fewer points: insufficient data
MIN_SIZE = 2  # a level holds at least this many points (HUD: two violations in a row)
RECENT = 5  # a slowdown whose first point is among the newest RECENT points is a regression
THRESHOLD = {"time": math.log(1.05), "exponent": 0.1}  # the smallest change called: 5% in time, 0.1 in exponent
PENALTY = 3.0  # a jump costs this many noise scales of L1 (the points' robust spread)
ALPHA = 0.01  # the rank test's level for two levels to differ
LEVEL = 0.95
RESAMPLES = 999
TAIL = 3  # violations in a row at the end that make a change (HUD's two doubled the study's false alarms)
BAND = 2.0  # a violation lies beyond the level's median by this many of its robust sds (and THRESHOLD at least)
SCREEN = math.log(
    1.03
)  # with --confirm: a time series' newest TAIL points' median this far above its level is re-measured
CLASSES = ("regression", "suspicious", "improvement", "no change", "insufficient data")


@dataclass(frozen=True)
class Change:
    """A change point: the last point before it, the first after it, its size and interval (time: the
    ratio after/before, minus 1; an exponent: after − before)."""

    before: int  # index of the last point of the level before
    after: int  # index of the first point of the level after
    size: float
    lo: float
    hi: float
    slower: bool  # time or exponent went up
    rule: str = "levels"  # which rule found it: the levels', the tail's, or the screen's (`screen_change`)


def _segments(y: np.ndarray, kind: str, penalty: float) -> list[list[int]]:
    """The levels of `y` (lists of indices): asv's exact penalised L1 fit, a jump costing `penalty` noise scales."""
    try:
        from asv.step_detect import solve_potts
    except ImportError:
        raise UsageError(
            'the history\'s change points need asv: pip install -c constraints.txt -e ".[history]"'
        ) from None
    from scipy.stats import median_abs_deviation

    centre = np.median(y)
    z = np.exp(y - centre) if kind == "time" else 1.0 + (y - centre)  # about 1, as asv's own series are
    sigma = float(median_abs_deviation(np.diff(y), scale="normal")) / math.sqrt(2) or 1e-9
    right, _, _ = solve_potts(list(map(float, z)), [1.0] * len(z), gamma=penalty * sigma, min_size=MIN_SIZE)
    return [list(range(left, end)) for left, end in zip([0, *right[:-1]], right)]


def _size(y: np.ndarray, before: list[int], after: list[int]) -> tuple[float, float, float]:
    """Median(after) − median(before) and its bootstrap interval."""
    from scipy import stats

    a, b = y[after], y[before]
    size = float(np.median(a) - np.median(b))
    res = stats.bootstrap(
        (a, b),
        lambda s, t, axis: np.median(s, axis=axis) - np.median(t, axis=axis),
        vectorized=True,
        n_resamples=RESAMPLES,
        confidence_level=LEVEL,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    return size, float(res.confidence_interval.low), float(res.confidence_interval.high)


def _significant(y: np.ndarray, before: list[int], after: list[int]) -> bool:
    """Whether the two levels differ by a rank test (Mann-Whitney U, two-sided, at ALPHA): a long level
    with a few far points of its own makes two high points after it no surprise."""
    from scipy import stats

    return bool(stats.mannwhitneyu(y[after], y[before], alternative="two-sided").pvalue < ALPHA)


def _weakest(y: np.ndarray, levels: list[list[int]], threshold: float) -> tuple[int | None, list]:
    """The index of the boundary that is no change point (the smallest |size| among them), and the sizes."""
    sizes = [_size(y, levels[i], levels[i + 1]) for i in range(len(levels) - 1)]
    weak = [
        (abs(s), i)
        for i, (s, lo, hi) in enumerate(sizes)
        if abs(s) < threshold or lo <= 0 <= hi or not _significant(y, levels[i], levels[i + 1])
    ]
    return (min(weak)[1] if weak else None), sizes


def change_points(
    values, kind: str = "time", threshold: float | None = None, penalty: float = PENALTY, tail: bool = True
) -> list[Change]:
    """The change points of one series, oldest first. `values`: times (seconds) or exponents, in order:
    the levels' (`level_changes`), and with `tail` the tail's where they show none among the newest
    RECENT points."""
    y = np.log(np.asarray(values, float)) if kind == "time" else np.asarray(values, float)
    threshold = THRESHOLD[kind] if threshold is None else threshold
    found = level_changes(y, kind, threshold, penalty)
    if not tail or (found and found[-1].after >= len(y) - RECENT):
        return found
    newest = tail_change(y, kind, threshold, penalty)
    return found + [newest] if newest is not None else found


def judged(values, kind: str = "time", tail: bool = True, screen: bool = False, **options) -> tuple[list[Change], str]:
    """A series' change points (`change_points`, `options` its threshold and penalty) and its tail's class;
    with `screen` (a time series, `check --confirm`) the screen's slowdown appended where the class is no
    regression: a change to measure again, which gives the series no class."""
    found = change_points(values, kind, tail=tail, **options)
    status = classify(len(values), found)
    if screen and kind == "time" and status != "regression" and len(values) >= MIN_POINTS:
        screened = screen_change(
            np.log(np.asarray(values, float)), kind, SCREEN, options.get("threshold"), options.get("penalty", PENALTY)
        )
        found = found + [screened] if screened is not None else found
    return found, status


def _tail(y: np.ndarray, kind: str, threshold: float, penalty: float) -> tuple[list[int], list[int]] | None:
    """(the level, the tail): the newest TAIL points, and the points before them since the older points'
    last change point, MIN_POINTS at least (None: too few)."""
    if len(y) < MIN_POINTS + TAIL:
        return None
    older = level_changes(y[:-TAIL], kind, threshold, penalty)
    start = older[-1].after if older else 0
    level, tail = list(range(start, len(y) - TAIL)), list(range(len(y) - TAIL, len(y)))
    return (level, tail) if len(level) >= MIN_POINTS else None


def _tail_size(y: np.ndarray, kind: str, level: list[int], tail: list[int], rule: str) -> Change | None:
    """The tail's median less the level's as a change, where its bootstrap interval excludes zero (the
    screen's candidates with any interval: three points' resamples often hold the one fast night)."""
    size, lo, hi = _size(y, level, tail)
    if rule != "screen" and lo <= 0 <= hi:
        return None
    scale = math.expm1 if kind == "time" else (lambda v: v)
    return Change(level[-1], tail[0], scale(size), scale(lo), scale(hi), size > 0, rule)


def tail_change(y: np.ndarray, kind: str, threshold: float, penalty: float = PENALTY) -> Change | None:
    """HUD's rule on `y` (log times or exponents): the newest TAIL points all above, or all below, the
    band of the level before them (`_tail`): its median ± max(threshold, BAND robust sds). The change's
    size is the tail's median less the level's, with its bootstrap interval, which must exclude zero."""
    from scipy.stats import median_abs_deviation

    split = _tail(y, kind, threshold, penalty)
    if split is None:
        return None
    level, tail = split
    band = max(threshold, BAND * float(median_abs_deviation(y[level], scale="normal")))
    beyond = y[tail] - np.median(y[level])
    if not (np.all(beyond > band) or np.all(beyond < -band)):
        return None
    return _tail_size(y, kind, level, tail, "tail")


def screen_change(
    y: np.ndarray, kind: str, screen: float = SCREEN, threshold: float | None = None, penalty: float = PENALTY
) -> Change | None:
    """A slowdown to re-measure (`check --confirm`): the newest TAIL points' median at least `screen` (log)
    above the level before them (`_tail`; its older change points found with `threshold`). Speedups are
    not screened (nothing to confirm)."""
    split = _tail(y, kind, THRESHOLD[kind] if threshold is None else threshold, penalty)
    if split is None:
        return None
    level, tail = split
    if np.median(y[tail]) - np.median(y[level]) < screen:
        return None
    return _tail_size(y, kind, level, tail, "screen")


def level_changes(y: np.ndarray, kind: str, threshold: float, penalty: float = PENALTY) -> list[Change]:
    """The change points between the levels of `y` (log times or exponents)."""
    if len(y) < 2 * MIN_SIZE:
        return []
    levels = _segments(y, kind, penalty)
    while True:
        weakest, sizes = _weakest(y, levels, threshold)
        if weakest is None:
            break
        levels[weakest : weakest + 2] = [levels[weakest] + levels[weakest + 1]]
    out = []
    for i, (size, lo, hi) in enumerate(sizes):
        scale = (lambda v: math.expm1(v)) if kind == "time" else (lambda v: v)
        out.append(Change(levels[i][-1], levels[i + 1][0], scale(size), scale(lo), scale(hi), size > 0))
    return out


def classify(count: int, changes: list[Change]) -> str:
    """The class of a series' tail, from its number of points and its change points."""
    if count < MIN_POINTS:
        return "insufficient data"
    if changes and changes[-1].after >= count - RECENT:
        return "regression" if changes[-1].slower else "improvement"
    if any(change.slower for change in changes):
        return "suspicious"
    return "no change"
