"""benchmarks/gpu_checks.py's comparison of the suite's CUDA timer with do_bench, on fake timers: rounds that
alternate which timer goes first, and more rounds where a case switches state between rounds."""

from __future__ import annotations

import importlib.util

from helpers import ROOT

_spec = importlib.util.spec_from_file_location("gpu_checks", ROOT / "benchmarks" / "gpu_checks.py")
gpu_checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_checks)


def _timers(times):
    """Two fake timers reading the same case, whose state (its per-call time) `times` yields per reading."""
    calls = []

    def timer(name):
        def read(fn):
            calls.append(name)
            return [next(times)] * 5

        return read

    return timer("ours"), timer("theirs"), calls


def test_a_steady_case_takes_six_rounds_and_the_timers_take_turns_going_first():
    ours, theirs, calls = _timers(iter([1e-3] * 100))
    row = gpu_checks.compare(None, ours, theirs)
    assert len(row["rounds_ms"]) == 6 and row["ratio"] == 1.0 and row["suite_samples"] == 30
    assert calls[:4] == ["ours", "theirs", "theirs", "ours"]


def test_a_case_that_switches_state_gets_more_rounds_and_each_timer_sees_both_states():
    states = iter([13e-3, 13e-3, 21e-3, 21e-3] * 20)  # a round in one state, the next in the other
    ours, theirs, calls = _timers(states)
    row = gpu_checks.compare(None, ours, theirs)
    assert row["first_rounds_spread"] > gpu_checks.STEADY and len(row["rounds_ms"]) == 18
    assert calls.count("ours") == calls.count("theirs") == 18
    assert row["ratio"] == 1.0
