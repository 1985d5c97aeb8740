"""Building blocks of the structure-exploiting (`native`) implementations.

A sparse pattern is split into disjoint key sets (`KeySet`), each scored in the layout that suits
it (a band of blocks, a gather per query, a residue class). Each set yields a softmax output and
log-sum-exp per query row, block by block; `union` folds every set after the first into the
first one's output as its blocks come (flash-decoding's merge of splits, in place), so a call holds
one output and a few blocks, whatever the number of sets. Under autograd the forward is the same,
and the backward recomputes each set's blocks from the output and lse (variants.native.core.part_grad). No set
ever builds an n×n tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from variants.native.core.expo import exp_
from variants.native.core.part_grad import OwnBackward

NEG_INF = float("-inf")


@dataclass
class Partial:
    """Softmax over one key set: normalized output (B, H, n, d) and log-sum-exp (B, H, n)."""

    out: torch.Tensor
    lse: torch.Tensor | None  # None: this part is the whole softmax (single-part fast path)


def softmax_part(scores: torch.Tensor, apply_v: Callable[[torch.Tensor], torch.Tensor], need_lse: bool):
    """Softmax over the last dim of `scores` (masked with -inf), then `apply_v(probs)`.

    With `need_lse`, scores are exponentiated in place (they are not used again) and the fix-ups
    for rows with no allowed key (out = 0, lse = -inf: `fold` gives them no weight) touch only
    per-row tensors, never the scores again.
    """
    if not need_lse:  # in place (out= the scores) where autograd does not need them: no second buffer
        # NB: but torch's CPU softmax in place over a last dim that is not a multiple of 16 takes about twice its
        # out-of-place time at narrow widths, less as they grow (docs/performance.md, "Figures behind the code's
        # choices"): below 64 keys a fresh buffer, a step's size (wider, the memory counts more).
        width = scores.shape[-1]
        in_place = not scores.requires_grad and (width % 16 == 0 or width >= 64)
        return apply_v(torch.softmax(scores, dim=-1, out=scores if in_place else None)), None
    if scores.shape[-1] == 0:  # an empty key set (fixed with summary=0, random with keys=0)
        return apply_v(scores), torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    top = scores.amax(dim=-1, keepdim=True).detach()  # any per-row constant is exact; no gradient
    top = top.masked_fill(top == NEG_INF, 0.0)  # empty rows: exp(-inf - 0) = 0 rather than NaN
    if scores.requires_grad:  # autograd needs the scores it saw: out of place
        probs = (scores - top).exp()
        total = probs.sum(dim=-1, keepdim=True)
        empty = total == 0  # NB: divided or logged as 1, then masked: 0/0 and log 0 gave NaN gradients
        safe = total.masked_fill(empty, 1.0)
        out = apply_v(probs) / safe
        return out, (safe.log() + top).masked_fill(empty, NEG_INF).squeeze(-1)
    probs = exp_(scores.sub_(top))
    total = probs.sum(dim=-1, keepdim=True)
    out = apply_v(probs).div_(total).masked_fill_(total == 0, 0.0)
    return out, (total.log_() + top).squeeze(-1)


def fold(acc_out: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """In place: (acc_out, acc_lse) (rows…, d), (rows…) become the softmax over the union of their
    keys and the block's (disjoint). A row with no key in either stays 0 with lse −inf.

    The two weights are taken relative to the larger lse and divided by their sum, so they sum to 1
    whatever the lse's size. NB: weighting by exp(lse − logaddexp(…)) did not: at |lse| ≈ 5·10⁴
    (reformer's lone self key) float32 rounds the sum by ~0.004, and the weights missed 1 by 0.1%."""
    top = torch.maximum(acc_lse, lse)
    top = top.masked_fill(top == NEG_INF, 0.0)
    w_acc, w = torch.exp(acc_lse - top), torch.exp(lse - top)
    total = w_acc + w
    norm = total.masked_fill(total == 0, 1.0)  # no key in either: both weights 0
    acc_out.mul_((w_acc / norm).unsqueeze(-1)).addcmul_(out, (w / norm).unsqueeze(-1))
    acc_lse.copy_(total.log_().add_(top))


def grad_of(q, k, v) -> bool:
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


class KeySet:
    """A set of keys per query, disjoint from the other sets of its pattern: `steps` scores it
    without autograd, one step alive at a time (its output and lse, or folded `into` another's);
    `grads` adds its tiles' share of dQ, dK, dV given the whole softmax's lse (variants.native.core.part_grad).
    Under autograd, `part` runs `steps` inside a Function whose backward is `grads`: memory stays
    bounded both ways, where autograd through the steps kept every step's scores."""

    def part(self, q, k, v, need_lse: bool, into: Partial | None = None) -> Partial:
        if grad_of(q, k, v):
            out, lse = OwnBackward.apply(q, k, v, self)
            return Partial(out, lse if need_lse else None)
        return self.steps(q, k, v, need_lse, into)

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        raise NotImplementedError

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Union(KeySet):
    """Exact softmax over disjoint key sets: each set after the first is folded into the first's
    output block by block; in the backward, each adds its share under the union's lse."""

    sets: tuple

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        acc = self.sets[0].steps(q, k, v, True, into)
        for keys in self.sets[1:]:
            keys.steps(q, k, v, True, acc)
        return acc if need_lse else Partial(acc.out, None)

    def grads(self, *args) -> None:
        for keys in self.sets:
            keys.grads(*args)


def output(q, k, v, keys: KeySet) -> torch.Tensor:
    """The output of softmax attention over `keys` (B, H, n, d): a native path's timed call."""
    return keys.part(q, k, v, need_lse=False).out


def union(q, k, v, *sets: KeySet) -> torch.Tensor:
    """The output of softmax attention over the union of `sets` (disjoint key sets)."""
    return output(q, k, v, Union(sets))


class Blocks:
    """Where a part puts a block's (out, lse): its own (B·H, n, d) output, or folded into `into`'s."""

    def __init__(self, like3: torch.Tensor, need_lse: bool, into: Partial | None):
        self.into = into
        if into is None:
            self.out = torch.empty_like(like3)
            self.lse = like3.new_empty(like3.shape[:2]) if need_lse else None
        else:
            self.out, self.lse = into.out.view(like3.shape), into.lse.view(like3.shape[:2])

    def put(self, rows: slice, out: torch.Tensor, lse: torch.Tensor | None, head: int | slice = slice(None)) -> None:
        """The block of `rows` (of one head, or of all) is `out` (…, rows, d) with `lse` (…, rows)."""
        if self.into is None:
            self.out[head, rows] = out
            if self.lse is not None:
                self.lse[head, rows] = lse
        else:
            fold(self.out[head, rows], self.lse[head, rows], out, lse)

    def partial(self, b: int, h: int) -> Partial:
        if self.into is not None:
            return self.into
        n, d = self.out.shape[1:]
        return Partial(self.out.view(b, h, n, d), None if self.lse is None else self.lse.view(b, h, n))
