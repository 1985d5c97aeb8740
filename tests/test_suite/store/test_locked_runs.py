"""Every command that reads a run refuses one that another process measures (its lock held), exit 2 naming
that process, before anything in it is read or rebuilt; a run a command reads is not resumed meanwhile, and
a run nobody measures is read without a lock file made in its folder."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import TESTS, legacy_run, suite_in_process

from suite.store import lock
from suite.store.rundir import RunDir

HOLD = """
import fcntl, os, sys
from suite.store import lock

folder, how = sys.argv[1], sys.argv[2]
if how == "measure":
    with lock.held(folder):
        print("held", flush=True)
        sys.stdin.read()
else:  # a command reading the run
    fd = os.open(os.path.join(folder, lock.NAME), os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    print("held", flush=True)
    sys.stdin.read()
"""


@contextmanager
def locked(folder: Path, how: str = "measure"):
    """Another process holds the run's lock (`measure`: as `run` does; `read`: as a reading command) until
    the block ends; yields its pid."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout.readline() == "held\n"
        yield child.pid
    finally:
        child.stdin.close()
        child.wait(timeout=30)


@pytest.fixture
def results(tmp_path):
    legacy_run(tmp_path, "r")
    legacy_run(tmp_path, "s")
    (tmp_path / "r" / lock.NAME).write_text("pid 1 on a machine since a run measured it before\n")
    (tmp_path / "r" / RunDir.PARQUET).unlink()  # stale: a reader that did not wait would rebuild it in the live run
    (tmp_path / "r" / RunDir.CSV).unlink()
    return tmp_path


COMMANDS = {
    "report": ("report", "r", "--reports-dir", "{tmp}/reports"),
    "compare-new": ("compare", "s", "r"),
    "compare-base": ("compare", "r", "s"),
    "baseline-save": ("baseline", "save", "r"),
    "merge": ("merge", "r", "--run-id", "m", "--no-report"),
    "export": ("export", "r", "--format", "github-action-benchmark", "-o", "{tmp}/out.json"),
    "card": ("card", "r"),
    "history-add": ("history", "add", "r", "--db", "{tmp}/h.duckdb", "--commit-time", "2026-01-01T00:00:00"),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_refuses_a_run_being_measured_naming_its_process(results, command):
    args = [arg.format(tmp=results) for arg in COMMANDS[command]]
    with locked(results / "r") as pid:
        res = suite_in_process(*args, "--results-dir", str(results), cwd=results)
    assert res.returncode == 2 and f"being measured by pid {pid}" in res.stderr, res.stderr
    assert sorted(p.name for p in results.iterdir()) == ["r", "s"], "nothing written"
    assert not (results / "r" / RunDir.PARQUET).exists(), "nothing rebuilt in the run being measured"


def test_a_resume_of_a_run_that_a_command_reads_exits_2_saying_so(results):
    with locked(results / "r", "read"):
        res = suite_in_process("run", "--resume", "r", "--results-dir", str(results), cwd=results)
    assert res.returncode == 2 and "being read by another command" in res.stderr, res.stderr
    assert not (results / "r" / RunDir.PARQUET).exists()


def test_commands_read_each_other_s_runs_at_once_and_a_measuring_process_after_them(results):
    with lock.reading(results / "r", "report"):
        with locked(results / "r", "read"):
            res = suite_in_process(
                "export",
                "r",
                "--format",
                "github-action-benchmark",
                "-o",
                str(results / "o.json"),
                "--results-dir",
                str(results),
                cwd=results,
            )
    assert res.returncode == 0, res.stderr
    with lock.held(results / "r"):
        pass


def test_a_run_nobody_measures_is_read_from_a_read_only_folder_without_a_lock_file(tmp_path):
    folder = legacy_run(tmp_path, "r")
    os.chmod(folder, 0o555)
    try:
        res = suite_in_process(
            "export",
            "r",
            "--format",
            "github-action-benchmark",
            "-o",
            str(tmp_path / "o.json"),
            "--results-dir",
            str(tmp_path),
            cwd=tmp_path,
        )
    finally:
        os.chmod(folder, 0o755)
    assert res.returncode == 0, res.stderr
    assert not (folder / lock.NAME).exists()
