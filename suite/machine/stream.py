"""The device's memory bandwidth: the roofline's second ceiling, measured in a worker like the GEMM probe.

STREAM's kernels (McCalpin): copy `b = a` moves 2 arrays, triad `a = b + s·c` moves 3, each counted
as STREAM counts them (every element read or written once; a write-allocate read, where the
hardware makes one, is not counted). Two buffer sizes: `memory`, each buffer several times the
last-level cache, so every call streams from DRAM (HBM); and `cache`, the three buffers together
inside L2, so the same kernels read what the cache holds (none on CUDA: its timer flushes L2
before every call, as before every case). Every kernel is timed in every one of ROUNDS rounds,
interleaved, like the GEMM probe's shapes; the ceiling is the best memory kernel's median over the
rounds, and its spread is the rounds' range over that median.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from suite.machine.probe import ROUNDS

ARRAYS = {"copy": 2, "triad": 3}  # arrays each kernel reads or writes once per element
DTYPE = torch.float32  # bytes are bytes: one element type for every run
LEVELS = ("memory", "cache")


@dataclass(frozen=True)
class Stream:
    """One kernel over buffers of `buffer_bytes` each, at one level of the memory hierarchy."""

    kernel: str  # "copy", "triad"
    level: str  # "memory", "cache"
    buffer_bytes: int

    @property
    def elements(self) -> int:
        return self.buffer_bytes // DTYPE.itemsize

    @property
    def moved(self) -> int:
        """Bytes one call reads and writes, STREAM's count."""
        return ARRAYS[self.kernel] * self.elements * DTYPE.itemsize

    @property
    def name(self) -> str:
        return f"{self.kernel} {self.level} {_mib(self.buffer_bytes)}"


def kernels(sizes: dict[str, int | None]) -> tuple[Stream, ...]:
    """copy and triad at each level the device sizes (None: that level is not measured)."""
    return tuple(Stream(kernel, level, sizes[level]) for level in LEVELS if sizes.get(level) for kernel in ARRAYS)


def calls(streams: tuple[Stream, ...], device: str) -> dict[Stream, object]:
    """Each kernel's zero-argument call; the kernels of one level share its three buffers."""
    buffers = {}
    for s in streams:
        if s.level not in buffers:  # NB: written (ones, not empty) so every page is mapped before timing
            buffers[s.level] = [torch.ones(s.elements, dtype=DTYPE, device=device) for _ in range(3)]
    out = {}
    for s in streams:
        a, b, c = buffers[s.level]
        out[s] = (
            (lambda a=a, b=b: b.copy_(a))
            if s.kernel == "copy"
            else (lambda a=a, b=b, c=c: torch.add(b, c, alpha=3.0, out=a))
        )
    return out


def measure(
    timer, streams: tuple[Stream, ...], device: str, threads: int, min_run_time: float, min_samples: int
) -> dict:
    """Bytes per second of every kernel over ROUNDS interleaved rounds; the ceiling is the best
    memory-level kernel's median, `cache_bytes_per_s` the best cache-level one's."""
    fns = calls(streams, device)
    rounds: dict[Stream, list[float]] = {s: [] for s in streams}
    for _ in range(ROUNDS):
        for s, fn in fns.items():
            samples = timer(fn, min_run_time, 50, min_samples, threads)
            rounds[s].append(s.moved / statistics.median(samples))
    by_kernel = {s.name: _summary(s, rates) for s, rates in rounds.items()}
    out = {
        "by_kernel": by_kernel,
        "rounds": ROUNDS,
        "threads": threads,
        "note": f"best kernel's median bytes/s over {ROUNDS} interleaved rounds of STREAM copy and triad",
    }
    for level, prefix in (("memory", ""), ("cache", "cache_")):
        mine = [name for name, k in by_kernel.items() if k["level"] == level]
        if mine:
            best = max(mine, key=lambda name: by_kernel[name]["bytes_per_s"])
            out.update(
                {
                    f"{prefix}bytes_per_s": by_kernel[best]["bytes_per_s"],
                    f"{prefix}spread": by_kernel[best]["spread"],
                    f"{prefix}kernel": best,
                }
            )
    return out


