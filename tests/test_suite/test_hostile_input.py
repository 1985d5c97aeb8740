"""Hostile input found by an audit of the command line: each exits 2 naming the field (no traceback),
before any work."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers import ROOT, suite_in_process, write_grid
from suite.errors import UsageError
from suite.present import site
from suite.store.journal import Journal
from suite.store.rundir import RunDir

DEEP = "[" * 100000  # JSON nested past Python's stack


def refused(res, *says: str) -> str:
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert all(s in res.stderr for s in says), res.stderr
    return res.stderr


@pytest.mark.parametrize("block, field", [('variant = [{a=1}]\nimpl = ["sdpa"]', "field 'variant'"),
                                          ('variant = ["full"]\nimpl = [{a=1}]', "field 'impl'")])
def test_a_table_where_a_name_goes_in_a_grid_is_named(tmp_path, block, field):
    grid = write_grid(tmp_path, f"[[block]]\n{block}\nseq_len = [16]\n")
    refused(suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path), field, "allowed:")


def test_a_shard_count_past_the_limit_is_named(tmp_path):
    grid = write_grid(tmp_path, '[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\nseq_len = [16]\n')
    for n in ("99999999999999999999", "100000000"):
        refused(suite_in_process("run", "--grid", str(grid), "--dry-run", "--shard", f"1/{n}", cwd=tmp_path),
                f"N = {n}", "allowed: 1..")


def test_json_nested_past_the_stack_is_a_damaged_file_and_a_skipped_journal_line(tmp_path):
    run = tmp_path / "deep"
    shutil.copytree(ROOT / "docs" / "runs" / "cpu-smoke", run)
    (run / RunDir.ENV).write_text(DEEP)
    with pytest.raises(UsageError, match="env.json cannot be read"):
        RunDir(run).env()
    journal = tmp_path / "journal.jsonl"
    journal.write_text(json.dumps({"case_id": "a", "status": "ok"}) + "\n" + DEEP + "\n")
    lines, problems = Journal(journal).lines()
    assert [data["case_id"] for _, data in lines] == ["a"] and "line 2 is" in problems[0]


def test_a_card_folder_whose_name_would_enter_mkdocs_yml_is_refused(tmp_path):
    folder = tmp_path / site.RUNS / "x: y #z"
    shutil.copytree(ROOT / "docs" / "runs" / "cpu-smoke", folder)
    with pytest.raises(UsageError, match="docs/runs folder 'x: y #z'"):
        site.cards(tmp_path)


def test_a_resumed_plans_bad_setting_is_named_as_itself(tmp_path):
    run = tmp_path / "results" / "bad"
    shutil.copytree(ROOT / "docs" / "runs" / "cpu-smoke", run)
    plan = json.loads((run / RunDir.PLAN).read_text())
    plan["settings"]["threads"] = 999
    (run / RunDir.PLAN).write_text(json.dumps(plan))
    err = refused(suite_in_process("run", "--resume", "bad", "--results-dir", str(tmp_path / "results"), "--no-report",
                                   cwd=tmp_path), "field 'threads' = 999 (allowed: 1..256)")
    assert "ladders" not in err
