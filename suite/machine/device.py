"""Devices as data: what the suite needs to measure on one. Adding a device is one entry in DEVICES.

Each entry names how to time a call (raw per-call samples), how to read a call's peak memory above
what existed before it and where a warm call's time went, how to wait for queued work, whether a
worker may cap its address space, what a Ray actor reserves, a rough rate for balancing shards, and
the GEMM and bandwidth probes' sizes, and whether the bandwidth probe times random gathers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from suite.errors import UsageError
from suite.machine import stream, timing
from suite.machine.probe import GemmShape, attention_shapes, square

Timer = Callable[..., list[float]]  # (fn, min_run_time, max_samples, min_samples, threads, warmed=) -> seconds


@dataclass(frozen=True)
class Device:
    name: str
    time: Timer
    peak_bytes: Callable[[Callable[[], object]], int]
    op_seconds: Callable[[Callable[[], object]], dict[str, float] | None]  # where a warm call's time went
    synchronize: Callable[[], None]
    release: Callable[[], None]  # hand cached memory back after a case
    allocated: Callable[[], int | None]  # bytes the device's allocator holds for tensors (None: not read)
    limit_address_space: bool  # RLIMIT_AS in the worker; NB: never with CUDA (its context maps huge ranges)
    ray_resources: Callable[[int], dict]  # threads -> resources of one measuring actor
    assumed_flop_rate: float  # for balancing shards only: ratios between cases matter
    probe_shapes: tuple[GemmShape, ...]  # the GEMM probe's matmuls: squares and attention's own shapes
    timer_name: str  # what `time` uses, for exports
    stream_sizes: Callable[[], dict[str, int | None]]  # the bandwidth probe's buffer per level (suite.machine.stream)
    # the peak-memory call may be the timer's warm-up: measured on CPU (the same peak, warm or cold,
    # in all 415 cases of two full runs); not on CUDA, where a first call may allocate a library's
    # workspace or autotune, so the peak is read after the timing there
    peak_warms_up: bool = False
    gathers: bool = (
        False  # the bandwidth probe times random gathers too (suite.machine.gathers): where caches set their rate
    )

    def reasons(self) -> list[str]:
        """Why this machine cannot measure on the device ([] when it can)."""
        from variants.rules import device_reasons

        return device_reasons(self.name)


def _nothing(*_) -> None:
    # NB: also the CPU's `allocated` (no cheap reading of live tensor bytes there) and CUDA's
    # `op_seconds` (its operators' time is the GPU's: not read)
    return None


DEVICES: dict[str, Device] = {
    "cpu": Device(
        "cpu",
        timing.time_cpu,
        timing.peak_cpu,
        timing.ops_cpu,
        _nothing,
        _nothing,
        _nothing,
        True,
        lambda threads: {"num_cpus": threads},
        2e10,
        (
            square(512),
            square(1024),
            *attention_shapes(8, 1024, 64, 1024),
            *attention_shapes(8, 256, 64, 768),
            square(512, "onednn"),
            square(1024, "onednn"),
        ),
        "torch.utils.benchmark",
        stream.cpu_sizes,
        peak_warms_up=True,
        gathers=True,
    ),
    "cuda": Device(
        "cuda",
        timing.time_cuda,
        timing.peak_cuda,
        _nothing,
        timing.cuda_synchronize,
        timing.cuda_release,
        timing.cuda_allocated,
        False,
        lambda threads: {"num_gpus": 1, "num_cpus": 1},
        2e13,
        (square(4096), square(8192), *attention_shapes(32, 4096, 64, 4096), *attention_shapes(32, 1024, 128, 1024)),
        "CUDA events, do_bench's semantics: L2 flushed before each call, calls queued",
        stream.cuda_sizes,
    ),
}


def get(name: str, field: str = "device") -> Device:
    """The entry of `name`; UsageError naming the field and the devices there are."""
    if name not in DEVICES:
        raise UsageError(f"{field} {name!r} (allowed: {', '.join(DEVICES)})")
    return DEVICES[name]
