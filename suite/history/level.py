"""Each run's level (how much slower or faster the whole host was in that run) and each case judged against it.

A busy host slows every case of a run together; a case's own series cannot tell that from a change of
the case. So each case is judged against the other cases of its run:

    deviation  d[c, r] = log time of case c in run r, less its median over the history's runs
    level      L[c, r] = the median of d[c', r] over the run's cases c' of *other series* than c's: a
               commit acts on a series (a variant's path at every length at once), so a change of c's
               series is not subtracted from itself. Defined where the run holds at least MIN_OTHERS
               such cases from at least MIN_SERIES - 1 other series; elsewhere NaN: judged raw
    host       H[r] = the median of d[c, r] over all the run's cases, where the run holds MIN_SERIES
               series and MIN_OTHERS + 1 cases: the level as a series of its own

A case's judged time is its time · exp(−L): its time at the history's usual level. H is judged by the
same rule as a case (suite.history.changes): a change there is every case at once, the host or a
commit that slowed everything, and `history check` reports it as such (docs/history.md).

The level helps only where the host's shift is common to the cases and large against each case's own
noise; where it is not (the study's busy host: a busy spell slowed some series far more than others),
subtracting another series' median adds that median's own noise. `quieter` says which way a history
is: the median over its cases of each one's robust spread, raw and against the level
(`history check --against auto`, the default, judges against the level only where that is smaller).

Pure numpy on one matrix (cases × runs); suite.history.series puts the store's frames through it.
"""

from __future__ import annotations

import warnings

import numpy as np

MIN_OTHERS = 3  # a median of 3 others is not moved past the other two by one changed case
MIN_SERIES = 3  # a run's cases span this many series: each case's level comes from 2 other series at least


def _median(values: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():  # an all-NaN column: no level there, NaN as wanted
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(values, axis=0)


def deviations(logs: np.ndarray) -> np.ndarray:
    """d[c, r]: each case's log time less its median over the runs (NaN where the case has no point)."""
    return logs - _median(logs.T)[:, None]


def robust_sd(values: np.ndarray) -> float:
    """1.4826 · the median absolute deviation from the median (a normal's standard deviation)."""
    values = values[~np.isnan(values)]
    return 1.4826 * float(np.median(np.abs(values - np.median(values)))) if len(values) else float("nan")


def quieter(logs: np.ndarray, own: np.ndarray, min_points: int = 3) -> tuple[bool, float, float]:
    """(whether the cases' series spread less against the level, the median over the cases of each one's
    robust sd raw, and against the level), over each case's points that have a level (NaN: none has
    `min_points` such points)."""
    raw, against = [], []
    for y, lev in zip(np.asarray(logs, float), own):
        has = ~np.isnan(y) & ~np.isnan(lev)
        if has.sum() >= min_points:
            raw.append(robust_sd(y[has]))
            against.append(robust_sd(y[has] - lev[has]))
    if not raw:
        return False, float("nan"), float("nan")
    spread_raw, spread_level = float(np.median(raw)), float(np.median(against))
    return spread_level < spread_raw, spread_raw, spread_level


def levels(logs: np.ndarray, series) -> tuple[np.ndarray, np.ndarray]:
    """(L, H) of a history. `logs`: log times, cases × runs, NaN where a case has no point in a run;
    `series`: each case's series (a row label). L: cases × runs, each case's level in each run
    (leaving its own series out); H: runs, the host's level (every case). NaN where too few cases."""
    d = deviations(np.asarray(logs, float))
    series = np.asarray(series)
    present = ~np.isnan(d)
    names = list(dict.fromkeys(series.tolist()))
    spans = np.array([present[series == name].any(axis=0) for name in names])  # series × runs: it has a point
    own = np.full_like(d, np.nan)
    for i, name in enumerate(names):
        mine = series == name
        count = present[~mine].sum(axis=0)
        others = np.delete(spans, i, axis=0).sum(axis=0)
        level = np.where((count >= MIN_OTHERS) & (others >= MIN_SERIES - 1), _median(d[~mine]), np.nan)
        own[mine] = level
    enough = (present.sum(axis=0) >= MIN_OTHERS + 1) & (spans.sum(axis=0) >= MIN_SERIES)
    host = np.where(enough, _median(d), np.nan)
    return own, host
