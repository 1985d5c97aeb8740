"""A grid's planning is bounded before it starts: by the combinations its lists make, repeats included,
and by the sizes whose figures a run's table must hold."""

from __future__ import annotations

import random
import signal
import subprocess

import pytest
from helpers import suite, suite_in_process

import variants
from suite.plan import bounds
from suite.plan import grid as grids
from suite.plan.case import theory_of
from suite.store import table
from suite.store.row import Row

AXES = ("batch", "num_heads", "head_dim", "seq_len", "causal", "dtype")
REPEATED = {"batch": "1", "num_heads": "1", "head_dim": "8", "seq_len": "16", "causal": "false", "dtype": '"float32"'}


def _toml(repeats: int = 60) -> str:
    """Under 2 kB of TOML whose lists multiply to 60^6 ≈ 4.7e10 combinations of one case."""
    lists = "".join(f"{axis} = [{', '.join([REPEATED[axis]] * repeats)}]\n" for axis in AXES)
    return f'name = "bomb"\n[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\n{lists}'


def _yaml() -> str:
    """One anchor of 100 repeated values reused on four axes: 10^8 combinations of one case."""
    anchor = "[" + ", ".join(["1"] * 100) + "]"
    return (
        "name: bomb\nblock:\n  - variant: [full]\n    impl: [sdpa]\n    batch: &r "
        + anchor
        + "\n"
        + "".join(f"    {axis}: *r\n" for axis in ("num_heads", "seq_len", "head_dim"))
    )


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
    assert "field 'batch'" in str(err.value) and f"at most {bounds.MAX_EXPANSION}" in str(err.value)


def test_the_presets_are_well_inside_the_bound():
    for preset in grids.PRESETS:
        data = grids.load(preset)
        made = sum(
            grids._check_expansion({**data.get("defaults", {}), **block}, preset, 0)
            for block in data.get("block", [{}])
        )
        assert made * 100 < bounds.MAX_EXPANSION, preset


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
    assert "field 'batch'" in res.stderr and f"at most {bounds.MAX_EXPANSION}" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [grid.name]


def test_sizes_past_a_column_are_refused_at_planning_naming_the_field(tmp_path):
    grid = tmp_path / "huge.toml"
    grid.write_text('[[block]]\nvariant = ["full"]\nimpl = ["sdpa"]\nbatch = [2147483647]\nnum_heads = [2147483647]\n')
    res = suite_in_process("run", "--grid", str(grid), "--dry-run", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "field 'batch' = 2147483647 (allowed: integers from 1 to 65536)" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [grid.name]


@pytest.mark.parametrize(
    "sizes",
    [
        {"batch": 2**16, "num_heads": 2**16, "seq_len": 16},
        {"seq_len": 2**31 - 1, "kv_len": 2**31 - 1},
        {"seq_len": {"min": 256, "max": 2**31 - 1}},
    ],
)
def test_a_product_of_sizes_past_a_column_is_refused_naming_the_product(sizes):
    block = {"variant": ["full"], "impl": ["sdpa"], **{k: v if isinstance(v, dict) else [v] for k, v in sizes.items()}}
    with pytest.raises(grids.ConfigError, match=r"field 'batch·seq_len·.*\(allowed: at most 2\^52"):
        grids.parse({"block": [block]}, "huge.toml")


def _at_the_bound(name: str, rng: random.Random) -> dict:
    """A block of one variant whose work is as large as planning accepts, at a length its theory counts fast."""
    n, heads, dim = 2 ** rng.randint(6, 12), 2 ** rng.randint(0, 16), 2 ** rng.randint(0, 16)
    while heads * dim > 2**20:
        heads, dim = max(1, heads // 2), max(1, dim // 2)
    batch = min(bounds.SIZE_LIMITS["batch"], bounds.MAX_WORK // (n * max(n, heads * dim) * heads * dim))
    return {
        "variant": [name],
        "mode": [rng.choice(["fwd", "fwd_bwd"])],
        "dtype": ["float64"],
        "seq_len": [n],
        "batch": [max(1, batch)],
        "num_heads": [heads],
        "head_dim": [dim],
    }


@pytest.mark.slow
def test_the_largest_sizes_planning_accepts_give_figures_that_fit_the_table(tmp_path):
    rng = random.Random(0)
    blocks = [_at_the_bound(name, rng) for name in variants.names() for _ in range(2)]
    blocks.append({**_at_the_bound("reformer", rng), "params": {"rounds": [64], "chunk": [64]}})
    blocks.append({**_at_the_bound("full", rng), "valid_fraction": [0.5]})
    cases = list(grids.parse({"block": blocks}, "bound.toml").cases)
    rows = []
    for case in cases:
        figures = theory_of(case)
        ints = [v for v in (*figures.values(), *figures["extra_flops"].values()) if isinstance(v, int)]
        assert max(ints) < 2**63, case.label()
        rows.append(
            Row(
                case,
                flops=figures["flops"],
                pairs=figures["pairs"],
                kv_bytes=figures["kv_bytes"],
                compulsory_bytes=figures["compulsory_bytes"],
                traffic_bytes=figures["traffic_bytes"],
                extra_flops=figures["extra_flops"],
                valid_tokens=figures["valid_tokens"],
            )
        )
    written = table.table(cases, rows)
    table.write(written, tmp_path / "results.parquet", tmp_path / "results.csv")
    back = table.read(tmp_path / "results.parquet")
    assert back["flops"].tolist() == [row.flops for row in rows]
    assert [None if x != x else int(x) for x in back["traffic_bytes"]] == [row.traffic_bytes for row in rows]
