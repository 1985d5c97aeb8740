"""An output the user named that cannot be written (a file where a folder goes, a folder where a file
goes) is refused before any work: exit 2 naming the field, and nothing made."""

from __future__ import annotations

import pytest
from helpers import ROOT, suite_in_process

RUN = ROOT / "docs" / "runs" / "cpu-smoke"  # a finished run's folder (read only here)


@pytest.mark.parametrize(
    "args, field",
    [
        (("run", "--grid", "smoke", "--reports-dir", "{file}"), "--reports-dir"),
        (("report", "{run}", "--reports-dir", "{file}/sub"), "--reports-dir"),
        (("export", "{run}", "--format", "pytest-benchmark", "-o", "{file}/x.json"), "--output"),
        (("export", "{run}", "--format", "pytest-benchmark", "-o", "{folder}"), "--output"),
        (("card", "{run}", "-o", "{file}/c.md"), "--output"),
        (("card", "{run}", "--figure", "{folder}"), "--figure"),
        (("card", "{run}", "--into", "{file}"), "--into"),
        (("merge", "{run}", "--run-id", "m", "--reports-dir", "{file}"), "--reports-dir"),
    ],
)
def test_an_output_that_cannot_be_written_exits_2_before_any_work(tmp_path, args, field):
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    given = [a.format(file=tmp_path / "file", folder=tmp_path / "folder", run=RUN) for a in args]
    res = suite_in_process(*given, "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert res.returncode == 2 and f"error: {field}" in res.stderr, res.stderr
    assert "allowed:" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]  # no run folder, no report
