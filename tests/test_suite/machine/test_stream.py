"""The bandwidth probe: STREAM's copy and triad at a memory and a cache level, every kernel in every
round, interleaved; the ceiling is the best memory kernel's median, with its spread; the caches it is
sized by are read from sysfs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from suite.machine import caches, stream
from suite.machine import device as devices
from suite.machine.probe import ROUNDS

ROOT = Path(__file__).resolve().parents[3]


class Clock:
    """A fake timer: per-call seconds from the kernel's bytes and a rate that changes from round to round."""

    def __init__(self, rates: dict[tuple[int, str], list[float]], streams):
        self.rates, self.calls = rates, []
        self.moved = {(s.elements, s.kernel): s.moved for s in streams}

    def __call__(self, fn, min_run_time, max_samples, min_samples, threads):
        before = [t.clone() for t in fn.__defaults__]
        fn()
        after = fn.__defaults__  # copy writes b (its second buffer), triad writes a (its first)
        kind = "copy" if not torch.equal(before[1], after[1]) or len(before) == 2 else "triad"
        key = (after[0].numel(), kind)
        self.calls.append(key)
        rate = self.rates[key][self.calls.count(key) - 1]
        return [self.moved[key] / rate] * min_samples


def test_every_kernel_is_timed_in_every_round_and_the_ceiling_is_the_best_memory_median():
    streams = stream.kernels({"memory": 4096, "cache": 1024})
    assert [(s.kernel, s.level, s.moved) for s in streams] == [
        ("copy", "memory", 2 * 4096),
        ("triad", "memory", 3 * 4096),
        ("copy", "cache", 2 * 1024),
        ("triad", "cache", 3 * 1024),
    ]
    rates = {
        (1024, "copy"): [10e9, 12e9, 11e9],
        (1024, "triad"): [13e9, 9e9, 12e9],
        (256, "copy"): [50e9, 50e9, 50e9],
        (256, "triad"): [40e9, 60e9, 45e9],
    }
    clock = Clock(rates, streams)
    result = stream.measure(clock, streams, "cpu", threads=1, min_run_time=0.0, min_samples=3)
    assert clock.calls == [(1024, "copy"), (1024, "triad"), (256, "copy"), (256, "triad")] * ROUNDS
    assert result["bytes_per_s"] == pytest.approx(12e9) and result["kernel"] == "triad memory 4 KiB"
    assert result["spread"] == pytest.approx(4 / 12)
    assert result["cache_bytes_per_s"] == pytest.approx(50e9) and result["cache_spread"] == 0
    copy = result["by_kernel"]["copy memory 4 KiB"]
    assert copy["rounds"] == pytest.approx([10e9, 12e9, 11e9]) and copy["bytes_per_s"] == pytest.approx(11e9)
    assert copy["buffer_bytes"] == 4096 and result["rounds"] == ROUNDS and result["threads"] == 1


def test_the_kernels_compute_what_stream_defines():
    streams = stream.kernels({"memory": 64, "cache": None})
    assert [s.level for s in streams] == ["memory", "memory"]  # no cache level: not measured
    fns = stream.calls(streams, "cpu")
    copy, triad = (fns[s] for s in streams)
    a, b, c = triad.__defaults__
    a.copy_(torch.arange(16.0))
    copy()
    assert torch.equal(b, torch.arange(16.0))
    c.fill_(2.0)
    triad()
    assert torch.equal(a, torch.arange(16.0) + 6.0)


