"""An implementation's own change of path within a series (its notes' "path", recorded per case:
variants.rules.paths): the cost model's leading term runs at the first path's rate, and at that rate
times a factor on each later path, a parameter of the fit chosen by least squares (suite.analyse.cost,
docs/CLAIMS.md, "Verdicts")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

FACTOR_OCTAVES = 3.0  # a path's factor lies within 2^±FACTOR_OCTAVES
FACTOR_GRID = 25  # the factor's first search: this many points over its range, then refined between neighbours


@dataclass(frozen=True)
class Paths:
    """The path each length ran on, where an implementation changes how it runs within the span (its
    notes' "path", recorded per case): the first path's leading term sets the rate, each later path's
    is that times its own factor."""

    labels: tuple[str, ...]  # per length, in the order of the lengths

    @property
    def names(self) -> tuple[str, ...]:  # in the order they first run
        return tuple(dict.fromkeys(self.labels))

    def weights(self, factors: dict[str, float]) -> np.ndarray:
        return np.array([factors.get(label, 1.0) for label in self.labels])

    def subset(self, keep: np.ndarray) -> "Paths":
        return Paths(tuple(self.labels[i] for i in keep))

    def changes(self, x: np.ndarray) -> list[tuple[str, float]]:
        """(path, the first length it ran at), each time the path changes."""
        return [(label, float(x[i])) for i, label in enumerate(self.labels) if i == 0 or label != self.labels[i - 1]]


def declared(labels) -> Paths | None:
    """Paths where the lengths ran on two or more, else None (one path: nothing to model)."""
    if labels is None:
        return None
    labels = tuple("" if v is None else str(v) for v in labels)
    return Paths(labels) if len(set(labels)) > 1 else None


def least(paths: Paths, model: Callable) -> object:
    """`model(factors)` (a fitted model, with its `sse`) at the factors of least SSE: a grid over
    2^±FACTOR_OCTAVES, refined between the best point's neighbours, one path at a time (twice where there
    are three paths or more)."""
    from scipy.optimize import minimize_scalar

    later = paths.names[1:]
    logs = dict.fromkeys(later, 0.0)
    grid = np.linspace(-FACTOR_OCTAVES, FACTOR_OCTAVES, FACTOR_GRID)
    step = grid[1] - grid[0]
    for _ in range(1 if len(later) == 1 else 2):
        for name in later:
            def sse(log: float) -> float:
                return model({**{k: 2.0**v for k, v in logs.items()}, name: 2.0**log}).sse
            start = grid[int(np.argmin([sse(g) for g in grid]))]
            lo, hi = max(start - step, -FACTOR_OCTAVES), min(start + step, FACTOR_OCTAVES)
            logs[name] = float(minimize_scalar(sse, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}).x)
    return model({k: 2.0**v for k, v in logs.items()})
