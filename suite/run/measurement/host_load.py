"""What else the machine did while a case was timed: other processes' CPU, the hypervisor's steal,
and the load average — so a busy machine is seen in the row, not guessed at afterwards.

Read from /proc through psutil: the whole machine's busy CPU time over the timing window, less this
process's own (every thread of it), is what the other processes used; steal is CPU time the host
gave to other guests. Both in cores (CPU seconds per wall second).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")  # guest time is inside user


@dataclass(frozen=True)
class Snapshot:
    busy_s: float
    steal_s: float
    own_s: float
    at: float


def snapshot() -> Snapshot:
    cpu = psutil.cpu_times()
    own = psutil.Process().cpu_times()
    return Snapshot(
        sum(getattr(cpu, f, 0.0) for f in BUSY_FIELDS),
        getattr(cpu, "steal", 0.0),
        own.user + own.system,
        time.monotonic(),
    )


def since(before: Snapshot) -> dict[str, float]:
    """Other processes' CPU and the steal over the window since `before`, in cores; the load average."""
    after = snapshot()
    wall = max(after.at - before.at, 1e-9)
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return {
        "busy_cores": max(0.0, others / wall),
        "steal_cores": max(0.0, (after.steal_s - before.steal_s) / wall),
        "load_avg": psutil.getloadavg()[0],
    }
