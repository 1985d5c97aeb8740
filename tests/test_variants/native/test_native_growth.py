"""A native path realizes its claim in memory: no tensor in it grows faster than the claimed exponent.

Every op's outputs are recorded (setup and call) under a TorchDispatchMode, at n and 16n. A
linear-in-n path must keep its largest tensor within ~16×, an n^1.5 one within ~64×, where an
n×n tensor would grow 256×. Sizes are counted, not timed: the check is exact and quiet.
"""

from __future__ import annotations

import pytest
import torch
from helpers import inputs, theory
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import variants

pytestmark = pytest.mark.slow  # every native path timed at growing lengths


class LargestTensor(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                # a sparse tensor holds its values, not its logical n×n size
                stored = t.numel() if t.layout == torch.strided else t.values().numel()
                self.numel = max(self.numel, stored)
        return out


def largest(spec, impl, seq_len, **params):
    q, k, v = inputs(spec, batch=1, heads=1, head_dim=4, seq_len=seq_len, dtype=torch.float32)
    with LargestTensor() as probe:
        spec.prepare(q, k, v, impl=impl, **params)()
    return probe.numel


SUB_QUADRATIC = [n for n in variants.names() if theory(variants.get(n), seq_len=1024).claimed_exponent_n < 2]


@pytest.mark.parametrize("name", SUB_QUADRATIC)
def test_native_memory_grows_as_claimed(name):
    spec = variants.get(name)
    small, big = 512, 8192  # 16×
    exponent = theory(spec, seq_len=big).claimed_exponent_n
    growth = largest(spec, "native", big) / largest(spec, "native", small)
    assert growth <= 16**exponent * 1.3, f"{name}/native: largest tensor grew {growth:.1f}× for 16× n"


def test_the_probe_sees_a_quadratic_path():
    """The instrument can fail: the dense reference of the window grows 256× for 16× n."""
    spec = variants.get("sliding_window")
    growth = largest(spec, "dense", 8192) / largest(spec, "dense", 512)
    assert growth >= 200


# The bound: a native call's allocator peak above its inputs is at most 2 outputs, plus the state its
# algorithm defines (m·d per head for the feature maps, the projected K′ and V′ for linformer), which
# outweighs the output where n < m or n < 2k (docs/performance.md, "Memory the native paths hold").
STATE = {  # outputs' worth of the algorithm's own state at n
    "performer": lambda p, n: p["features"] / n,
    "rfa": lambda p, n: 2 * p["features"] / n,
    "linformer": lambda p, n: 2 * p["proj_len"] / n,
}
ATTENTION_FAMILIES = ("sparse", "linear", "shared_kv")
BOUNDED = [
    n for n in variants.names() if variants.get(n).family in ATTENTION_FAMILIES and "native" in variants.get(n).impls
]


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("n", [256, 1024, 2048, 4096])
@pytest.mark.parametrize("name", BOUNDED)
def test_every_native_path_holds_at_most_two_outputs_plus_its_state(name, n, causal):
    """The call's allocator peak above its inputs, over the output's size (the profiler's count, as
    the sweep's peak_bytes), at n from 256 (where one block of 128 rows over 8 heads outweighs the
    output) to 4096, and at n = 2048 where strided's l = 46 does not divide n."""
    from suite.machine.timing import peak_cpu

    spec = variants.get(name)
    if causal and not spec.impls["native"].supports_causal:
        pytest.skip(f"{name}/native has no causal form")
    q, k, v = inputs(spec, batch=1, heads=8, head_dim=64, seq_len=n, dtype=torch.float32)
    call = spec.prepare(q, k, v, impl="native", causal=causal)
    call()
    ratio = peak_cpu(call) / (q.numel() * q.element_size())
    state = STATE.get(name, lambda p, n: 0.0)(spec.resolve(n, {}), n)
    assert 1.0 <= ratio <= 2.0 + state, f"{name}/native at n = {n} holds {ratio:.2f} outputs (state: {state:.2f})"


# The feature maps' peak in outputs at short n, where their state is most of it (B = 1, H = 8, d = 64, float32):
# streamed in chunks, not one chunk for the whole sequence
STREAMED = {("linear", 1024): 2.2, ("linear", 4096): 1.8, ("performer", 1024): 2.5, ("performer", 4096): 1.5}


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name,n", sorted(STREAMED))
def test_a_linearized_native_path_streams_in_chunks_smaller_than_its_output(name, n, causal):
    """Chunks of at most 2^17 features, each chunk's (C × C) at most a quarter of the output, and the
    running state updated in place when autograd does not record: about one output at every n."""
    from suite.machine.timing import peak_cpu

    spec = variants.get(name)
    q, k, v = inputs(spec, batch=1, heads=8, head_dim=64, seq_len=n, dtype=torch.float32)
    call = spec.prepare(q, k, v, impl="native", causal=causal)
    call()
    ratio = peak_cpu(call) / (q.numel() * q.element_size())
    assert 1.0 <= ratio <= STREAMED[name, n], f"{name}/native at n = {n} holds {ratio:.2f} outputs"


# NB: before the loops dropped a step's tensors (del) before the next step made its own, two steps
# were alive at once: at n = 1024 (B = 1, H = 8, d = 64) fixed held 1.90 outputs, bigbird 1.95,
# neighborhood 1.75; after, 1.59, 1.58 and 1.47. Within 2, but one step more than the design.
ONE_STEP = ("fixed", "bigbird", "neighborhood", "strided", "sliding_window", "mqa")


@pytest.mark.parametrize("name", ONE_STEP)
def test_a_native_loop_holds_one_step_at_a_time(name):
    """The output, its log-sum-exp and one step of at most half an output: under 1.7 outputs; a shared-KV path's
    product may also pack its group's keys (G/H of an output), as oneDNN's kernels for some CPUs do."""
    from suite.machine.timing import peak_cpu

    spec = variants.get(name)
    q, k, v = inputs(spec, batch=1, heads=8, head_dim=64, seq_len=1024, dtype=torch.float32)
    call = spec.prepare(q, k, v, impl="native", causal=False)
    call()
    ratio = peak_cpu(call) / (q.numel() * q.element_size())
    packed = k.numel() / q.numel() if k.shape[1] < q.shape[1] else 0.0
    assert 1.0 <= ratio <= 1.7 + packed, f"{name}/native at n = 1024 holds {ratio:.2f} outputs"
