"""What counts as a regression: the gate's settings, apart from the statistics that apply them
(suite.analyse.regression), so that the command line reads its defaults without importing scipy."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """What counts as a regression. The defaults are the ones docs/performance.md's figures were measured with."""

    alpha: float = 0.05  # false discovery rate over the grid
    effect_floor: float = 0.05  # changes under 5% are never called
    exponent_drift: float = 0.15  # docs/CLAIMS.md's tolerance, applied to a change of fitted exponent
    allow_new: bool = False  # new cases (no baseline) do not block
    allow_shift: bool = False  # test each case beyond the grid's common shift, which then does not block