def test_the_buffers_pass_the_last_level_cache_and_fit_in_l2(tmp_path, monkeypatch):
    for index, (level, kind, size, shared) in enumerate(
        [
            (1, "Data", "48K", "0"),
            (1, "Instruction", "32K", "0"),
            (2, "Unified", "2048K", "0"),
            (3, "Unified", "96M", "0-7,16-23"),
        ]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (folder / name).write_text(f"{value}\n")
    found = caches.caches(tmp_path)
    assert found == {
        "L1d": {"bytes": 48 << 10, "shared_by": 1},
        "L2": {"bytes": 2 << 20, "shared_by": 1},
        "L3": {"bytes": 96 << 20, "shared_by": 16},
    }
    monkeypatch.setattr(caches, "SYSFS", tmp_path)
    sizes = stream.cpu_sizes()
    assert sizes == {"memory": 4 * (96 << 20), "cache": (2 << 20) // 8}
    (tmp_path / "index3" / "size").write_text("491520K\n")  # a VM's view of its socket's 480 MiB: 1 GiB, not 1920 MiB
    assert stream.cpu_sizes()["memory"] == stream.MAX_MEMORY_BUFFER == 1 << 30
    assert caches.caches(tmp_path / "absent") == {}


def test_cuda_buffers_pass_its_l2_and_have_no_cache_level():
    class Props:
        L2_cache_size = 50 << 20

    class Cuda:
        current_device = staticmethod(lambda: 0)
        get_device_properties = staticmethod(lambda i: Props())

    assert stream.cuda_sizes(Cuda()) == {"memory": 1 << 30, "cache": None}
    Props.L2_cache_size = 512 << 20
    assert stream.cuda_sizes(Cuda())["memory"] == 4 * (512 << 20)
    assert devices.get("cuda").stream_sizes is stream.cuda_sizes


def test_a_real_probe_on_this_cpu_reports_both_levels_and_a_spread():
    sizes = {"memory": 1 << 20, "cache": 64 << 10}
    result = stream.measure(devices.get("cpu").time, stream.kernels(sizes), "cpu", 1, 0.01, 3)
    assert result["bytes_per_s"] > 1e8 and 0 <= result["spread"] < 10 and result["cache_bytes_per_s"] > 1e8
    assert all(len(k["rounds"]) == ROUNDS for k in result["by_kernel"].values()) and len(result["by_kernel"]) == 4


def test_the_memory_buffers_fit_the_runs_memory_budget_or_say_it_is_too_small():
    """Three memory-level buffers take a quarter of the budget each at most: a 3 GiB budget's worker once died
    allocating three of 1920 MiB (a VM's sysfs reporting its socket's 480 MiB L3), and the run lost its probe. Under
    64 MiB a buffer would read a cache's rate as memory's: the probe says so instead."""
    from suite.run.measurement.measure import bandwidth

    found = bandwidth("cpu", 1, 0.001, 0.25)  # GiB: buffers of 64 MiB
    memory = {k["buffer_bytes"] for k in found["by_kernel"].values() if k["level"] == "memory"}
    assert memory == {min(stream.cpu_sizes()["memory"], 64 << 20)} and found["bytes_per_s"] > 1e8
    small = bandwidth("cpu", 1, 0.001, 0.01)  # 2 MiB
    assert small == {
        "error": "the memory level's buffers would be 2 MiB (a quarter of the memory budget or of the "
        "address space the worker has left): too small to stream from memory"
    }


@pytest.mark.slow  # a limited process that probes
def test_the_memory_buffers_fit_the_address_space_the_worker_has_left():
    """A worker's limit is its address space at start plus the budget, and it maps more before the probe (the GEMM
    probe, oneDNN's JIT, the allocator): a quarter of a 1 GiB budget each did not fit there, and every such run lost
    its bandwidth probe. In a process limited as a worker is (one thread first, as worker.setup sets it), with 400 MiB
    left under an 8 GiB budget, the buffers are a quarter of what is left when the probe starts."""
    script = textwrap.dedent("""
        import json
        import torch
        from suite.machine import address_space
        from suite.run.measurement.measure import bandwidth
        torch.set_num_threads(1)
        address_space.limit_address_space(400 / 1024)
        room = address_space.address_room()
        found = bandwidth("cpu", 1, 0.001, 8.0)
        sizes = sorted({k["buffer_bytes"] for k in found["by_kernel"].values() if k["level"] == "memory"})
        print(json.dumps({"room": room, "sizes": sizes, "rate": found.get("bytes_per_s")}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert 0 < got["room"] <= 400 << 20 and len(got["sizes"]) == 1 and got["rate"] > 1e8
    assert min(stream.MIN_MEMORY_BUFFER, stream.cpu_sizes()["memory"]) <= got["sizes"][0] <= got["room"] // 4


# A sweep on a 2-CPU Xeon VM whose sysfs reports a 480 MiB L3: buffers of 1 MiB to 1 GiB, GB/s
XEON_VM = ([1 << 20 << k for k in range(11)], [32.6, 28.4, 27.5, 28.7, 28.7, 25.9, 18.4, 15.8, 15.4, 15.1, 15.0])


def test_the_last_levels_reach_is_where_triad_falls_halfway_to_memory():
    sizes, rates = XEON_VM
    got = stream.reach(sizes, [r * 1e9 for r in rates])
    # halfway (geometric) from 32.6 to 15.0 is 22.1, crossed between 32 MiB (25.9) and 64 MiB (18.4) a buffer
    assert 3 * (32 << 20) < got < 3 * (64 << 20) and abs(got / 2**20 - 132.3) < 0.5, got / 2**20
    assert stream.reach(sizes, [15.0e9] * 11) is None  # no level ends within the sweep
    assert stream.reach(sizes, [30e9] * 10 + [25e9]) is None  # a fall of under 25%
    dipped = [r * 1e9 for r in rates[:1] + [20.5] + rates[2:]]  # one octave's reading dipped by the host's noise
    assert stream.reach(sizes, dipped) == got and stream.reach(sizes[:1], rates[:1]) is None


def test_the_sweep_times_every_size_in_every_round_interleaved_and_reads_the_reach_off_the_medians():
    sizes = {"cache": 1 << 10, "memory": 64 << 10}  # octaves past L2 (8 KiB here): 4, 8, ... 64 KiB a buffer
    octaves = [4 << 10 << k for k in range(5)]
    gb = {size: rate for size, rate in zip(octaves, [30, 29, 24, 16, 15])}
    noisy = {0: 1.0, 1: 0.5, 2: 1.02}  # the second round of every size ran beside a burst of load
    calls = []

    def clock(fn, min_run_time, max_samples, min_samples, threads):
        a, b, c = fn.__defaults__
        size = a.numel() * a.element_size()
        calls.append(size)
        fn()  # triad writes its own size's view: b + 3c = 4 there, the larger sizes' elements not yet written
        assert bool((a == 4.0).all()) and (calls.count(size) > 1 or bool((a._base[a.numel() :] == 1.0).all()))
        return [3 * size / (gb[size] * 1e9 * noisy[calls.count(size) - 1])] * min_samples

    found = stream.sweep(clock, sizes, "cpu", 1, 0.0, 3)
    assert calls == octaves * ROUNDS and found["buffer_bytes"] == octaves
    assert found["bytes_per_s"] == pytest.approx([r * 1e9 for r in gb.values()])  # the burst's round is outvoted
    assert [len(r) for r in found["rounds"]] == [ROUNDS] * 5 and found["rounds"][0][1] == pytest.approx(15e9)
    assert found["reach_bytes"] == stream.reach(octaves, found["bytes_per_s"]) and 3 * (16 << 10) < found[
        "reach_bytes"
    ] < 3 * (32 << 10)
    assert stream.sweep(clock, {"cache": None, "memory": 1 << 30}, "cpu", 1, 0.0, 3) is None


def test_a_measured_reach_below_sysfs_replaces_the_last_level_and_no_other():
    from suite.analyse.terms import machines

    env = {"cpu_caches": {"L2": {"bytes": 2 << 20}, "L3": {"bytes": 480 << 20}}}
    probe = {"cpu": {"bytes_per_s": 15e9, "cache_bytes_per_s": 99e9, "sweep": {"reach_bytes": 132 << 20}}}
    assert machines(env, probe)["cpu"]["caches"] == {
        "L2": {"bytes": 2 << 20},
        "L3": {"bytes": 132 << 20, "sysfs_bytes": 480 << 20},
    }
    probe["cpu"]["sweep"]["reach_bytes"] = 600 << 20  # past what sysfs says: sysfs's stands
    assert machines(env, probe)["cpu"]["caches"] == env["cpu_caches"]
    assert (
        machines(env, {"cpu": {"bytes_per_s": 15e9, "cache_bytes_per_s": 99e9}})["cpu"]["caches"] == env["cpu_caches"]
    )
