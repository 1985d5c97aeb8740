"""How cases are measured: one frozen Settings, its defaults and limits stated once.

It crosses process boundaries as itself (pickled), and is written to plan.json as a plain table;
`Settings.from_plan` reads that table back, old plans included (a missing key takes its default).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from suite.errors import UsageError, shown
from suite.machine.allocator import MODES as ALLOCATORS


@dataclass(frozen=True)
class Settings:
    """Chosen for a 2-core machine (docs/regression.md, "Noise"; the figures: docs/performance.md)."""

    threads: int = 1  # NB: two threads gave bimodal timings (docs/performance.md, "Noise: the settings measured")
    min_run_time_s: float = 0.2  # torch.utils.benchmark blocked_autorange
    max_samples: int = 50
    case_timeout_s: float = 300.0
    memory_budget_gib: float = 16.0  # CPU address-space limit of a worker, above what it holds at start
    check_seq_len: int = 96  # correctness check against the dense reference at this n
    allocator: str = "auto"  # jemalloc where the system has it, else retain (suite.machine.allocator)
    replicates: int = 1  # worker processes each case is timed in (process-level replicates)
    busy_limit_cores: float = (
        0.5  # other processes' CPU above this while timing: time again (suite.run.measurement.host_load)
    )
    retimes: int = 1  # at most this many more timings of a case measured on a busy machine
    ladder_width: float = 0.2  # adaptive lengths: a series is settled when its exponent's interval is this narrow
    max_call_s: float = 10.0  # adaptive lengths: no length whose one call is predicted to take longer
    stretch_call_s: float = 0.0  # ... but this long, where the overheads hide its claim, its top may be a step or its
    # higher term's test is at its level (0: none)
    probe: bool = True  # the GEMM and bandwidth probes; false: no peak, no roofline, no cache-step bound
    budget_min: float = 0.0  # the run's wall time in minutes that the ladders climb within (0: none; suite.run.budget)

    def to_plan(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_plan(cls, raw: dict[str, Any], where: str = "plan.json: settings") -> "Settings":
        return cls(**validate(raw, where))


# name -> (type, low, high); the allocator is a choice instead, the probe a switch
LIMITS: dict[str, tuple[type, float | None, float | None]] = {
    "threads": (int, 1, 256),
    "min_run_time_s": (float, 0.0, 600.0),
    "max_samples": (int, 1, 100000),
    "case_timeout_s": (float, 1.0, 86400.0),
    "memory_budget_gib": (float, 0.5, 4096.0),
    "check_seq_len": (int, 1, 4096),
    "allocator": (str, None, None),
    "replicates": (int, 1, 64),
    "busy_limit_cores": (float, 0.0, 1024.0),
    "retimes": (int, 0, 10),
    "ladder_width": (float, 0.01, 10.0),
    "max_call_s": (float, 0.001, 86400.0),
    "stretch_call_s": (float, 0.0, 86400.0),
    "probe": (bool, None, None),
    "budget_min": (float, 0.0, 10080.0),
}


def validate(raw: Any, where: str) -> dict[str, Any]:
    """The settings table checked key by key; UsageError names the key, the value and the rule."""
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: field 'settings' = {raw!r} (allowed: a table)")
    values = {}
    for key, value in raw.items():
        if key not in LIMITS:
            raise UsageError(f"{where}: field '{key}' = {shown(value)} (allowed: {', '.join(LIMITS)})")
        kind, low, high = LIMITS[key]
        if key == "allocator":
            if value not in ALLOCATORS:
                raise UsageError(f"{where}: field 'allocator' = {shown(value)} (allowed: {', '.join(ALLOCATORS)})")
        elif kind is bool:
            if not isinstance(value, bool):
                raise UsageError(f"{where}: field '{key}' = {shown(value)} (allowed: true, false)")
        elif (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (kind is int and not isinstance(value, int))
        ):
            raise UsageError(
                f"{where}: field '{key}' = {shown(value)} (allowed: a number ({kind.__name__}) in {low}..{high})"
            )
        elif not low <= value <= high:
            raise UsageError(f"{where}: field '{key}' = {shown(value)} (allowed: {low}..{high})")
        values[key] = value
    return values
