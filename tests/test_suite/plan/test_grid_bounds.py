"""A grid's planning is bounded before it starts: by the combinations its lists make, repeats included,
and by the sizes whose figures a run's table must hold."""

from __future__ import annotations

import signal
import subprocess

import pytest

from suite.plan import grid as grids
from helpers import suite

AXES = ("batch", "num_heads", "head_dim", "seq_len", "causal", "dtype")
REPEATED = {"batch": "1", "num_heads": "1", "head_dim": "8", "seq_len": "16", "causal": "false", "dtype": '"float32"'}


def _toml(repeats: int = 60) -> str:
    """Under 2 kB of TOML whose lists multiply to 60^6 ≈ 4.7e10 combinations of one case."""
    lists = "".join(f"{axis} = [{', '.join([REPEATED[axis]] * repeats)}]\n" for axis in AXES)
    return f'name = "bomb"\n[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\n{lists}'


def _yaml() -> str:
    """One anchor of 100 repeated values reused on four axes: 10^8 combinations of one case."""
    anchor = "[" + ", ".join(["1"] * 100) + "]"
    return ("name: bomb\nblock:\n  - variant: [full]\n    impl: [sdpa]\n    batch: &r " + anchor + "\n"
            + "".join(f"    {axis}: *r\n" for axis in ("num_heads", "seq_len", "head_dim")))


def _in_seconds(seconds: int, fn, *args):
    """fn(*args), or TimeoutError after `seconds` (an unbounded expansion fails here instead of hanging)."""
    def stop(*_):
        raise TimeoutError(f"still planning after {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        return fn(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_repeated_values_are_refused_before_expanding_naming_the_field_and_the_bound():
    import tomllib

    assert len(_toml()) < 2048
    with pytest.raises(grids.ConfigError) as err:
        _in_seconds(10, grids.parse, tomllib.loads(_toml()), "bomb.toml")
    assert "field 'batch'" in str(err.value) and f"at most {grids.MAX_EXPANSION}" in str(err.value)


def test_the_presets_are_well_inside_the_bound():
    for preset in grids.PRESETS:
        data = grids.load(preset)
        made = sum(grids._check_expansion({**data.get("defaults", {}), **block}, preset, 0)
                   for block in data.get("block", [{}]))
        assert made * 100 < grids.MAX_EXPANSION, preset


@pytest.mark.slow
@pytest.mark.parametrize("suffix, text", [(".toml", _toml()), (".yaml", _yaml())])
def test_a_dry_run_of_a_grid_of_repeated_values_exits_2_at_once(tmp_path, suffix, text):
    grid = tmp_path / f"bomb{suffix}"
    grid.write_text(text)
    try:
        res = suite("run", "--grid", str(grid), "--dry-run", cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the dry run was still planning after 60 s")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "field 'batch'" in res.stderr and f"at most {grids.MAX_EXPANSION}" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [grid.name]
