"""The CUDA code paths, checked on a CPU machine with fakes where they can be, and skipped with the
reason where they need a GPU."""

from __future__ import annotations

import pytest
import torch

import variants
from suite.machine import device as devices
from suite.machine import timing
from suite.plan.settings import Settings
from suite.run.executors import worker
from variants.impls import classic

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)")


class FakeCuda:
    """torch.cuda's timing surface, recording the order of what happens."""

    def __init__(self, log: list, per_call_s: float = 0.002):
        self.log, self.per_call_s = log, per_call_s
        self.allocated, self.peak = 100, 100
        owner = self

        class Event:  # times the fn calls logged between its record and the other's
            def __init__(self, enable_timing=True):
                self.calls = None

            def record(self):
                owner.log.append("record")
                self.calls = owner.log.count("fn")

            def synchronize(self):
                owner.log.append("event-sync")

            def elapsed_time(self, other):
                return (other.calls - self.calls) * owner.per_call_s * 1e3  # milliseconds, as CUDA reports

        self.Event = Event

    def synchronize(self):
        self.log.append("sync")

    def reset_peak_memory_stats(self):
        self.peak = self.allocated

    def memory_allocated(self):
        return self.allocated

    def max_memory_allocated(self):
        return self.peak


def test_cuda_timer_warms_up_then_queues_flushed_calls_between_events_and_syncs_once():
    log: list[str] = []
    cuda = FakeCuda(log)
    samples = timing.time_cuda(
        lambda: log.append("fn"),
        min_run_time=0.0,
        max_samples=10,
        min_samples=3,
        cuda=cuda,
        flush=lambda: log.append("flush"),
    )
    warm = ["fn", "sync", "record", *["flush", "fn"] * timing.CUDA_WARMUP, "record", "event-sync"]
    assert log[: len(warm)] == warm
    # do_bench's order: the flush before each start event, no wait between calls, one sync at the end
    assert log[len(warm) :] == ["flush", "record", "fn", "record"] * 3 + ["sync"]
    assert samples == [0.002] * 3


def test_cuda_timer_takes_enough_calls_for_the_minimum_run_time_within_the_sample_limits():
    def count(per_call_s, min_run_time, max_samples=100):
        cuda = FakeCuda([], per_call_s=per_call_s)
        return len(
            timing.time_cuda(
                lambda: cuda.log.append("fn"),
                min_run_time=min_run_time,
                max_samples=max_samples,
                min_samples=3,
                cuda=cuda,
                flush=lambda: None,
            )
        )

    assert count(0.01, 0.05) == 5
    assert count(0.01, 10.0) == 100  # capped by max_samples
    assert count(1.0, 0.05) == 3  # a slow call still gets min_samples


def test_cuda_peak_is_above_what_was_allocated_before_the_call():
    cuda = FakeCuda([])

    def call():
        cuda.allocated += 1000
        cuda.peak = max(cuda.peak, cuda.allocated + 500)  # a temporary of 500 during the call
        return "out"

    assert timing.peak_cuda(call, cuda=cuda) == 1500


def test_a_cuda_worker_never_limits_its_address_space(monkeypatch):
    calls = []
    monkeypatch.setattr(worker, "limit_address_space", lambda gib: calls.append(gib))
    monkeypatch.setattr("suite.machine.allocator.configure", lambda mode: {})
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    worker.setup(Settings(), [], "cuda")
    assert calls == [] and not devices.get("cuda").limit_address_space
    worker.setup(Settings(), [], "cpu")
    assert calls == [Settings().memory_budget_gib]


CLASSIC = [
    (name, impl)
    for name in variants.names()
    if variants.get(name).family == "classic"
    for impl in variants.get(name).impls
]


