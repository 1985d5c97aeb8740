"""The typed values the stages hand each other: Row, RunDir, Settings, Device, mode-aware theory, traits."""

from __future__ import annotations

import dataclasses
import json

import pytest

import variants
from suite import cli
from suite.errors import UsageError
from suite.machine import device as devices
from suite.plan.case import Case, theory_of
from suite.plan.settings import Settings
from suite.run.measurement.counting import count_flops
from suite.store.journal import Journal
from suite.store.row import COLUMNS, PROCESS, Row, aggregate
from suite.store.rundir import RunDir, baseline_path

CASE = Case("full", "sdpa", "cpu", "float32", "fwd", 1, 64, 2, 2, 8, False)


def test_a_row_round_trips_through_its_journal_line_and_every_field_has_a_column(tmp_path):
    row = Row(CASE, flops=10, setup={"mask_s": 0.1}, pid=7, replicate=1).with_samples([3.0, 1.0, 2.0])
    assert row.time_s == 2.0 and row.time_iqr_s > 0
    journal = Journal(tmp_path / "j.jsonl")
    journal.append(row)
    assert journal.read().rows == [row]
    per_process = {f.name for f in dataclasses.fields(Row) if f.metadata == PROCESS}
    optional = {"kv_len", "valid_fraction"}  # a case's key holds them only where they are set
    assert set(row.to_json()) - per_process == set(COLUMNS) - optional
    shaped = Row(dataclasses.replace(CASE, kv_len=128, valid_fraction=0.5)).with_samples([1.0])
    journal.append(shaped)
    assert journal.read().rows == [row, shaped]
    assert set(shaped.to_json()) - per_process == set(COLUMNS)


def test_replicates_that_shared_a_process_count_as_one_process():
    """Hole 4: fewer Ray actors than replicates put two replicates in one process."""
    reps = [
        Row(CASE, pid=pid, replicate=r, busy_cores=b).with_samples(times)
        for r, (pid, times, b) in enumerate([(11, [1.0, 1.1], 0.1), (11, [1.2, 1.3], 0.6), (12, [2.0, 2.1], 0.0)])
    ]
    row = aggregate(reps)
    assert row.replicates == 2 and row.replicate_times_s == [1.15, 2.05]
    assert row.busy_cores == 0.6 and len(row.samples) == 6


def test_a_journal_field_this_version_does_not_know_is_reported_never_dropped(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps({**Row(CASE).to_json(), "energy_j": 1.5}) + "\n")
    read = Journal(path).read()
    assert read.rows == [] and "energy_j" in read.problems[0] and "run again" in read.problems[0]


def test_a_case_measured_in_three_processes_is_the_median_of_their_medians():
    reps = [Row(CASE, replicate=r).with_samples(s) for r, s in enumerate([[1.0, 1.0], [2.0, 2.0], [9.0, 9.0]])]
    row = aggregate(reps)
    assert row.time_s == 2.0 and row.replicate_times_s == [1.0, 2.0, 9.0] and len(row.samples) == 6
    assert row.time_min_s == 1.0 and reps[2].time_min_s == 9.0  # the fastest call, over every process
    failed = aggregate([reps[0], dataclasses.replace(reps[1], status="oom", reason="big")])
    assert failed.status == "oom" and failed.reason == "replicate 1: big"


@pytest.mark.parametrize("name", ["..", "../x", "a/b", ".hidden", "", "x" * 129, "a\\b"])
def test_names_that_become_paths_are_refused(tmp_path, name):
    with pytest.raises(UsageError, match="allowed"):
        RunDir.new(tmp_path, name)
    with pytest.raises(UsageError, match="plan.json grid"):
        baseline_path(tmp_path, "abc123", name)


def test_run_id_outside_the_results_folder_exits_2_and_writes_nothing(tmp_path, capsys):
    code = cli.main(["run", "--grid", "smoke", "--run-id", "../escape", "--results-dir", str(tmp_path / "r")])
    assert code == 2 and "--run-id '../escape'" in capsys.readouterr().err
    assert not (tmp_path / "escape").exists() and not (tmp_path / "r").exists()


