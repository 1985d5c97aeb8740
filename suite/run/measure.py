"""Measure one case: check it, time it, count its FLOPs, take its peak memory. Returns a Row.

Runs inside a worker process (suite.run.worker). Knows nothing of files or pandas; devices are
entries of suite.run.device, implementation traits come from the registry. The Row keeps every raw
sample; its median and spread are derived in one place (suite.store.row).
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import replace
from typing import Callable

import torch

import variants
from variants import padding
from variants._checks import against_reference
from suite.plan.case import DTYPES, Case, reasons_of, theory_of
from suite.plan.settings import Settings
from suite.run import device as devices
from suite.run import load, probe, stream
from suite.store.row import Row

MIN_SAMPLES = 3  # per case, over all its replicates: each of R processes takes ceil(3 / R), 2 at least
# Tolerances of the correctness check, relative to the reference output's largest magnitude.
CHECK_TOL = {"float64": 1e-8, "float32": 1e-4, "bfloat16": 4e-2, "float16": 1e-2}
OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory")


def inputs(case: Case, *, dtype=None, device=None, requires_grad=False, seed=0):
    """q (B, H, n_q, d), k and v (B, H_kv, n_k, d), seeded: n_q = 1 in decode mode, n_k = kv_len
    where the keys are another sequence's."""
    n_q, n = case.query_len, case.key_len
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
    prepared = spec.prepare(q, k, v, impl=case.impl, causal=case.causal, lengths=case.lengths, **dict(case.params))
    if case.mode != "fwd_bwd":
        return prepared, prepared.setup_s
    grad = torch.ones_like(prepared())

    def forward_backward():
        out = prepared()
        return torch.autograd.grad(out, (q, k, v), grad, allow_unused=True)  # layers read q only

    return forward_backward, prepared.setup_s


def at_length(case: Case, n: int) -> Case:
    """The case at batch 1 and length n: where checks against a dense reference are affordable. A
    cross case's keys are scaled alike, so the check keeps n_q ≠ n_k and which one is longer; a padded
    batch keeps its batch (each sequence its own valid length)."""
    kv_len = None if case.kv_len is None else max(1, round(case.kv_len * n / case.seq_len))
    batch = 1 if case.valid_fraction is None else case.batch
    return Case(**{**case.key, "batch": batch, "seq_len": n, "params": case.params, "kv_len": kv_len})


_CHECKED: dict[tuple, tuple[float, float]] = {}


