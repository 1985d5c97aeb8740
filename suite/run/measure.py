"""Measure one case: check it, time it, count its FLOPs, take its peak memory. Returns a plain row.

Runs inside a worker process (suite.worker). Knows nothing of files or pandas: a row is a dict of
plain values, raw timing samples included; medians and spreads are derived from them later too.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from typing import Callable

import torch

import variants
from suite.plan.case import DTYPES, Case, theory_of

MIN_SAMPLES = 3  # per case, over all its replicates: each of R processes takes ceil(3 / R), 2 at least
# Tolerances of the correctness check, relative to the reference output's largest magnitude.
CHECK_TOL = {"float64": 1e-8, "float32": 1e-4, "bfloat16": 4e-2, "float16": 1e-2}
OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory")


def inputs(case: Case, *, seq_len: int | None = None, dtype=None, device=None, requires_grad=False, seed=0):
    """q (B, H, n_q, d), k and v (B, H_kv, n, d), seeded; n_q = 1 in decode mode."""
    n = seq_len or case.seq_len
    n_q = 1 if case.mode == "decode" else n
    dtype = dtype or DTYPES[case.dtype]
    device = device or case.device
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def make(heads, rows):
        t = torch.randn(case.batch, heads, rows, case.head_dim, generator=gen, dtype=torch.float32)
        return t.to(device=device, dtype=dtype).requires_grad_(requires_grad)

    return make(case.num_heads, n_q), make(case.num_kv_heads, n), make(case.num_kv_heads, n)


def build(case: Case, q, k, v) -> tuple[Callable[[], object], dict]:
    """The zero-argument closure to time for the case's mode, and its setup costs."""
    spec = variants.get(case.variant)
    prepared = spec.prepare(q, k, v, impl=case.impl, causal=case.causal, **dict(case.params))
    if case.mode != "fwd_bwd":
        return prepared, prepared.setup_s
    grad = torch.ones_like(prepared())

    def forward_backward():
        out = prepared()
        return torch.autograd.grad(out, (q, k, v), grad)

    return forward_backward, prepared.setup_s


def at_length(case: Case, n: int) -> Case:
    """The case at batch 1 and length n: where checks against a dense reference are affordable."""
    return Case(**{**case.key, "batch": 1, "seq_len": n, "params": case.params})


_CHECKED: dict[tuple, tuple[float, float]] = {}


def check(case: Case, check_seq_len: int) -> tuple[float, float]:
    """Max |impl − dense float64| at a small shape, and the tolerance; cached per configuration."""
    key = (case.variant, case.impl, case.device, case.dtype, case.mode, case.causal, case.params,
           case.num_heads, case.num_kv_heads, case.head_dim)
    if key not in _CHECKED:
        spec = variants.get(case.variant)
        n = min(case.seq_len, check_seq_len)
        try:
            spec.resolve(n, dict(case.params))
        except ValueError:  # an explicit parameter needs a longer sequence: check at the case's n
            n = case.seq_len
        q, k, v = inputs(at_length(case, n))
        with torch.no_grad():
            out = spec.attention(q, k, v, impl=case.impl, causal=case.causal, **dict(case.params))
            ref = spec.attention(*(t.double() for t in (q, k, v)), impl="dense", causal=case.causal,
                                 **dict(case.params))
        scale = max(1.0, ref.abs().max().item())
        err = (out.double() - ref).abs().max().item() / scale
        _CHECKED[key] = (err if err == err else float("inf"), CHECK_TOL[case.dtype])  # NaN -> inf
    return _CHECKED[key]


APPROX_SEQ_LEN = 1024  # where an approximating variant's error against its target is measured
_APPROX: dict[tuple, float] = {}


def approximation_error(case: Case) -> tuple[float, int] | None:
    """‖out − target‖ / ‖target‖ against the variant the case approximates, both dense in float64.

    The algorithm's error (performer against softmax attention), not the implementation's: that one
    is `check`'s. Measured at n = min(seq_len, APPROX_SEQ_LEN); None for exact variants.
    """
    spec = variants.get(case.variant)
    if spec.approximates is None:
        return None
    n = min(case.seq_len, APPROX_SEQ_LEN)
    key = (case.variant, case.params, case.num_heads, case.num_kv_heads, case.head_dim, case.causal, case.mode, n)
    if key not in _APPROX:
        q, k, v = inputs(at_length(case, n), dtype=torch.float64, device="cpu")
        with torch.no_grad():
            out = spec.attention(q, k, v, impl="dense", causal=case.causal, **dict(case.params))
            ref = variants.get(spec.approximates).attention(q, k, v, impl="dense", causal=case.causal)
        _APPROX[key] = ((out - ref).norm() / ref.norm()).item()
    return _APPROX[key], n


def gemm_peak(device: str, dtype: str, threads: int, min_run_time: float = 0.2) -> dict:
    """The device's matmul rate: the best FLOP/s of square matmuls, timed like the cases."""
    sizes = (512, 1024, 2048) if device == "cpu" else (2048, 4096, 8192)
    rates = {}
    for n in sizes:
        gen = torch.Generator(device="cpu").manual_seed(0)
        a, b = (torch.randn(n, n, generator=gen).to(device=device, dtype=DTYPES[dtype]) for _ in range(2))
        fn = lambda: torch.mm(a, b)  # noqa: E731
        if device == "cuda":
            samples = time_cuda(fn, min_run_time, 50)
        else:
            samples = time_cpu(fn, threads, min_run_time, 50)
        rates[str(n)] = 2 * n**3 / statistics.median(samples)
    return {"flops_per_s": max(rates.values()), "by_size": rates, "threads": threads,
            "note": "best median FLOP/s of square torch.mm over the sizes"}


