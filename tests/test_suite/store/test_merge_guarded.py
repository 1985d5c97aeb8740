"""Merge from small shard folders cut from the legacy run: overlapping shards are refused naming the cases
and the shards; a merge stopped at any step leaves no run under its name, and the next one succeeds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import LEGACY, TESTS, suite_in_process

from suite.errors import UsageError
from suite.plan.case import Case
from suite.store import journal, merge
from suite.store.rundir import RunDir

KEYS = json.loads((LEGACY / RunDir.PLAN).read_text())["cases"]
LINES = (LEGACY / RunDir.JOURNAL).read_text().splitlines()


def shard_folder(results: Path, name: str, keys: list, spec: dict) -> Path:
    """A shard run of the legacy grid holding `keys` (its journal's rows of them; no table: read rebuilds it)."""
    folder = results / name
    folder.mkdir(parents=True)
    plan = {**json.loads((LEGACY / RunDir.PLAN).read_text()), "cases": keys, "shard": spec}
    (folder / RunDir.PLAN).write_text(json.dumps(plan))
    (folder / RunDir.ENV).write_bytes((LEGACY / RunDir.ENV).read_bytes())
    ids = {Case.from_key(key).case_id for key in keys}
    (folder / RunDir.JOURNAL).write_text("".join(line + "\n" for line in LINES if json.loads(line)["case_id"] in ids))
    return folder


def halves(results: Path, overlap: int = 0) -> list[str]:
    shard_folder(results, "a", KEYS[: 12 + overlap], {"k": 1, "n": 2})
    shard_folder(results, "b", KEYS[12:], {"k": 2, "n": 2})
    return ["a", "b"]


def merged(results: Path, *names: str, run_id: str = "m"):
    return suite_in_process(
        "merge", *names, "--run-id", run_id, "--results-dir", str(results), "--no-report", cwd=results
    )


def test_shards_that_do_not_overlap_merge_into_every_case_once(tmp_path):
    res = merged(tmp_path, *halves(tmp_path))
    assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(tmp_path / "m" / RunDir.PARQUET)
    assert sorted(frame["case_id"]) == sorted(Case.from_key(key).case_id for key in KEYS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "m"], "no folder of the merge is left beside it"


@pytest.mark.parametrize("other", [{"k": 2, "n": 3}, {"k": 1, "n": 2}], ids=["another-split", "same-shard"])
def test_overlapping_shards_are_refused_naming_the_cases_and_the_shards(tmp_path, other):
    halves(tmp_path, overlap=4)
    shard_folder(tmp_path, "c", KEYS[:12], other)  # another split's shard, or shard a under another name
    twice = [Case.from_key(key).case_id for key in KEYS[12:16]]
    res = merged(tmp_path, "a", "b")
    assert res.returncode == 2 and "4 case(s)" in res.stderr and "(held by a, b)" in res.stderr, res.stderr
    assert all(f"{case_id} (in a, b)" in res.stderr for case_id in twice[:3])
    res = merged(tmp_path, "b", "c", "a")
    assert res.returncode == 2 and "16 case(s)" in res.stderr and "(held by b, c, a)" in res.stderr
    assert not (tmp_path / "m").exists() and not list(tmp_path.glob(".m*"))


def _failing_append(real):
    calls = []

    def append(path, data):
        calls.append(1)
        if len(calls) == 5:
            raise OSError(28, "No space left on device")
        return real(path, data)

    return append


def test_a_merge_that_fails_half_way_leaves_no_run_and_the_next_one_succeeds(tmp_path, monkeypatch):
    halves(tmp_path)
    shards = [RunDir.resolve(name, tmp_path) for name in ("a", "b")]
    monkeypatch.setattr(journal, "append_line", _failing_append(journal.append_line))
    with pytest.raises(OSError):
        merge.merge(shards, RunDir(tmp_path / "m"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    monkeypatch.undo()
    assert merged(tmp_path, "a", "b").returncode == 0


KILLED = """
import os, signal, sys
from suite.store import journal, merge
from suite.store.rundir import RunDir

real, calls = journal.append_line, []
def append(path, data):
    calls.append(1)
    if len(calls) == 5:
        print("writing", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    real(path, data)
journal.append_line = append
results = sys.argv[1]
merge.merge([RunDir.resolve(name, results) for name in ("a", "b")], RunDir(os.path.join(results, "m")))
"""


@pytest.mark.slow  # a Python that imports the suite, killed
def test_a_merge_killed_half_way_leaves_no_run_and_the_next_one_succeeds(tmp_path):
    halves(tmp_path)
    for name in ("a", "b"):
        RunDir.resolve(name, tmp_path)  # NB: the tables first, so the child is killed in the merge itself
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, "-c", KILLED, str(tmp_path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == -signal.SIGKILL and "writing" in res.stdout, res.stderr
    assert not (tmp_path / "m").exists(), "a killed merge left a run that looks resumable"
    assert len(list(tmp_path.glob(".m.merging.*"))) == 1
    res = merged(tmp_path, "a", "b")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "m"], "what the killed merge left is gone"
    assert len(pd.read_parquet(tmp_path / "m" / RunDir.PARQUET)) == len(KEYS)


def test_a_target_made_while_merging_is_not_overwritten(tmp_path, monkeypatch):
    halves(tmp_path)
    shards = [RunDir.resolve(name, tmp_path) for name in ("a", "b")]
    real = merge._write

    def write(run, *args):
        real(run, *args)
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "mine").write_text("x")

    monkeypatch.setattr(merge, "_write", write)
    with pytest.raises(UsageError, match="exists"):
        merge.merge(shards, RunDir(tmp_path / "m"))
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["mine"] and not list(tmp_path.glob(".m.*"))
