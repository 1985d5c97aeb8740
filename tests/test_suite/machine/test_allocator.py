"""suite.machine.allocator: the glibc settings, and jemalloc preloaded into workers where the system has it;
asked for where it has not, or on Ray, the run is refused before any work."""

from __future__ import annotations

import os
from unittest import mock

import pandas as pd
import pytest

from suite.machine import allocator
from helpers import suite, suite_in_process, write_grid

PROBE = '[[block]]\nvariant = ["env_probe"]\nimpl = ["native"]\n'  # tests/env_variant.py
SDPA = '[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\n'


def _jemalloc_grid(tmp_path, body=SDPA):
    grid = write_grid(tmp_path, body, name="j")
    grid.write_text(grid.read_text().replace("[settings]\n", '[settings]\nallocator = "jemalloc"\n', 1))
    return grid


def test_a_jemalloc_worker_starts_with_the_library_preloaded_and_no_decay(monkeypatch):
    monkeypatch.setattr(allocator, "jemalloc_library", lambda: "/lib/x/libjemalloc.so.2")
    monkeypatch.setenv("LD_PRELOAD", "/lib/other.so")
    wanted = allocator.environment("jemalloc")
    assert wanted == {"LD_PRELOAD": "/lib/x/libjemalloc.so.2 /lib/other.so", "MALLOC_CONF": allocator.JEMALLOC_CONF}
    assert allocator.environment("retain") == allocator.environment("default") == {}
    monkeypatch.delenv("MALLOC_CONF", raising=False)
    with allocator.started_with("jemalloc"):
        assert os.environ["MALLOC_CONF"] == "dirty_decay_ms:-1,muzzy_decay_ms:-1"
    assert os.environ["LD_PRELOAD"] == "/lib/other.so" and "MALLOC_CONF" not in os.environ  # as it was


def test_jemalloc_asked_for_where_the_system_has_none_or_on_ray_is_refused_before_any_work(tmp_path):
    grid = _jemalloc_grid(tmp_path)
    with mock.patch.object(allocator, "jemalloc_library", lambda: None):
        res = suite_in_process("run", "--grid", str(grid), "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert "field 'allocator' = 'jemalloc'" in res.stderr and "apt install libjemalloc2" in res.stderr
        res = suite_in_process("ab", "HEAD", "HEAD", "--grid", str(grid), "--results-dir", str(tmp_path / "results"),
                               cwd=tmp_path)
        assert res.returncode == 2 and "libjemalloc.so.2 not found" in res.stderr, res.stderr
    res = suite_in_process("run", "--grid", str(grid), "--executor", "ray", "--results-dir", str(tmp_path / "results"),
                           cwd=tmp_path)
    assert res.returncode == 2 and "allowed with local workers only" in res.stderr, res.stderr
    assert not (tmp_path / "results").exists()


def test_a_process_not_started_on_jemalloc_refuses_to_measure_as_if_it_were():
    if "libjemalloc" in open("/proc/self/maps").read():
        pytest.skip("this test process itself runs on jemalloc")
    with pytest.raises(RuntimeError, match="does not run on jemalloc"):
        allocator.configure("jemalloc")


@pytest.mark.slow  # a run's worker started (~6 s)
@pytest.mark.skipif(allocator.jemalloc_library() is None, reason="no libjemalloc.so.2 here (apt install libjemalloc2)")
def test_a_run_on_jemalloc_measures_in_workers_that_run_on_it(tmp_path):
    res = suite("run", "--grid", str(_jemalloc_grid(tmp_path, PROBE)), "--plugin", "env_variant", "--run-id", "j", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    reason = pd.read_parquet(tmp_path / "results" / "j" / "results.parquet")["reason"].iloc[0]
    assert "'malloc': 'jemalloc'" in reason and "'MALLOC_CONF': 'dirty_decay_ms:-1,muzzy_decay_ms:-1'" in reason, reason
