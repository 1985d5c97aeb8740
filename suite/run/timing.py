"""Timers and peak-memory readers, one per kind of device; suite.run.device puts them in its table.

A timer returns raw per-call seconds (never a summary): statistics are derived later, in one place
(suite.store.row). Every timer warms up first and keeps setup, flushes and syncs out of the timed
window.
"""

from __future__ import annotations

import time

import torch

CUDA_WARMUP = 3


def time_cpu(fn, min_run_time: float, max_samples: int, min_samples: int, threads: int = 1) -> list[float]:
    """Per-call seconds from torch.utils.benchmark: blocked_autorange, then at least `min_samples`."""
    import torch.utils.benchmark as benchmark

    began = time.perf_counter()
    fn()  # NB: warm-up; the block-size estimate alone left memory-heavy calls 3-5x slow at times
    slow = time.perf_counter() - began >= min_run_time
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    # a call slower than min_run_time is a block by itself: blocked_autorange would spend one more
    # whole call estimating the block size, a quarter of a slow case's time
    samples = [] if slow else list(timer.blocked_autorange(min_run_time=min_run_time).times)
    while len(samples) < min_samples:  # slow cases: one block is one call
        samples.extend(timer.timeit(1).times)
    return samples[-max_samples:]


def l2_flusher(cuda=None):
    """A call that evicts the L2 cache: zeroes a buffer twice its size (64 MiB at least)."""
    cuda = cuda or torch.cuda
    props = cuda.get_device_properties(cuda.current_device())
    buffer = torch.empty(max(2 * getattr(props, "L2_cache_size", 50 << 20), 64 << 20), dtype=torch.int8, device="cuda")
    return buffer.zero_


def time_cuda(fn, min_run_time: float, max_samples: int, min_samples: int, threads: int = 1,
              cuda=None, flush=None) -> list[float]:
    """CUDA events around each call, after CUDA_WARMUP calls, with L2 flushed before each sample.

    `cuda` stands in for `torch.cuda` and `flush` for the L2 flush (a test passes fakes).
    """
    cuda = cuda or torch.cuda
    flush = flush or l2_flusher(cuda)
    for _ in range(CUDA_WARMUP):
        fn()
    cuda.synchronize()
    samples, spent = [], 0.0
    while len(samples) < min_samples or (spent < min_run_time and len(samples) < max_samples):
        flush()  # NB: before the start event is recorded: the flush is not in the timed window
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
        spent += samples[-1]
    return samples


def peak_cpu(fn) -> int:
    """Allocator peak of one call above what existed before it, from the profiler's memory events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    del out
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak


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


def cuda_release() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
