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


@dataclass(frozen=True)
class Machine:
    """What places the cache steps: the working set at each length (bytes a kernel reuses: an
    attention head's K and V) and the host's caches (env.json's `cpu_caches`)."""

    working_set: np.ndarray
    caches: dict
    step_max: float = math.inf  # a step raises the time per unit of work by at most this (cache over memory bandwidth, − 1)
    with_edge: bool = False  # model the top edge's levels too (the test a refutation must pass)

    def levels(self) -> tuple[dict[str, float], dict[str, float]]:
        """log2 of the sizes of the levels whose step the span shows whole (INSIDE lengths an octave
        or more inside, two at least half-way past), and of those at its top edge (the step may begin
        inside the span, but too few lengths lie past it to tell it from a term that keeps growing)."""
        octaves = np.log2(self.working_set)
        seen, edge = {}, {}
        for level, info in self.caches.items():
            size = float(info.get("bytes") or 0) if isinstance(info, dict) else 0.0
            if size <= 0 or (octaves <= math.log2(size) - 1).sum() < INSIDE:
                continue
            if (octaves >= math.log2(size) - 0.5).sum() >= 2 or (self.with_edge and octaves[-1] > math.log2(size) - EDGE):
                seen[level] = math.log2(size)
            elif octaves[-1] > math.log2(size) - EDGE:
                edge[level] = math.log2(size)
        return seen, edge

    def ramp(self, centre: float) -> np.ndarray:
        """0 inside the cache, 1 past it: a logistic in octaves of working set about `centre` (log2 bytes)."""
        return 1.0 / (1.0 + np.exp(-(np.log2(self.working_set) - centre) / SCALE))

    def subset(self, keep: np.ndarray) -> "Machine":
        return replace(self, working_set=self.working_set[keep])

    def without(self, level: str) -> "Machine":
        return replace(self, caches={k: v for k, v in self.caches.items() if k != level})


def machine(working_set, caches, step_max: float = math.inf) -> Machine | None:
    """A Machine where the working set is known and positive at every length, else None (no steps)."""
    if working_set is None or not caches:
        return None
    ws = np.asarray(working_set, float)
    return Machine(ws, dict(caches), step_max) if np.all(np.isfinite(ws)) and np.all(ws > 0) else None
