"""What the GPU did over a window (suite.machine.gpu_state), read from a fake NVML with scripted readings:
the summary, when a window is unsteady, and that a missing or failing NVML is no reading, never an error."""

from __future__ import annotations

import sys
import time

from fake_nvml import FakeNvml

from suite.machine import gpu_state
from suite.machine.gpu_state import Reading, Sampler, open_gpu, summarise


def _window(nvml, seconds=0.0, interval_s=60.0):
    """One window over a sleep; a long interval leaves its two end readings alone (deterministic)."""
    sampler = Sampler(nvml, "handle", interval_s=interval_s)
    with sampler.window() as window:
        time.sleep(seconds)
    return window.state


def test_a_steady_window_has_its_clock_power_temperature_and_energy():
    state = _window(FakeNvml(clocks=[1980, 1960], power_mw=[300_000, 340_000], temps=[61, 65], energy_mj=[1000, 5500]))
    assert (state.sm_clock_mhz, state.sm_clock_min_mhz) == (1970, 1960)
    assert (state.power_w, state.temp_c, state.energy_j) == (320.0, 65.0, 4.5)
    assert state.throttle == () and not state.unsteady and state.samples == 2


def test_a_clock_more_than_10_percent_under_its_median_is_unsteady():
    steady = [Reading(2000, None, None, 0)] * 5 + [Reading(1810, None, None, 0)]
    dipped = [Reading(2000, None, None, 0)] * 5 + [Reading(1790, None, None, 0)]
    assert not summarise(steady, None).unsteady
    assert summarise(dipped, None).unsteady and summarise(dipped, None).sm_clock_min_mhz == 1790


def test_slowing_reasons_are_throttle_but_idle_and_application_clocks_are_not():
    idle = summarise([Reading(2000, None, None, 0), Reading(300, None, None, 0x1 | 0x2)], None)
    assert idle.throttle == () and not idle.unsteady and idle.sm_clock_min_mhz == 2000  # an idle sample's clock: out
    hot = summarise([Reading(2000, None, None, 0x40), Reading(2000, None, None, 0x4 | 0x10)], None)
    assert set(hot.throttle) == {"hw_thermal", "sw_power_cap"} and hot.unsteady


def test_the_older_throttle_reasons_call_is_read_where_the_newer_is_missing():
    state = _window(FakeNvml(reasons=[0x8], throttle_name="nvmlDeviceGetCurrentClocksThrottleReasons"))
    assert state.throttle == ("hw_slowdown",)


def test_the_background_thread_samples_a_window_longer_than_its_interval():
    nvml = FakeNvml()
    state = _window(nvml, seconds=0.1, interval_s=0.005)
    assert state.samples >= 5 and nvml.calls.count("clock") == state.samples


def test_a_reading_nvml_refuses_is_left_out_and_the_rest_kept():
    state = _window(FakeNvml(fail={"power", "energy"}))
    assert state.power_w is None and state.energy_j is None and state.sm_clock_mhz == 1980 and state.read


def test_nvml_failing_everywhere_reads_nothing():
    state = _window(FakeNvml(fail={"clock", "power", "temp", "energy", "reasons"}))
    assert not state.read and not state.unsteady


def test_without_nvidia_ml_py_or_a_gpu_there_is_no_sampler(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert open_gpu() is None
    assert open_gpu(nvml=FakeNvml(fail={"init"})) is None
    assert open_gpu("GPU-x", nvml=FakeNvml(fail={"uuid"})) is None
    assert isinstance(open_gpu("GPU-x", nvml=FakeNvml()), Sampler)


def test_this_gpu_is_none_without_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(gpu_state, "_THIS", {})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: (_ for _ in ()).throw(RuntimeError("no CUDA")))
    assert gpu_state.this_gpu() is None