def time_cpu(fn, threads: int, min_run_time: float, max_samples: int, min_samples: int = MIN_SAMPLES) -> list[float]:
    """Per-call seconds from torch.utils.benchmark: blocked_autorange, then at least `min_samples`."""
    import torch.utils.benchmark as benchmark

    fn()  # NB: warm-up; the block-size estimate alone left memory-heavy calls 3-5x slow at times
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    samples = list(timer.blocked_autorange(min_run_time=min_run_time).times)
    while len(samples) < min_samples:  # slow cases: one block is one call
        samples.extend(timer.timeit(1).times)
    return samples[-max_samples:]


def time_cuda(fn, min_run_time: float, max_samples: int, min_samples: int = MIN_SAMPLES, warmup: int = 3) -> list[float]:
    """CUDA events around each call, after warm-up, with L2 flushed before each sample."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    flush = torch.empty(max(2 * getattr(props, "L2_cache_size", 50 << 20), 64 << 20), dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples, spent = [], 0.0
    while len(samples) < min_samples or (spent < min_run_time and len(samples) < max_samples):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
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


def peak_cuda(fn) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    del out
    return torch.cuda.max_memory_allocated() - base


def count_flops(case: Case) -> tuple[int | None, str]:
    """FlopCounterMode on meta tensors: the implementation's matmul work, where it can be counted.

    NB: FlopCounterMode counts 0 for CPU SDPA and raises under flex_attention; on meta tensors
    SDPA is counted. Sparse (CSR) ops cannot run on meta: those are reported as not countable.
    """
    from torch.utils.flop_counter import FlopCounterMode

    spec = variants.get(case.variant)
    if case.impl in ("flex", "xformers"):
        return None, f"not countable: FlopCounterMode cannot trace {case.impl}"
    try:
        q, k, v = inputs(case, device="meta", requires_grad=case.mode == "fwd_bwd")
        impl = spec.impls[case.impl]
        params = spec.resolve(case.seq_len, dict(case.params))
        with FlopCounterMode(display=False) as counter:
            out = impl.prepare(q, k, v, causal=case.causal, params=params)()
            if case.mode == "fwd_bwd":
                torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        return int(counter.get_total_flops()), "counted on meta tensors"
    except Exception as err:  # noqa: BLE001 - any failure only means "not countable"
        return None, f"not countable on meta: {type(err).__name__}: {str(err).splitlines()[0][:160]}"


def classify(err: BaseException) -> tuple[str, str]:
    """(status, reason) for an exception: out-of-memory by type or by message, else error."""
    text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:500]
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)) or any(m in str(err).lower() for m in OOM_MARKERS):
        return "oom", text
    return "error", text


def measure(case: Case, settings: dict, replicate: int = 0) -> dict:
    """Everything about one case, as a row. Never raises: failures become a status and a reason.

    Replicate 0 measures everything; later replicates (other processes) only time the case.
    """
    started = time.perf_counter()
    row: dict = {"case_id": case.case_id, **case.key, "status": "ok", "reason": "", "pid": os.getpid()}
    try:
        row.update(theory_of(case))
    except Exception as err:  # noqa: BLE001
        row.update(status="error", reason=f"theory: {type(err).__name__}: {err}")
        return row
    spec = variants.get(case.variant)
    reasons = spec.reasons(case.impl, device=case.device, dtype=DTYPES[case.dtype], batch=case.batch,
                           num_heads=case.num_heads, num_kv_heads=case.num_kv_heads,
                           seq_len=case.seq_len, head_dim=case.head_dim, causal=case.causal)
    if reasons:
        row.update(status="skipped", reason="; ".join(reasons))
        return row
    try:
        err, tol = check(case, settings["check_seq_len"])
        row.update(check_error=err, check_tol=tol)
        if not err <= tol:
            row.update(status="invalid", reason=f"differs from the dense reference by {err:.3g} (tolerance {tol:g})")
            return row
        q, k, v = inputs(case, requires_grad=case.mode == "fwd_bwd")
        fn, setup = build(case, q, k, v)
        row["setup"] = {key: float(val) for key, val in setup.items()}
        row["notes"] = dict(getattr(fn, "notes", {}))
        row["setup_s"] = float(sum(setup.values()))
        min_samples = max(2, -(-MIN_SAMPLES // int(settings.get("replicates", 1))))
        if case.device == "cuda":
            samples = time_cuda(fn, settings["min_run_time_s"], settings["max_samples"], min_samples)
            if replicate == 0:
                row["peak_bytes"] = peak_cuda(fn)
        else:
            samples = time_cpu(fn, settings["threads"], settings["min_run_time_s"], settings["max_samples"], min_samples)
            if replicate == 0:
                row["peak_bytes"] = peak_cpu(fn)
        row["samples"] = samples
        row["time_s"] = statistics.median(samples)
        quartiles = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
        row["time_iqr_s"] = quartiles[2] - quartiles[0]
        del fn, q, k, v
        if replicate == 0:
            row["flops_counted"], row["flops_counted_note"] = count_flops(case)
            approx = approximation_error(case)
            if approx is not None:
                row["approx_error"], row["approx_seq_len"] = approx
    except BaseException as err:  # noqa: BLE001 - a failing case is a row, not a crash
        if isinstance(err, KeyboardInterrupt):
            raise
        row["status"], row["reason"] = classify(err)
        del err  # NB: a kept traceback would keep the case's tensors alive
        gc.collect()  # only after a failure: a full collection costs ~0.1 s with torch loaded
    finally:
        if case.device == "cuda" and torch.cuda.is_available():
            torch.cuda.empty_cache()
        row["wall_s"] = time.perf_counter() - started
    return row
