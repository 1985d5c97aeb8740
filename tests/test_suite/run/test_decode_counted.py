"""A decode step's counted FLOPs are the timed step's: the state a linearized step reads is built in setup,
which the counter must not count (docs/CLAIMS.md, "Modes")."""

from __future__ import annotations

import pytest

from suite.plan.case import Case, theory_of
from suite.run.measurement.counting import count_flops


def _decode(variant: str, impl: str, n: int, heads: int = 4, kv_heads: int = 4) -> Case:
    return Case(variant, impl, "cpu", "float32", "decode", 1, n, heads, kv_heads, 32, False)


@pytest.mark.parametrize("variant", ["linear", "performer"])
def test_a_linearized_decode_step_counts_the_step_not_the_state_it_was_given(variant):
    """The state of the n − 1 cached keys is setup: counted with the step, the work grew as n (a claim of n^0
    read refuted by its work); counted alone, it is the same at every n and within the theory's step."""
    counted = {n: count_flops(_decode(variant, "native", n))[0] for n in (256, 4096)}
    assert counted[256] == counted[4096] > 0, counted
    step = theory_of(_decode(variant, "native", 4096))["flops"]
    assert counted[4096] <= 4 * step, (counted, step)


def test_a_cache_read_step_still_counts_its_whole_row():
    """Full attention's step scores every cached key: its counted work grows as n."""
    counted = {n: count_flops(_decode("mqa", "native", n, kv_heads=1))[0] for n in (256, 4096)}
    assert counted[4096] == pytest.approx(16 * counted[256], rel=0.05), counted
