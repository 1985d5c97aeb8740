"""Online softmax in registers, shared by the softmax kernel families (band, gather, residue).

A row's state is (m, l, acc): the largest score so far, the sum of exp(score − m), and the sum of
exp(score − m)·v. A part's kernel may start from the normalized output and log-sum-exp an earlier
part left (m = lse, l = 1, acc = out): the merge of disjoint key sets by log-sum-exp, done in the next
part's registers. A row with no key stays m = −inf, l = 0, acc = 0, and leaves out = 0, lse = −inf.
"""

from __future__ import annotations

import triton
import triton.language as tl

NEG_INF = float("-inf")


@triton.jit
def resume(o_ptrs, l_ptrs, rows, cols, FIRST: tl.constexpr, ACC: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
    """(m, l, acc) of a block of rows: empty, or the earlier parts' (out, lse)."""
    if FIRST:
        m = tl.full([BM], float("-inf"), ACC)
        l = tl.zeros([BM], ACC)
        acc = tl.zeros([BM, BD], ACC)
    else:
        m = tl.load(l_ptrs, mask=rows, other=float("-inf"))
        l = tl.where(m == float("-inf"), 0.0, 1.0).to(ACC)
        acc = tl.load(o_ptrs, mask=rows[:, None] & cols[None, :], other=0.0)
    return m, l, acc


@triton.jit
def rescale(m, l, s):
    """The new maximum after scores s (BM, keys…) and the factors for the old sums and the new scores'
    shift: (m_new, alpha, shift). An all −inf row keeps shift 0: exp(−inf − 0) = 0, never NaN."""
    m_new = tl.maximum(m, tl.max(s, 1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, tl.exp(m - shift), shift


@triton.jit
def finish(o_ptrs, l_ptrs, m, l, acc, rows, cols):
    """Store out = acc / l and lse = m + log l (a row with no key: 0 and −inf)."""
    empty = l == 0
    safe = tl.where(empty, 1.0, l)
    tl.store(o_ptrs, acc / safe[:, None], mask=rows[:, None] & cols[None, :])
    tl.store(l_ptrs, tl.where(empty, float("-inf"), m + tl.log(safe)), mask=rows)


@triton.jit
def head_scale(d, ACC: tl.constexpr):
    """d^(−1/2) in the accumulator's precision (a float argument would arrive as float32; an int
    argument of 1 arrives as a constant)."""
    return 1.0 / tl.sqrt(tl.zeros([], ACC) + d)
