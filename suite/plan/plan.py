"""A run's plan as plan.json holds it: the grid, the cases, the settings, the plugins and the ladders.
(suite.run.runner writes and reads the file.)"""

from __future__ import annotations

from dataclasses import dataclass, field

from suite.plan.case import Case
from suite.plan.ladder import Ladder
from suite.plan.settings import Settings


@dataclass(frozen=True)
class Plan:
    """What a run measures, as plan.json holds it."""

    grid: str
    cases: list[Case]
    settings: Settings
    plugins: list[str]
    ladders: list[Ladder] = field(default_factory=list)


# What plan.json may hold: the grid's plan, a shard's record, a merge's, an ab's design
PLAN_FIELDS = {
    "grid",
    "source",
    "description",
    "grid_id",
    "grid_cases",
    "grid_index",
    "settings",
    "plugins",
    "cases",
    "ladders",
    "shard",
    "grid_cases_held",
    "merged_from",
    "shards",
    "complete",
    "ab",
    "created_at",
    "suite_version",
}