def test_baseline_save_refuses_a_grid_name_that_would_leave_the_baselines_folder(tmp_path, capsys):
    run = tmp_path / "results" / "r1"
    run.mkdir(parents=True)
    RunDir(run).write_table(__import__("pandas").DataFrame(columns=COLUMNS))
    RunDir(run).write_json(RunDir.PLAN, {"grid": "../../.."})
    RunDir(run).write_json(RunDir.ENV, {"fingerprint_id": "abc"})
    assert cli.main(["baseline", "save", "r1", "--results-dir", str(tmp_path / "results")]) == 2
    assert "plan.json grid '../../..'" in capsys.readouterr().err and run.is_dir()


def test_settings_have_one_set_of_defaults_and_old_plans_read_back():
    assert Settings.from_plan({}) == Settings()
    assert Settings.from_plan({"threads": 2}).threads == 2
    with pytest.raises(UsageError, match="'replicates' = 0"):
        Settings.from_plan({"replicates": 0})


def test_devices_are_one_table_and_an_unknown_one_is_refused_with_the_known():
    assert set(devices.DEVICES) >= {"cpu", "cuda"}
    assert devices.get("cpu").reasons() == []
    with pytest.raises(UsageError, match="allowed: cpu, cuda"):
        devices.get("tpu")
    assert cli.main(["list", "--device", "tpu"]) == 2


def test_theory_is_mode_aware_in_the_registry():
    spec = variants.get("sliding_window")
    fwd = spec.theory(seq_len=1024, mode="fwd")
    assert spec.theory(seq_len=1024, mode="fwd_bwd").flops == 3 * fwd.flops
    decode = variants.get("full").theory(seq_len=1024, num_heads=8, head_dim=64, mode="decode")
    assert decode.flops == 4 * 8 * 1024 * 64 and decode.claimed_exponent_n == 1.0
    with pytest.raises(ValueError, match="mode='bwd'"):
        spec.theory(seq_len=1024, mode="bwd")
    assert theory_of(dataclasses.replace(CASE, mode="fwd_bwd"))["flops"] == 3 * theory_of(CASE)["flops"]


def test_traits_are_data_the_flop_counter_reads():
    assert not variants.get("full").impls["flex"].countable
    flops, note = count_flops(dataclasses.replace(CASE, impl="flex"))
    assert flops is None and "cannot trace flex" in note
    assert count_flops(dataclasses.replace(CASE, impl="dense"))[0] > 0
    assert variants.get("sliding_window").impls["sdpa"].work == "all_pairs"
    assert variants.get("sliding_window").impls["native"].work == "algorithm"
    with pytest.raises(ValueError, match="work='most'"):
        dataclasses.replace(variants.get("full").impls["dense"], work="most")


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_the_counter_counts_in_place_gemms_so_linear_attention_counts_its_claim(causal):
    """linear/native accumulates K′ᵀV by baddbmm_, which FlopCounterMode left at 0 (a work ratio of
    0.51, causal 1.51): counted, the products are the claim's 4·B·H·n·d², and causal adds the masked
    chunks' work, at most as much again (variants.native.linearized.masked_rows)."""
    case = dataclasses.replace(
        CASE, variant="linear", impl="native", seq_len=1024, num_heads=8, num_kv_heads=8, head_dim=64, causal=causal
    )
    flops, note = count_flops(case)
    claim = theory_of(case)["flops"]
    assert note == "counted on meta tensors"
    assert (1.0 <= flops / claim <= 1.1) if not causal else (1.75 <= flops / claim <= 2.1), flops / claim


def test_a_grid_named_like_a_path_is_refused_before_anything_runs():
    from suite.plan import grid as grids

    with pytest.raises(grids.ConfigError, match="field 'name' = '../../..'"):
        grids.parse({"name": "../../..", "block": [{"variant": ["full"]}]}, "g.toml")
