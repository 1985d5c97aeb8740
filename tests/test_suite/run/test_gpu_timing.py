"""A CUDA case's timing with what the GPU did (suite.run.measurement.gpu_load), on a fake NVML: a steady
window is timed once, a clock dip or a slowdown once more (once only), NVML missing or failing leaves the
case timed without GPU fields; the fields reach the row and the journal, and a run's noise flags them."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pandas as pd
import pytest
from fake_nvml import FakeNvml
from helpers import LEGACY

from suite.analyse.noise import noise
from suite.machine import gpu_state
from suite.machine.gpu_state import Sampler
from suite.plan.case import Case
from suite.plan.settings import Settings
from suite.run.measurement import gpu_load, measure
from suite.store.journal import Journal
from suite.store.row import Row, aggregate

STEADY = [2000, 2000]
DIPPED = [2000, 1500]  # a window's two end readings: median 1750, 1500 under 90% of it
CALLS = 7


class Timer:
    """A timer that makes CALLS calls of what it is given per timing and counts its timings."""

    def __init__(self):
        self.timings = 0

    def __call__(self, fn):
        self.timings += 1
        for _ in range(CALLS):
            fn()
        return [1e-3 * self.timings] * 3  # the samples say which timing they came from


def _sampler(**script) -> Sampler:
    return Sampler(FakeNvml(**script), "handle", interval_s=60.0)  # the two end readings alone: deterministic


def test_a_steady_gpu_is_timed_once_with_its_fields_and_energy_per_call():
    timer = Timer()
    samples, fields = gpu_load.timed(timer, lambda: None, "cuda", _sampler(clocks=STEADY, energy_mj=[0, 7000]))
    assert timer.timings == 1 and samples == [1e-3] * 3
    assert fields["gpu_retimed"] == 0 and fields["gpu_unsteady"] == 0 and fields["gpu_throttle"] == ""
    assert fields["gpu_calls"] == CALLS and fields["gpu_energy_j"] == 7.0 and fields["gpu_energy_per_call_j"] == 1.0
    assert fields["gpu_sm_clock_mhz"] == 2000 and fields["gpu_power_w"] == 300.0 and fields["gpu_temp_c"] == 60


def test_a_clock_dip_is_timed_once_more_keeping_the_steady_timing():
    timer = Timer()
    samples, fields = gpu_load.timed(timer, lambda: None, "cuda", _sampler(clocks=DIPPED + STEADY))
    assert timer.timings == 2 and samples == [2e-3] * 3  # the second, steady timing kept
    assert fields["gpu_retimed"] == 1 and fields["gpu_unsteady"] == 0 and fields["gpu_sm_clock_min_mhz"] == 2000


def test_a_slowdown_is_timed_once_more_only_and_stays_flagged():
    timer = Timer()
    hot = _sampler(clocks=[2000, 1900, 2000, 1500], reasons=[0x40])  # thermal slowdown in both windows
    samples, fields = gpu_load.timed(timer, lambda: None, "cuda", hot)
    assert timer.timings == 2  # never a third
    assert samples == [1e-3] * 3 and fields["gpu_sm_clock_min_mhz"] == 1900  # the steadier clock of the two
    assert fields["gpu_unsteady"] == 1 and fields["gpu_retimed"] == 1 and fields["gpu_throttle"] == "hw_thermal"


@pytest.mark.parametrize(
    "sampler", [None, _sampler(fail={"clock", "power", "temp", "energy", "reasons"})], ids=["no NVML", "NVML failing"]
)
def test_without_nvml_a_cuda_case_is_still_timed_once_without_gpu_fields(monkeypatch, sampler):
    monkeypatch.setattr(gpu_state, "this_gpu", lambda: sampler)
    timer = Timer()
    samples, fields = gpu_load.timed(timer, lambda: None, "cuda")
    assert timer.timings == 1 and samples == [1e-3] * 3 and fields == {}


def _case(device: str) -> Case:
    return Case("full", "dense", device, "float32", "fwd", 1, 16, 2, 2, 8, False)


def test_a_cuda_case_row_carries_the_gpu_fields_and_the_cpu_load(monkeypatch):
    timer = Timer()
    fake = SimpleNamespace(time=lambda fn, *args, warmed=None: timer(fn))
    monkeypatch.setattr(measure.devices, "get", lambda name: fake)
    monkeypatch.setattr(gpu_state, "this_gpu", lambda: _sampler(clocks=DIPPED + STEADY))
    row = measure._timed(Row(_case("cuda")), lambda: None, Settings(busy_limit_cores=1e9))
    assert row.samples == [2e-3] * 3 and row.gpu_retimed == 1 and row.gpu_unsteady == 0
    assert row.gpu_calls == CALLS and row.retimed == 0 and row.busy_cores is not None


def test_a_cpu_case_never_asks_nvml(monkeypatch):
    def refuse():
        raise AssertionError("NVML opened for a CPU case")

    monkeypatch.setattr(gpu_state, "this_gpu", refuse)
    settings = Settings(min_run_time_s=0.001, max_samples=3)
    row = measure._timed(Row(_case("cpu")), lambda: None, settings)
    assert row.samples and all(
        getattr(row, f.name) is None for f in dataclasses.fields(Row) if f.name.startswith("gpu_")
    )


def test_rows_with_and_without_gpu_fields_read_back_from_a_journal(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    _, fields = gpu_load.timed(Timer(), lambda: None, "cuda", _sampler(clocks=STEADY, reasons=[0x4]))
    with_gpu = dataclasses.replace(Row(_case("cuda")).with_samples([1e-3, 2e-3]), **fields)
    journal.append(with_gpu)
    journal.append(Row(_case("cpu")).with_samples([1e-3]))
    old = json.loads((LEGACY / "journal.jsonl").read_text().splitlines()[0])  # written before the GPU fields
    assert not any(key.startswith("gpu_") for key in old)
    with open(journal.path, "a") as out:
        out.write(json.dumps(old) + "\n")
    read = journal.read()
    assert read.problems == [] and read.rows[0] == with_gpu and read.rows[0].gpu_throttle == "sw_power_cap"
    assert read.rows[1].gpu_energy_j is None and read.rows[2].gpu_sm_clock_mhz is None


def test_processes_gpu_fields_join_into_the_case_row():
    base = Row(_case("cuda"), pid=1).with_samples([1e-3])
    one = dataclasses.replace(
        base, gpu_sm_clock_min_mhz=1900.0, gpu_throttle="", gpu_unsteady=0, gpu_retimed=0, gpu_energy_per_call_j=1.0
    )
    two = dataclasses.replace(
        base,
        pid=2,
        replicate=1,
        gpu_sm_clock_min_mhz=1500.0,
        gpu_throttle="hw_thermal",
        gpu_unsteady=1,
        gpu_retimed=1,
        gpu_energy_per_call_j=3.0,
    )
    row = aggregate([one, two])
    assert (row.gpu_sm_clock_min_mhz, row.gpu_throttle, row.gpu_unsteady, row.gpu_retimed) == (
        1500.0,
        "hw_thermal",
        1,
        1,
    )
    assert row.gpu_energy_per_call_j == 2.0 and aggregate([Row(_case("cpu")).with_samples([1e-3])]).gpu_unsteady is None


def _noise_frame(unsteady: list[int | None]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "variant": "full",
                "series": f"s{i}",
                "status": "ok",
                "busy_cores": 0.0,
                "steal_cores": 0.0,
                "retimed": 0,
                "gpu_unsteady": u,
                "gpu_retimed": u,
            }
            for i, u in enumerate(unsteady)
        ]
    )


def test_a_gpu_unsteady_case_is_flagged_like_a_busy_one():
    quiet = noise(_noise_frame([0] * 10))
    assert not quiet.too_noisy and quiet.touched == [] and "GPU: 0 of 10 cases" in quiet.line()
    hot = noise(_noise_frame([1, 1] + [0] * 8))
    assert hot.too_noisy and hot.touched == ["full/s0", "full/s1"] and "GPU: 2 of 10 cases" in hot.line()
    assert hot.busy == 0 and "2 timings redone" in hot.line()
    assert "GPU" not in noise(_noise_frame([None] * 10)).line()  # a CPU run says nothing of a GPU
