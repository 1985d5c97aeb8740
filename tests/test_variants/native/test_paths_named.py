"""The native paths that change how they run with the length name the path their calls take
(variants.rules.paths), as the sweep records it in each row's notes for the cost model: at lengths of the full
grid on either side of each change (sliding_window's and neighborhood's fused interior from n = 360,
sliding_window's backward layout from n = 1024, random's scores in slices of K past 16384 keys)."""

from __future__ import annotations

import importlib

import pytest
import torch

import variants
from variants.rules import paths

csr_slices = importlib.import_module("variants.native.keys.csr_slices")  # the module (its package exports the function)


def named(name: str, n: int, backward: bool = False, heads: int = 8) -> str | None:
    spec = variants.get(name)
    q, k, v = (
        torch.randn(1, heads, n, 64, generator=torch.Generator().manual_seed(i), requires_grad=backward)
        for i in range(3)
    )
    paths.clear()
    out = spec.attention(q, k, v, impl="native")
    if backward:
        paths.clear()
        out.sum().backward()
    return paths.taken()


@pytest.mark.parametrize(
    "name, n, expected",
    [
        ("sliding_window", 256, "no fused interior"),  # no block's keys all exist: every block an edge
        ("sliding_window", 360, "fused interior"),
        ("neighborhood", 256, "no fused runs"),  # its kernel clamped to 255: no run of interior blocks
        ("neighborhood", 360, "fused runs"),
        ("strided", 728, "fused interior"),  # a short last block: named as every other length, not by each block's way
    ],
)
def test_a_bands_interior_through_the_fused_kernel_is_named(name, n, expected):
    assert named(name, n) == expected


@pytest.mark.parametrize(
    "n, expected",
    [
        (512, "backward blocks over head groups"),
        (2048, "backward runs head by head + backward blocks over head groups"),  # its own 64-row layout from 1024
    ],
)
def test_sliding_windows_backward_layout_is_named(n, expected):
    assert named("sliding_window", n, backward=True, heads=2) == expected


def test_randoms_scores_name_one_pass_or_their_slices():
    """fastest() chooses between the slices of K and one pass by a timing in setup: the call names which it took."""
    n, w = 64, 32  # w // MIN_ENTRIES = 4 slices allowed
    idx = torch.sort(torch.randint(0, n, (n, w), generator=torch.Generator().manual_seed(0)), dim=1).values
    crow = torch.arange(0, n * w + 1, w)
    pattern = torch.sparse_csr_tensor(crow, idx.reshape(-1), torch.zeros(n * w), (n, n))
    q, k = torch.randn(n, 16), torch.randn(n, 16)
    slices = csr_slices.csr_slices(idx, pattern, row_bytes=csr_slices.SLICE_BYTES // 16)  # K 4x a slice: 4 slices
    assert len(slices) == 4
    one = (csr_slices.Slice(0, n, pattern, None),)
    for chosen, expected in ((slices, "scores in 4 slices"), (one, "scores in one pass")):
        paths.clear()
        got = csr_slices.sampled_scores(chosen, q, k, 1.0)
        assert paths.taken() == expected
        ref = (q[torch.arange(n).repeat_interleave(w)] * k[idx.reshape(-1)]).sum(-1)
        assert torch.allclose(got, ref, atol=1e-5)
