"""The compile caches that travel between processes, leases and CI jobs: `--compile-cache DIR` (checked
like any option, never inside the results folder, reaching the workers), and the GPU session script's
`pack` and `unpack` steps run here on a fake $OUT."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT, suite, suite_in_process, write_grid

from suite.errors import UsageError
from suite.machine import compile_cache

SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"


@pytest.mark.parametrize("value", ["results", "results/cache", "results/../results/x", "", "a-file"])
@pytest.mark.parametrize("command", [["run", "--dry-run"], ["ab", "HEAD", "HEAD"]])
def test_a_compile_cache_in_the_results_folder_or_not_a_folder_exits_2_naming_the_option(tmp_path, command, value):
    (tmp_path / "a-file").write_text("not a folder")
    res = suite_in_process(*command, "--compile-cache", value, cwd=tmp_path)
    assert res.returncode == 2 and "--compile-cache" in res.stderr, res.stderr
    assert not (tmp_path / "results" / "cache").exists()


def test_a_compile_cache_outside_the_results_folder_is_made_and_both_variables_name_it(tmp_path, monkeypatch):
    for name in compile_cache.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    folder = compile_cache.use(str(tmp_path / "cache"), tmp_path / "results")
    assert folder.is_dir() and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(folder / "inductor")
    assert os.environ["TRITON_CACHE_DIR"] == str(folder / "triton")
    assert suite_in_process("run", "--dry-run", "--compile-cache", "cache", cwd=tmp_path).returncode == 0
    with pytest.raises(UsageError, match="--results-dir"):
        compile_cache.check(str(tmp_path / "out" / "c"), tmp_path / "out")


def test_the_option_is_seen_on_a_command_line_however_it_is_spelled():
    assert compile_cache.named(["--grid", "pr", "--compile-cache", "c"])
    assert compile_cache.named(["--compile-cache=c"]) and compile_cache.named(["--compile", "c"])
    assert not compile_cache.named(["--grid", "pr", "--run-id", "c", "--"])


@pytest.mark.slow  # a run's worker started
def test_the_workers_of_a_run_see_the_compile_cache(tmp_path):
    grid = write_grid(tmp_path, '[[block]]\nvariant = ["env_probe"]\nimpl = ["native"]\n')
    res = suite(
        "run", "--grid", str(grid), "--plugin", "env_variant", "--run-id", "e", "--compile-cache", "cc", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    reason = pd.read_parquet(tmp_path / "results" / "e" / "results.parquet")["reason"].iloc[0]
    assert str(tmp_path / "cc" / "inductor") in reason and str(tmp_path / "cc" / "triton") in reason, reason


# ------------------------------------------------------------------------------ gpu_session.sh
def _session(cwd: Path, *steps: str, **env) -> subprocess.CompletedProcess:
    out = cwd / "out"
    return subprocess.run(
        ["bash", str(SCRIPT), *steps],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "OUT": str(out), **env},
    )


def _entry(path: Path, size: int, age_s: float = 0.0) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "kernel.bin").write_bytes(os.urandom(size))  # random: the tarball is as large as its files
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))


def test_pack_returns_the_caches_and_unpack_puts_them_back_where_the_variables_point(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    _entry(first / ".compile-cache" / "triton" / "k1", 1000)
    _entry(first / ".compile-cache" / "inductor" / "fxgraph" / "ab", 1000)
    res = _session(first, "pack")
    assert res.returncode == 0, res.stderr
    with tarfile.open(first / "out" / "compile-cache.tgz") as tgz:
        assert {"triton/k1/kernel.bin", "inductor/fxgraph/ab/kernel.bin"} <= set(tgz.getnames())
    (second / ".compile-cache").mkdir(parents=True)  # what the next call's carry brings
    (second / ".compile-cache" / "compile-cache.tgz").write_bytes((first / "out" / "compile-cache.tgz").read_bytes())
    res = _session(second, "unpack")
    assert res.returncode == 0 and "carried in" in res.stdout, res.stdout + res.stderr
    assert (second / ".compile-cache" / "triton" / "k1" / "kernel.bin").read_bytes() == (
        first / ".compile-cache" / "triton" / "k1" / "kernel.bin"
    ).read_bytes()
    shown = subprocess.run(
        ["bash", "-c", f"source {SCRIPT}; echo $TORCHINDUCTOR_CACHE_DIR $TRITON_CACHE_DIR"],
        cwd=second,
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(second / "out")},
    )
    assert shown.stdout.split() == [
        str(second / ".compile-cache" / "inductor"),
        str(second / ".compile-cache" / "triton"),
    ]


def test_pack_prunes_the_oldest_entries_to_fit_and_returns_nothing_that_cannot(tmp_path):
    cache = tmp_path / ".compile-cache"
    for age, name in enumerate(["new", "mid", "old"]):
        _entry(cache / "triton" / name, 100_000, age_s=3600 * age)
    res = _session(tmp_path, "pack", COMPILE_CACHE_MAX_BYTES="250000")
    assert res.returncode == 0 and "pruning" in res.stdout, res.stdout + res.stderr
    assert (tmp_path / "out" / "compile-cache.tgz").stat().st_size <= 250_000
    assert sorted(p.name for p in (cache / "triton").iterdir()) == ["mid", "new"]
    res = _session(tmp_path, "pack", COMPILE_CACHE_MAX_BYTES="100")  # not even the empty folders fit
    assert "not returned" in res.stdout and not (tmp_path / "out" / "compile-cache.tgz").exists()


def test_a_cache_larger_than_a_returned_file_travels_in_parts_and_the_other_files_in_one_bundle(tmp_path):
    """A file back from a lease holds 16 MiB and 8 files come back: an H200's pr cache packed 22 MB (stop 62)."""
    first, second = tmp_path / "first", tmp_path / "second"
    for name in ("k1", "k2", "k3"):
        _entry(first / ".compile-cache" / "triton" / name, 100_000)
    (first / "out" / "profile").mkdir(parents=True)
    for name in ("checks.txt", "ab-aa.log", "profile/triton.json"):
        (first / "out" / name).write_text(name)
    res = _session(first, "pack", COMPILE_CACHE_PART_BYTES="120000")
    assert res.returncode == 0, res.stdout + res.stderr
    back = sorted(p.name for p in (first / "out").iterdir())
    assert back == [
        "compile-cache.tgz.0",
        "compile-cache.tgz.1",
        "compile-cache.tgz.2",
        "logs.tgz",
        "results.tgz",
        "steps.txt",
    ], back
    assert all((first / "out" / f"compile-cache.tgz.{i}").stat().st_size <= 120_000 for i in range(3))
    with tarfile.open(first / "out" / "logs.tgz") as tgz:
        assert {"./checks.txt", "./ab-aa.log", "./profile/triton.json"} == set(tgz.getnames()) - {"."}
    (second / ".compile-cache").mkdir(parents=True)
    for i in range(3):
        name = f"compile-cache.tgz.{i}"
        (second / ".compile-cache" / name).write_bytes((first / "out" / name).read_bytes())
    res = _session(second, "unpack")
    assert "carried in (3 parts)" in res.stdout, res.stdout + res.stderr
    for name in ("k1", "k2", "k3"):
        assert (second / ".compile-cache" / "triton" / name / "kernel.bin").read_bytes() == (
            first / ".compile-cache" / "triton" / name / "kernel.bin"
        ).read_bytes()


