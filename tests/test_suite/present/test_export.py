"""Exports name each case apart: pytest-benchmark and github-action-benchmark key their series by name."""

from __future__ import annotations

import pytest

from suite.plan import grid as grids
from suite.present import export
from suite.store import table
from suite.store.row import Row


def _frame(cases):
    rows = [Row(case, time_s=1e-3, time_iqr_s=1e-5, time_min_s=1e-3, samples=[1e-3, 1.1e-3], flops=1) for case in cases]
    return table.table(cases, rows)


def test_cross_attention_and_padded_cases_export_under_distinct_names():
    cases = [case for case in grids.resolve("shapes").cases if case.kv_len is not None or case.valid_fraction]
    assert len({(c.kv_len, c.valid_fraction) for c in cases}) > 2, "the preset sweeps kv_len and valid_fraction"
    frame = _frame(cases)
    names = [b["name"] for b in export.pytest_benchmark(frame, {})["benchmarks"]]
    assert len(names) == len(set(names)) == len(cases)
    names = [b["name"] for b in export.github_action_benchmark(frame)]
    assert len(names) == len(set(names)) == len(cases)


@pytest.mark.parametrize("preset", grids.PRESETS)
def test_every_presets_cases_get_distinct_names(preset):
    cases = list(grids.resolve(preset).cases)
    names = [export._name(row) for _, row in _frame(cases).iterrows()]
    assert len(set(names)) == len(cases)


def test_a_case_without_the_optional_fields_keeps_its_name():
    case = grids.resolve("smoke").cases[0]
    name = export._name(_frame([case]).iloc[0])
    assert name.startswith(f"{case.variant}[{case.impl}-{case.device}-{case.dtype}-{case.mode}-n{case.seq_len}-B")
    assert "nk" not in name and "valid" not in name
