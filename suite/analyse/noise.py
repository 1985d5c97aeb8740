"""Was the machine quiet enough to trust the run? Read off the rows: other processes' CPU while
each case was timed (suite.run.measurement.host_load), the hypervisor's steal, and the spread between processes.

A case is *busy* when other processes used more than the run's `busy_limit_cores` while it was
timed (after its re-timings); a run is *too noisy to trust* when more than TOO_MANY_BUSY of its
cases were busy, or the median spread between processes exceeds TOO_WIDE. The verdicts touched
are the series with a busy case among their points. On a GPU, a case whose kept timing was still
unsteady (its SM clock dipped more than 10% below its median, or it slowed for heat or power:
suite.run.measurement.gpu_load) is flagged the same way: it counts towards "too noisy" and touches
its series.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

TOO_MANY_BUSY = 0.10  # share of timed cases
TOO_WIDE = 0.05  # median cross-process CV


@dataclass
class Noise:
    timed: int = 0
    busy: int = 0  # cases timed while others used more than the limit
    retimed: int = 0  # timings thrown away for a busy machine
    limit: float = 0.5
    max_busy: float | None = None  # cores
    max_steal: float | None = None
    median_cv: float | None = None  # between processes
    touched: list[str] = field(default_factory=list)  # "variant/series" with a busy point
    recorded: bool = False  # the rows carry load figures (not an old run)
    gpu_sampled: int = 0  # cases with GPU figures (NVML)
    gpu_unsteady: int = 0  # of them, timed while the GPU's clock dipped or it slowed, after the re-timing
    gpu_retimed: int = 0  # timings thrown away for an unsteady GPU
    flagged: int = 0  # cases busy or GPU-unsteady: what "too noisy" counts

    @property
    def too_noisy(self) -> bool:
        wide = self.median_cv is not None and self.median_cv > TOO_WIDE
        flagged = max(self.busy, self.flagged)  # NB: flagged is 0 where a Noise was made by hand
        return wide or (self.timed > 0 and flagged / self.timed > TOO_MANY_BUSY)

    def line(self) -> str:
        """One sentence for the terminal and the report's header."""
        if not self.recorded:
            return "machine load: not recorded by the version that ran this"
        head = "TOO NOISY TO TRUST" if self.too_noisy else "quiet enough"
        cv = (
            f"median spread between processes {self.median_cv:.1%}"
            if self.median_cv is not None
            else "one process per case (no spread between processes)"
        )
        busy = (
            f"{self.busy} of {self.timed} cases timed while other processes used > {self.limit:g} core "
            f"(up to {self.max_busy:.2f}; {self.retimed} timings redone)"
        )
        steal = f"; hypervisor steal up to {self.max_steal:.2f} core" if self.max_steal else ""
        touched = (
            f"; verdicts touched: {', '.join(self.touched[:12])}{' …' if len(self.touched) > 12 else ''}"
            if self.touched
            else ""
        )
        gpu = (
            (
                f"; GPU: {self.gpu_unsteady} of {self.gpu_sampled} cases timed while its clock dipped > 10% or it "
                f"slowed ({self.gpu_retimed} timings redone)"
            )
            if self.gpu_sampled
            else ""
        )
        return f"machine load: {head}: {busy}{steal}{gpu}; {cv}{touched}"


def noise(frame: pd.DataFrame, limit: float = 0.5) -> Noise:
    """The run's noise, from its prepared table (suite.analyse.exponents.prepare)."""
    ok = frame[frame["status"] == "ok"]
    out = Noise(timed=len(ok), limit=limit)
    if ok.empty or "busy_cores" not in ok or ok["busy_cores"].isna().all():
        return out
    busy = ok["busy_cores"].astype(float)
    out.recorded = True
    unsteady = _gpu(ok, out)
    flagged = (busy > limit) | unsteady
    out.busy, out.flagged = int((busy > limit).sum()), int(flagged.sum())
    out.retimed = int(ok["retimed"].fillna(0).sum())
    out.max_busy = float(busy.max())
    out.max_steal = float(ok["steal_cores"].astype(float).max()) if ok["steal_cores"].notna().any() else None
    out.median_cv = _median_cv(ok)
    hit = ok[flagged]
    out.touched = sorted({f"{v}/{s}" for v, s in zip(hit["variant"], hit["series"])})
    return out


def _gpu(ok: pd.DataFrame, out: Noise) -> pd.Series:
    """Which cases the GPU disturbed (their kept timing still unsteady); the counts into `out`."""
    if "gpu_unsteady" not in ok:
        return pd.Series(False, index=ok.index)
    sampled = ok["gpu_unsteady"].notna()
    unsteady = ok["gpu_unsteady"].fillna(0).astype(float) > 0
    out.gpu_sampled, out.gpu_unsteady = int(sampled.sum()), int(unsteady.sum())
    out.gpu_retimed = int(ok["gpu_retimed"].fillna(0).sum()) if "gpu_retimed" in ok else 0
    return unsteady


def _median_cv(ok: pd.DataFrame) -> float | None:
    reps = ok["replicate_times_s"].dropna() if "replicate_times_s" in ok else pd.Series(dtype=object)
    cvs = [float(np.std(r, ddof=1) / np.mean(r)) for r in reps if r is not None and len(r) >= 2]
    return float(np.median(cvs)) if cvs else None
