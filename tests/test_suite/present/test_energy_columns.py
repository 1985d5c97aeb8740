"""Energy per call and per token: in the efficiency tables of the report and the card where the GPU's
energy was measured, and no empty column where it was not (a CPU run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import stored_table, table

from suite.analyse.tables import efficiency
from suite.present import card, report
from suite.store.row import COLUMNS
from suite.store.rundir import RunDir


def _run(root: Path, energy: bool) -> RunDir:
    """A run folder of the synthetic table; with `energy`, each ok row's GPU energy per call 2 mJ."""
    path = root / ("gpu" if energy else "cpu")
    path.mkdir(parents=True)
    frame = stored_table()
    if energy:
        frame["gpu_energy_per_call_j"] = [2e-3 if status == "ok" else None for status in frame["status"]]
    RunDir(path).write_table(frame[COLUMNS])
    (path / "env.json").write_text(json.dumps({"torch": "2.13.0", "fingerprint_id": "x", "devices": ["cpu"]}))
    (path / "plan.json").write_text(json.dumps({"grid": "synthetic", "settings": {"threads": 1}}))
    (path / "probe.json").write_text(json.dumps({"cpu": {"float32": {"flops_per_s": 1e11, "threads": 1}}}))
    return RunDir(path)


def test_energy_per_token_is_per_call_over_the_tokens_of_a_call():
    frame = table().assign(gpu_energy_per_call_j=1e-3, batch=2)
    frame.loc[0, "mode"] = "decode"
    eff = efficiency(frame, None).set_index(["mode", "seq_len", "variant", "impl"])
    assert eff.loc[("fwd", 1024, "full", "sdpa"), "energy_per_token_j"] == pytest.approx(1e-3 / (2 * 1024))
    assert eff.loc[("decode", 256, "full", "sdpa"), "energy_per_token_j"] == pytest.approx(
        1e-3 / 2
    )  # a token a sequence


def test_the_card_shows_energy_only_where_it_was_measured(tmp_path):
    measured, cpu = card.card(_run(tmp_path, True)), card.card(_run(tmp_path, False))
    header = next(
        line for line in measured.splitlines() if line.startswith("| variant | implementation | device | mode")
    )
    assert header.rstrip(" |").endswith("energy / call | energy / token")
    assert "| 2 mJ | 122 nJ |" in measured  # 2 mJ over B·n = 16384 tokens at the largest n
    assert "energy" not in cpu


@pytest.mark.slow  # two reports' figures drawn
def test_the_report_shows_energy_only_where_it_was_measured(tmp_path):
    measured = report.build(_run(tmp_path, True), tmp_path / "reports" / "gpu")[0].read_text()
    cpu = report.build(_run(tmp_path, False), tmp_path / "reports" / "cpu")[0].read_text()
    assert "<th>energy / call (GPU)</th><th>energy / token</th>" in measured and ">2 mJ</td>" in measured
    assert "energy / call" not in cpu and "Energy / call" not in cpu


def test_joules_read_in_their_unit():
    assert [report.fmt_joules(x) for x in (2.5e3, 1.5, 2e-3, 2.44e-7, 3e-10, None)] == [
        "2.5 kJ",
        "1.5 J",
        "2 mJ",
        "244 nJ",
        "0.3 nJ",
        "",
    ]
