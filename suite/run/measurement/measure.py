"""Measure one case: check it, time it, count its FLOPs, take its peak memory. Returns a Row, with an
error classified (out of memory, or an error) where the case raised.

Runs inside a worker process (suite.run.executors.worker). Knows nothing of files or pandas; devices are
entries of suite.machine.device, implementation traits come from the registry. The Row keeps every raw
sample; its median and spread are derived in one place (suite.store.row).
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import replace

import torch

import variants
from suite.machine import device as devices
from suite.machine import gathers, probe, stream
from suite.machine.address_space import address_room
from suite.plan.case import DTYPES, Case, reasons_of, theory_of
from suite.plan.settings import Settings
from suite.run.measurement import gpu_load
from suite.run.measurement import host_load as load
from suite.run.measurement.check import approximation_error, check
from suite.run.measurement.counting import count_flops
from suite.run.measurement.inputs import build, inputs
from suite.store.row import Row
from variants.rules import paths

MIN_SAMPLES = 3  # per case, over all its replicates: each of R processes takes ceil(3 / R), 2 at least
OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory")


def gemm_peak(device: str, dtype: str, threads: int, min_run_time: float) -> dict:
    """The device's matmul rate over its probe shapes, timed like the cases (suite.machine.probe)."""
    dev = devices.get(device)
    return probe.measure(dev.time, dev.probe_shapes, device, DTYPES[dtype], threads, min_run_time, MIN_SAMPLES)


def bandwidth(device: str, threads: int, min_run_time: float, budget_gib: float | None = None) -> dict:
    """The device's memory bandwidth, STREAM's copy and triad timed like the cases (suite.machine.stream); the
    memory level's three buffers take a quarter each at most of the run's memory budget and of the address space
    the worker has left under it (with a small budget, three quarters of it would not fit there: the probe failed);
    where that leaves them under stream.MIN_MEMORY_BUFFER, an error says so rather than a cache's rate read as memory's."""
    dev = devices.get(device)
    sizes = dev.stream_sizes()
    if sizes.get("memory") and dev.limit_address_space:  # NB: the CPU's: CUDA's budget is not its RAM
        fits = _memory_buffer_fits(budget_gib)
        if fits is not None and fits < min(sizes["memory"], stream.MIN_MEMORY_BUFFER):
            return {
                "error": f"the memory level's buffers would be {fits >> 20} MiB (a quarter of the memory budget or "
                f"of the address space the worker has left): too small to stream from memory"
            }
        sizes = {**sizes, "memory": min(sizes["memory"], fits or sizes["memory"])}
    found = stream.measure(dev.time, stream.kernels(sizes), device, threads, min_run_time, MIN_SAMPLES)
    try:
        swept = stream.sweep(dev.time, sizes, device, threads, min_run_time, MIN_SAMPLES)
    except (RuntimeError, MemoryError) as err:  # the levels' bandwidth stands without it
        swept = {"error": f"{type(err).__name__}: {err}"[:300]}
    return found if swept is None else {**found, "sweep": swept}


def _memory_buffer_fits(budget_gib: float | None) -> int | None:
    """The largest memory-level buffer, in whole MiB, at a quarter of the budget and of the address space this worker
    has left under its limit (suite.machine.address_space); None where neither bounds it."""
    bounds = [b for b in (int(budget_gib * 2**30) if budget_gib else None, address_room()) if b is not None]
    return min(b // 4 >> 20 << 20 for b in bounds) if bounds else None


def gather_rate(device: str, threads: int, longest: int | None = None) -> dict:
    """This process's rate for random gathers on the device to n = `longest` (suite.machine.gathers), timed like the cases."""
    return gathers.measure(devices.get(device).time, device, threads, longest)


def classify(err: BaseException) -> tuple[str, str]:
    """(status, reason) for an exception: out-of-memory by type or by message, else error."""
    text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:500]
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)) or any(m in str(err).lower() for m in OOM_MARKERS):
        return "oom", text
    return "error", text


def measure(case: Case, settings: Settings, replicate: int = 0) -> Row:
    """Everything about one case, as a Row. Never raises: failures become a status and a reason.

    Replicate 0 measures everything; later replicates (other processes) only time the case.
    """
    started = time.perf_counter()
    row = Row(case, pid=os.getpid(), replicate=replicate)
    dev = devices.get(case.device)
    before = dev.allocated()
    try:
        row = _ready(row)
        if row.status == "ok":
            row = _measured(row, settings, replicate)
    except BaseException as err:  # noqa: BLE001 - a failing case is a row, not a crash
        if isinstance(err, KeyboardInterrupt):
            raise
        row = replace(row, **dict(zip(("status", "reason"), classify(err))))
        del err  # NB: a kept traceback would keep the case's tensors alive
        gc.collect()  # only after a failure: a full collection is slow with torch loaded
    finally:
        dev.release()
    after = dev.allocated()  # NB: after an OOM too: what the case left behind is the next case's loss
    left = None if after is None else after - (before or 0)  # before None: CUDA not yet initialized
    return replace(row, wall_s=time.perf_counter() - started, left_bytes=left)


