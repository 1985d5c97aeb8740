"""Every file the suite writes is whole or absent, and a table always holds its journal.

Faults are injected rather than waited for: a short write, a full disk on the n-th write, a writer
that dies half-way, and damaged files of each kind.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from helpers import LEGACY, ROOT, legacy_run, suite_in_process

from suite.store.journal import Journal
from suite.store.row import Row
from suite.store.rundir import RunDir


def first_row() -> Row:
    line = (LEGACY / "journal.jsonl").read_text().splitlines()[0]
    return Row.from_json(json.loads(line))


# ------------------------------------------------------------------ the journal
def test_a_short_write_is_completed_not_lost(tmp_path, monkeypatch):
    real = os.write
    calls = []

    def short(fd, data):  # the kernel may write fewer bytes than asked
        calls.append(len(data))
        return real(fd, bytes(data[: max(1, len(data) // 3)]))

    monkeypatch.setattr("suite.store.journal.os.write", short)
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append(first_row())
    journal.append(first_row())
    read = journal.read()
    assert len(calls) > 2 and len(read.rows) == 2 and not read.problems


def test_a_full_disk_mid_line_leaves_whole_lines_only(tmp_path, monkeypatch):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append(first_row())
    real = os.write

    def full_disk(fd, data):
        real(fd, bytes(data[:40]))  # part of the line reaches the file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("suite.store.journal.os.write", full_disk)
    with pytest.raises(OSError):
        journal.append(first_row())
    monkeypatch.setattr("suite.store.journal.os.write", real)
    journal.append(first_row())  # the next line starts on a line of its own
    read = journal.read()
    assert len(read.rows) == 2 and not read.problems


# ------------------------------------------------------------------ `suite ab`'s journal
def _ab_blocks(journal: Path) -> None:
    """One case's four blocks (A, B, B, A) into `journal`, as a sweep writes them."""
    from suite.plan.case import Case
    from suite.run.ab import driver

    case = Case.from_key(json.loads((LEGACY / "plan.json").read_text())["cases"][0])
    worker = SimpleNamespace(has=lambda c: True, run=lambda c, r: first_row(), side=SimpleNamespace(given="HEAD"))
    driver._case(case, 0, {"a": worker, "b": worker}, journal, set())


