"""The `triton` paths (variants.triton) in float32 against the float64 dense reference, at the
lengths the issue names (1, 61, 130, 257: no multiple of a tile, and shorter and longer than one),
the variants' default parameters, d = 64 (the tiles a GPU runs), causal and not: the output within
1e-5 and the gradients of q, k and v within 1e-4, relative to the reference's largest entry where it
is over 1. Registry-driven: every variant with a `triton` implementation, none named here. On a
machine without a GPU the kernels run under Triton's interpreter (tests/conftest.py); without
Triton the cases skip with the reason. The kernel families against their own naive references
(each part's log-sum-exp, a part resumed from another's) follow."""

from __future__ import annotations

import pytest
import torch
from helpers import inputs

import variants

pytestmark = pytest.mark.slow  # Triton's interpreter is slow on the CPU

TRITON = [name for name in variants.names() if "triton" in variants.get(name).impls]
FORWARD_TOL, GRAD_TOL = 1e-5, 1e-4
# the kernels compiled on a GPU where there is one (the lease's step), else under the interpreter; the
# dense float64 reference on the CPU
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _skip_unless_runnable(spec, causal: bool, n: int, dtype=torch.float32):
    why = spec.reasons("triton", device=DEVICE, causal=causal, dtype=dtype, seq_len=n)
    if why:
        pytest.skip(f"{spec.name}/triton: {'; '.join(why)}")


def test_every_structured_variant_has_a_triton_path():
    assert set(TRITON) == {
        "sliding_window",
        "neighborhood",
        "global",
        "random",
        "strided",
        "fixed",
        "bigbird",
        "linear",
        "performer",
        "rfa",
    }


@pytest.mark.parametrize("n", [1, 61, 130, 257])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", TRITON)
def test_triton_float32_equals_the_float64_dense_reference(name, causal, n):
    spec = variants.get(name)
    _skip_unless_runnable(spec, causal, n)
    q, k, v = inputs(spec, batch=1, heads=1, head_dim=64, seq_len=n, dtype=torch.float32)
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = []
    for impl, dtype, device in (("triton", torch.float32, DEVICE), ("dense", torch.float64, "cpu")):
        qkv = [t.to(device, dtype).requires_grad_() for t in (q, k, v)]
        out = spec.attention(*qkv, impl=impl, causal=causal)
        assert out.dtype == dtype
        results.append([t.cpu() for t in (out.detach(), *torch.autograd.grad(out, qkv, upstream.to(device, dtype)))])
    (out, *grads), (ref, *ref_grads) = results

    def error(got, want):
        return ((got.double() - want).abs().max() / want.abs().max().clamp(min=1.0)).item()

    assert error(out, ref) <= FORWARD_TOL, f"{name}/triton causal={causal} n={n}: output off by {error(out, ref):.3g}"
    for label, got, want in zip("qkv", grads, ref_grads):
        assert error(got, want) <= GRAD_TOL, (
            f"{name}/triton causal={causal} n={n}: d{label} off by {error(got, want):.3g}"
        )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", TRITON)
def test_triton_in_reduced_precision_stays_within_the_sweeps_tolerance(name, causal, dtype):
    """Half-precision operands (tl.dot on them, float32 sums) at n = 130, against dense float64, within
    the sweep's check tolerance for the dtype, output and gradients. NB: bfloat16 runs on a GPU only
    (the interpreter's bf16 products are wrong: its capability reason says so, and the case skips)."""
    from suite.run.measurement.check import CHECK_TOL

    spec = variants.get(name)
    _skip_unless_runnable(spec, causal, 130, dtype)
    q, k, v = inputs(spec, batch=1, heads=1, head_dim=64, seq_len=130, dtype=torch.float32)
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = []
    for impl, kind, device in (("triton", dtype, DEVICE), ("dense", torch.float64, "cpu")):
        qkv = [t.to(device, kind).requires_grad_() for t in (q, k, v)]
        out = spec.attention(*qkv, impl=impl, causal=causal)
        results.append([t.cpu() for t in (out.detach(), *torch.autograd.grad(out, qkv, upstream.to(device, kind)))])
    tol = CHECK_TOL[str(dtype).removeprefix("torch.")]
    for label, got, want in zip(("out", "dq", "dk", "dv"), *results):
        err = ((got.double() - want).abs().max() / want.abs().max().clamp(min=1.0)).item()
        assert err <= tol, f"{name}/triton {dtype} causal={causal}: {label} off by {err:.3g} > {tol}"


