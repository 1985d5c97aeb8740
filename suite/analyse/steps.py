"""Where a series' cache steps go: the working set at each length against the host's cache levels
(suite.analyse.cost, docs/CLAIMS.md, "Verdicts"). A level is modelled where the span shows its step
whole, lengths well inside it and past it; one the working set only nears at the span's top is at its
edge, where a step and a term that keeps growing look alike."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

SCALE = 0.35  # a step's logistic in octaves of working set: 10–90% over 1.5 octaves
INSIDE = 2  # a level is modelled where this many lengths lie an octave or more inside it
EDGE = 1.5  # octaves below a level's size where its earliest step may begin to show
REACH = 0.5  # octaves past the gather probe's longest table that a series' lengths may reach (gather_rate)


@dataclass(frozen=True)
class Machine:
    """What places the cache steps: the working set at each length (bytes a kernel reuses: an
    attention head's K and V) and the host's caches (env.json's `cpu_caches`)."""

    working_set: np.ndarray
    caches: dict
    step_max: float = (
        math.inf
    )  # a step raises the time per unit of work by at most this (cache over memory bandwidth, − 1)
    with_edge: bool = False  # model the top edge's levels too (the test a refutation must pass)
    # the run's ns a gathered pair at each length (suite.machine.gathers), for an implementation whose leading
    # term is random gathers: measured across every level, it stands in for the levels' steps
    gathers: np.ndarray | None = None

    def levels(self) -> tuple[dict[str, float], dict[str, float]]:
        """log2 of the sizes of the levels whose step the span shows whole (INSIDE lengths an octave
        or more inside, two at least half-way past), and of those at its top edge (the step may begin
        inside the span, but too few lengths lie past it to tell it from a term that keeps growing)."""
        octaves = np.log2(self.working_set)
        seen, edge = {}, {}
        if self.gathers is not None:
            return seen, edge
        for level, info in self.caches.items():
            size = float(info.get("bytes") or 0) if isinstance(info, dict) else 0.0
            if size <= 0 or (octaves <= math.log2(size) - 1).sum() < INSIDE:
                continue
            if (octaves >= math.log2(size) - 0.5).sum() >= 2 or (
                self.with_edge and octaves[-1] > math.log2(size) - EDGE
            ):
                seen[level] = math.log2(size)
            elif octaves[-1] > math.log2(size) - EDGE:
                edge[level] = math.log2(size)
        return seen, edge

    def ramp(self, centre: float) -> np.ndarray:
        """0 inside the cache, 1 past it: a logistic in octaves of working set about `centre` (log2 bytes)."""
        return 1.0 / (1.0 + np.exp(-(np.log2(self.working_set) - centre) / SCALE))

    def subset(self, keep: np.ndarray) -> "Machine":
        return replace(
            self, working_set=self.working_set[keep], gathers=None if self.gathers is None else self.gathers[keep]
        )

    def without(self, level: str) -> "Machine":
        return replace(self, caches={k: v for k, v in self.caches.items() if k != level})


def machine(working_set, caches, step_max: float = math.inf, gathers=None) -> Machine | None:
    """A Machine where the working set is known and positive at every length, else None (no steps);
    `gathers`: the run's ns a gathered pair at each length, where the leading term is random gathers."""
    if working_set is None or not caches:
        return None
    ws = np.asarray(working_set, float)
    rate = None if gathers is None else np.asarray(gathers, float)
    if rate is not None and not (len(rate) == len(ws) and np.all(np.isfinite(rate)) and np.all(rate > 0)):
        rate = None
    return Machine(ws, dict(caches), step_max, gathers=rate) if np.all(np.isfinite(ws)) and np.all(ws > 0) else None


def gather_rate(probe: dict | None, table_bytes, monotone: bool = True) -> np.ndarray | None:
    """The gather probe's ns a pair (bandwidth.json's `gathers`: suite.machine.gathers) at each of
    `table_bytes` (a head's K), linear in log2 of the size between the probe's lengths and its end values
    past them; None where the run has no such probe, or one whose longest table falls REACH octaves short
    of the series'. `monotone`: past the probe's least the figures are
    made non-decreasing (isotonic regression): a random pair does not get cheaper as its table grows, and
    a length the probe read a few percent low (its noise between processes) would otherwise read as the
    series' own excess there. Below its least the probe's own per-call floor shows (the short lengths read
    higher than the next: docs/performance.md, "(28) Random gathers at the machine's measured rate, and the
    card on it"): left as measured, where the leading term is a sliver of the time."""
    from scipy.optimize import isotonic_regression

    try:
        sizes, ns = np.log2(np.asarray(probe["table_bytes"], float)), np.asarray(probe["ns_per_pair"], float)
    except (KeyError, TypeError, ValueError):
        return None
    if len(sizes) < 2 or len(sizes) != len(ns) or not np.all(np.isfinite(ns)) or not np.all(ns > 0):
        return None
    if np.log2(np.max(table_bytes)) > sizes.max() + REACH:
        return None  # a series past the probe's longest: held flat, its own rise there would read as a higher term
    if monotone:
        least = int(np.argmin(ns))
        ns = np.concatenate([ns[:least], isotonic_regression(ns[least:]).x])
    return np.interp(np.log2(np.asarray(table_bytes, float)), sizes, ns)
