"""fixed/native's own block and summaries as one oneDNN tile (variants.native.keys.block_subset), in float32 at the
block sizes the sweep times (l = ⌈√n⌉: 128 at n = 16384, 182 at 32768, 256 at 65536), against the float64 dense
reference; and the union of the two key sets wherever the tile does not apply."""

from __future__ import annotations

import pytest
import torch
from helpers import inputs

import variants
from variants.native.keys import block_subset
from variants.rules import paths


@pytest.fixture
def tiles(monkeypatch):
    """The blocks of every call that took the tile path."""
    paths.clear()
    calls = []
    run = block_subset.block_and_subset
    monkeypatch.setattr(
        block_subset,
        "block_and_subset",
        lambda q, k, v, *, block, keys: calls.append(block) or run(q, k, v, block=block, keys=keys),
    )
    return calls


# the sweep's blocks, several of them in n (a short last one where n is no multiple, at n = 1020 holding 3 of its
# own summaries), c = 1 and c > 1
@pytest.mark.parametrize(
    "block, summary, n", [(128, 1, 600), (182, 1, 728), (256, 1, 1000), (256, 7, 1024), (256, 7, 1020), (128, 0, 300)]
)
def test_the_tile_equals_the_float64_reference(block, summary, n, tiles):
    spec = variants.get("fixed")
    q, k, v = inputs(spec, batch=2, heads=8, head_dim=64, seq_len=n)
    params = dict(block=block, summary=summary)
    got = spec.attention(q.float(), k.float(), v.float(), impl="native", **params)
    assert tiles == [block], "the tile path is the one tested"
    assert paths.taken() == "tile"  # as the sweep records it, for the cost model
    ref = spec.attention(q, k, v, impl="dense", **params)
    err = (got.double() - ref).abs().max().item() / ref.abs().max().item()
    assert err <= 1e-5, f"relative max |diff| = {err:.3g}"


def test_the_own_blocks_summaries_are_counted_once(tiles):
    """Every key a summary (c = l): each row attends to every key once, so the tile is full attention."""
    spec, full = variants.get("fixed"), variants.get("full")
    q, k, v = inputs(
        spec, batch=1, heads=8, head_dim=64, seq_len=400, dtype=torch.float32
    )  # its (128, 528) tile a step
    got = spec.attention(q, k, v, impl="native", block=128, summary=128)
    assert tiles == [128]
    assert torch.allclose(got, full.attention(q, k, v, impl="dense"), atol=1e-5)


@pytest.mark.parametrize("case", ["small blocks", "causal", "float64", "q recorded", "v recorded", "over a step"])
def test_elsewhere_the_union_runs(case, tiles):
    """Where the tile does not apply: blocks under 128 rows, causal, float64, any input recorded by autograd, and a
    block whose scores would be more than a step (an explicit block = n: a (n, n + s) tile a head)."""
    spec = variants.get("fixed")
    dtype = torch.float64 if case == "float64" else torch.float32
    q, k, v = inputs(spec, batch=1, heads=8, head_dim=64, seq_len=300, dtype=dtype)  # a (128, 130) tile fits a step
    if case.endswith("recorded"):
        (q if case.startswith("q") else v).requires_grad_(True)
    block = {"small blocks": 64, "over a step": 300}.get(case, 128)
    out = spec.attention(q, k, v, impl="native", causal=case == "causal", block=block)
    ref = spec.attention(*(x.double().detach() for x in (q, k, v)), impl="dense", causal=case == "causal", block=block)
    assert tiles == []
    assert paths.taken().split(" + ")[0] == "union"  # then its own block's band names its own way
    assert (out.double() - ref).abs().max().item() < 1e-5
