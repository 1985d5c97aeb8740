"""What the GPU did while a case was timed (suite.machine.gpu_state), as the row's `gpu_` fields; a
timing the GPU disturbed is made once more, as a busy CPU's is (host_load).

A window is unsteady when the SM clock dipped more than 10% below its median, or the GPU slowed for
heat or power (hardware slowdown, thermal, power brake, power cap). Such a timing is redone once, and
the steadier of the two kept; `gpu_unsteady` says whether the kept one was still unsteady.

Energy per call is the window's energy over every call the timer made in it (its warm-up calls
included), so it includes the L2 flush before each call and the gaps between calls: an upper bound
on one call's own energy. CPU cases pass straight through: no NVML, no thread.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from suite.machine import gpu_state
from suite.machine.gpu_state import GpuState, Sampler

T = TypeVar("T")


class Counted:
    """The timed call, counting how often the timer made it."""

    def __init__(self, fn: Callable[[], object]):
        self.fn, self.calls = fn, 0

    def __call__(self):
        self.calls += 1
        return self.fn()


def timed(
    time: Callable[[Callable[[], object]], T], fn: Callable[[], object], device: str, sampler: Sampler | None = None
) -> tuple[T, dict]:
    """`time(fn)`'s result and the row's gpu_ fields. On CUDA with NVML (this process's GPU, or
    `sampler`), the timing is sampled and, where unsteady, made once more, keeping the steadier;
    elsewhere `time(fn)` alone and no fields."""
    sampler = sampler or (gpu_state.this_gpu() if device == "cuda" else None)
    if sampler is None:
        return time(fn), {}
    first = _sampled(time, fn, sampler)
    if not first[1].unsteady:
        return first[0], fields(first[1], first[2], redone=0)
    second = _sampled(time, fn, sampler)
    kept = max(first, second, key=lambda timing: timing[1].steadiness())
    return kept[0], fields(kept[1], kept[2], redone=1)


def _sampled(time, fn, sampler: Sampler) -> tuple[object, GpuState, int]:
    counted = Counted(fn)
    with sampler.window() as window:
        result = time(counted)
    return result, window.state, counted.calls


def fields(state: GpuState, calls: int, redone: int) -> dict:
    """The Row's gpu_ fields of a window; none where NVML read nothing."""
    if not state.read:
        return {}
    per_call = state.energy_j / calls if state.energy_j is not None and calls else None
    return {
        "gpu_sm_clock_mhz": state.sm_clock_mhz,
        "gpu_sm_clock_min_mhz": state.sm_clock_min_mhz,
        "gpu_power_w": state.power_w,
        "gpu_temp_c": state.temp_c,
        "gpu_energy_j": state.energy_j,
        "gpu_calls": calls,
        "gpu_energy_per_call_j": per_call,
        "gpu_throttle": ",".join(state.throttle),
        "gpu_unsteady": int(state.unsteady),
        "gpu_retimed": redone,
    }
