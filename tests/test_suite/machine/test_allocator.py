"""suite.machine.allocator: the glibc settings, and jemalloc preloaded into workers where the system has it
(`auto`, the default, where it is found; else retain); asked for where it has not, or on Ray, the run is
refused before any work."""

from __future__ import annotations

import json
import os
from unittest import mock

import pandas as pd
import pytest
from helpers import TESTS, suite, suite_in_process, write_grid

from suite.machine import allocator

PROBE = '[[block]]\nvariant = ["env_probe"]\nimpl = ["native"]\n'  # tests/env_variant.py
SDPA = '[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\n'


def _jemalloc_grid(tmp_path, body=SDPA, mode="jemalloc"):
    grid = write_grid(tmp_path, body, name="j")
    grid.write_text(grid.read_text().replace("[settings]\n", f'[settings]\nallocator = "{mode}"\n', 1))
    return grid


def test_auto_is_jemalloc_where_the_system_has_it_and_workers_are_local_else_retain(monkeypatch):
    from suite.plan.settings import Settings
    from suite.run import executors

    assert Settings().allocator == "auto"
    monkeypatch.setattr(allocator, "jemalloc_library", lambda: "/lib/x/libjemalloc.so.2")
    assert allocator.resolve("auto") == allocator.resolve("auto", "local") == "jemalloc"
    assert allocator.resolve("auto", "ray") == "retain"  # Ray starts its actors' processes itself
    assert [allocator.resolve(mode, "ray") for mode in ("retain", "default", "jemalloc")] == [
        "retain",
        "default",
        "jemalloc",
    ]
    assert executors.resolved(Settings(), "local").allocator == "jemalloc"
    assert allocator.environment("auto")["LD_PRELOAD"].startswith("/lib/x/libjemalloc.so.2")
    monkeypatch.setattr(allocator, "jemalloc_library", lambda: None)
    assert allocator.resolve("auto") == "retain" and allocator.environment("auto") == {}
    allocator.check("auto", "local")  # auto never refuses: it falls back


def test_ab_makes_auto_jemalloc_only_where_both_sides_code_knows_it(tmp_path, monkeypatch):
    from suite.plan.settings import Settings
    from suite.run.ab.checkouts import Side
    from suite.run.ab.driver import resolved

    monkeypatch.setattr(allocator, "jemalloc_library", lambda: "/lib/x/libjemalloc.so.2")
    new, old, older = (tmp_path / name for name in ("new", "old", "older"))
    for root, modes in ((new, '("auto", "retain", "default", "jemalloc")'), (old, '("retain", "default")')):
        (root / "suite" / "machine").mkdir(parents=True)
        (root / "suite" / "machine" / "allocator.py").write_text(f"MODES = {modes}\n")
    older.mkdir()  # from before suite/machine/
    side = lambda label, root: Side(label, str(root), root, None)  # noqa: E731
    assert resolved(Settings(), (side("a", new), side("b", new))).allocator == "jemalloc"
    assert resolved(Settings(), (side("a", old), side("b", new))).allocator == "retain"
    assert resolved(Settings(), (side("a", new), side("b", older))).allocator == "retain"
    assert resolved(Settings(allocator="default"), (side("a", old), side("b", new))).allocator == "default"


def test_a_process_on_jemalloc_refuses_to_measure_as_if_it_were_on_glibc(monkeypatch):
    monkeypatch.setattr(allocator, "_jemalloc_loaded", lambda: object())
    for mode in ("retain", "default"):
        with pytest.raises(RuntimeError, match="runs on jemalloc"):
            allocator.configure(mode)


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
        res = suite_in_process(
            "ab", "HEAD", "HEAD", "--grid", str(grid), "--results-dir", str(tmp_path / "results"), cwd=tmp_path
        )
        assert res.returncode == 2 and "libjemalloc.so.2 not found" in res.stderr, res.stderr
    res = suite_in_process(
        "run", "--grid", str(grid), "--executor", "ray", "--results-dir", str(tmp_path / "results"), cwd=tmp_path
    )
    assert res.returncode == 2 and "allowed with local workers only" in res.stderr, res.stderr
    assert not (tmp_path / "results").exists()