def check(case: Case, check_seq_len: int) -> tuple[float, float]:
    """Max |impl − dense float64| at a small shape (and of the gradients, in fwd_bwd mode), and the
    tolerance; cached per configuration (a cross case's per ratio n_q : n_k, both scaled so the
    longer is at most check_seq_len; a padded case's per valid fraction, so its padding path is
    checked, not the unpadded one in its place)."""
    spec = variants.get(case.variant)
    n = max(1, min(case.seq_len, check_seq_len * case.seq_len // max(case.seq_len, case.key_len)))
    try:
        spec.resolve(n, dict(case.params))
    except ValueError:  # an explicit parameter needs a longer sequence: check at the case's n
        n = case.seq_len
    shape = None if case.kv_len is None else (n, at_length(case, n).kv_len)
    key = (case.variant, case.impl, case.device, case.dtype, case.mode, case.causal, case.params,
           case.num_heads, case.num_kv_heads, case.head_dim, shape, case.valid_fraction)
    if key not in _CHECKED:
        err, floor = against_reference(spec, case.impl, lambda m: inputs(at_length(case, m)), n,
                                       dict(case.params), case.causal, lambda m: at_length(case, m).lengths,
                                       grads=case.mode == "fwd_bwd")
        _CHECKED[key] = (err, max(CHECK_TOL[case.dtype], floor))
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


def gemm_peak(device: str, dtype: str, threads: int, min_run_time: float) -> dict:
    """The device's matmul rate over its probe shapes, timed like the cases (suite.run.probe)."""
    dev = devices.get(device)
    return probe.measure(dev.time, dev.probe_shapes, device, DTYPES[dtype], threads, min_run_time, MIN_SAMPLES)


def bandwidth(device: str, threads: int, min_run_time: float) -> dict:
    """The device's memory bandwidth, STREAM's copy and triad timed like the cases (suite.run.stream)."""
    dev = devices.get(device)
    return stream.measure(dev.time, stream.kernels(dev.stream_sizes()), device, threads, min_run_time, MIN_SAMPLES)


def in_place_gemms() -> dict:
    """FlopCounterMode's own formulas for the in-place forms of its GEMMs: it registers baddbmm and
    addmm, and counted 0 for baddbmm_ and addmm_ (linearized attention accumulates K′ᵀV by baddbmm_:
    its counted work read half its FLOPs, a work ratio of 0.51). `__wrapped__`: the formula on shapes,
    which the mode wraps again."""
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    return {aten.baddbmm_: flop_registry[aten.baddbmm].__wrapped__, aten.addmm_: flop_registry[aten.addmm].__wrapped__}


def count_flops(case: Case) -> tuple[int | None, str]:
    """FlopCounterMode on meta tensors: the implementation's matmul work, where it can be counted.

    NB: FlopCounterMode counts 0 for CPU SDPA and raises under flex_attention; on meta tensors
    SDPA is counted. Sparse (CSR) ops cannot run on meta: those are reported as not countable.
    """
    from torch.utils.flop_counter import FlopCounterMode

    spec = variants.get(case.variant)
    if not spec.impls[case.impl].countable:
        return None, f"not countable: FlopCounterMode cannot trace {case.impl}"
    try:
        q, k, v = inputs(case, device="meta", requires_grad=case.mode == "fwd_bwd")
        impl = spec.impls[case.impl]
        params = spec.resolve(case.seq_len, dict(case.params))
        with FlopCounterMode(display=False, custom_mapping=in_place_gemms()) as counter:
            out = padding.prepare(impl, q, k, v, causal=case.causal, params=params, lengths=case.lengths)()
            if case.mode == "fwd_bwd":
                torch.autograd.grad(out, (q, k, v), torch.ones_like(out), allow_unused=True)
        return int(counter.get_total_flops()), "counted on meta tensors"
    except Exception as err:  # noqa: BLE001 - any failure only means "not countable"
        return None, f"not countable on meta: {type(err).__name__}: {str(err).splitlines()[0][:160]}"


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
        gc.collect()  # only after a failure: a full collection costs ~0.1 s with torch loaded
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
    row = replace(row, impl_work=impl.work, impl_library=impl.library)
    return replace(row, status="skipped", reason="; ".join(reasons)) if reasons else row


def _timed(row: Row, fn, settings: Settings, warmed: float | None = None) -> Row:
    """The samples, with what else the machine did meanwhile; timed again (up to `retimes` more) while
    other processes used more than `busy_limit_cores`, keeping the quietest timing."""
    dev = devices.get(row.case.device)
    min_samples = max(2, -(-MIN_SAMPLES // settings.replicates))
    best = None
    for attempt in range(settings.retimes + 1):
        before = load.snapshot()
        samples = dev.time(fn, settings.min_run_time_s, settings.max_samples, min_samples, settings.threads,
                           warmed=warmed)
        seen = load.since(before)
        if best is None or seen["busy_cores"] < best[1]["busy_cores"]:
            best = (samples, seen)
        if seen["busy_cores"] <= settings.busy_limit_cores:
            break
    return replace(row.with_samples(best[0]), **best[1], retimed=attempt)


def _measured(row: Row, settings: Settings, replicate: int) -> Row:
    """On replicate 0: check against the dense reference; then set up and time; on replicate 0 also
    memory, where a call's time went, FLOPs, error. NB: the other processes run the same code, so
    replicate 0's check stands for them (a flex series' check compiled once more in each of them:
    ~0.4 min of a full run)."""
    case = row.case
    if replicate == 0:
        err, tol = check(case, settings.check_seq_len)
        row = replace(row, check_error=err, check_tol=tol)
        if not err <= tol:
            return replace(row, status="invalid",
                           reason=f"differs from the dense reference by {err:.3g} (tolerance {tol:g})")
    q, k, v = inputs(case, requires_grad=case.mode == "fwd_bwd")
    fn, setup = build(case, q, k, v)
    row = replace(row, setup={key: float(val) for key, val in setup.items()}, setup_s=float(sum(setup.values())),
                  notes=dict(getattr(fn, "notes", {})))
    dev, warmed = devices.get(case.device), None
    if replicate == 0 and dev.peak_warms_up:  # the peak-memory call is the timer's warm-up (CPU)
        began = time.perf_counter()
        row = replace(row, peak_bytes=dev.peak_bytes(fn))
        warmed = time.perf_counter() - began
    row = _timed(row, fn, settings, warmed)
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