def test_the_comparison_can_fail():
    """A different window through the kernels gives a different output than the reference's."""
    spec = variants.get("sliding_window")
    _skip_unless_runnable(spec, False, 61, torch.float64)
    q, k, v = inputs(spec, batch=1, heads=2, head_dim=16, seq_len=61)
    assert (
        spec.attention(q, k, v, impl="triton", window=5) - spec.attention(q, k, v, impl="dense", window=6)
    ).abs().max() > 1e-3


def test_without_the_interpreter_a_cpu_is_refused_with_the_reason(monkeypatch):
    from variants.triton import capability

    monkeypatch.setattr(capability, "loaded_mode", lambda: False)
    why = variants.get("random").reasons("triton", device="cpu")
    assert why and "TRITON_INTERPRET=1" in why[0]
    monkeypatch.setattr(capability, "import_error", lambda: "triton not installed (pip install triton)")
    assert variants.get("random").reasons("triton") == ["triton not installed (pip install triton)"]


# ------------------------------------------------------------------------------- the families
def _kernels():
    from variants.triton import capability

    why = capability.reasons(
        "cpu" if not torch.cuda.is_available() else "cuda",
        torch.float64 if not torch.cuda.is_available() else torch.float32,
    )
    if why:
        pytest.skip("; ".join(why))
    dtype = torch.float64 if not torch.cuda.is_available() else torch.float32
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 61, 16, generator=gen, dtype=dtype).to(device) for _ in range(3))
    return q, k, v, (1e-12 if dtype == torch.float64 else 1e-5)


BANDS = [
    ("window", 5, 0, None),
    ("neighborhood", 9, 0, None),
    ("blocks", 7, 0, None),
    ("rect", 4, 2, (4, 61)),
    ("rect", 61, -61, (0, 4)),
    ("summary", 8, 2, None),
]


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("kind,p1,p2,rows", BANDS)
def test_a_band_part_resumed_after_a_key_list_gives_the_union_and_its_lse(kind, p1, p2, rows, causal):
    """A key list first (every row), then the band part resumed from its (out, lse): the softmax over
    the union of the two (disjoint) key sets, and its log-sum-exp, as the naive references give them."""
    from variants.triton.band import KINDS, band_fwd, band_mask
    from variants.triton.band.naive import masked_softmax
    from variants.triton.gather import gather_fwd, list_mask

    q, k, v, tol = _kernels()
    n = q.shape[2]
    band = band_mask(KINDS[kind], n, p1, p2, rows, causal).to(q.device)
    others = torch.rand(n, n, generator=torch.Generator().manual_seed(4)).to(q.device) < 0.1
    others = others & ~band & (torch.ones_like(band).tril() if causal else torch.ones_like(band))
    idx = torch.where(others, torch.arange(n, device=q.device), -1).sort(dim=1, descending=True).values[:, :12]
    idx = idx.sort(dim=1).values.int().contiguous()
    out, lse = torch.empty_like(q), q.new_empty(q.shape[:-1])
    gather_fwd(q, k, v, out, lse, idx, first=True)
    band_fwd(q, k, v, out, lse, kind=KINDS[kind], p1=p1, p2=p2, rows=rows, causal=causal, first=False)
    ref, ref_lse = masked_softmax(q, k, v, band | list_mask(idx, n))
    assert (out - ref).abs().max().item() <= tol
    finite = ref_lse > float("-inf")
    assert torch.equal(lse > float("-inf"), finite)
    assert (lse[finite] - ref_lse[finite]).abs().max().item() <= tol


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("stride", [1, 7, 61])
def test_residue_classes_and_their_lse_equal_the_naive_form(stride, causal):
    from variants.triton.residue import residue_fwd, residue_reference

    q, k, v, tol = _kernels()
    out, lse = torch.empty_like(q), q.new_empty(q.shape[:-1])
    residue_fwd(q, k, v, out, lse, stride=stride, causal=causal, first=True)
    ref, ref_lse = residue_reference(q, k, v, stride=stride, causal=causal)
    assert (out - ref).abs().max().item() <= tol
    assert torch.equal(lse > float("-inf"), ref_lse > float("-inf"))


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_the_unnormalized_chunk_product_the_backward_uses_equals_the_naive_form(causal):
    from variants.triton.chunk import chunk_reference, product

    q, k, v, tol = _kernels()
    c = torch.cat([v, v[..., :3]], dim=-1)  # another width than the keys'
    got = product(q, k, c, causal)
    ref = chunk_reference(q, k, c, causal=causal, normalize=False)
    assert ((got - ref).abs().max() / ref.abs().max()).item() <= tol
    back = product(q, k, c, causal, reverse=True)  # s >= t
    ref = chunk_reference(q.flip(2), k.flip(2), c.flip(2), causal=causal, normalize=False).flip(2)
    assert ((back - ref).abs().max() / ref.abs().max()).item() <= tol


