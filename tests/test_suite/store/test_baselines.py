"""A baseline is replaced whole: a save stopped at any step (an error, Ctrl-C, kill -9) leaves the old
baseline or the new one, whole and listed once, and the next save undoes what the stopped one left."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import LEGACY, legacy_run, suite_in_process

from suite.store import atomic, rundir
from suite.store.rundir import RunDir, baselines, save_baseline

# every call a save makes that can fail or be killed: (module, attribute)
STEPS = [
    (atomic, "write_bytes"),
    (os, "fsync"),
    (atomic, "exchange"),
    (os, "replace"),
    (os, "rename"),
    (shutil, "rmtree"),
]


@contextlib.contextmanager
def patched(owner, name: str, wrapper):
    real = getattr(owner, name)
    setattr(owner, name, wrapper(real))
    try:
        yield
    finally:
        setattr(owner, name, real)


def counting(calls: list):
    def wrap(real):
        def call(*args, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)

        return call

    return wrap


def failing_at(n: int, fault: str):
    """The n-th call raises (Ctrl-C, a full disk) or ends the process there (kill -9)."""

    def wrap(real):
        seen = []

        def call(*args, **kwargs):
            seen.append(1)
            if len(seen) == n:
                if fault == "kill":
                    os._exit(137)
                raise KeyboardInterrupt if fault == "interrupt" else OSError(errno.ENOSPC, "No space left on device")
            return real(*args, **kwargs)

        return call

    return wrap


def whole(target: Path) -> str | None:
    """The run a baseline folder holds where it holds all of it (every file as the run has it), else None."""
    expected = {name for name in RunDir.SAVED if (LEGACY / name).is_file()} | {RunDir.BASELINE}
    if not target.is_dir() or {p.name for p in target.iterdir()} != expected:
        return None
    if any((target / name).read_bytes() != (LEGACY / name).read_bytes() for name in expected - {RunDir.BASELINE}):
        return None
    return json.loads((target / RunDir.BASELINE).read_text()).get("run")


def save_stopped(results: Path, owner, name: str, n: int, fault: str) -> None:
    """`baseline save s --force`, stopped at the n-th call of owner.name (a kill: in a forked child)."""
    if fault != "kill":
        with patched(owner, name, failing_at(n, fault)), contextlib.suppress(KeyboardInterrupt, OSError):
            save_baseline(RunDir(results / "s"), results, force=True)  # NB: a folder's fsync may fail unseen
        return
    pid = os.fork()
    if pid == 0:  # NB: the child only moves files, then ends without running the parent's cleanup
        code = 1
        try:
            with patched(owner, name, failing_at(n, fault)):
                save_baseline(RunDir(results / "s"), results, force=True)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 137


@pytest.fixture
def results(tmp_path):
    legacy_run(tmp_path, "r")
    legacy_run(tmp_path, "s")
    return tmp_path


def target_of(results: Path) -> Path:
    run = RunDir(results / "r")
    return rundir.baseline_path(results, run.env()["fingerprint_id"], run.plan()["grid"])


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["interrupt", "enospc", "kill"])
@pytest.mark.parametrize("can_exchange", [True, False], ids=["exchange", "renames"])
def test_a_baseline_save_stopped_at_any_step_leaves_one_whole_baseline(results, monkeypatch, fault, can_exchange):
    if not can_exchange:
        monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    target = target_of(results)
    save_baseline(RunDir(results / "r"), results)
    for owner, name in STEPS:
        calls = []
        with patched(owner, name, counting(calls)):
            save_baseline(RunDir(results / "s"), results, force=True)
        for n in range(1, len(calls) + 1):
            save_baseline(RunDir(results / "r"), results, force=True)
            save_stopped(results, owner, name, n, fault)
            step = f"{name} call {n} of {len(calls)}, {fault}"
            if (
                fault != "kill" or can_exchange
            ):  # NB: a kill between two renames leaves no baseline until the next listing
                assert whole(target) in ("r", "s"), step
            listed = baselines(results)
            assert [(str(where), info["run"]) for where, info in listed] == [
                (str(target.relative_to(results / "baselines")), whole(target))
            ] and whole(target), step
            save_baseline(RunDir(results / "s"), results, force=True)
            assert whole(target) == "s" and [p.name for p in target.parent.iterdir()] == [target.name], step


def test_a_baseline_json_that_names_nothing_is_listed_without_a_traceback(results):
    target = save_baseline(RunDir(results / "r"), results)
    (target / RunDir.BASELINE).write_text("{}")
    res = suite_in_process("baseline", "list", "--results-dir", str(results), cwd=results)
    assert res.returncode == 0 and "from run ?" in res.stdout, res.stderr
