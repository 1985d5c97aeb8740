"""Steps off the CPU (variants.native.core.steps): where a step is kernel launches, the native paths take steps as
large as the memory rule allows. Checked here on the CPU by treating it as such a device, with the
fused CPU kernel off, as on a GPU: the same code the CUDA sweep times, exact, and in fewer steps."""

from __future__ import annotations

import collections

import pytest
import torch
from helpers import causal_unsupported, inputs
from torch.utils._python_dispatch import TorchDispatchMode

import variants
from variants.native.core import fused_kernel as fused
from variants.native.core import onednn, steps
from variants.rules import against_reference

pytestmark = pytest.mark.slow  # fused steps at the sweeps' shapes

# the long-sequence variants (the classic forms' native paths take no steps)
NATIVE = [
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
    "reformer",
    "linformer",
    "mqa",
    "gqa",
]


@pytest.fixture
def launch_sized(monkeypatch):
    """The CPU taken as a device whose steps are sized by the memory rule, without the fused kernel or oneDNN's
    products (a GPU has neither)."""
    monkeypatch.setattr(steps, "CACHE_SIZED", set())
    monkeypatch.setattr(fused, "FUSED", None)
    monkeypatch.setattr(onednn, "_LINEAR", None)


@pytest.mark.parametrize("name", NATIVE)
def test_launch_sized_steps_equal_dense_with_gradients(name, launch_sized):
    """float64, B = 1, H = 4, n = 2048 (bands of several runs, classes of several groups; reformer 1024): output and
    the gradients of q, k, v against dense, causal too where the variant has it."""
    spec = variants.get(name)
    for causal in (False, True):
        if causal_unsupported(spec, "native", causal):
            continue
        make = lambda n: inputs(spec, batch=1, heads=4, head_dim=32, seq_len=n)  # noqa: E731
        for grads in (False, True):
            n = 1024 if name == "reformer" else 2048  # its rounds of hashing are slow in float64
            err, floor = against_reference(spec, "native", make, n, {}, causal, grads=grads)
            assert err <= max(1e-9, floor), f"{name} causal={causal} grads={grads}: {err:.2e}"


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[func.overloadpacket] += 1
        return func(*args, **(kwargs or {}))


def _ops(name: str, n: int, monkeypatch, cache_sized: bool) -> int:
    monkeypatch.setattr(steps, "CACHE_SIZED", {"cpu"} if cache_sized else set())
    spec = variants.get(name)
    q, k, v = inputs(spec, batch=1, heads=16, head_dim=64, seq_len=n, dtype=torch.float32)
    prepared = spec.prepare(q, k, v, impl="native", causal=False)
    counter = _Ops()
    with counter:
        prepared()
    return sum(counter.count.values())


@pytest.mark.parametrize(
    "name,n", [("strided", 8192), ("fixed", 8192), ("linear", 8192), ("global", 8192), ("neighborhood", 16384)]
)
def test_launch_sized_steps_are_fewer(name, n, monkeypatch):
    """The paths whose cache-sized steps were hundreds of rows (neighborhood's blocks one by one): at
    the GPU grid's shape (H = 16, n = 8192 or 16384, no fused kernel) half the aten ops or fewer (on
    an H200, strided's forward went from 11138 kernel launches at n = 16384). NB: performer's chunks
    are 256 rows at least on the CPU too (variants.native.linearized.forward.MIN_ROWS), 32 at n = 8192:
    its launch-sized ones are 2/3 as many; `linear` holds the linearized paths' steps to this."""
    monkeypatch.setattr(fused, "FUSED", None)
    monkeypatch.setattr(onednn, "_LINEAR", None)  # a GPU's products: batched, as the cache-sized ones here
    cache, launch = (_ops(name, n, monkeypatch, sized) for sized in (True, False))
    assert launch * 2 <= cache, f"{name}: {cache} aten ops cache-sized, {launch} launch-sized"


@pytest.mark.parametrize(
    "name", ["sliding_window", "neighborhood", "global", "strided", "fixed", "bigbird", "linear", "performer"]
)
def test_launch_sized_forward_holds_within_two_outputs(name, launch_sized):
    """The memory rule holds with the larger steps: a forward's own peak (its output included) at
    most 2 outputs, B = 1, H = 16, n = 4096, float32 (measured 1.24-1.56 there)."""
    from suite.machine.timing import peak_cpu

    spec = variants.get(name)
    q, k, v = inputs(spec, batch=1, heads=16, head_dim=64, seq_len=4096, dtype=torch.float32)
    prepared = spec.prepare(q, k, v, impl="native", causal=False)
    prepared()
    assert peak_cpu(prepared) <= 2 * q.numel() * q.element_size(), name


@pytest.mark.parametrize("window,n", [(32, 2048), (32, 2000), (32, 1500)])
def test_launch_sized_band_runs_and_their_tails_equal_dense(window, n, launch_sized, monkeypatch):
    """The band's runs of several blocks over several heads, and the shorter run at the end where the
    last keys stop (as at the GPU grid's n = 16384, H = 16: runs of 4 blocks of 16 heads), reached at a
    test's size by a narrower window: output and gradients against dense, float64."""
    from variants.native.band import windows as band

    groups = []
    heads_of = band._band_heads
    monkeypatch.setattr(band, "_band_heads", lambda *a, **kw: (groups.append(kw["group"]), heads_of(*a, **kw))[1])
    spec = variants.get("sliding_window")
    make = lambda m: inputs(spec, batch=1, heads=4, head_dim=64, seq_len=m)  # noqa: E731
    for grads in (False, True):
        err, _ = against_reference(spec, "native", make, n, {"window": window}, False, grads=grads)
        assert err <= 1e-9, f"window={window} n={n} grads={grads}: {err:.2e}"
    assert max(groups) > 1, groups
