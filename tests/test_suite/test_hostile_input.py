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


@pytest.mark.parametrize(
    "block, field",
    [('variant = [{a=1}]\nimpl = ["sdpa"]', "field 'variant'"), ('variant = ["full"]\nimpl = [{a=1}]', "field 'impl'")],
)
def test_a_table_where_a_name_goes_in_a_grid_is_named(tmp_path, block, field):
    grid = write_grid(tmp_path, f"[[block]]\n{block}\nseq_len = [16]\n")
    refused(suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path), field, "allowed:")


def test_a_shard_count_past_the_limit_is_named(tmp_path):
    grid = write_grid(tmp_path, '[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\nseq_len = [16]\n')
    for n in ("99999999999999999999", "100000000"):
        refused(
            suite_in_process("run", "--grid", str(grid), "--dry-run", "--shard", f"1/{n}", cwd=tmp_path),
            f"N = {n}",
            "allowed: 1..",
        )


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
    err = refused(
        suite_in_process(
            "run", "--resume", "bad", "--results-dir", str(tmp_path / "results"), "--no-report", cwd=tmp_path
        ),
        "field 'threads' = 999 (allowed: 1..256)",
    )
    assert "ladders" not in err


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda p: p["cases"][3].update(dtype="float8"), "cases[3]: field 'dtype' = 'float8' (allowed: float16"),
        (lambda p: p["cases"][0].update(seq_len=10**30), "field 'seq_len' = 1000000000000000000000000000000"),
        (
            lambda p: p["cases"][0].update(impl="*"),
            "field 'impl' = '*' (allowed: one of the variant's implementations)",
        ),
        (
            lambda p: (
                p["cases"][0]["params"].update(window=10**400)
                if p["cases"][0]["variant"] == "sliding_window"
                else p["cases"][0].update(variant="sliding_window", impl="native", params={"window": 10**400})
            ),
            "cases[0]: field 'params' = \"{'window': 1000",
        ),
        (lambda p: p["cases"][0].update(valid_fraction=10**400), "cases[0]: case field valid_fraction = 1000"),
        (
            lambda p: p["cases"][0].update(mode="decode", causal=True, variant="full", impl="sdpa"),
            "field 'causal' = True (allowed: false with mode decode)",
        ),
        (lambda p: p["ladders"][1].update(min=7, max=8), "ladders[1]: field 'seq_len.max' = 8 (allowed: at least 16x"),
        (lambda p: p["ladders"][0]["template"].update(mode="back"), "ladders[0].template: field 'mode' = 'back'"),
    ],
)
def test_a_resumed_plans_edited_case_is_named_before_any_work(tmp_path, edit, says):
    """A hand-edited plan.json is judged by the grid's own rules: before, a bad dtype or mode became
    error rows (exit 0) and a length past int64 broke the table's write after the run."""
    run = tmp_path / "results" / "edited"
    shutil.copytree(ROOT / "docs" / "runs" / "cpu-full", run)
    plan = json.loads((run / RunDir.PLAN).read_text())
    edit(plan)
    (run / RunDir.PLAN).write_text(json.dumps(plan))
    before = {f.name: f.read_bytes() for f in run.iterdir()}
    refused(
        suite_in_process(
            "run", "--resume", "edited", "--results-dir", str(tmp_path / "results"), "--no-report", cwd=tmp_path
        ),
        "plan.json",
        says,
    )
    assert {f.name: f.read_bytes() for f in run.iterdir()} == before


def test_a_grid_past_the_sizes_and_case_count_is_named(tmp_path):
    grid = write_grid(tmp_path, '[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\nseq_len = [99999999999]\n')
    refused(
        suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path),
        "field 'seq_len' = 99999999999 (allowed: integers from 1 to 2147483647)",
    )
    lengths = ", ".join(str(16 * k) for k in range(1, 400))
    grid = write_grid(
        tmp_path, f'[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\nseq_len = [{lengths}]\nnum_heads = [{lengths}]\n'
    )
    refused(suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path), "at most 100000 cases in a grid")


