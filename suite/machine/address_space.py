"""The address space a measuring process may map: RLIMIT_AS set at what it holds plus the grid's memory budget
(suite.run.executors.worker), which turns memory exhaustion into a clean error rather than the kernel's SIGKILL; and
what is left of it, which the bandwidth probe sizes its buffers by (suite.run.measurement.measure)."""

from __future__ import annotations

import resource


def _held() -> int:
    """The address space this process holds now (VmSize), in bytes."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def limit_address_space(budget_gib: float) -> None:
    """RLIMIT_AS at the address space the process holds now plus the budget: what a case may add.

    NB: relative, not absolute, so that a local worker and a Ray actor (which maps Ray's shared
    memory and threads before any case runs) give a case the same room.
    """
    limit = _held() + int(budget_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def address_room() -> int | None:
    """The address space this process may still map under its RLIMIT_AS, in bytes; None where it has no limit.
    Less than the budget once the worker has mapped more (a probe's GEMMs, oneDNN's JIT, the allocator's arenas:
    a fair share of a small budget before the bandwidth probe)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else max(0, soft - _held())