def sweep(
    timer, sizes: dict[str, int | None], device: str, threads: int, min_run_time: float, min_samples: int
) -> dict | None:
    """Triad over buffers of every octave past L2 (the three together larger than it) to the memory level's (views of
    one set of three buffers, the smallest first), each size's median over ROUNDS interleaved rounds, and the last
    level's reach read off them (`reach`); None where the device has no cache level (CUDA: its timer flushes L2)."""
    if not sizes.get("cache") or not sizes.get("memory"):
        return None
    past_l2 = [sizes["cache"] << k for k in range(64) if 3 * (sizes["cache"] << k) > sizes["cache"] * IN_L2]
    octaves = [size for size in past_l2 if size <= sizes["memory"]]
    if len(octaves) < 3:
        return None
    a, b, c = (torch.ones(octaves[-1] // DTYPE.itemsize, dtype=DTYPE, device=device) for _ in range(3))
    views = [(a[:n], b[:n], c[:n]) for n in (size // DTYPE.itemsize for size in octaves)]
    fns = [(lambda a=a, b=b, c=c: torch.add(b, c, alpha=3.0, out=a)) for a, b, c in views]
    rounds: list[list[float]] = [[] for _ in octaves]
    for _ in range(ROUNDS):  # NB: interleaved, so a burst of another program's load lands on one reading of a size
        for size, fn, mine in zip(octaves, fns, rounds):
            mine.append(3 * size / statistics.median(timer(fn, min_run_time, 50, min_samples, threads)))
    rates = [statistics.median(mine) for mine in rounds]
    return {
        "buffer_bytes": octaves,
        "bytes_per_s": rates,
        "rounds": rounds,
        "reach_bytes": reach(octaves, rates),
        "note": f"STREAM triad over three buffers of each size past L2, each size's median over {ROUNDS} interleaved "
        "rounds; the reach is their total where the rate falls halfway (geometric) from its best to the "
        "largest size's",
    }


def reach(buffer_bytes: list[int], rates: list[float]) -> int | None:
    """The last cache level's reach, in bytes of all three buffers: where triad's rate, falling from its best (past
    L2) to the largest size's (memory), crosses their geometric mean, interpolated in octaves; None where it never
    falls by 25% (no level ends within the sweep). The last such crossing: a reading the host's noise dipped below it
    earlier (one octave a quarter below its neighbours) would otherwise end the level there."""
    if len(rates) < 2:
        return None
    best, low = max(rates), rates[-1]
    if best < 1.25 * low:
        return None
    mid = math.sqrt(best * low)
    for i in reversed(range(rates.index(best), len(rates) - 1)):
        if rates[i] >= mid > rates[i + 1]:
            frac = math.log(rates[i] / mid) / math.log(rates[i] / rates[i + 1])
            return int(3 * buffer_bytes[i] * 2**frac)
    return None


def _summary(stream: Stream, rates: list[float]) -> dict:
    mid = statistics.median(rates)
    return {
        "kernel": stream.kernel,
        "level": stream.level,
        "buffer_bytes": stream.buffer_bytes,
        "bytes_per_s": mid,
        "rounds": rates,
        "spread": (max(rates) - min(rates)) / mid,
    }


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size / 2**10:g} KiB"


# ------------------------------------------------------------------------------ sizes per device
PAST_LAST_LEVEL = 4  # a memory-level buffer is this many last-level caches
IN_L2 = 8  # a cache-level buffer is L2 over this: its three buffers take 3/8 of L2
UNKNOWN_LAST_LEVEL = 64 << 20  # where sysfs says nothing: a last-level cache this large is assumed
UNKNOWN_L2 = 1 << 20
# NB: sysfs can report a socket's whole shared last level, where four times it made buffers past a case's time and
# memory budgets, while buffers of a quarter of that already streamed at memory's rate (docs/performance.md,
# "Figures behind the code's choices").
MAX_MEMORY_BUFFER = 1 << 30
# a memory-level buffer capped below this (a small memory budget) would read a cache's rate as memory's: three of
# these are past the last level's reach of the hosts measured (docs/performance.md, "Figures behind the code's
# choices")
MIN_MEMORY_BUFFER = 64 << 20


def cpu_sizes() -> dict[str, int]:
    """Buffers of 4× the host's last-level cache, 1 GiB at most, and of L2/8 (suite.machine.caches)."""
    from suite.machine.caches import caches, last_level

    found = caches()
    l2 = found.get("L2", {}).get("bytes", UNKNOWN_L2)
    memory = min(PAST_LAST_LEVEL * (last_level(found) or UNKNOWN_LAST_LEVEL), MAX_MEMORY_BUFFER)
    return {"memory": memory, "cache": l2 // IN_L2}


def cuda_sizes(cuda=None) -> dict[str, int | None]:
    """Buffers of 4× the GPU's L2, 1 GiB at least; no cache level (the timer flushes L2 before each call)."""
    cuda = cuda or torch.cuda
    l2 = getattr(cuda.get_device_properties(cuda.current_device()), "L2_cache_size", 0) or 0
    return {"memory": max(PAST_LAST_LEVEL * l2, 1 << 30), "cache": None}
