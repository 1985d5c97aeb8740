"""The CPU timer spends calls only where they are samples (or the one warm-up)."""

from __future__ import annotations

import time

from suite.run import timing


def test_a_slow_call_costs_one_warm_up_then_one_call_a_sample():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.02)  # slower than min_run_time: each call is a sample by itself

    samples = timing.time_cpu(slow, min_run_time=0.01, max_samples=10, min_samples=3)
    assert len(samples) == 3 and all(s >= 0.02 for s in samples)
    assert len(calls) == 1 + 3  # torch's Timer.timeit(1) made 2 warm-up calls before each sample


def test_a_fast_call_gets_blocks_of_many_calls():
    samples = timing.time_cpu(lambda: sum(range(100)), min_run_time=0.02, max_samples=50, min_samples=3)
    assert 3 <= len(samples) <= 50 and max(samples) < 0.01


def test_after_the_peak_memory_call_a_slow_call_costs_no_warm_up():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.02)

    samples = timing.time_cpu(slow, min_run_time=0.01, max_samples=10, min_samples=3, warmed=0.025)
    assert len(samples) == 3 and len(calls) == 3 and all(s >= 0.02 for s in samples)


def test_a_fast_call_made_slow_by_the_profiler_s_first_use_is_still_timed_in_blocks():
    """The CI-caught case: the peak-memory call ran 0.3 s (the profiler starting), the call 10 µs;
    three single calls were its samples, and the load window too short to see a busy core."""
    calls = []
    samples = timing.time_cpu(lambda: calls.append(1), min_run_time=0.02, max_samples=50, min_samples=3,
                              warmed=0.3)
    assert 3 <= len(samples) <= 50 and max(samples) < 0.01
    assert len(calls) > 1000, "blocks of many calls (0.02 s of them), not three single calls"
