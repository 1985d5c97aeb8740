"""What a careless or hostile user can do to a results folder, and what the suite does instead of harm:
baselines never destroyed, no code run from a results folder, one process per run, no worker left
behind, no traceback for bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from helpers import TESTS, legacy_run, suite, suite_in_process

from suite.store.rundir import RunDir, baseline_path


def fingerprint_and_grid(path: Path) -> Path:
    run = RunDir(path)
    return baseline_path(path.parent, run.env()["fingerprint_id"], run.plan()["grid"])


# ------------------------------------------------------------------ baselines
def test_baseline_save_refuses_a_baseline_as_its_source(tmp_path):
    legacy_run(tmp_path)
    assert suite_in_process("baseline", "save", "r", "--results-dir", str(tmp_path), cwd=tmp_path).returncode == 0
    target = fingerprint_and_grid(tmp_path / "r")
    before = sorted(p.name for p in target.iterdir())
    res = suite_in_process("baseline", "save", str(target), "--force", "--results-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "is a saved baseline" in res.stderr
    assert sorted(p.name for p in target.iterdir()) == before and "results.parquet" in before


def test_baseline_save_refuses_a_run_that_measured_nothing(tmp_path):
    path = legacy_run(tmp_path)
    (path / "journal.jsonl").write_text("")
    (path / "results.parquet").unlink()
    res = suite_in_process("baseline", "save", "r", "--results-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "no case of it measured ok" in res.stderr
    assert not (tmp_path / "baselines").exists()


def test_baseline_save_replaces_only_with_force_and_keeps_the_old_one_until_the_new_is_whole(tmp_path, monkeypatch):
    legacy_run(tmp_path, "r")
    legacy_run(tmp_path, "s")
    assert suite_in_process("baseline", "save", "r", "--results-dir", str(tmp_path), cwd=tmp_path).returncode == 0
    target = fingerprint_and_grid(tmp_path / "r")
    res = suite_in_process("baseline", "save", "s", "--results-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "--force" in res.stderr
    assert json.loads((target / "baseline.json").read_text())["run"] == "r"

    from suite.store import atomic

    real, count = atomic.write_bytes, {"n": 0}

    def dies_on_third(path, data):  # killed half-way through copying the new baseline
        count["n"] += 1
        if count["n"] == 3:
            raise KeyboardInterrupt
        return real(path, data)

    monkeypatch.setattr(atomic, "write_bytes", dies_on_third)
    res = suite_in_process("baseline", "save", "s", "--force", "--results-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 130 and "stopped by SIGINT" in res.stderr
    assert json.loads((target / "baseline.json").read_text())["run"] == "r"
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name], "no half-made baseline is left"
    monkeypatch.setattr(atomic, "write_bytes", real)
    assert (
        suite_in_process("baseline", "save", "s", "--force", "--results-dir", str(tmp_path), cwd=tmp_path).returncode
        == 0
    )
    assert json.loads((target / "baseline.json").read_text())["run"] == "s"
    assert (target / "results.parquet").is_file() and (target / "plan.json").is_file()


def test_baseline_save_refuses_a_linked_file_in_the_run(tmp_path):
    path = legacy_run(tmp_path)
    (path / "env.json").rename(tmp_path / "env-elsewhere.json")
    (path / "env.json").symlink_to(tmp_path / "env-elsewhere.json")
    res = suite_in_process("baseline", "save", "r", "--results-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "symbolic link" in res.stderr
    assert not (tmp_path / "baselines").exists() or not list((tmp_path / "baselines").rglob("*.json"))


# ------------------------------------------------------------------ no code from a results folder
def _planted(tmp_path: Path) -> Path:
    evil = tmp_path / "results" / "evil"
    evil.mkdir(parents=True)
    marker = tmp_path / "it-ran"
    (evil / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('init')\n")
    (evil / "payload.py").write_text(f"open({str(marker)!r}, 'w').write('payload')\n")
    return marker


def test_a_plan_naming_a_plugin_imports_nothing(tmp_path, monkeypatch):
    marker = _planted(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # importable: only the guard keeps it out
    path = legacy_run(tmp_path / "results", "r")
    plan = json.loads((path / "plan.json").read_text())
    (path / "plan.json").write_text(json.dumps({**plan, "plugins": ["results.evil.payload"]}))
    res = suite_in_process("run", "--resume", "r", "--results-dir", "results", cwd=tmp_path)
    assert res.returncode == 2 and "--plugin results.evil.payload" in res.stderr
    assert not marker.exists()


def test_compare_confirm_imports_no_plugin_the_plan_names_unless_the_command_line_does(tmp_path, monkeypatch):
    """The re-run of `compare --confirm` starts workers with the run's plugins: they must come from --plugin."""
    marker, folder = tmp_path / "it-ran", tmp_path / "code"
    folder.mkdir()
    (folder / "planted_plugin.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    monkeypatch.syspath_prepend(str(folder))  # importable: only the guard keeps it out
    legacy_run(tmp_path / "results", "b")
    run = RunDir(legacy_run(tmp_path / "results", "r"))
    frame = run.read_table()  # one case three times slower: flagged on its own, so --confirm re-runs it
    for column in ("samples", "replicate_times_s", "time_s", "time_iqr_s", "time_min_s"):
        frame.at[0, column] = np.asarray(frame.at[0, column]) * 3
    run.write_table(frame)
    plan = json.loads((run.path / "plan.json").read_text())
    (run.path / "plan.json").write_text(json.dumps({**plan, "plugins": ["planted_plugin"]}))
    res = suite_in_process("compare", "b", "r", "--confirm", "--results-dir", "results", cwd=tmp_path)
    assert res.returncode == 2 and "--plugin planted_plugin" in res.stderr, res.stderr
    assert not marker.exists()


def test_a_plugin_under_the_results_folder_is_refused_before_it_is_imported(tmp_path, monkeypatch):
    marker = _planted(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m suite` run there has its working directory
    for module in ("results.evil.payload", "results.evil", "results"):
        res = suite_in_process(
            "run", "--grid", "smoke", "--plugin", module, "--results-dir", "results", "--dry-run", cwd=tmp_path
        )
        assert res.returncode == 2 and "under the results folder" in res.stderr, res.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_a_resumed_run_takes_its_plugins_from_the_command_line(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(
        'name = "p"\n[settings]\nmin_run_time_s = 0.01\nmax_samples = 3\ncheck_seq_len = 16\nprobe = false\n'
        "[defaults]\nseq_len = [16]\nbatch = [1]\nnum_heads = [1]\nhead_dim = [8]\n"
        '[[block]]\nvariant = ["fault_raise"]\nimpl = ["native"]\n'
    )
    res = suite(
        "run",
        "--grid",
        str(grid),
        "--plugin",
        "fault_variants",
        "--run-id",
        "p",
        "--results-dir",
        str(tmp_path / "results"),
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    journal = tmp_path / "results" / "p" / "journal.jsonl"
    journal.write_text("")
    res = suite_in_process("run", "--resume", "p", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert res.returncode == 2 and "--plugin fault_variants" in res.stderr
    res = suite(
        "run", "--resume", "p", "--plugin", "fault_variants", "--results-dir", str(tmp_path / "results"), cwd=tmp_path
    )
    assert res.returncode == 0 and json.loads(journal.read_text().splitlines()[0])["status"] == "error", res.stderr


# ------------------------------------------------------------------ one process per run; options that do not apply
def test_a_second_resume_of_a_run_in_progress_exits_2_naming_the_holder(tmp_path):
    from suite.store import lock

    path = legacy_run(tmp_path)
    with lock.held(path):
        res = suite_in_process("run", "--resume", "r", "--results-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and f"pid {os.getpid()}" in res.stderr, res.stderr


@pytest.mark.parametrize(
    "extra",
    [
        ("--grid", "quick"),
        ("--threads", "1"),
        ("--shard", "1/2"),
        ("--variant", "full"),
        ("--device", "cpu"),
        ("--run-id", "x"),
    ],
)
def test_resume_refuses_options_that_would_be_ignored(tmp_path, extra):
    legacy_run(tmp_path)
    res = suite_in_process("run", "--resume", "r", *extra, "--results-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and extra[0] in res.stderr, res.stderr


@pytest.mark.parametrize(
    "args, field",
    [(("--threads", "300"), "--threads 300"), (("--run-id=-x",), "-x"), (("--threads", "0"), "--threads 0")],
)
def test_bad_run_options_exit_2_before_any_work(tmp_path, args, field):
    res = suite_in_process("run", "--grid", "smoke", *args, "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert res.returncode == 2 and field in res.stderr, res.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_report_of_a_dotted_path_writes_where_the_folder_is_named(tmp_path):
    legacy_run(tmp_path / "results")
    (tmp_path / "results" / "r" / "sub").mkdir()
    res = suite_in_process(
        "report",
        str(tmp_path / "results" / "r" / "sub" / ".."),
        "--results-dir",
        str(tmp_path / "results"),
        "--reports-dir",
        str(tmp_path / "reports"),
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "reports" / "r" / "index.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports", "results"]


def test_bad_files_and_folders_exit_2(tmp_path):
    grid = tmp_path / "latin1.toml"
    grid.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    res = suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path)
    assert res.returncode == 2 and "not UTF-8" in res.stderr
    res = suite_in_process("ab", "HEAD", "HEAD", "--repo", str(tmp_path / "nonexistent"), cwd=tmp_path)
    assert res.returncode == 2 and "--repo" in res.stderr


def test_merge_of_a_damaged_shard_writes_nothing(tmp_path):
    path = legacy_run(tmp_path, "s1")
    plan = json.loads((path / "plan.json").read_text())
    plan["cases"][3]["seq_len"] = "long"
    (path / "plan.json").write_text(json.dumps(plan))
    res = suite_in_process("merge", "s1", "--run-id", "m", "--results-dir", str(tmp_path), "--no-report", cwd=tmp_path)
    assert res.returncode == 2 and "cases[3]" in res.stderr and "seq_len" in res.stderr
    assert not (tmp_path / "m").exists()


# ------------------------------------------------------------------ processes
HANG = (
    'name = "h"\n[settings]\ncase_timeout_s = 600\nmin_run_time_s = 0.01\ncheck_seq_len = 16\nprobe = false\n'
    "[defaults]\nseq_len = [16]\nbatch = [1]\nnum_heads = [1]\nhead_dim = [8]\n"
    '[[block]]\nvariant = ["{variant}"]\nimpl = ["native"]\n'
)


def _start(tmp_path: Path, variant: str) -> subprocess.Popen:
    (tmp_path / "g.toml").write_text(HANG.format(variant=variant))
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "suite",
            "run",
            "--grid",
            str(tmp_path / "g.toml"),
            "--plugin",
            "fault_variants",
            "--run-id",
            "h",
            "--results-dir",
            str(tmp_path / "results"),
            "--no-report",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(predicate, timeout_s: float = 120.0) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _workers(proc: subprocess.Popen) -> list[psutil.Process]:
    """The runner's worker processes: descendants that hold the run's worker.log open."""
    found = []
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if any(f.path.endswith("worker.log") for f in child.open_files()):
                found.append(child)
        except psutil.Error:
            pass
    return found


@pytest.mark.slow
def test_a_worker_in_a_hanging_case_dies_with_its_runner(tmp_path):
    proc = _start(tmp_path, "fault_hang")
    try:
        assert _wait_for(lambda: _workers(proc)), "no worker started"
        time.sleep(2)  # the worker is in the case now (it hangs for an hour)
        workers = _workers(proc)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        proc.wait(10)
        gone, alive = psutil.wait_procs(descendants, timeout=15)
        assert workers and not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], alive
    finally:
        for p in psutil.Process().children(recursive=True):
            p.kill()


@pytest.mark.slow
def test_sigterm_and_sighup_end_a_run_with_one_line(tmp_path):
    for sig in (signal.SIGTERM, signal.SIGHUP):
        shutil.rmtree(tmp_path / "results", ignore_errors=True)
        proc = _start(tmp_path, "fault_hang")
        assert _wait_for(lambda: _workers(proc))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, err
        assert "Traceback" not in err and f"stopped by {sig.name}" in err, err
        assert (tmp_path / "results" / "h" / "results.parquet").is_file()


@pytest.mark.slow
def test_a_worker_killed_from_outside_is_not_called_oom_and_runs_again_on_resume(tmp_path):
    proc = _start(tmp_path, "fault_killed")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    journal = tmp_path / "results" / "h" / "journal.jsonl"
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["killed"] and "from outside the suite" in rows[0]["reason"]
    res = suite(
        "run", "--resume", "h", "--plugin", "fault_variants", "--results-dir", str(tmp_path / "results"), cwd=tmp_path
    )
    assert res.returncode == 0 and "0 of 1 cases already in the journal" in res.stderr, res.stderr
    assert len(journal.read_text().splitlines()) == 2


@pytest.mark.slow
def test_ab_removes_its_worktrees_on_sigterm_and_sighup_and_its_servers_die_with_it(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (
        ("init", "-q"),
        ("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"),
    ):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (tmp_path / "g.toml").write_text(HANG.format(variant="fault_hang"))
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for n, sig in enumerate((signal.SIGTERM, signal.SIGHUP, signal.SIGKILL)):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "suite",
                "ab",
                "HEAD",
                "HEAD",
                "--repo",
                str(repo),
                "--grid",
                str(tmp_path / "g.toml"),
                "--plugin",
                "fault_variants",
                "--pairs",
                "2",
                "--rounds",
                "1",
                "--run-id",
                f"ab{n}",
                "--results-dir",
                str(tmp_path / "results"),
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        listed = lambda: subprocess.run(
            ["git", "worktree", "list"],
            cwd=repo,
            capture_output=True,  # noqa: E731
            text=True,
        ).stdout.count("\n")
        # NB: both sides' servers started (each a child of the driver), so that their deaths are what is checked
        assert _wait_for(lambda: listed() == 3 and len(psutil.Process(proc.pid).children()) >= 2), "no servers"
        serves = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        _, alive = psutil.wait_procs(serves, timeout=15)
        assert not alive, alive  # NB: after SIGKILL too: the servers die with their driver
        if sig == signal.SIGKILL:
            break
        assert proc.returncode == 128 + sig and "Traceback" not in err, err
        assert listed() == 1, "worktrees left registered"