@pytest.mark.parametrize(
    "column, value, says",
    [
        ("time_s", "fast", "column time_s holds 'fast' (allowed: numbers)"),
        ("seq_len", True, "column seq_len holds True (allowed: numbers)"),
        ("variant", 7, "column variant holds 7 (allowed: text)"),
        ("status", "great", "column status holds 'great' (allowed: ok, skipped"),
    ],
)
def test_a_tables_column_of_the_wrong_kind_is_named_by_every_reader(tmp_path, column, value, says):
    import pandas as pd

    run = tmp_path / "results" / "edited"
    shutil.copytree(ROOT / "docs" / "runs" / "cpu-smoke", run)
    frame = pd.read_parquet(run / RunDir.PARQUET)
    frame[column] = [value] * len(frame)  # NB: Parquet holds one kind a column
    frame.to_parquet(run / RunDir.PARQUET)
    for command in (
        ["card", "edited"],
        ["report", "edited"],
        ["compare", "edited", "edited"],
        ["export", "edited", "--format", "pytest-benchmark", "-o", str(tmp_path / "out.json")],
    ):
        refused(
            suite_in_process(*command, "--results-dir", str(tmp_path / "results"), cwd=tmp_path),
            "results.parquet cannot be read",
            says,
        )


@pytest.mark.parametrize("number", ["1" + "0" * 400, "1e400", "NaN"])
def test_a_probe_figure_no_float_holds_is_named(tmp_path, number):
    run = tmp_path / "results" / "edited"
    shutil.copytree(ROOT / "docs" / "runs" / "cpu-smoke", run)
    probe = (run / RunDir.PROBE).read_text()
    (run / RunDir.PROBE).write_text(probe.replace('"flops_per_s": 102015841149.52028', f'"flops_per_s": {number}', 1))
    refused(
        suite_in_process("card", "edited", "--results-dir", str(tmp_path / "results"), cwd=tmp_path),
        "field cpu.float32.flops_per_s holds",
        "not a finite number",
    )


def test_an_empty_grid_file_and_an_empty_name_list_are_named(tmp_path):
    """An empty file planned every variant at its defaults (82 cases); `--device ,` listed for no device."""
    grid = tmp_path / "empty.toml"
    grid.write_text("# nothing yet\n")
    refused(suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path), ": empty (allowed:")
    for command in (["list", "--device", ","], ["run", "--grid", "smoke", "--variant", ",", "--dry-run"]):
        refused(suite_in_process(*command, cwd=tmp_path), "',' names nothing")


def test_gqas_groups_give_its_kv_heads_and_a_different_axis_is_named(tmp_path):
    """params.groups = 4 with H = 8 planned H/4 = 2 KV heads, a case every worker then refused."""
    body = '[[block]]\nvariant = ["gqa"]\nimpl = ["native"]\nnum_heads = [8]\nparams = {groups = [4]}\n'
    res = suite_in_process("run", "--grid", str(write_grid(tmp_path, body)), "--dry-run", cwd=tmp_path)
    assert res.returncode == 0 and "H=8/4" in res.stdout, res.stdout + res.stderr
    grid = write_grid(tmp_path, body + "num_kv_heads = [2]\n", name="u")
    refused(
        suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path),
        "field 'num_kv_heads' = 2 (allowed: params.groups = 4",
    )


def _aliased(levels: int) -> str:
    """A YAML list whose aliases nest 10**levels items in a few lines (a 'billion laughs')."""
    items = ["&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "[" + ", ".join(items) + "]"


@pytest.mark.parametrize(
    "where",
    [
        "description: BOMB\n",
        "defaults: {batch: BOMB}\n",
        "block:\n  - {variant: [sliding_window], impl: [native], params: {window: BOMB}}\n",
    ],
)
def test_a_yaml_grid_of_nested_aliases_is_named_in_a_short_line(tmp_path, where):
    """Its whole repr (or str) ran a dry run out of memory after a minute; the error shows a few items."""
    grid = tmp_path / "bomb.yaml"
    body = "name: bomb\n" + where.replace("BOMB", _aliased(8))
    if "block" not in where:
        body += "block:\n  - {variant: [full], impl: [sdpa]}\n"
    grid.write_text(body)
    says = refused(suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path), "bomb.yaml")
    assert len(says) < 2000, says


def test_a_plan_whose_description_is_not_text_is_named(tmp_path):
    run = tmp_path / "results" / "edited"
    shutil.copytree(ROOT / "docs" / "runs" / "cpu-smoke", run)
    plan = json.loads((run / RunDir.PLAN).read_text())
    (run / RunDir.PLAN).write_text(json.dumps({**plan, "description": ["a", "list"]}))
    refused(
        suite_in_process("card", "edited", "--results-dir", str(tmp_path / "results"), cwd=tmp_path),
        "plan.json",
        "field description holds",
    )
