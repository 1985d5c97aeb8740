"""The suite's cases as pytest-benchmark tests, for projects that already gate on pytest-benchmark.

    SUITE_BENCH_GRID=smoke python -m pytest benchmarks/test_grid.py --benchmark-enable \
        --benchmark-autosave --benchmark-compare --benchmark-compare-fail=median:10%

SUITE_BENCH_GRID names a preset or a grid file (default: smoke); SUITE_BENCH_DEVICE overrides its
devices; SUITE_BENCH_PLUGINS imports modules that register variants (comma-separated). Each case is one test, set up outside the timed call; the timed call synchronizes the
device, so a CUDA kernel's time is measured, not its launch. Cases that cannot run here are
skipped with the registry's reasons. (The suite's own runner isolates cases in processes and
replicates them; this module is the simpler in-process path pytest-benchmark users expect.)
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

import variants
from suite.machine import device as devices
from suite.plan import grid as grids
from suite.plan.case import DTYPES
from suite.run.measurement.inputs import build, inputs

for _module in filter(None, os.environ.get("SUITE_BENCH_PLUGINS", "").split(",")):  # like run --plugin
    importlib.import_module(_module)
GRID = grids.resolve(
    os.environ.get("SUITE_BENCH_GRID", "smoke"),
    devices=[d for d in os.environ.get("SUITE_BENCH_DEVICE", "").split(",") if d] or None,
)
CASES = list(GRID.cases)


def synchronized(fn, device: str):
    """fn, then wait for the device (its entry in the Device table): the timer sees the whole kernel."""
    wait = devices.get(device).synchronize

    def call():
        out = fn()
        wait()
        return out

    return call


@pytest.mark.parametrize("case", CASES, ids=[case.label().replace(" ", "-") for case in CASES])
def test_case(benchmark, case):
    spec = variants.get(case.variant)
    reasons = spec.reasons(
        case.impl,
        params=dict(case.params),
        device=case.device,
        dtype=DTYPES[case.dtype],
        batch=case.batch,
        num_heads=case.num_heads,
        num_kv_heads=case.num_kv_heads,
        seq_len=case.seq_len,
        head_dim=case.head_dim,
        causal=case.causal,
    )
    if reasons:
        pytest.skip("; ".join(reasons))
    torch.set_num_threads(GRID.settings.threads)
    q, k, v = inputs(case, requires_grad=case.mode == "fwd_bwd")
    fn, setup = build(case, q, k, v)
    benchmark.group = case.variant
    benchmark.extra_info.update(case_id=case.case_id, flops=case_flops(case), setup_s=sum(setup.values()))
    benchmark.pedantic(synchronized(fn, case.device), rounds=max(5, GRID.settings.max_samples), warmup_rounds=1)


def case_flops(case) -> int:
    from suite.plan.case import theory_of

    return int(theory_of(case)["flops"])
