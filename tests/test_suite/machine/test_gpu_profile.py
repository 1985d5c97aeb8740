"""benchmarks/gpu_profile.py on the CPU (the script is tried before a lease): a profile that a lease's
limit stopped resumes with the rows it holds kept and the failed ones run again, its file whole after
every row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a subprocess per profile

ROOT = Path(__file__).resolve().parents[3]


def _profile(out: Path, *extra: str) -> list[dict]:
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu_profile.py"),
        str(out),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--only",
        "sliding_window",
        "--modes",
        "fwd",
        "--rep",
        "1",
        "--heads",
        "2",
        *extra,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_a_resumed_profile_keeps_its_rows_and_runs_the_rest_and_the_failed(tmp_path):
    out = tmp_path / "profile.json"
    first = _profile(out, "--n", "64")
    assert [(r["n"], r["impl"]) for r in first] == [(64, "native")] and "median_ms" in first[0]
    failed = dict(first[0], n=128, median_ms=None, error="RuntimeError: stopped")
    out.write_text(json.dumps(first + [failed]))
    rows = _profile(out, "--n", "64,128,256", "--resume")
    assert [r["n"] for r in rows] == [64, 128, 256]
    assert rows[0] == first[0]  # kept as it was, not measured again
    assert all("error" not in r and r["median_ms"] > 0 for r in rows)
    again = _profile(out, "--n", "64")  # without --resume: a new profile
    assert [r["n"] for r in again] == [64] and again[0]["median_ms"] != first[0]["median_ms"]