def _ready(row: Row) -> Row:
    """Theory, traits and capability: the row of a case that can run here, or of one skipped."""
    case, reasons = row.case, []
    try:
        reasons = reasons_of(case)
        row = replace(row, **theory_of(case))
    except Exception as err:  # noqa: BLE001
        if not reasons:  # NB: a shape the variant does not define (cross, padded) has reasons, and no theory
            return replace(row, status="error", reason=f"theory: {type(err).__name__}: {err}")
    impl = variants.get(case.variant).impls[case.impl]
    row = replace(
        row, impl_work=impl.work, impl_library=impl.library, impl_gathers=impl.gathers and case.mode != "decode"
    )  # a decode step gathers one row's keys
    return replace(row, status="skipped", reason="; ".join(reasons)) if reasons else row


def _timed(row: Row, fn, settings: Settings, warmed: float | None = None) -> Row:
    """The samples, with what else the machine did meanwhile (host_load): timed again (up to `retimes`
    more) while other processes used more than `busy_limit_cores`, keeping the quietest timing. On CUDA,
    what the GPU did too (gpu_load): timed once more where its clock dipped or it throttled."""
    (samples, seen, attempt), gpu = gpu_load.timed(
        lambda call: _quietest(row.case.device, call, settings, warmed), fn, row.case.device
    )
    return replace(row.with_samples(samples), **seen, retimed=attempt, **gpu)


def _quietest(device: str, fn, settings: Settings, warmed: float | None) -> tuple[list[float], dict, int]:
    """(samples, the load while they were taken, timings thrown away) of the quietest of the timings."""
    dev = devices.get(device)
    min_samples = max(2, -(-MIN_SAMPLES // settings.replicates))
    best = None
    for attempt in range(settings.retimes + 1):
        before = load.snapshot()
        samples = dev.time(
            fn, settings.min_run_time_s, settings.max_samples, min_samples, settings.threads, warmed=warmed
        )
        seen = load.since(before)
        if best is None or seen["busy_cores"] < best[1]["busy_cores"]:
            best = (samples, seen)
        if seen["busy_cores"] <= settings.busy_limit_cores:
            break
    return best[0], best[1], attempt


def _measured(row: Row, settings: Settings, replicate: int) -> Row:
    """On replicate 0: check against the dense reference; then set up and time; on replicate 0 also
    memory, where a call's time went, FLOPs, error. NB: the other processes run the same code, so
    replicate 0's check stands for them (a flex series' check would compile once more in each of them)."""
    case = row.case
    if replicate == 0:
        err, tol = check(case, settings.check_seq_len)
        row = replace(row, check_error=err, check_tol=tol)
        if not err <= tol:
            return replace(
                row, status="invalid", reason=f"differs from the dense reference by {err:.3g} (tolerance {tol:g})"
            )
    q, k, v = inputs(case, requires_grad=case.mode == "fwd_bwd")
    fn, setup = build(case, q, k, v)
    row = replace(
        row,
        setup={key: float(val) for key, val in setup.items()},
        setup_s=float(sum(setup.values())),
        notes=dict(getattr(fn, "notes", {})),
    )
    paths.clear()  # the path the timed calls take, where the implementation names it (variants.rules.paths)
    dev, warmed = devices.get(case.device), None
    if replicate == 0 and dev.peak_warms_up:  # the peak-memory call is the timer's warm-up (CPU)
        began = time.perf_counter()
        row = replace(row, peak_bytes=dev.peak_bytes(fn))
        warmed = time.perf_counter() - began
    row = _timed(row, fn, settings, warmed)
    if taken := paths.taken():
        row = replace(row, notes={**row.notes, "path": taken})
    if replicate == 0 and not dev.peak_warms_up:
        row = replace(row, peak_bytes=dev.peak_bytes(fn))
    if replicate == 0:
        row = replace(row, op_seconds=dev.op_seconds(fn))
    del fn, q, k, v
    if replicate == 0:
        counted, note = count_flops(case)
        row = replace(row, flops_counted=counted, flops_counted_note=note)
        approx = approximation_error(case)
        if approx is not None:
            row = replace(row, approx_error=approx[0], approx_seq_len=approx[1])
    return row
