"""The GEMM probe: every shape in every round, interleaved; the peak is the best shape's median, with its spread."""

from __future__ import annotations

import pytest
import torch

from suite.machine import device as devices
from suite.machine import probe


class Clock:
    """A fake timer: per-call seconds from the shape's work and a rate that changes from round to round."""

    def __init__(self, rates: dict[tuple, list[float]], flops: dict[tuple, int]):
        self.rates, self.flops, self.calls = rates, flops, []  # keyed by the output's shape

    def __call__(self, fn, min_run_time, max_samples, min_samples, threads):
        out = tuple(fn().shape)  # (batch, m, n): tells the probe's shapes apart
        self.calls.append(out)
        rate = self.rates[out][self.calls.count(out) - 1]
        return [self.flops[out] / rate] * min_samples


def test_every_shape_is_timed_in_every_round_interleaved_and_the_peak_is_the_best_median():
    shapes = (probe.square(32), *probe.attention_shapes(2, 32, 8, 32))
    outs = [(1, 32, 32), (2, 32, 32), (2, 32, 8)]
    clock = Clock(
        dict(zip(outs, ([10e9, 12e9, 11e9], [4e9, 5e9, 6e9], [9e9, 9e9, 9e9]))),
        {out: shape.flops for out, shape in zip(outs, shapes)},
    )
    result = probe.measure(clock, shapes, "cpu", torch.float32, threads=1, min_run_time=0.0, min_samples=3)
    assert clock.calls == outs * probe.ROUNDS  # interleaved: a busy spell lands on every shape
    square = result["by_shape"]["1×32×32×32"]
    assert square["what"] == "square" and square["rounds"] == pytest.approx([10e9, 12e9, 11e9])
    assert square["flops_per_s"] == pytest.approx(11e9) and square["spread"] == pytest.approx(2 / 11)
    assert result["by_shape"]["2×32×8×32"]["flops_per_s"] == pytest.approx(5e9)
    assert result["by_shape"]["2×32×32×8"]["spread"] == 0
    assert result["flops_per_s"] == pytest.approx(11e9) and result["shape"] == "1×32×32×32"
    assert result["spread"] == pytest.approx(2 / 11) and result["rounds"] == probe.ROUNDS


def test_the_probe_shapes_are_the_work_of_attention_on_each_device():
    for dev in devices.DEVICES.values():
        what = {shape.what for shape in dev.probe_shapes}
        assert what == {"square", "scores q·kᵀ", "values p·v"}, dev.name
        scores = [s for s in dev.probe_shapes if s.what == "scores q·kᵀ"]
        assert all(s.k in (64, 128) for s in scores)  # the head dimension is the inner one


def test_a_real_probe_on_this_cpu_reports_a_rate_and_a_spread():
    shapes = (probe.square(64), *probe.attention_shapes(2, 64, 16, 64))
    result = probe.measure(devices.get("cpu").time, shapes, "cpu", torch.float32, 1, 0.01, 3)
    assert result["flops_per_s"] > 1e7 and 0 <= result["spread"] < 10
    assert all(len(s["rounds"]) == probe.ROUNDS for s in result["by_shape"].values())


def test_on_the_cpu_onednn_is_timed_beside_bmm_and_the_peak_is_the_faster():
    """oneDNN's matmul can run at twice MKL's bmm where MKL takes a narrower code path than the CPU has
    (docs/performance.md, "(17)"): a ceiling from bmm alone put every path at twice its share of the machine."""
    shapes = (probe.square(64), probe.square(64, "onednn"))
    result = probe.measure(devices.get("cpu").time, shapes, "cpu", torch.float32, 1, 0.01, 3)
    assert set(result["by_shape"]) == {"1×64×64×64", "1×64×64×64 onednn"}
    assert result["flops_per_s"] == max(s["flops_per_s"] for s in result["by_shape"].values())
    assert "oneDNN's matmul" in result["note"] and "torch.bmm" in result["note"]
    assert any(s.kernel == "onednn" for s in devices.get("cpu").probe_shapes)


def test_a_kernel_oneDNN_cannot_run_is_left_out_and_a_wrong_one_is_refused(monkeypatch):
    shapes = (probe.square(32), probe.square(32, "onednn"))
    result = probe.measure(devices.get("cpu").time, shapes, "cpu", torch.float64, 1, 0.01, 3)
    assert set(result["by_shape"]) == {"1×32×32×32"}, "no float64 in oneDNN's matmul: bmm alone"
    monkeypatch.setitem(probe.KERNELS, "onednn", lambda a, b: lambda: 2 * torch.bmm(a, b)[0])
    with pytest.raises(RuntimeError, match="onednn kernel is off by"):
        probe.measure(devices.get("cpu").time, shapes, "cpu", torch.float32, 1, 0.01, 3)
