"""One observation: a Row per (case, worker process), and the long-form table's columns derived from it.

A Row holds the raw samples; `time_s`, `time_iqr_s` and `time_min_s` are derived from them in one place
(`with_samples`), and a case measured in several processes is aggregated here too. The journal
stores `Row.to_json()`; `Row.from_json` reads it back and refuses a field it does not know, so no
measurement is ever dropped on the way to the table. A new metric is one field here.
"""

from __future__ import annotations

import numbers
import statistics
from dataclasses import dataclass, field, fields, replace
from typing import Any

from suite.plan.case import Case
from suite.plan.settings import LIMITS

PROCESS = {"table": False}  # metadata: a field of one process's row, not of the case's table row
CASE_FIELDS = tuple(f.name for f in fields(Case))


@dataclass(frozen=True)
class Row:
    case: Case
    status: str = "ok"  # one of STATUSES
    reason: str = ""
    time_s: float | None = None  # median of the samples (of the per-process medians, aggregated)
    time_iqr_s: float | None = None
    time_min_s: float | None = None  # the fastest sample: the least disturbed call (exponents are fitted to it)
    samples: list[float] | None = None  # seconds per call, every one kept
    flops: int | None = None  # the algorithm's FLOPs (docs/CLAIMS.md)
    flops_counted: int | None = None  # FlopCounterMode on meta tensors, where it can trace the path
    peak_bytes: int | None = None  # allocator peak of one call above its inputs
    op_seconds: dict[str, float] | None = None  # that profiled call's self time per operator (suite.machine.timing)
    setup_s: float | None = None  # mask, plan, compile: never in the timed call
    pairs: int | None = None
    claimed_exponent_n: float | None = None
    claimed_exponent_d: float | None = None
    claimed_exponent_q: float | None = None  # cross attention: in n_q alone, and in n_k alone
    claimed_exponent_k: float | None = None
    claimed_memory_exponent_n: float | None = None  # one call's extra memory in n (variants.rules.MemoryClaim)
    valid_tokens: int | None = None  # a padded batch: its sequences' valid tokens, summed
    kv_bytes: int | None = None
    compulsory_bytes: int | None = None  # each input read once, each output written once (docs/CLAIMS.md, "Bytes")
    traffic_bytes: int | None = None  # the algorithm's reads and writes when its working set leaves the cache
    check_error: float | None = None  # max |impl − dense float64| / scale at a small n
    check_tol: float | None = None
    flops_counted_note: str | None = None
    setup: dict[str, float] | None = None  # named setup costs
    notes: dict[str, str] | None = None  # how it ran (compile mode, kernel)
    extra_flops: dict[str, int] | None = None  # named terms apart from `flops` (softmax)
    impl_work: str | None = None  # the implementation's traits (variants.rules.registry.Impl)
    impl_library: str | None = None
    impl_gathers: bool | None = None  # its leading term's work is random gathers (Impl.gathers)
    wall_s: float | None = None  # everything this process spent on the case
    replicates: int | None = None  # processes aggregated into this row
    replicate_times_s: list[float] | None = None  # each process's median
    busy_cores: float | None = None  # other processes' CPU while timing, in cores (suite.run.measurement.host_load)
    steal_cores: float | None = None  # CPU the hypervisor gave away while timing, in cores
    load_avg: float | None = None  # 1-minute load average when timing ended
    retimed: int | None = None  # timings thrown away because the machine was busy
    # what the GPU did while timing, through NVML (suite.run.measurement.gpu_load); None on CPU or without NVML
    gpu_sm_clock_mhz: float | None = None  # median SM clock of the samples taken while the GPU was not idle
    gpu_sm_clock_min_mhz: float | None = None
    gpu_power_w: float | None = None  # mean power draw
    gpu_temp_c: float | None = None  # highest temperature
    gpu_energy_j: float | None = None  # the energy counter over the timing window
    gpu_calls: int | None = None  # calls the timer made in that window, its warm-ups included
    gpu_energy_per_call_j: float | None = None  # gpu_energy_j / gpu_calls: an upper bound (L2 flushes included)
    gpu_throttle: str | None = None  # slowing reasons seen, comma-separated ("" none)
    gpu_unsteady: int | None = None  # 1: the kept timing's clock dipped > 10% below its median, or it slowed
    gpu_retimed: int | None = None  # timings thrown away because the GPU was unsteady (at most 1)
    left_bytes: int | None = None  # device memory still allocated after the case, above before it
    approx_error: float | None = None  # against the variant it approximates, float64
    approx_seq_len: int | None = None
    pid: int | None = field(default=None, metadata=PROCESS)
    replicate: int = field(default=0, metadata=PROCESS)
    finished_at: float | None = field(default=None, metadata=PROCESS)

    @property
    def case_id(self) -> str:
        return self.case.case_id

    def with_samples(self, samples: list[float]) -> "Row":
        """The row with its raw samples and the statistics derived from them."""
        median, iqr = sample_stats(samples)
        return replace(self, samples=list(samples), time_s=median, time_iqr_s=iqr, time_min_s=min(samples))

    def to_json(self) -> dict[str, Any]:
        """A flat JSON object: the case's key, then every measured field (the journal's line)."""
        out = {"case_id": self.case_id, **self.case.key}
        out.update({f.name: getattr(self, f.name) for f in fields(self) if f.name != "case"})
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Row":
        """The inverse of to_json; ValueError naming a field this version does not know."""
        known = set(MEASURED) | set(CASE_FIELDS) | {"case_id"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        case = Case.from_key({k: data[k] for k in CASE_FIELDS if k in data})
        if "case_id" in data and data["case_id"] != case.case_id:
            raise ValueError(f"case_id {data['case_id']} does not match its fields ({case.case_id})")
        measured = {k: v for k, v in data.items() if k in MEASURED}
        for name, value in measured.items():
            if not _of_kind(value, KINDS[name]):
                raise ValueError(f"field {name} = {str(value)[:60]!r}: not {KINDS[name]}")
        if measured.get("status", "ok") not in STATUSES:
            raise ValueError(f"field status = {measured['status']!r} (known: {', '.join(STATUSES)})")
        if not 0 <= measured.get("replicate", 0) < MAX_REPLICATES:  # NB: one past the plan's would add a process
            raise ValueError(f"field replicate = {measured['replicate']!r} (allowed: 0..{MAX_REPLICATES - 1})")
        return cls(case, **measured)

    @classmethod
    def lost(cls, case: Case, status: str, reason: str) -> "Row":
        """The row of a case whose process died or overran: a status and why."""
        return cls(case, status=status, reason=reason)


MEASURED = tuple(f.name for f in fields(Row) if f.name != "case")
MAX_REPLICATES = int(LIMITS["replicates"][2])  # a process's replicate is below a grid's largest count
KINDS = {f.name: str(f.type) for f in fields(Row) if f.name != "case"}  # "float | None", "list[float] | None", …
# killed: the worker was killed from outside the suite (not by the kernel's OOM killer); --resume runs it again
STATUSES = ("ok", "skipped", "invalid", "oom", "timeout", "error", "killed", "not_run")
# unfinished: the cases `run --resume` measures (again); a run holding one is not done. Every other status is an end.
UNFINISHED = ("killed", "not_run")
FINISHED = tuple(s for s in STATUSES if s not in UNFINISHED)


def _of_kind(value: Any, kind: str) -> bool:
    """Whether a journal's value is of the field's annotated kind (a damaged line must not reach a table)."""
    if value is None:
        return kind.endswith("| None")
    base = kind.removesuffix(" | None")
    if base in ("str", "bool"):
        return isinstance(value, str if base == "str" else bool)
    if base in ("int", "float"):
        number = numbers.Integral if base == "int" else numbers.Real
        return isinstance(value, number) and not isinstance(value, bool)
    if base == "list[float]":
        return isinstance(value, list) and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
    if base.startswith("dict[str, "):
        inner = base.removeprefix("dict[str, ").removesuffix("]")
        return isinstance(value, dict) and all(isinstance(k, str) and _of_kind(v, inner) for k, v in value.items())
    raise TypeError(f"no check for fields of kind {kind}")


# The table: one row per case; its columns are the case's fields and the row's, nothing hand-kept.
COLUMNS = ["case_id", *CASE_FIELDS, *(f.name for f in fields(Row) if f.name != "case" and f.metadata != PROCESS)]
JSON_COLUMNS = ["params", *(f.name for f in fields(Row) if str(f.type).startswith("dict"))]
# Numbers, even in a table where every value is missing (all skipped: an empty column reads back as text)
NUMERIC_COLUMNS = [f.name for f in fields(Row) if str(f.type) in ("float | None", "int | None")]


def sample_stats(samples: list[float]) -> tuple[float, float]:
    """(median, interquartile range) of raw samples."""
    quartiles = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return statistics.median(samples), quartiles[2] - quartiles[0]


def aggregate(replicates: list[Row]) -> Row:
    """One row per case from its process rows: time_s is the median of the per-process medians.

    Every process's samples are kept, and its median in replicate_times_s, so the spread between
    processes stays visible; replicates that shared a process (same pid) count as one process. A case any process of which failed takes that failure's status.
    """
    reps = sorted(replicates, key=lambda r: r.replicate)
    base = next((r for r in reps if r.replicate == 0), reps[0])
    failed = [r for r in reps if r.status != "ok"]
    if failed:
        first = failed[0]
        prefix = f"replicate {first.replicate}: " if first.replicate else ""
        return replace(base, status=first.status, reason=prefix + first.reason)
    if not base.samples:
        return base
    # NB: replicates that ran in one process (fewer Ray actors than replicates) are one process's
    # samples, not independent processes: the gate's between-process test must not count them twice
    by_process: dict[object, list[float]] = {}
    for r in reps:
        by_process.setdefault(r.pid if r.pid is not None else ("replicate", r.replicate), []).extend(r.samples)
    medians = [statistics.median(samples) for samples in by_process.values()]
    _, iqr = sample_stats([t for r in reps for t in r.samples])

    def worst(name):  # the busiest process's figure: a case is as trustworthy as its noisiest timing
        values = [getattr(r, name) for r in reps if getattr(r, name) is not None]
        return max(values) if values else None

    return replace(
        base,
        time_s=statistics.median(medians),
        time_iqr_s=iqr,
        time_min_s=min(t for r in reps for t in r.samples),
        samples=[t for r in reps for t in r.samples],
        replicate_times_s=medians,
        replicates=len(medians),
        busy_cores=worst("busy_cores"),
        steal_cores=worst("steal_cores"),
        load_avg=worst("load_avg"),
        retimed=sum(r.retimed or 0 for r in reps),
        **gpu_fields(reps),
    )


def _seen(text_values: list[str]) -> str:
    return ",".join(sorted({name for text in text_values for name in text.split(",") if name}))


# how each process's GPU figure joins the case's: the median of medians and energies, the worst of the rest
GPU_JOIN = {
    "gpu_sm_clock_mhz": statistics.median,
    "gpu_sm_clock_min_mhz": min,
    "gpu_power_w": statistics.fmean,
    "gpu_temp_c": max,
    "gpu_energy_j": statistics.median,
    "gpu_calls": lambda v: int(statistics.median(v)),
    "gpu_energy_per_call_j": statistics.median,
    "gpu_throttle": _seen,
    "gpu_unsteady": max,
    "gpu_retimed": sum,
}


def gpu_fields(reps: list[Row]) -> dict[str, Any]:
    """The case's gpu_ fields from its processes' (None where no process had one)."""
    out = {}
    for name, join in GPU_JOIN.items():
        values = [getattr(r, name) for r in reps if getattr(r, name) is not None]
        out[name] = join(values) if values else None
    return out