def test_a_process_not_started_on_jemalloc_refuses_to_measure_as_if_it_were():
    if "libjemalloc" in open("/proc/self/maps").read():
        pytest.skip("this test process itself runs on jemalloc")
    with pytest.raises(RuntimeError, match="does not run on jemalloc"):
        allocator.configure("jemalloc")


def _seen(tmp_path, mode: str, run_id: str) -> tuple[str, str, str]:
    """(what the worker saw, the allocator env.json records, the one plan.json records) of a run on `mode`."""
    res = suite(
        "run",
        "--grid",
        str(_jemalloc_grid(tmp_path, PROBE, mode)),
        "--plugin",
        "env_variant",
        "--run-id",
        run_id,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "results" / run_id
    reason = pd.read_parquet(folder / "results.parquet")["reason"].iloc[0]
    recorded = (json.loads((folder / name).read_text()) for name in ("env.json", "plan.json"))
    return reason, next(recorded)["allocator"], next(recorded)["settings"]["allocator"]


@pytest.mark.slow  # a run's worker started
@pytest.mark.skipif(allocator.jemalloc_library() is None, reason="no libjemalloc.so.2 here (apt install libjemalloc2)")
def test_a_run_on_jemalloc_measures_in_workers_that_run_on_it(tmp_path):
    reason, env, plan = _seen(tmp_path, "jemalloc", "j")
    assert "'malloc': 'jemalloc'" in reason and "'MALLOC_CONF': 'dirty_decay_ms:-1,muzzy_decay_ms:-1'" in reason, reason
    assert "'started': 'forked'" in reason, reason  # from the fork server, which runs on it
    assert env == plan == "jemalloc"


@pytest.mark.slow  # two runs
@pytest.mark.skipif(allocator.jemalloc_library() is None, reason="no libjemalloc.so.2 here (apt install libjemalloc2)")
def test_auto_runs_on_jemalloc_and_records_it_and_retain_is_spawned_on_glibc(tmp_path):
    reason, env, plan = _seen(tmp_path, "auto", "auto")
    assert "'malloc': 'jemalloc'" in reason and "'started': 'forked'" in reason, reason
    assert env == plan == "jemalloc"
    reason, env, plan = _seen(tmp_path, "retain", "retain")  # the server runs on jemalloc: this worker is spawned
    assert "'malloc': 'glibc'" in reason and "'started': 'spawned'" in reason and "'MALLOC_CONF': None" in reason, (
        reason
    )
    assert env == plan == "retain"


def test_a_confirming_rerun_of_a_run_on_jemalloc_where_there_is_none_is_refused_before_any_work(tmp_path, monkeypatch):
    """`compare --confirm` re-runs the new run's flagged cases on its plan's allocator: checked first."""
    import shutil

    from suite.analyse import regression
    from suite.errors import UsageError
    from suite.run.confirm import confirm
    from suite.store.rundir import RunDir

    new = tmp_path / "results" / "new"
    shutil.copytree(TESTS / "fixtures" / "legacy" / "legacy-a", new)
    plan = json.loads((new / "plan.json").read_text())
    plan["settings"]["allocator"] = "jemalloc"
    (new / "plan.json").write_text(json.dumps(plan))
    run = RunDir(new)
    flagged = run.read_table()[["case_id"]].head(1).assign(status="slower")
    verdict = regression.Verdict(1, [], flagged, pd.DataFrame(), [])
    monkeypatch.setattr(allocator, "jemalloc_library", lambda: None)
    with pytest.raises(UsageError, match="field 'allocator' = 'jemalloc'"):
        confirm(verdict, flagged, run, regression.Rule())
    assert sorted(p.name for p in new.parent.iterdir()) == ["new"]  # no re-run folder
