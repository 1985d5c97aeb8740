"""Adaptive lengths: a series whose seq_len is a range is measured upward until its exponent is settled.

    seq_len = {min = 256, max = 65536}          # doubling (step = 2, the default)
    seq_len = {min = 256, max = 65536, step = 4}
    seq_len = "auto"                            # {min = 128, max = 1048576}

A ladder starts at min, 2·min, …, 16·min (the 16x span a verdict needs). After each round
`advance` reads the series' measured points and either names the next length or stops, saying
why: settled (span above the overhead floor ≥ 16x, the exponent's 95% interval at most
`ladder_width` wide and a verdict reached whose higher term's test is not at its level), the range's max, the time of one call (`max_call_s`,
predicted from the fit), the memory budget (predicted from the peak-memory fit), or a case that
failed. Before any stop stands, settled or not, the series measures once the √2 midpoints below
its top interval (`midpoints`); a series that no longer settles with them climbs on. The reason
and what would settle the verdict go into the report beside the verdict.
Pure: no files, no processes; the decision after each round is suite.run.settle's, and suite.run.climb
drives the rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from suite.plan.case import MAX_SIZE, Case, series_key

AUTO = {"min": 128, "max": 1 << 20}
MIN_SPAN = (
    16.0  # docs/CLAIMS.md: a verdict needs a 16x span (suite.analyse.fits.MIN_SPAN; test_ladder holds them equal)
)
STEPS = (2, 4)


@dataclass(frozen=True)
class Ladder:
    """One series (a case with its seq_len free) and the range of lengths it may climb."""

    template: Case  # the series at seq_len = low
    low: int
    high: int
    step: int = 2

    def case(self, n: int) -> Case:
        return replace(self.template, seq_len=n)

    def start(self) -> list[Case]:
        return [self.case(n) for n in start_lengths(self.low, self.high, self.step)]

    @property
    def key(self) -> str:
        return series_key(self.template.key)

    def to_plan(self) -> dict:
        return {"template": self.template.key, "min": self.low, "max": self.high, "step": self.step}

    @classmethod
    def from_plan(cls, raw: dict) -> "Ladder":
        return cls(Case.from_key(raw["template"]), int(raw["min"]), int(raw["max"]), int(raw.get("step", 2)))


def start_lengths(low: int, high: int, step: int) -> list[int]:
    """The first round: min·stepᵏ up to a 16x span (or the range's max)."""
    out, n = [], low
    while n <= high and n <= low * MIN_SPAN:
        out.append(n)
        n *= step
    return out


def parse_range(value, where: str, fail) -> tuple[int, int, int]:
    """(min, max, step) from a grid's seq_len range or "auto"; `fail(where, name, value, allowed)` raises."""
    if value == "auto":
        return AUTO["min"], AUTO["max"], 2
    allowed_keys = {"min", "max", "step"}
    for key in value:
        if key not in allowed_keys:
            fail(where, f"seq_len.{key}", value[key], "min, max, step")
    low, high, step = value.get("min"), value.get("max"), value.get("step", 2)
    for name, v in (("seq_len.min", low), ("seq_len.max", high)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SIZE:
            fail(where, name, v, f"an integer from 1 to {MAX_SIZE}")
    if step not in STEPS:
        fail(where, "seq_len.step", step, ", ".join(map(str, STEPS)))
    if high < low * MIN_SPAN:
        fail(
            where,
            "seq_len.max",
            high,
            f"at least {int(MIN_SPAN)}x seq_len.min = {low * int(MIN_SPAN)} (a verdict needs a 16x span)",
        )
    return low, high, step


def rows_of(table: pd.DataFrame, ladders: list[Ladder]) -> dict[str, pd.DataFrame]:
    """Each ladder's rows of the run's table, by series key."""
    if table.empty:
        return {}
    keys = np.array([series_key(row) for _, row in table.iterrows()])
    return {ladder.key: table[keys == ladder.key] for ladder in ladders}
