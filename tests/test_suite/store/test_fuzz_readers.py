"""Random bytes and random JSON into the journal, plan and grid readers: a clean read or a UsageError
(exit 2 naming the file), never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.errors import UsageError
from suite.plan import grid as grids
from suite.run import runner
from suite.store.journal import Journal
from suite.store.rundir import RunDir
from helpers import LEGACY, suite_in_process

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=10), inner, max_size=5)),
                           max_leaves=20)
REAL_LINE = json.loads((LEGACY / "journal.jsonl").read_text().splitlines()[0])
REAL_PLAN = json.loads((LEGACY / "plan.json").read_text())


def _mutated(base: dict, data) -> dict:
    """`base` with a few fields replaced by random values, removed, or added."""
    out = dict(base)
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(sorted(out) + ["extra"]))
        if data.draw(st.booleans()):
            out[key] = data.draw(json_values)
        else:
            out.pop(key, None)
    return out


@FUZZ
@given(st.binary(max_size=600))
def test_the_journal_reads_any_bytes(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("j") / "journal.jsonl"
    path.write_bytes(raw)
    read = Journal(path).read()
    assert len(read.rows) + len(read.problems) <= raw.count(b"\n") + 1


@FUZZ
@given(st.data())
def test_the_journal_reads_any_damaged_row(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("j") / "journal.jsonl"
    line = _mutated(REAL_LINE, data)
    path.write_text(json.dumps(line) + "\n" + json.dumps(REAL_LINE) + "\n")
    read = Journal(path).read()
    assert len(read.rows) + len(read.problems) == 2 and read.rows


def _plan_folder(tmp_path_factory, content: bytes) -> RunDir:
    folder = tmp_path_factory.mktemp("p") / "run"
    folder.mkdir()
    (folder / "plan.json").write_bytes(content)
    return RunDir(folder)


@FUZZ
@given(st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode())))
def test_the_plan_reader_takes_any_bytes_or_json(tmp_path_factory, content):
    run = _plan_folder(tmp_path_factory, content)
    try:
        runner.load(run)
    except UsageError as err:
        assert "plan.json" in str(err)


@FUZZ
@given(st.data())
def test_the_plan_reader_takes_any_damaged_plan(tmp_path_factory, data):
    plan = _mutated(REAL_PLAN, data)
    cases = plan.get("cases")
    if data.draw(st.booleans()) and isinstance(cases, list) and cases and isinstance(cases[0], dict):
        plan["cases"] = [_mutated(plan["cases"][0], data), *plan["cases"][1:]]
    run = _plan_folder(tmp_path_factory, json.dumps(plan).encode())
    try:
        runner.load(run)
    except UsageError as err:
        assert "plan.json" in str(err)


@FUZZ
@given(st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode)), st.sampled_from([".toml", ".yaml"]))
def test_the_grid_reader_takes_any_bytes(tmp_path_factory, content, suffix):
    path = tmp_path_factory.mktemp("g") / f"grid{suffix}"
    path.write_bytes(content)
    try:
        grids.resolve(str(path))
    except UsageError:
        pass


@FUZZ
@given(st.dictionaries(st.sampled_from(["name", "settings", "defaults", "block", "description", "x"]),
                       json_values, max_size=4))
def test_the_grid_parser_takes_any_table(data):
    try:
        grids.parse(data, "fuzz")
    except UsageError:
        pass


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_commands_on_a_damaged_run_exit_0_or_2(tmp_path_factory, data):
    """The whole command: `report` of a run whose plan or journal is damaged."""
    tmp = tmp_path_factory.mktemp("cmd")
    shutil.copytree(LEGACY, tmp / "r")
    (tmp / "r" / "results.parquet").unlink()
    if data.draw(st.booleans()):
        (tmp / "r" / "plan.json").write_text(json.dumps(_mutated(REAL_PLAN, data)))
    else:
        lines = (tmp / "r" / "journal.jsonl").read_text().splitlines()
        lines[0] = json.dumps(_mutated(REAL_LINE, data))
        (tmp / "r" / "journal.jsonl").write_text("\n".join(lines) + "\n")
    res = suite_in_process("report", "r", "--results-dir", str(tmp), "--reports-dir", str(tmp / "rep"), cwd=tmp)
    assert res.returncode in (0, 2), res.stderr
    assert "Traceback" not in res.stderr
    if res.returncode == 2:
        assert not Path(tmp / "rep").exists()