def _parts(q) -> list:
    """One part of every kind for q's length: the bands of BANDS, key lists (one of no slot), residue classes."""
    from variants.triton.union import Band, KeyList, Residues

    n = q.shape[2]
    idx = torch.randint(0, n, (n, 6), generator=torch.Generator().manual_seed(5))
    return (
        [Band(kind, p1, p2, rows) for kind, p1, p2, rows in BANDS]
        + [KeyList.of(x, torch.ones_like(x, dtype=torch.bool), q) for x in (idx, idx[:, :0])]
        + [Residues(7)]
    )


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_a_part_that_says_it_covers_writes_every_gradient_entry(causal):
    """The first part writes its share into unset buffers where it `covers` (variants.triton.backward): every
    entry of dQ, dK and dV written, none left from the buffer (NaN here). A part that does not cover leaves
    some, which is why it adds into zeros."""
    from variants.triton.backward import row_delta
    from variants.triton.union import forward

    q, k, v, _ = _kernels()
    for part in _parts(q):
        out, lse = forward(q, k, v, (part,), causal)
        do = torch.randn_like(out)
        grads = [torch.full_like(q, float("nan")) for _ in range(3)]
        part.backward(q, k, v, do, lse, row_delta(out.contiguous(), do), *grads, causal=causal, add=False)
        unset = sum(int(g.isnan().sum()) for g in grads)
        assert (unset == 0) == part.covers, f"{part}: {unset} entries unset, covers={part.covers}"


def test_a_lone_part_is_its_kernels_and_nothing_else(monkeypatch):
    """Forward and backward of one band part: its kernels and δ's, no zeroed buffer, no cast of the output
    or of a gradient (each is a pass over B·H·n·d on the GPU; docs/gpu.md gives its share)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from variants.triton import backward as shared
    from variants.triton.band import bwd, fwd
    from variants.triton.union import Band, attend

    launched, ops = [], []
    for module in (shared, bwd, fwd):
        monkeypatch.setattr(module, "launch", lambda kernel, grid, *a, **kw: launched.append(kernel.fn.__name__))

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    q, k, v = (torch.randn(1, 2, 64, 16, dtype=torch.float16, requires_grad=True) for _ in range(3))
    with Ops():
        out = attend(q, k, v, (Band("window", 8),), causal=False)
        out.backward(torch.ones_like(out))
    assert launched == ["band_fwd_kernel", "delta_kernel", "band_dq_kernel", "band_dkdv_kernel"]
    assert out.dtype == torch.float16 and q.grad.dtype == torch.float16
    assert not [
        op for op in ops if op.split(".")[-1] in ("zeros", "zero_", "fill_", "_to_copy", "copy_", "mul", "sum")
    ], ops


def test_causal_linear_walks_its_suffix_products_backwards_without_copies():
    """dφ(K) and dV are suffix products: the chunk kernels walk the rows last to first (REVERSE), where
    they were run on flipped copies (eight flips of B·H·n·width a backward: 9% of causal linear's
    forward+backward on an H100). G = [dO/D, g_D] and V₁ = [V, 1] come from one kernel, not from
    casts, products, sums and concatenations."""
    from torch.utils._python_dispatch import TorchDispatchMode

    _kernels()
    ops = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(str(func.overloadpacket).split(".")[-1])
            return func(*args, **(kwargs or {}))

    spec = variants.get("linear")
    q, k, v = (x.float().requires_grad_() for x in inputs(spec, seq_len=40, head_dim=16))
    out = spec.attention(q, k, v, impl="triton", causal=True)
    grad = torch.ones_like(out)
    with Ops():
        out.backward(grad)
    assert q.grad is not None and not {"flip", "cat", "sum", "ones_like", "ones"} & set(ops), ops
