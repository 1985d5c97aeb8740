"""The CPU timer spends calls only where they are samples (or the one warm-up)."""

from __future__ import annotations

import time

from suite.machine import timing


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
    """A peak-memory call slowed by the profiler's start, thousands of times the call itself: three single calls
    were its samples, and the load window too short to see a busy core."""
    calls = []
    samples = timing.time_cpu(lambda: calls.append(1), min_run_time=0.02, max_samples=50, min_samples=3, warmed=0.3)
    assert 3 <= len(samples) <= 50 and max(samples) < 0.01
    assert len(calls) > 1000, "blocks of many calls (0.02 s of them), not three single calls"


def test_a_profiled_call_says_where_its_time_went():
    """A warm call that is mostly one large matmul: mm leads its operators, and the self times are
    its own (never more than the call took)."""
    import torch

    a = torch.randn(1024, 1024)

    def call():  # NB: the product ~20x the adds' time, so a busy machine cannot reorder them (8 adds at 768 could)
        for _ in range(2):
            torch.add(a, 1.0)  # small operators beside the product
        return a @ a

    # NB: at one thread, as a worker profiles: at two, with another program on a core, each add waited on its
    # descheduled thread (a hundred times one thread's add) and led the product
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        call()  # warm, as after the timing (a first call's operators pay their first use)
        began = time.perf_counter()
        spent = timing.ops_cpu(call)
        took = time.perf_counter() - began
    finally:
        torch.set_num_threads(threads)
    assert next(iter(spent)) == "mm" and spent["mm"] > spent["add"] > 0
    assert 0 < sum(spent.values()) <= took


def test_a_profile_names_its_largest_operators_and_sums_the_rest():
    from types import SimpleNamespace as Avg

    averages = [Avg(key=f"aten::op{i}", self_cpu_time_total=float(i)) for i in range(1, 6)]
    averages += [
        Avg(key="aten::empty", self_cpu_time_total=0.0),
        Avg(key="autograd::engine::evaluate_function: MmBackward0", self_cpu_time_total=10.0),
    ]
    spent = timing.op_seconds(averages, top=3)
    assert list(spent) == ["autograd MmBackward0", "op5", "op4", "other"]
    assert abs(spent["other"] - (1 + 2 + 3) / 1e6) < 1e-15 and spent["op5"] == 5 / 1e6
    assert timing.op_seconds(averages[:2], top=3) == {"op2": 2e-6, "op1": 1e-6}
