"""An implementation's own change of path within a series (its notes' "path", recorded per case:
variants.rules.paths): the cost model's leading term runs at the first path's rate, and at that rate
times a factor on each later path, a parameter of the fit chosen by least squares (suite.analyse.cost,
docs/CLAIMS.md, "Verdicts")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from suite.analyse.claim_rule import Reason, Why

FACTOR_OCTAVES = 3.0  # a path's factor lies within 2^±FACTOR_OCTAVES
FACTOR_GRID = 25  # the factor's first search: this many points over its range, then refined between neighbours
TIE = 1e-9  # grid points whose SSE differ by less than this share fit alike: the factor nearest 1 is taken
MIN_LENGTHS = 3  # a path's lengths, at least, for a confirmation to rest on its factor (suite.analyse.cost)
ALONE_LENGTHS = 5  # a top path's lengths, at least, for it to be judged alone: a ladder's doublings over 16x


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

    def top(self) -> int:
        """Where the top lengths' path's run begins (the largest lengths on one path): an index of the lengths."""
        run = next((i for i, label in enumerate(reversed(self.labels)) if label != self.labels[-1]), len(self.labels))
        return len(self.labels) - run

    def short(self) -> int:
        """The top lengths' path's run where it holds fewer than MIN_LENGTHS lengths, else 0: its factor fits them
        almost freely, where a higher term shows first. A short path lower down leaves the top to judge the claim
        (alone, where the top spans enough: `alone`)."""
        run = len(self.labels) - self.top()
        return run if run < MIN_LENGTHS else 0

    def alone(self, x: np.ndarray, span: float) -> int:
        """Where the top lengths' path begins, if it spans `span` alone (its largest length over its least) on
        ALONE_LENGTHS lengths at least: the claim is judged on it alone, the earlier paths' own costs left out
        (suite.analyse.cost); else 0."""
        start = self.top()
        return start if 0 < start <= len(x) - ALONE_LENGTHS and x[-1] / x[start] >= span else 0

    def withheld(self, x: np.ndarray, why: Why) -> Why:
        """Why a confirmation is withheld: the top lengths' path holds too few of them, its factor fits them almost
        freely."""
        at = ", ".join(f"{v:g}" for v in x[-self.short() :])
        return Why(Reason.SHORT_PATH, {"path": self.labels[-1], "at": at, "needed": MIN_LENGTHS}, why)

    def changes(self, x: np.ndarray) -> list[tuple[str, float]]:
        """(path, the first length it ran at), each time the path changes."""
        return [(label, float(x[i])) for i, label in enumerate(self.labels) if i == 0 or label != self.labels[i - 1]]


def declared(labels) -> Paths | None:
    """Paths where the lengths ran on two or more, else None (one path: nothing to model)."""
    if labels is None:
        return None
    labels = tuple(map(str, labels))
    return Paths(labels) if len(set(labels)) > 1 else None


def rate(paths: Paths | None, factors: dict[str, float], x) -> np.ndarray:
    """Each length's factor on the leading term's rate: its path's (1 on the first), or 1 where no path is modelled."""
    return paths.weights(factors) if paths is not None else np.ones(len(x))


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

            fits = np.array([sse(g) for g in grid])
            alike = fits <= fits.min() * (1 + TIE) + TIE  # a flat SSE (no leading term): the factor nearest 1
            start = grid[alike][np.argmin(np.abs(grid[alike]))]
            lo, hi = max(start - step, -FACTOR_OCTAVES), min(start + step, FACTOR_OCTAVES)
            refined = float(minimize_scalar(sse, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}).x)
            logs[name] = refined if sse(refined) < sse(start) * (1 - TIE) - TIE else float(start)
    return model({k: 2.0**v for k, v in logs.items()})