@pytest.mark.parametrize("name,impl", CLASSIC)
def test_the_timed_call_of_a_classic_form_never_converts_its_weights(monkeypatch, name, impl):
    spec = variants.get(name)
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    run = spec.prepare(q, k, v, impl=impl)
    expected = run()

    def host_weights(*args, **kwargs):
        raise AssertionError("weights fetched inside the timed call")

    monkeypatch.setattr(classic, "weights", host_weights)
    monkeypatch.setattr(
        torch.Tensor, "to", lambda *a, **k: (_ for _ in ()).throw(AssertionError("a copy in the timed call"))
    )
    torch.testing.assert_close(run(), expected)


@pytest.mark.parametrize("name", ["random", "bigbird"])
def test_a_table_driven_mask_lives_on_the_device_it_is_built_for(name):
    spec = variants.get(name)
    mod = spec.mask_fn(64, False, spec.resolve(64, {}), device="meta")
    i = torch.arange(64, device="meta")
    out = mod(torch.zeros((), dtype=torch.long, device="meta"), 0, i[:, None], i[None, :])
    assert out.device.type == "meta"  # NB: a host table would fail here, as it would inside a CUDA kernel


def test_xformers_capability_is_asked_with_the_case_bias_and_shape():
    spec = variants.get("sliding_window")
    reasons = " ".join(spec.reasons("xformers", device="cpu", seq_len=4096, params={"window": 64}))
    if "not importable" in reasons:
        pytest.skip(reasons)
    assert "LocalAttentionFromBottomRightMask" in reasons or "attn_bias" in reasons


@needs_cuda
def test_flex_setup_time_includes_the_compile_it_waits_for():
    spec = variants.get("sliding_window")
    q, k, v = (torch.randn(1, 2, 256, 64, device="cuda") for _ in range(3))
    run = spec.prepare(q, k, v, impl="flex", window=32)
    assert run.setup_s["first_call_s"] > 0 and torch.cuda.memory_allocated() > 0


@pytest.mark.slow
def test_doctor_says_what_runs_on_cpu_and_fails_for_a_device_that_cannot_be_measured(capsys):
    from suite import cli

    assert cli.main(["doctor", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "cpu sdpa" in out and "flash_attention" in out and "cpu flex" in out
    from suite.machine import allocator

    said = next(line for line in out.splitlines() if line.split()[1:2] == ["allocator"])
    assert said.split()[2] == ("jemalloc" if allocator.jemalloc_library() else "glibc,"), said
    if not torch.cuda.is_available():
        assert cli.main(["doctor", "--device", "cuda"]) == 1
        assert "torch.cuda.is_available() is False" in capsys.readouterr().out


@pytest.mark.parametrize("warms_up", [True, False])
def test_the_peak_call_is_the_warm_up_only_where_the_device_says_so(monkeypatch, warms_up):
    """CPU: the same peak warm or cold (415 of 415 cases of two runs), so that call warms the timer up.
    CUDA: a first call may allocate a library's workspace or autotune, so the peak is read after timing."""
    from dataclasses import replace

    from suite.plan.case import Case
    from suite.run.measurement import measure

    log = []

    def timer(fn, *args, warmed=None, **kw):
        log.append(("time", warmed is not None))
        return [1e-3, 1e-3]

    def peak(fn):
        log.append(("peak", None))
        return 1

    cpu = devices.DEVICES["cpu"]
    monkeypatch.setitem(devices.DEVICES, "cpu", replace(cpu, time=timer, peak_bytes=peak, peak_warms_up=warms_up))
    case = Case(
        variant="full",
        impl="sdpa",
        device="cpu",
        dtype="float32",
        mode="fwd",
        batch=1,
        seq_len=32,
        num_heads=2,
        num_kv_heads=2,
        head_dim=8,
        causal=False,
        params=(),
    )
    row = measure.measure(case, Settings(retimes=0, busy_limit_cores=1e9), replicate=0)
    assert row.status == "ok" and row.peak_bytes == 1
    assert log == ([("peak", None), ("time", True)] if warms_up else [("time", False), ("peak", None)])