def test_unpack_without_a_carried_cache_says_it_starts_cold(tmp_path):
    res = _session(tmp_path, "unpack")
    assert res.returncode == 0 and "none carried in (cold)" in res.stdout


# ------------------------------------------------------------------------------ the GPU workflow
WORKFLOW = ROOT / ".github" / "workflows" / "gpu.yml"


def _key(step: dict, tmp_path: Path) -> str:
    """The key step's shell run here, beside a fake nvidia-smi: the key it writes to $GITHUB_OUTPUT."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    output = tmp_path / "github_output"
    output.write_text("")
    script = step["run"].replace(". .venv/bin/activate", "")  # this interpreter stands for the job's venv
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    subprocess.run(
        ["bash", "-e", "-c", script], check=True, env={**os.environ, "PATH": path, "GITHUB_OUTPUT": str(output)}
    )
    return output.read_text().strip().removeprefix("key=")


@pytest.mark.parametrize("job, grid", [("pr-compare", "pr"), ("nightly", "full")])
def test_each_gpu_job_restores_and_keeps_the_compile_caches_keyed_by_torch_gpu_and_grid(tmp_path, job, grid):
    import importlib.metadata

    import yaml

    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]
    uses = [step.get("uses", "") for step in steps]
    restore, save = uses.index("actions/cache/restore@v4"), uses.index("actions/cache/save@v4")
    key_step = next(step for step in steps if step.get("id") == "compile-key")
    assert steps.index(key_step) < restore < save and steps[save].get("if") == "always()"
    for step in (steps[restore], steps[save]):
        assert step["with"]["path"] == ".compile-cache"
        assert step["with"]["key"] == "${{ steps.compile-key.outputs.key }}-${{ github.run_id }}"
    assert steps[restore]["with"]["restore-keys"] == "${{ steps.compile-key.outputs.key }}-"
    runs = [step.get("run", "") for step in steps[restore:save]]
    suite_calls = [
        line
        for run in runs
        for line in run.replace("\\\n", " ").splitlines()
        if "python -m suite run" in line or "python -m suite ab" in line
    ]
    assert suite_calls and all("--compile-cache .compile-cache" in line for line in suite_calls)
    torch = importlib.metadata.version("torch")
    assert _key(key_step, tmp_path) == f"suite-compile-{torch}-NVIDIA-H100-80GB-HBM3-{grid}"


def test_the_session_exits_0_when_its_steps_pass_and_1_naming_a_failed_one(tmp_path):
    """Its exit status is its steps' (it once ended on a test for /tmp/site: 1 wherever no wheels were carried);
    a failed step does not stop the ones after it."""
    assert _session(tmp_path, "pack").returncode == 0
    res = _session(tmp_path, "nonsense", "pack")
    assert res.returncode == 1 and "failed: nonsense" in res.stdout and (tmp_path / "out" / "results.tgz").exists()
