"""Results written by the version before the typed stages still load, report, compare, merge, save
as a baseline and export (tests/fixtures/legacy: recorded by commit 7290207)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from suite import cli
from suite.analyse import exponents, fits
from suite.store.rundir import RunDir

LEGACY = Path(__file__).parent / "fixtures" / "legacy"


@pytest.fixture
def results(tmp_path) -> Path:
    out = tmp_path / "results"
    for name in ("legacy-a", "legacy-b", "legacy-c"):
        shutil.copytree(LEGACY / name, out / name)
    return out


def test_every_legacy_journal_line_reads_as_a_row():
    for name in ("legacy-a", "legacy-b", "legacy-c"):
        read = RunDir(LEGACY / name).journal.read()
        assert read.problems == [] and len(read.rows) >= 12


@pytest.mark.slow  # the whole report, figures and bootstraps
def test_legacy_report_gives_the_verdicts_that_version_printed(results, tmp_path, capsys, monkeypatch):
    """Fitted to the medians, as that version fitted, by its rule (the power law's interval), the
    figures are the ones it printed; fitted to the fastest calls (read from its samples), as now, the
    figures move and its rule's verdicts stay. The cost model's verdicts (no caches in so old a run:
    no cache steps) refute the window run through a dense mask, as the power law could not, and
    confirm nothing on 5 lengths: too few to look for a higher term."""
    old = (LEGACY / "old-summary.txt").read_text().splitlines()
    assert cli.main(["report", "legacy-a", "--results-dir", str(results), "--reports-dir", str(tmp_path / "r")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in printed[1:5]] == ["inconclusive", "inconclusive", "inconclusive", "refuted"]
    assert "5 lengths leave 1 degree of freedom to look for a higher term" in "\n".join(printed)
    assert (tmp_path / "r" / "legacy-a" / "index.html").is_file()
    page = (tmp_path / "r" / "legacy-a" / "index.html").read_text()  # no bandwidth probe, no bytes: blank, not a crash
    assert "not measured in this run (a run before the bandwidth probe)" in page and 'id="roofline"' not in page
    monkeypatch.setattr(exponents, "RULE", "power")
    assert cli.main(["report", "legacy-a", "--results-dir", str(results), "--reports-dir", str(tmp_path / "p")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in printed[1:5]] == [line.split()[-1] for line in old[1:5]]
    assert printed[1:5] != old[1:5]
    monkeypatch.setitem(exponents.METRICS, "time", "time_s")
    monkeypatch.setattr(fits, "FLOOR_LEVEL", 1.0)  # and every fitted floor taken, as then
    assert cli.main(["report", "legacy-a", "--results-dir", str(results), "--reports-dir", str(tmp_path / "m")]) == 0
    assert capsys.readouterr().out.splitlines()[:5] == old


def test_legacy_shards_merge_and_compare_with_the_whole_run(results, tmp_path):
    assert (
        cli.main(["merge", "legacy-b", "legacy-c", "--run-id", "m", "--results-dir", str(results), "--no-report"]) == 0
    )
    merged, whole = RunDir(results / "m").read_table(), RunDir(results / "legacy-a").read_table()
    assert list(merged["case_id"]) == list(whole["case_id"])
    out = tmp_path / "c.json"
    assert cli.main(["compare", "legacy-a", "m", "--results-dir", str(results), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["counts"] == {"unchanged": 23, "skipped": 1}


def test_legacy_run_saves_as_baseline_and_exports(results, tmp_path):
    assert cli.main(["baseline", "save", "legacy-a", "--results-dir", str(results)]) == 0
    assert cli.main(["compare", "baseline", "legacy-a", "--results-dir", str(results)]) == 0
    for fmt in ("pytest-benchmark", "github-action-benchmark"):
        out = tmp_path / f"{fmt}.json"
        assert cli.main(["export", "legacy-a", "--format", fmt, "-o", str(out), "--results-dir", str(results)]) == 0
        assert "full[sdpa-cpu-float32-fwd-n1024" in out.read_text()


def test_legacy_tables_gain_the_trait_columns_from_the_built_in_names():
    frame = RunDir(LEGACY / "legacy-a").read_table()
    traits = dict(zip(frame["impl"], zip(frame["impl_work"], frame["impl_library"])))
    assert traits["native"][0] == "algorithm" and not isinstance(traits["native"][1], str)
    assert traits["sdpa"][1] == "torch scaled_dot_product_attention"


def test_merge_refuses_shards_of_different_commits_and_reports_unreadable_journal_lines(results, capsys):
    env = json.loads((results / "legacy-c" / "env.json").read_text())
    (results / "legacy-c" / "env.json").write_text(json.dumps({**env, "git_commit": "0" * 40}))
    assert (
        cli.main(["merge", "legacy-b", "legacy-c", "--run-id", "m", "--results-dir", str(results), "--no-report"]) == 2
    )
    assert "by commit 0000" in capsys.readouterr().err and not (results / "m").exists()
    (results / "legacy-c" / "env.json").write_text(json.dumps(env))
    with open(results / "legacy-c" / "journal.jsonl", "a") as journal:
        journal.write('{"case_id": "x", "status": "ok", "variant": \n')
    assert (
        cli.main(["merge", "legacy-b", "legacy-c", "--run-id", "m", "--results-dir", str(results), "--no-report"]) == 0
    )
    assert "legacy-c: journal.jsonl line 24 is" in capsys.readouterr().err
