"""What a run says of its time: the wall time it predicts before any case, the time left while it runs, and the
other processes of a length tried in one process first. The figures are suite.run.budget's."""

from __future__ import annotations

import time
from dataclasses import dataclass

from suite.plan.case import Case
from suite.plan.settings import Settings
from suite.run import budget


@dataclass
class Outlook:
    """A round's (case, process) tasks at their predicted walls, scaled by how far its finished ones were from
    theirs (a host slower than the prediction shows it from the first cases on), and the ladders' climbs after
    it, within the budget (`budget_s`, 0: none)."""

    began: float  # time.perf_counter() at the run's start
    budget_s: float
    price: dict  # (case id, process) -> predicted wall, s
    climbs_s: float
    measured: float = 0.0
    predicted: float = 0.0

    def done(self, case_id: str, replicate: int, wall_s: float | None) -> None:
        if wall_s is not None and (case_id, replicate) in self.price:
            self.measured += wall_s
            self.predicted += self.price[(case_id, replicate)]

    def left(self, pending) -> float:
        scale = self.measured / self.predicted if self.predicted > 0 else 1.0
        round_s = scale * sum(self.price.get(key, 0.0) for key in pending)
        return budget.remaining_s(round_s, scale * self.climbs_s, time.perf_counter() - self.began, self.budget_s)


def prices(tasks: list[tuple[Case, int]], cost_s: dict[str, float], replicates: int) -> dict:
    """Each task's share of its case's predicted wall."""
    return {(case.case_id, r): cost_s.get(case.case_id, 0.0) / replicates for case, r in tasks}


def foresee(tasks: list[tuple[Case, int]], ladders, settings: Settings, began: float, out) -> Outlook:
    """Print the run's predicted wall time before any case (the prior's, suite.plan.shard, for the planned cases
    and the ladders' climbs to max_call_s; within the budget where one is set) and return the first round's Outlook."""
    from suite.plan.shard import predicted_s

    price = {(case.case_id, r): predicted_s(case, settings) / settings.replicates for case, r in tasks}
    first, climbs = sum(price.values()), budget.prior_climbs_s(ladders, settings)
    budget_s = settings.budget_min * 60
    total = budget.remaining_s(first, climbs, 0.0, budget_s)
    within = f"; budget {minutes(budget_s)}: the lengths climb within it" if budget_s > 0 else ""
    print(
        f"predicted wall time: ~{minutes(total)} ({minutes(first)} for the {len(price)} planned (case, process) "
        f"pairs, up to {minutes(climbs)} for the {len(ladders)} series' climbs){within}",
        file=out,
        flush=True,
    )
    return Outlook(began, budget_s, price, climbs)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def probed(step, rows, replicates: int, out, left_s: float = float("inf")) -> list[tuple[Case, int]]:
    """The other processes of each length the round tried in one process first (`step.probes`: a
    suite.run.climb.Round's), where that process's call was within the limit the length climbed under and its
    wall, once per other process, within the budget's `left_s`."""
    first = {row.case_id: row for row in rows if row.replicate == 0}
    rest = []
    for case in step.cases:
        limit, row = step.probes.get(case.case_id), first.get(case.case_id)
        if limit is None or row is None or row.status != "ok":
            continue
        over = row.time_s is not None and row.time_s > limit
        cost = (replicates - 1) * (row.wall_s or 0.0)
        if over or cost > left_s:
            past = (
                f"{row.time_s:.2g} s a call, past {limit:g} s" if over else f"~{cost:.0f} s more, {left_s:.0f} s left"
            )
            print(
                f"lengths: {case.label()} in one process: {past}: its other processes are not run", file=out, flush=True
            )
            continue
        left_s -= cost
        rest += [(case, r) for r in range(1, replicates)]
    return rest