def test_a_short_write_to_the_ab_journal_is_completed(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[: max(1, len(data) // 3)])))
    _ab_blocks(tmp_path / "ab.jsonl")
    lines, problems = Journal(tmp_path / "ab.jsonl").lines()
    assert len(lines) == 4 and not problems, problems


def test_a_full_disk_mid_line_of_the_ab_journal_leaves_whole_lines_only(tmp_path, monkeypatch):
    journal = tmp_path / "ab.jsonl"
    _ab_blocks(journal)
    real = os.write

    def full_disk(fd, data):
        real(fd, bytes(data[:40]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError):
        _ab_blocks(journal)
    monkeypatch.setattr(os, "write", real)
    _ab_blocks(journal)
    lines, problems = Journal(journal).lines()
    assert len(lines) == 8 and not problems, problems


# ------------------------------------------------------------------ links in a run folder: refused, never followed
def _linked(path: Path, name: str, outside: Path, content: bytes) -> Path:
    """`path/name` made a link to `outside`, which holds `content`."""
    outside.write_bytes(content)
    (path / name).unlink(missing_ok=True)
    (path / name).symlink_to(outside)
    return outside


def test_resume_refuses_a_linked_journal_and_leaves_its_target_alone(tmp_path):
    path = legacy_run(tmp_path / "results")
    content = (path / "journal.jsonl").read_bytes() + b'{"case_id": "cut'  # repair would cut this line
    outside = _linked(path, "journal.jsonl", tmp_path / "elsewhere.jsonl", content)
    res = suite_in_process("run", "--resume", "r", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert res.returncode == 2 and "journal.jsonl is a symbolic link" in res.stderr, res.stderr
    assert outside.read_bytes() == content


@pytest.mark.parametrize("act", ["append", "repair"])
def test_the_journal_never_writes_through_a_link(tmp_path, act):
    from suite.errors import UsageError

    outside = _linked(tmp_path, "journal.jsonl", tmp_path / "elsewhere.jsonl", b'{"partial')
    journal = Journal(tmp_path / "journal.jsonl")
    with pytest.raises(UsageError, match="journal.jsonl is a symbolic link"):
        journal.append(first_row()) if act == "append" else journal.repair()
    assert outside.read_bytes() == b'{"partial'


def test_the_ab_journal_and_a_serve_log_are_never_written_through_a_link(tmp_path):
    from suite.errors import UsageError
    from suite.run.ab import driver

    outside = _linked(tmp_path, "ab.jsonl", tmp_path / "elsewhere.jsonl", b"keep")
    with pytest.raises(UsageError, match="ab.jsonl is a symbolic link"):
        _ab_blocks(tmp_path / "ab.jsonl")
    log = _linked(tmp_path, "worker.log", tmp_path / "elsewhere.log", b"keep")
    side = SimpleNamespace(root=ROOT, label="a", given="HEAD")
    with pytest.raises(UsageError, match="worker.log is a symbolic link"):
        driver.ServeWorker(side, "cpu", SimpleNamespace(to_plan=dict), [], tmp_path / "worker.log", wait=False)
    assert outside.read_bytes() == b"keep" and log.read_bytes() == b"keep"


def test_resume_refuses_a_linked_worker_log_before_any_worker_starts(tmp_path):
    path = legacy_run(tmp_path / "results")
    outside = _linked(path, "worker.log", tmp_path / "elsewhere.log", b"keep")
    res = suite_in_process("run", "--resume", "r", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert res.returncode == 2 and "worker.log is a symbolic link" in res.stderr, res.stderr
    assert outside.read_bytes() == b"keep"


# ------------------------------------------------------------------ files written whole
@pytest.mark.parametrize("failing_write", [1, 2, 3])
def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_litter(tmp_path, monkeypatch, failing_write):
    target = tmp_path / "plan.json"
    target.write_text('{"old": true}')
    real, count = os.write, {"n": 0}

    def enospc_on_nth(fd, data):
        count["n"] += 1
        if count["n"] == failing_write:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, bytes(data[:4096]))

    from suite.store import atomic

    monkeypatch.setattr("suite.store.atomic.os.write", enospc_on_nth)
    payload = json.dumps({"new": "x" * 10000})
    if failing_write <= len(range(0, len(payload), 4096)):
        with pytest.raises(OSError):
            atomic.write_text(target, payload)
        assert json.loads(target.read_text()) == {"old": True}
    else:
        atomic.write_text(target, payload)
        assert json.loads(target.read_text())["new"] == "x" * 10000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_a_table_whose_writer_dies_half_way_keeps_the_old_one(tmp_path, monkeypatch):
    run = RunDir(legacy_run(tmp_path))
    before = (run.path / "results.parquet").read_bytes()

    def dies(self, path, *args, **kwargs):
        Path(path).write_bytes(b"PAR1" + b"\0" * 100)  # a cut file, then the process is gone
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", dies)
    with pytest.raises(KeyboardInterrupt):
        run.write_table(run.read_table())
    assert (run.path / "results.parquet").read_bytes() == before
    assert not [p for p in run.path.iterdir() if p.name.startswith(".")]


def test_a_symlink_in_a_run_folder_is_replaced_never_written_through(tmp_path):
    run = RunDir(legacy_run(tmp_path))
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    (run.path / "results.csv").unlink()
    (run.path / "results.csv").symlink_to(outside)
    run.write_table(run.read_table())
    assert outside.read_text() == "keep me" and not (run.path / "results.csv").is_symlink()


# ------------------------------------------------------------------ a table holds its journal
@pytest.mark.slow
@pytest.mark.parametrize("cut", [0, 4096])
def test_a_cut_table_is_rebuilt_from_the_journal(tmp_path, cut):
    path = legacy_run(tmp_path)
    whole = pd.read_parquet(path / "results.parquet")
    data = (path / "results.parquet").read_bytes()
    (path / "results.parquet").write_bytes(data[:cut])
    for command in (
        ("report", "r", "--reports-dir", str(tmp_path / "reports")),
        ("export", "r", "--format", "github-action-benchmark", "-o", str(tmp_path / "o.json")),
    ):
        res = suite_in_process(*command, "--results-dir", str(tmp_path), cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    rebuilt = pd.read_parquet(path / "results.parquet")
    assert len(rebuilt) == len(whole) and (rebuilt["status"] == "ok").sum() == (whole["status"] == "ok").sum()


@pytest.mark.slow
def test_a_table_older_than_its_journal_is_rebuilt(tmp_path):
    """`report` during a run wrote a table of the rows so far; the run then measured more and was killed."""
    path = legacy_run(tmp_path)
    lines = (path / "journal.jsonl").read_text().splitlines(keepends=True)
    (path / "journal.jsonl").write_text("".join(lines[:3]))
    (path / "results.parquet").unlink()
    assert (
        suite_in_process(
            "report", "r", "--results-dir", str(tmp_path), "--reports-dir", str(tmp_path / "reports"), cwd=tmp_path
        ).returncode
        == 0
    )
    early = pd.read_parquet(path / "results.parquet")
    with open(path / "journal.jsonl", "a") as fh:  # measured on after the table was written
        fh.write("".join(lines[3:]))
    os.utime(path / "journal.jsonl", ns=(os.stat(path / "results.parquet").st_mtime_ns + 10**6,) * 2)
    res = suite_in_process(
        "report", "r", "--results-dir", str(tmp_path), "--reports-dir", str(tmp_path / "reports"), cwd=tmp_path
    )
    assert res.returncode == 0 and "measured more after its table was written" in res.stderr
    late = pd.read_parquet(path / "results.parquet")
    assert (late["status"] == "ok").sum() > (early["status"] == "ok").sum()


def test_a_table_is_rebuilt_when_its_journal_grew_even_with_equal_times(tmp_path):
    """Times alone miss it: a file system that keeps whole seconds, a copy that sets them alike."""
    path = legacy_run(tmp_path)
    lines = (path / "journal.jsonl").read_text().splitlines(keepends=True)
    (path / "journal.jsonl").write_text("".join(lines[:3]))
    (path / "results.parquet").unlink()
    export = (
        "export",
        "r",
        "--format",
        "github-action-benchmark",
        "-o",
        str(tmp_path / "o.json"),
        "--results-dir",
        str(tmp_path),
    )
    assert suite_in_process(*export, cwd=tmp_path).returncode == 0
    early = pd.read_parquet(path / "results.parquet")
    with open(path / "journal.jsonl", "a") as fh:
        fh.write("".join(lines[3:]))
    stamp = os.stat(path / "results.parquet").st_mtime_ns
    os.utime(path / "journal.jsonl", ns=(stamp, stamp))
    res = suite_in_process(*export, cwd=tmp_path)
    assert res.returncode == 0 and "measured more after its table was written" in res.stderr, res.stderr
    late = pd.read_parquet(path / "results.parquet")
    assert (late["status"] == "ok").sum() > (early["status"] == "ok").sum()
    assert "measured more" not in suite_in_process(*export, cwd=tmp_path).stderr  # and then it is current


def _compare(tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    """`suite compare b r` (two copies of the legacy run) with its JSON."""
    out = tmp_path / "compare.json"
    out.unlink(missing_ok=True)
    res = suite_in_process("compare", "b", "r", "--json", str(out), "--results-dir", str(tmp_path), cwd=tmp_path)
    return res, (json.loads(out.read_text()) if out.is_file() else None)


@pytest.mark.parametrize("cut", [0, 4096])
def test_compare_of_a_run_with_a_cut_table_rebuilds_it_and_answers(tmp_path, cut):
    legacy_run(tmp_path, "b")
    path = legacy_run(tmp_path)
    whole_res, whole = _compare(tmp_path)
    (path / "results.parquet").write_bytes((path / "results.parquet").read_bytes()[:cut])
    res, payload = _compare(tmp_path)
    assert res.returncode == whole_res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "has a table that cannot be read; its table is written from its journal" in res.stderr
    assert payload["counts"] == whole["counts"] and pd.read_parquet(path / "results.parquet").shape[0] == 24


def test_compare_counts_and_names_the_journal_lines_it_cannot_read(tmp_path):
    legacy_run(tmp_path, "b")
    path = legacy_run(tmp_path)
    lines = (path / "journal.jsonl").read_text().splitlines()
    lines[1] = lines[1][:50]
    lines[4] = json.dumps({**json.loads(lines[4]), "replicate": "0"})
    (path / "journal.jsonl").write_text("\n".join(lines) + "\n")
    for fresh_table in (True, False):  # the table is read as it is, or rebuilt from the journal
        if fresh_table:
            os.utime(path / "journal.jsonl", ns=(os.stat(path / "results.parquet").st_mtime_ns - 10**9,) * 2)
        else:
            (path / "results.parquet").unlink()
        res, payload = _compare(tmp_path)
        assert payload is not None and res.returncode in (0, 1), res.stderr
        assert "journal.jsonl line 2 is corrupt" in res.stderr and "line 5" in res.stderr and "replicate" in res.stderr
        assert "2 line(s) of" in res.stderr, res.stderr


# ------------------------------------------------------------------ damaged files: exit 2, nothing written
DAMAGED_PLANS = {
    "not JSON": b'{"grid": "x", "cases": [',
    "not UTF-8": b"\xff\xfe{}",
    "no cases": json.dumps({"grid": "x", "settings": {}}).encode(),
    "an unknown case field": None,  # built from the fixture below
    "plugins not names": None,
    "a list": b"[1, 2]",
}


def _damaged_plan(path: Path, kind: str) -> bytes:
    plan = json.loads((path / "plan.json").read_text())
    if kind == "an unknown case field":
        plan["cases"][0]["colour"] = "red"
        return json.dumps(plan).encode()
    if kind == "plugins not names":
        plan["plugins"] = [5]
        return json.dumps(plan).encode()
    return DAMAGED_PLANS[kind]


@pytest.mark.parametrize("kind", list(DAMAGED_PLANS))
def test_a_damaged_plan_is_named_and_nothing_is_written(tmp_path, kind):
    path = legacy_run(tmp_path)
    (path / "plan.json").write_bytes(_damaged_plan(path, kind))
    (path / "results.parquet").unlink()  # so that `report` has to read the plan
    before = sorted(p.name for p in path.iterdir())
    commands = [("run", "--resume", "r")]
    if kind != "plugins not names":  # NB: a report imports nothing: it reads no plugins
        commands.append(("report", "r", "--reports-dir", str(tmp_path / "reports")))
    for command in commands:
        res = suite_in_process(*command, "--results-dir", str(tmp_path), cwd=tmp_path)
        assert res.returncode == 2, (kind, command, res.stderr)
        assert "plan.json" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in path.iterdir()) == before and not (tmp_path / "reports").exists()


DAMAGED_SIDECARS = {  # what the file holds: text as it is, a list, or fields replacing the run's own
    "env a list": ("env.json", [1, 2]),
    "env devices text": ("env.json", {"devices": "cpu"}),
    "env cache size text": ("env.json", {"cpu_caches": {"L2": {"bytes": "1 MiB"}}}),
    "probe a list": ("probe.json", ["cpu"]),
    "probe device text": ("probe.json", {"cpu": "fast"}),
    "probe peak text": ("probe.json", {"cpu": {"float32": {"flops_per_s": "fast"}}}),
    "bandwidth device a list": ("bandwidth.json", {"cpu": ["fast"]}),
    "bandwidth text": ("bandwidth.json", {"cpu": {"bytes_per_s": "fast", "spread": 0.1}}),
    "gathers text": ("bandwidth.json", {"cpu": {"bytes_per_s": 1e9, "gathers": {"ns_per_pair": ["slow"]}}}),
    "sweep reach text": ("bandwidth.json", {"cpu": {"bytes_per_s": 1e9, "sweep": {"reach_bytes": "101 MiB"}}}),
    "ladders text": ("ladders.json", {"ladders": "all"}),
    "ladder why a number": ("ladders.json", {"ladders": [{"series": "x", "stop": "settled", "why": 5}]}),
    "baseline a list": ("baseline.json", ["r"]),
    "baseline run a number": ("baseline.json", {"run": 5}),
    "baseline saved_at a number": ("baseline.json", {"saved_at": 2026}),
}


@pytest.mark.parametrize("name, damage", DAMAGED_SIDECARS.values(), ids=DAMAGED_SIDECARS)
def test_a_damaged_sidecar_file_is_named_and_nothing_is_written(tmp_path, name, damage):
    path = legacy_run(tmp_path)
    command = ("report", "r", "--reports-dir", str(tmp_path / "reports"))
    if name == "baseline.json":  # a saved baseline's: read where baselines are listed
        assert suite_in_process("baseline", "save", "r", "--results-dir", str(tmp_path), cwd=tmp_path).returncode == 0
        path, command = next((tmp_path / "baselines").glob("*/*")), ("baseline", "list")
    own = json.loads((path / name).read_text()) if (path / name).is_file() else {}
    text = damage if isinstance(damage, str) else json.dumps({**own, **damage} if isinstance(damage, dict) else damage)
    (path / name).write_text(text)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    res = suite_in_process(*command, "--results-dir", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and f"{path / name} cannot be read" in res.stderr, res.stderr
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before and not (tmp_path / "reports").exists()


@pytest.mark.parametrize(
    "field, value",
    [
        ("params", "abc"),
        ("replicate", "0"),
        ("replicate", -1),
        ("replicate", 64),
        ("samples", ["x"]),
        ("status", "great"),
        ("time_s", "fast"),
        ("op_seconds", [1]),
    ],
)
@pytest.mark.slow
def test_a_journal_line_with_a_bad_field_is_named_and_the_rest_kept(tmp_path, field, value):
    path = legacy_run(tmp_path)
    lines = (path / "journal.jsonl").read_text().splitlines()
    bad = json.loads(lines[1])
    bad[field] = value
    lines[1] = json.dumps(bad)
    (path / "journal.jsonl").write_text("\n".join(lines) + "\n")
    (path / "results.parquet").unlink()
    res = suite_in_process(
        "report", "r", "--results-dir", str(tmp_path), "--reports-dir", str(tmp_path / "reports"), cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert "line 2" in res.stderr and field in res.stderr and "1 line(s)" in res.stderr


def test_a_journal_from_a_newer_version_is_counted_on_every_read(tmp_path):
    path = legacy_run(tmp_path)
    lines = [json.loads(line) for line in (path / "journal.jsonl").read_text().splitlines()]
    (path / "journal.jsonl").write_text("".join(json.dumps({**line, "joules": 1.0}) + "\n" for line in lines))
    os.utime(path / "results.parquet")  # the table is current: the journal is read for the count alone
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
    assert res.returncode == 0 and f"{len(lines)} line(s)" in res.stderr and "joules" in res.stderr


def test_a_run_with_nothing_ok_reports_instead_of_crashing(tmp_path):
    """pandas 3 reads an all-missing column back as text; arithmetic on it raised TypeError."""
    path = legacy_run(tmp_path)
    lines = [json.loads(line) for line in (path / "journal.jsonl").read_text().splitlines()]
    for state in ("skipped", "error", "plan only"):
        if state == "plan only":
            (path / "journal.jsonl").unlink()
        else:
            nothing = {
                "status": state,
                "reason": "x",
                "samples": None,
                "time_s": None,
                "time_iqr_s": None,
                "time_min_s": None,
                "flops": None,
                "extra_flops": None,
                "op_seconds": None,
            }
            (path / "journal.jsonl").write_text("".join(json.dumps({**line, **nothing}) + "\n" for line in lines))
        (path / "results.parquet").unlink(missing_ok=True)
        res = suite_in_process(
            "report", "r", "--results-dir", str(tmp_path), "--reports-dir", str(tmp_path / "reports"), cwd=tmp_path
        )
        assert res.returncode == 0, (state, res.stderr)
        frame = pd.read_parquet(path / "results.parquet")
        assert (frame["status"] == ("not_run" if state == "plan only" else state)).all()


def test_a_name_for_a_descriptor_is_written_in_place_never_replaced(tmp_path):
    """`-o /dev/stdout`: the link names the process's own descriptor (here a pipe's), which must stay."""
    from suite.store import atomic

    read_end, write_end = os.pipe()
    name = tmp_path / "stdout"
    name.symlink_to(f"/proc/self/fd/{write_end}")
    try:
        atomic.write_text(name, "streamed", follow_links=True)
        assert os.read(read_end, 100) == b"streamed" and name.is_symlink()
    finally:
        os.close(read_end)
        os.close(write_end)
