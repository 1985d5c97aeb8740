"""benchmarks/slowed.py, the injected regression `suite ab` is held to on a GPU: it slows only the side whose
folder holds `slowdown.py`, every timed implementation of one variant but its dense reference, keeps each
output as it was, and calibrates once per case and process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

PROBE = """
import json, torch, variants, slowed
spec = variants.get("strided")
q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
out = {"wrapped": sorted(n for n, i in spec.impls.items() if i.prepare.__qualname__.startswith("_wrap"))}
first = spec.impls["sdpa"].prepare(q, k, v, causal=False, params={"stride": 8})
again = spec.impls["sdpa"].prepare(q, k, v, causal=False, params={"stride": 8})
plain = variants.get("strided").impls["dense"].prepare(q, k, v, causal=False, params={"stride": 8})
out["same_output"] = bool(torch.allclose(first(), plain(), atol=1e-5))
out["notes"] = [first.notes.get("slowed"), again.notes.get("slowed")]
out["calibrated"] = len(slowed._CALIBRATED)
print(json.dumps(out))
"""


def _probe(cwd) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT)])}
    res = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[-1])


@pytest.mark.slow  # two fresh interpreters
def test_only_the_side_with_slowdown_py_is_slowed_and_its_outputs_are_unchanged(tmp_path):
    plain, slow = tmp_path / "a", tmp_path / "b"
    plain.mkdir(), slow.mkdir()
    (slow / "slowdown.py").write_text('VARIANT = "strided"\nFACTOR = 1.5\n')
    got = _probe(plain)
    assert got["wrapped"] == [] and got["notes"] == [None, None] and got["same_output"]
    got = _probe(slow)
    assert "dense" not in got["wrapped"] and {"native", "sdpa"} <= set(got["wrapped"])
    assert got["same_output"] and got["calibrated"] == 1  # the second prepare reused the first's pause
    assert got["notes"][0] == got["notes"][1] and got["notes"][0].startswith("× 1.5 asked, × ")
