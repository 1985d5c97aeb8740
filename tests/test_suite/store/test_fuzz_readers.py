"""Random bytes and random JSON into the journal, plan and grid readers: a clean read or a UsageError
(exit 2 naming the file), never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import LEGACY, suite_in_process
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from suite.errors import UsageError
from suite.plan import grid as grids
from suite.plan.case import Case
from suite.run import runner
from suite.store.journal import Journal
from suite.store.rundir import RunDir

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=5)),
    max_leaves=20,
)
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
@given(
    st.dictionaries(
        st.sampled_from(["name", "settings", "defaults", "block", "description", "x"]), json_values, max_size=4
    )
)
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


MERGE_FIELDS = ["cases", "shard", "grid_index", "ladders", "grid_cases", "grid_id", "grid", "settings"]


def _shards(tmp: Path) -> None:
    """Two shards of the legacy grid, three cases each, with their journal rows and tables (a merge that works)."""
    lines = (LEGACY / "journal.jsonl").read_text().splitlines()
    for k, keys in enumerate((REAL_PLAN["cases"][:3], REAL_PLAN["cases"][3:6]), 1):
        folder = tmp / f"s{k}"
        folder.mkdir()
        ids = {Case.from_key(key).case_id for key in keys}
        (folder / "plan.json").write_text(json.dumps({**REAL_PLAN, "cases": keys, "shard": {"k": k, "n": 2}}))
        shutil.copy(LEGACY / "env.json", folder)
        held = [line for line in lines if json.loads(line)["case_id"] in ids]
        (folder / "journal.jsonl").write_text("".join(f"{line}\n" for line in held))
        RunDir.resolve(folder.name, tmp)


@pytest.fixture(scope="module")
def shard_pair(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("shards")
    _shards(tmp)
    return tmp


def _json(path: Path):
    try:
        return json.loads(path.read_bytes())
    except ValueError:
        return None


def _damage(folder: Path, data) -> None:
    """One of the shard's files replaced by random bytes or JSON, or by itself with fields changed; or garbage
    at the end of its journal."""
    name = data.draw(st.sampled_from(["plan.json", "env.json", "journal.jsonl", "ladders.json", "bandwidth.json"]))
    path, how = folder / name, data.draw(st.sampled_from(["bytes", "json", "fields"]))
    if name == "journal.jsonl":
        junk = (
            data.draw(st.one_of(st.binary(max_size=120), json_values.map(lambda v: json.dumps(v).encode())))
            if data.draw(st.booleans())
            else json.dumps(_mutated(REAL_LINE, data)).encode()
        )
        path.write_bytes(path.read_bytes() + junk + b"\n")
    elif how == "bytes":
        path.write_bytes(data.draw(st.binary(max_size=200)))
    elif how == "json" or not path.is_file() or not isinstance(_json(path), dict):
        path.write_text(json.dumps(data.draw(json_values)))
    else:
        base = _json(path)
        for _ in range(data.draw(st.integers(1, 3))):
            key = data.draw(st.sampled_from(MERGE_FIELDS if name == "plan.json" else sorted(base) + ["extra"]))
            base[key] = data.draw(st.one_of(json_values, st.just(base.get(key)), st.just({"k": 1, "n": 2})))
        path.write_text(json.dumps(base))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], phases=[Phase.generate]
)  # NB: not shrunk: each example is a whole merge, and a failure reads as drawn
@given(st.data())
def test_merge_of_damaged_shards_works_or_exits_2_and_leaves_no_run(shard_pair, tmp_path_factory, data):
    """Shards whose plan, environment, ladders or bandwidth are random bytes, random JSON or fields changed (odd
    shard specs, cases, indexes), or whose journal ends in garbage: merged, or refused with nothing left."""
    tmp = tmp_path_factory.mktemp("merge")
    for name in ("s1", "s2"):
        shutil.copytree(shard_pair / name, tmp / name)
    for _ in range(data.draw(st.integers(1, 2))):
        _damage(tmp / data.draw(st.sampled_from(["s1", "s2"])), data)
    res = suite_in_process("merge", "s1", "s2", "--run-id", "m", "--results-dir", str(tmp), "--no-report", cwd=tmp)
    assert res.returncode in (0, 2), res.stderr
    assert "Traceback" not in res.stderr
    assert not list(tmp.glob(".m.*")), "no folder of the merge is left beside its run"
    if res.returncode == 2:
        assert not (tmp / "m").exists()
    else:
        assert {"plan.json", "env.json", "journal.jsonl", "results.parquet"} <= {p.name for p in (tmp / "m").iterdir()}
