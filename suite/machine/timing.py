"""Timers and peak-memory readers, one per kind of device; suite.machine.device puts them in its table.

A timer returns raw per-call seconds (never a summary): statistics are derived later, in one place
(suite.store.row). Every timer warms up first and keeps setup, flushes and syncs out of the timed
window.
"""

from __future__ import annotations

import math
import time
import timeit

import torch

CUDA_WARMUP = 3


def time_cpu(
    fn, min_run_time: float, max_samples: int, min_samples: int, threads: int = 1, warmed: float | None = None
) -> list[float]:
    """Per-call seconds from torch.utils.benchmark: blocked_autorange, then at least `min_samples`.

    `warmed`: the seconds of a call just made (the peak-memory call), which is then the warm-up.
    NB: that call ran under the profiler (its first use in a process adds its own start), so it only says
    "maybe slow": the first plain call decides, and is a sample when it is slow."""
    import torch.utils.benchmark as benchmark

    once = timeit.Timer(fn)  # NB: what benchmark.Timer wraps (gc off while timing)
    samples = []
    if warmed is None:
        began = time.perf_counter()
        fn()  # NB: warm-up; the block-size estimate alone left memory-heavy calls 3-5x slow at times
        warmed = time.perf_counter() - began
    elif warmed >= min_run_time:
        samples = [once.timeit(1)]
        warmed = samples[0]
    slow = warmed >= min_run_time
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    # a call slower than min_run_time is a block by itself: blocked_autorange would spend one more
    # whole call estimating the block size, a quarter of a slow case's time
    samples = samples if slow else list(timer.blocked_autorange(min_run_time=min_run_time).times)
    while len(samples) < min_samples:  # slow cases: one block is one call
        # NB: not timer.timeit(1): it makes 2 warm-up calls before each timed one, so a slow case
        # ran 3 calls a sample (measured: 6 sdpa calls at n = 4096 for 2 samples)
        samples.append(once.timeit(1))
    return samples[-max_samples:]


def l2_flusher(cuda=None):
    """A call that evicts the L2 cache: zeroes a buffer twice its size, 256 MB at least as do_bench's.

    NB: the flush's length matters for short calls: while the device zeroes, the host queues the
    next call, and a short flush left a short kernel timed long (docs/performance.md, "GPU sessions").
    """
    cuda = cuda or torch.cuda
    props = cuda.get_device_properties(cuda.current_device())
    buffer = torch.empty(
        max(2 * getattr(props, "L2_cache_size", 50 << 20), 256 * 10**6), dtype=torch.int8, device="cuda"
    )
    return buffer.zero_


def time_cuda(
    fn,
    min_run_time: float,
    max_samples: int,
    min_samples: int,
    threads: int = 1,
    warmed: float | None = None,
    cuda=None,
    flush=None,
) -> list[float]:
    """Per-call seconds with triton.testing.do_bench's semantics: CUDA events around each call, L2
    flushed before each start event, and the calls queued back to back with one synchronize at the
    end, so the host's launch overhead overlaps the device's work as it does in a model.

    The count comes from the warm-up calls' time: enough calls for `min_run_time`, within
    [min_samples, max_samples]. NB: synchronizing after every call adds the launch latency to every
    sample, which for a short kernel is most of it (docs/performance.md, "GPU sessions").
    `cuda` stands in for `torch.cuda` and `flush` for the L2 flush (a test passes fakes); `warmed`
    says a call was just made (compiled, autotuned), as time_cpu's.
    """
    cuda = cuda or torch.cuda
    flush = flush or l2_flusher(cuda)
    if warmed is None:
        fn()  # compile, autotune, allocate: outside the estimate
    cuda.synchronize()
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CUDA_WARMUP):
        flush()
        fn()
    end.record()
    end.synchronize()
    per_call = max(start.elapsed_time(end) / 1e3 / CUDA_WARMUP, 1e-7)
    count = min(max(min_samples, math.ceil(min_run_time / per_call)), max(max_samples, min_samples))
    events = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(count)]
    for start, end in events:
        flush()  # NB: before the start event is recorded: the flush is not in the timed window
        start.record()
        fn()
        end.record()
    cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in events]


def peak_cpu(fn) -> int:
    """Allocator peak of one call above what existed before it, from the profiler's memory events.

    NB: autograd's profiler, which torch.profiler wraps: the same events, but torch.profiler's start asks
    `hasattr(torch, "_inductor")`, which imports inductor and dynamo (seconds of a fresh worker's start)."""
    from torch.autograd.profiler import profile

    with profile(use_cpu=True, profile_memory=True) as prof:
        out = fn()
    del out
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.kineto_results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak


TOP_OPS = 6  # operators named in a call's profile; the rest are summed as "other"


def ops_cpu(fn) -> dict[str, float]:
    """Where one warm call's time went: self CPU seconds per operator (`op_seconds`).

    A warm call (after the timing): the first call of a case pays its fresh memory's page faults in
    whichever operator touches it first (docs/performance.md, "(12) Where a call's time goes, and two feature
    maps compiled"). The profiler adds a few microseconds to every operator, so a path of
    many small operators reads heavier in them than it is; the shares are of this one call."""
    from torch.autograd.profiler import profile

    with profile(use_cpu=True) as prof:
        out = fn()
    del out
    return op_seconds(prof.key_averages())


def op_seconds(averages, top: int = TOP_OPS) -> dict[str, float]:
    """Self seconds per operator name ("aten::" dropped), the `top` largest, the rest as "other"."""
    spent: dict[str, float] = {}
    for avg in averages:
        if avg.self_cpu_time_total > 0:
            name = avg.key.removeprefix("aten::").replace("autograd::engine::evaluate_function: ", "autograd ")
            spent[name] = spent.get(name, 0.0) + avg.self_cpu_time_total / 1e6  # NB: microseconds
    ranked = sorted(spent.items(), key=lambda item: -item[1])
    out = dict(ranked[:top])
    if len(ranked) > top:
        out["other"] = sum(seconds for _, seconds in ranked[top:])
    return out


def peak_cuda(fn, cuda=None) -> int:
    """max_memory_allocated during one call, above what was allocated before it."""
    cuda = cuda or torch.cuda
    cuda.synchronize()
    cuda.reset_peak_memory_stats()
    base = cuda.memory_allocated()
    out = fn()
    cuda.synchronize()
    del out
    return cuda.max_memory_allocated() - base


def cuda_synchronize() -> None:
    torch.cuda.synchronize()


def cuda_allocated() -> int | None:
    return torch.cuda.memory_allocated() if torch.cuda.is_initialized() else None


def cuda_release() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
