"""Fused elementwise steps (variants.impls.compiled): compiled in setup, never in a timed call, the same
values as their eager form, and the eager form wherever the compile did not happen."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import variants
from variants.catalog.linear import ELU_PLUS_ONE, _elu_eager
from variants.catalog.rfa import SINCOS, _sincos_eager
from variants.impls import Fused, compiled
from variants.rules import paths

pytestmark = pytest.mark.slow  # compiles with inductor


def _counted(traced=lambda x, scale: x * scale):
    """A step whose eager form counts its calls. NB: dynamo's graphs are per code object: a test
    that counts them passes a function of its own."""
    calls = {"eager": 0}

    def eager(x, scale):
        calls["eager"] += 1
        return x * scale

    return Fused(eager, traced), calls


def test_a_warmed_step_runs_compiled_without_recompiling_and_anything_else_runs_eager():
    step, calls = _counted()
    x = torch.randn(3, 5, 8)
    assert step.warm((x[:, :1], 2.0), (x[:, :2], 2.0)) == "compiled (inductor, dynamic shapes)" == step.note
    with torch._dynamo.config.patch(error_on_recompile=True):  # NB: outside the step's own
        for rows in (1, 2, 3, 4):  # every length of the warmed kinds (views of x): no compile
            torch.testing.assert_close(step(x[:, :rows], 2.0), x[:, :rows] * 2.0)
        with torch.enable_grad():
            step(x[:, :3], 2.0)  # grad mode on: the same graph
    assert calls == {"eager": 0}
    step(x.double()[:, :2], 2.0)  # a dtype not warmed
    step(x[:, :2], 3.0)  # another constant
    step(x, 2.0)  # contiguous: not warmed
    assert calls["eager"] == 3 and step.note == "compiled (inductor, dynamic shapes)"


def test_a_call_smaller_than_the_step_s_least_elements_runs_eager():
    step, calls = _counted()
    step.min_elements = 24
    x = torch.randn(3, 5, 8)
    step.warm((x[:, :1], 2.0), (x[:, :2], 2.0))
    step(x[:, :1], 2.0)  # 24 elements: compiled
    step(x[:, :2][:2], 2.0)  # 32 elements, 2 × 2 × 8: compiled
    step(x[:2, :1], 2.0)  # 16: eager
    assert calls == {"eager": 1}


def test_a_step_whose_calls_are_all_under_its_least_elements_is_not_compiled():
    """`most`: the largest call the step will see (a feature map: the longest of q and k); under the least
    elements a compiled call is for, every call runs eager, so setup compiles nothing."""
    step, calls = _counted()
    step.min_elements = 1000
    x = torch.randn(3, 5, 8)
    note = step.warm((x[:, :1], 2.0), (x[:, :2], 2.0), most=999)
    assert note == "eager (calls of 999 elements at most, under the 1000 it is compiled for)" == step.note
    assert step._compiled is None and not step._ready
    step(x, 2.0)
    assert calls == {"eager": 1}
    assert (
        step.warm((x[:, :1], 2.0), most=1000)
        == "compiled for calls of 1000 elements or more (inductor, dynamic shapes)"
    )


def test_a_feature_map_on_short_sequences_compiles_nothing_and_says_so():
    """linear's elu+1 at the tests' tiny shapes: every call under its 2^17 elements (a compile per worker
    process spent seconds of each one's setup, for calls that ran eager)."""
    q = torch.randn(1, 2, 256, 16)
    fn = variants.get("linear").impls["native"].prepare(q, q, q, causal=False, params={})
    assert (
        fn.notes["feature_map"] == "elu+1 eager (calls of 8192 elements at most, under the 131072 it is compiled for)"
    )
    big = torch.randn(1, 8, 4096, 64)  # the sweep's shape: 2^21 elements, compiled
    fn = variants.get("linear").impls["native"].prepare(big, big, big, causal=False, params={})
    assert fn.notes["feature_map"] == "elu+1 compiled for calls of 131072 elements or more (inductor, dynamic shapes)"


def test_a_named_step_names_the_form_that_took_most_of_its_elements():
    """variants.rules.paths.share: a compiled chunk and an eager short last one read as the compiled path."""
    step = Fused(lambda x, scale: x * scale, min_elements=24, name="scaled")
    x = torch.randn(3, 5, 8)
    step.warm((x[:, :1], 2.0), (x[:, :2], 2.0))
    paths.clear()
    step(x[:, :4], 2.0)  # 96 elements, compiled
    step(x[:2, :1], 2.0)  # 16, eager
    assert paths.taken() == "scaled compiled"
    paths.clear()
    step(x[:2, :1], 2.0)
    assert paths.taken() == "scaled eager"


@pytest.mark.parametrize("n, form", [(1448, "eager"), (2048, "compiled")])
def test_linears_map_names_its_form_on_either_side_of_its_change(n, form):
    """The sweep's shape (H = 8, d = 64): every chunk under 2^17 elements up to n = 1448, most of them over it from
    2048 (a short last chunk eager): the row's path says which, and the note says the rule."""
    q = torch.randn(1, 8, n, 64)
    fn = variants.get("linear").impls["native"].prepare(q, q, q, causal=False, params={})
    paths.clear()
    fn()
    assert paths.taken() == f"elu+1 {form} + sums batched + apply onednn"
    assert fn.notes["feature_map"] == "elu+1 compiled for calls of 131072 elements or more (inductor, dynamic shapes)"


def test_a_call_whose_graph_would_compile_runs_eager_instead():
    """A guard the key does not see: views of the same size classes, not contiguous either, with
    strides in another order."""
    step, calls = _counted()
    step.warm((torch.randn(3, 5, 8)[:, :2], 2.0))
    other = torch.randn(5, 3, 8).transpose(0, 1)[:, :2]  # (3, 2, 8), strides (8, 24, 1)
    torch.testing.assert_close(step(other, 2.0), other * 2.0)
    assert calls == {"eager": 1} and "would have compiled in the call" in step.note
    step(torch.randn(3, 5, 8)[:, :2], 2.0)  # the same key: eager from then on
    assert calls["eager"] == 2


def test_without_a_compile_the_step_runs_eager_and_says_why(monkeypatch):
    step, calls = _counted()
    x = torch.randn(2, 4)
    monkeypatch.setenv(compiled.EAGER_ENV, "1")
    assert step.warm((x, 2.0)) == "eager (ATTN_EAGER=1)"
    step(x, 2.0)
    assert calls == {"eager": 1}
    monkeypatch.delenv(compiled.EAGER_ENV)

    def broken(x, scale):
        raise ValueError("no compiler here")

    step = Fused(lambda x, scale: x * scale, broken)
    assert step.warm((x, 2.0)).startswith("eager (the compile failed: ") and "no compiler here" in step.note
    torch.testing.assert_close(step(x, 2.0), x * 2.0)
    step.traced = lambda x, scale: x * scale
    assert step.warm((x, 3.0)) == step.note and "no compiler here" in step.note  # not tried again


def test_float64_stays_eager_and_past_dynamo_s_graphs_limit_the_eager_form_runs():
    """float64 is the references' dtype; past dynamo's graph limit (8 here: a sweep raises it,
    `sweep_dynamo`) dynamo would run `traced` op by op: the compile fails in warm instead, and what
    warmed before still runs compiled."""

    def own(x, scale):
        return x * scale

    compiled.sweep_dynamo()  # NB: before the patch, which restores the sweep's limit after it
    step, calls = _counted(own)
    with torch._dynamo.config.patch(recompile_limit=8):
        assert step.warm((torch.randn(4, 3, dtype=torch.float64), 2.0)) == "eager (float64)"
        ranks = [torch.randn(*[3] * rank) for rank in range(1, 10)]  # 9 kinds: 9 graphs
        for x in ranks[:8]:
            assert step.warm((x, 2.0)) == "compiled (inductor, dynamic shapes)"
        assert "FailOnRecompileLimitHit" in step.warm((ranks[8], 2.0))
        with torch._dynamo.config.patch(error_on_recompile=True):
            for x in ranks:
                torch.testing.assert_close(step(x, 2.0), x * 2.0)
    assert calls == {"eager": 1}  # the ninth kind


@pytest.mark.parametrize("n", [97, 4096])
def test_the_fused_feature_maps_equal_their_eager_forms_and_float64(n):
    """At a check's length and a sweep's: sin and cos of rfa's angles, elu+1 of linear's q chunks."""
    gen = torch.Generator().manual_seed(0)
    angles = torch.randn(1, 8, n, 128, generator=gen) * 4
    SINCOS.warm((angles[:, :, :2].contiguous(), 0.125))
    exact = torch.cat([angles.double().sin(), angles.double().cos()], -1) * 0.125
    torch.testing.assert_close(SINCOS(angles, 0.125).double(), exact, rtol=0, atol=1e-7)
    torch.testing.assert_close(_sincos_eager(angles, 0.125).double(), exact, rtol=0, atol=1e-7)
    q = torch.randn(1, 8, n, 64, generator=gen) * 4
    ELU_PLUS_ONE.warm((q[:, :, :2],))
    exact = torch.nn.functional.elu(q.double()) + 1
    chunk = q[:, :, : n // 2]  # a view of q, as the sweep's chunks are
    torch.testing.assert_close(ELU_PLUS_ONE(chunk).double(), exact[:, :, : n // 2], rtol=1e-6, atol=0)
    torch.testing.assert_close(_elu_eager(chunk).double(), exact[:, :, : n // 2], rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", ["rfa", "linear"])
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("n", [97, 3000])
def test_the_native_paths_compile_in_setup_and_never_in_the_timed_calls(name, mode, n):
    """Prepared at a check's length (one chunk) and a sweep's (chunks of several sizes), then called
    twice with dynamo told to fail on any compile: the calls reuse what setup compiled, in fwd and
    fwd_bwd; at the sweep's length they reach the compiled form, and equal the dense float64 form.
    elu+1 at n = 97 (8 × 97 × 64 elements, under its 2^17) compiles nothing and runs eager."""
    spec = variants.get(name)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 8, n, 64, generator=gen).requires_grad_(mode == "fwd_bwd") for _ in range(3))
    prepared = spec.prepare(q, k, v, impl="native")
    small = name == "linear" and n == 97
    assert prepared.notes["feature_map"].endswith(
        "eager (calls of 49664 elements at most, under the 131072 it is compiled for)"
        if small
        else "(inductor, dynamic shapes)"
    )
    step = SINCOS if name == "rfa" else ELU_PLUS_ONE
    before = step.compiled_calls
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(2):
            out = prepared()
            if mode == "fwd_bwd":
                torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert prepared.notes["feature_map"].endswith(step.note)
    assert (step.compiled_calls > before) == (not small)
    if mode == "fwd" and n == 3000:
        with torch.no_grad():
            exact = spec.prepare(*(t[:, :2].double() for t in (q, k, v)), impl="dense")()
        torch.testing.assert_close(out[:, :2].double(), exact, rtol=0, atol=2e-5)


def test_importing_the_variants_leaves_dynamo_unimported():
    """torch._dynamo is a large share of a process's start: only a compile imports it."""
    import subprocess
    import sys

    code = "import sys, variants; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
